// loader.h — a model of glibc's dynamic loader (ld.so): which file each
// DT_NEEDED name resolves to and why, in which order objects are loaded,
// whether symbol-version needs are met, and how the static TLS block is
// shared out. It reads the machine only through host::Host, so the same model
// answers for the live system and for a tree under --root.
//
// Sections, by implementation file:
//   ld-cache.cc    /etc/ld.so.cache in the old, compat and new formats
//   static-tls.cc  static TLS surplus, startup layout and dlopen allocation
//   search.cc      search paths, DSTs, the breadth-first dependency closure
//   versions.cc    VERNEED against the chosen provider's VERDEF
//   dlopen.cc      a sequence of dlopen() calls and their static TLS outcome
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "elf/elf.h"
#include "host/host.h"

namespace mld::loader {

// A glibc release, e.g. {2, 36}. Behaviour that changed between releases is
// keyed on this, never on the build machine's own glibc.
struct GlibcVersion {
  int major = 2;
  int minor = 36;
  auto operator<=>(const GlibcVersion&) const = default;
};
// Parses "2.36" (and "2.36.9000"); nullopt when malformed.
std::optional<GlibcVersion> parse_glibc_version(std::string_view s);

// ─── ld-cache.cc ────────────────────────────────────────────────────────────
// glibc sysdeps/generic/dl-cache.h and elf/dl-cache.c.

enum class LdCacheFormat { Old, Compat, New };

struct LdCacheEntry {
  i32 flags = 0;              // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 ... (0x0303)
  std::string_view key;       // the soname, e.g. "libc.so.6"
  std::string_view value;     // the path, e.g. "/lib/x86_64-linux-gnu/libc.so.6"
  u64 hwcap = 0;              // new format only
  // New format: the glibc-hwcaps subdirectory this entry belongs to
  // ("x86-64-v3"), when hwcap bit 62 marks it as such.
  std::optional<std::string_view> hwcaps_subdir;
};

class LdCache {
 public:
  // Requires: `bytes` outlives the LdCache. Throws ParseError.
  static LdCache parse(ByteView bytes);

  LdCacheFormat format() const { return format_; }
  // Entries of the format glibc would search: the new-format table when
  // present (new or compat), else the old table. In file order.
  const std::vector<LdCacheEntry>& entries() const { return entries_; }
  // The generator string of the new-format extension (ldconfig's version).
  std::optional<std::string_view> generator() const { return generator_; }

  // _dl_load_cache_lookup: the path glibc takes from the cache for `name`.
  // `hwcaps_subdirs` is the active glibc-hwcaps priority list (best first,
  // e.g. {"x86-64-v3","x86-64-v2"}); `default_flags` is _DL_CACHE_DEFAULT_ID
  // of the analysed architecture (x86_64: 0x0303). Legacy-hwcap entries are
  // considered only for glibc < 2.37, as the release did.
  std::optional<std::string_view> lookup(
      std::string_view name, const std::vector<std::string>& hwcaps_subdirs,
      i32 default_flags, GlibcVersion glibc) const;

 private:
  LdCacheFormat format_ = LdCacheFormat::New;
  std::vector<LdCacheEntry> entries_;
  std::optional<std::string_view> generator_;
};

// ─── static-tls.cc ──────────────────────────────────────────────────────────
// glibc elf/dl-tls.c (_dl_tls_static_surplus_init, _dl_determine_tlsoffset)
// and elf/dl-reloc.c (_dl_try_allocate_static_tls).

// Where the thread pointer sits relative to the static TLS block.
enum class TlsAbi {
  TcbAtTp,  // x86, x86_64: blocks below the TCB
  DtvAtTp,  // aarch64 and most others: blocks above the TCB
};

struct StaticTlsParams {
  GlibcVersion glibc;
  TlsAbi abi = TlsAbi::TcbAtTp;
  u64 tcb_size = 0;       // TLS_TCB_SIZE
  u64 tcb_alignment = 0;  // TCB_ALIGNMENT
  u64 rtld_nns = 4;                // glibc.rtld.nns (2.32+)
  u64 optional_static_tls = 512;   // glibc.rtld.optional_static_tls (2.32+)
  u64 naudit = 0;                  // number of LD_AUDIT/DT_AUDIT modules

  // The parameters of `e_machine` (EM_X86_64, EM_AARCH64, EM_386) under the
  // given glibc release, with default tunables. nullopt: not modelled.
  static std::optional<StaticTlsParams> for_machine(u16 e_machine,
                                                    GlibcVersion glibc);
  // Applies a GLIBC_TUNABLES value the way glibc parses it, clamping to each
  // tunable's range (out-of-range values are ignored, as glibc does). Returns
  // human-readable notes about ignored or malformed items.
  std::vector<std::string> apply_tunables(std::string_view glibc_tunables);
  // GLRO(dl_tls_static_surplus).
  u64 surplus() const;
};

// One module's PT_TLS, as far as static TLS placement is concerned.
struct TlsBlock {
  std::string module;  // l_name: the path the module was opened as
  u64 blocksize = 0;
  u64 align = 1;
  u64 firstbyte_offset = 0;
};

// The static TLS area of one process.
class StaticTlsArena {
 public:
  // Lays out the startup modules (in module-id order) as
  // _dl_determine_tlsoffset does and sizes the area with the surplus.
  StaticTlsArena(const StaticTlsParams& params,
                 const std::vector<TlsBlock>& startup_modules);

  u64 static_size() const { return static_size_; }  // GLRO(dl_tls_static_size)
  u64 static_align() const { return static_align_; }
  u64 used() const { return used_; }                // GL(dl_tls_static_used)
  u64 optional_left() const { return optional_left_; }
  // The next TLS module id (1 + number of TLS modules so far).
  u64 next_modid() const { return next_modid_; }
  void note_new_modid() { next_modid_++; }
  // Bytes still available for an initial-exec block: what the x86_64 code
  // compares blsize against (static_size - used - TCB), or aarch64's
  // static_size - used.
  u64 bytes_left() const;

  // _dl_try_allocate_static_tls. Returns the module's offset, or nullopt when
  // glibc would refuse (alignment above static_align, no room, or an
  // optional (TLSDESC) request beyond the optional budget).
  std::optional<u64> try_allocate(const TlsBlock& block, bool optional);
  // The bytes an allocation of `block` would consume now (nullopt: no room).
  std::optional<u64> bytes_needed(const TlsBlock& block) const;
  // elf/dl-close.c: give a module's static TLS back, which glibc does only
  // when the module's chunk is the last one allocated.
  void release(const TlsBlock& block, u64 offset, u64 used_before);

 private:
  StaticTlsParams params_;
  u64 static_size_ = 0;
  u64 static_align_ = 0;
  u64 used_ = 0;
  u64 optional_left_ = 0;
  u64 next_modid_ = 1;
};

// ─── search.cc ──────────────────────────────────────────────────────────────
// glibc elf/dl-load.c (_dl_map_object, open_path, fillin_rpath, DSTs) and
// elf/dl-deps.c (_dl_map_object_deps).

// How a DT_NEEDED (or input) name was resolved.
enum class How {
  Input,          // named on the command line / the executable itself
  Preload,        // LD_PRELOAD
  Loaded,         // matched an object already loaded (name or soname)
  Direct,         // the name contains '/': opened as a path
  Rpath,          // DT_RPATH of the loader or of an object up its chain
  ExeRpath,       // DT_RPATH of the executable
  LdLibraryPath,  // LD_LIBRARY_PATH
  Runpath,        // DT_RUNPATH of the loader
  Cache,          // /etc/ld.so.cache
  Default,        // the system directories
  NotFound,
};
std::string_view how_name(How how);

// One candidate path ld.so would try, and what happened.
struct Attempt {
  std::string path;
  std::string source;   // "RPATH of /x/liba.so", "LD_LIBRARY_PATH", "cache"...
  std::string outcome;  // "found", "no such file", "wrong ELF class", ...
};

struct Resolution {
  std::string name;                // as written in DT_NEEDED
  How how = How::NotFound;
  std::optional<size_t> object;    // index into Process::objects
  std::string via;                 // whose RPATH/RUNPATH, when relevant
  std::vector<Attempt> tried;      // in order
};

// A link map: one object in the simulated process.
struct Object {
  std::string path;                // l_name (the path as opened)
  std::vector<std::string> names;  // l_libname: names it answers to
  host::FileId file_id;
  std::optional<size_t> loader;    // l_loader (index), nullopt for inputs
  int depth = 0;                   // BFS depth from the input
  bool faked = false;              // trace-mode entry for a missing library
  std::shared_ptr<const MappedFile> file;
  std::shared_ptr<const elf::ElfFile> elf;
  std::vector<Resolution> needed;  // one per DT_NEEDED, in order
  std::string error;               // why this object could not be read
};

// Everything that steers a search besides the objects themselves.
struct SearchConfig {
  u16 e_machine = elf::EM_X86_64;
  bool is_64 = true;
  GlibcVersion glibc;
  std::optional<std::string> ld_library_path;  // nullopt: unset
  std::vector<std::string> preload;            // LD_PRELOAD entries
  std::vector<std::string> system_dirs;        // "/lib/x86_64-linux-gnu", ...
  std::string dst_lib;                         // $LIB
  std::string dst_platform;                    // $PLATFORM
  std::vector<std::string> hwcaps_subdirs;     // glibc-hwcaps, best first
  std::vector<std::string> legacy_subdirs;     // "tls/haswell/x86_64", ...
  bool inhibit_cache = false;
  std::string cache_path = "/etc/ld.so.cache";

  // The configuration glibc would use on `host` for objects of `e_machine`
  // (reads LD_LIBRARY_PATH, LD_PRELOAD and the CPU features through host).
  static SearchConfig for_host(const host::Host& host, u16 e_machine,
                               bool is_64, GlibcVersion glibc);
};

// A simulated process (the base namespace): the objects in link-map order.
struct Process {
  std::vector<Object> objects;
  std::vector<std::string> errors;  // per-input errors
};

class Loader {
 public:
  Loader(const host::Host& host, SearchConfig config);

  // Loads `path` as the main program (what `ld.so --list PATH` does) with
  // LD_PRELOAD and the breadth-first DT_NEEDED closure.
  Process load_program(const std::string& path);
  // dlopen(name) into an existing process, with `caller` (an object index)
  // as the caller whose RUNPATH/RPATH applies. Returns the indices of the
  // objects newly added, in load order; sets *error on a missing object.
  std::vector<size_t> dlopen(Process& process, const std::string& name,
                             std::optional<size_t> caller, std::string* error);

  const SearchConfig& config() const { return config_; }
  const host::Host& host() const { return host_; }

 private:
  struct Impl;
  const host::Host& host_;
  SearchConfig config_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace mld::loader
