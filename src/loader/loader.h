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
#include "findings/findings.h"
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
// "2.36".
std::string to_string(GlibcVersion g);

// ─── ld-cache.cc ────────────────────────────────────────────────────────────
// glibc sysdeps/generic/dl-cache.h and elf/dl-cache.c.

enum class LdCacheFormat { Old, Compat, New };

struct LdCacheEntry {
  i32 flags = 0;           // FLAG_ELF_LIBC6 | FLAG_X8664_LIB64 ... (0x0303)
  std::string_view key;    // the soname, e.g. "libc.so.6"
  std::string_view value;  // the path, e.g. "/lib/x86_64-linux-gnu/libc.so.6"
  u64 hwcap = 0;           // new format only
  // New format: the glibc-hwcaps subdirectory this entry belongs to
  // ("x86-64-v3"), when hwcap bit 62 marks it as such.
  std::optional<std::string_view> hwcaps_subdir;
};

// The CPU state search_cache reads besides the glibc-hwcaps priority list.
struct LdCacheCpu {
  // x86 cpu_features->isa_1 as a level: 1 baseline .. 4 x86-64-v4. A
  // glibc-hwcaps entry whose ISA-level marker is above it is skipped
  // (sysdeps/x86/dl-isa-level.h). 0: the highest x86-64-vN in the list.
  int x86_isa_level = 0;
  // For legacy-hwcap entries (tls/, x86_64/, haswell/ ... written by
  // ldconfig < 2.37, still filtered by ld.so < 2.40): GLRO(dl_hwcap) &
  // glibc.cpu.hwcap_mask (x86_64: 2 "x86_64", 4 "avx512_1") and
  // GLRO(dl_platform) ("haswell", "xeon_phi", "i686"; other names match no
  // platform entry).
  u64 hwcap = 0;
  std::string platform;
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
  // --glibc-hwcaps-prepend names before the CPU's, e.g.
  // {"x86-64-v3","x86-64-v2"}); `default_flags` is _DL_CACHE_DEFAULT_ID
  // of the analysed architecture (x86_64: 0x0303). Legacy-hwcap entries are
  // filtered by `cpu` for glibc < 2.40 and skipped from 2.40 (commit
  // c5aa5fd40a; ldconfig stopped writing them in 2.37). `cpu` null: a
  // baseline CPU of the architecture (x86_64: hwcap "x86_64", no platform).
  std::optional<std::string_view> lookup(std::string_view name,
                                         const std::vector<std::string>& hwcaps_subdirs,
                                         i32 default_flags, GlibcVersion glibc,
                                         const LdCacheCpu* cpu = nullptr) const;

 private:
  LdCacheFormat format_ = LdCacheFormat::New;
  std::vector<LdCacheEntry> entries_;
  std::optional<std::string_view> generator_;
  // The glibc-hwcaps extension's names in section order (cache indices),
  // and whether they are strictly sorted, as ldconfig writes them.
  std::vector<std::string_view> hwcaps_names_;
  bool hwcaps_names_sorted_ = true;
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
  u64 tcb_size = 0;               // TLS_TCB_SIZE
  u64 tcb_alignment = 0;          // TCB_ALIGNMENT
  u64 rtld_nns = 4;               // glibc.rtld.nns (2.32+)
  u64 optional_static_tls = 512;  // glibc.rtld.optional_static_tls (2.32+)
  u64 naudit = 0;                 // number of LD_AUDIT/DT_AUDIT modules
  // Bytes of initial-exec TLS that preloaded objects without other effect
  // take at startup (`run`'s reserve, 16-aligned; taken under LD_AUDIT only).
  u64 startup_reserve = 0;
  // A thread has been created (RTLD_SINGLE_THREAD_P is false). Only glibc
  // 2.10–2.21 look at it: dlopen then refuses static TLS for a module whose
  // l_tls_modid exceeds DTV_SURPLUS (14).
  bool threads_running = false;
  // An ld.so older than 2.32 that carries 2.32's surplus accounting (a
  // distribution backport of upstream 0c7b002fac..ffb17e7ba3, as Debian 11's
  // 2.31): the tunables and the TLSDESC budget, with that series' constants.
  bool surplus_backport = false;

  // The static TLS rules of 2.32+ apply: the release, or a backport.
  bool surplus_accounting() const { return surplus_backport || glibc >= GlibcVersion{2, 32}; }

  // The parameters of `e_machine` (EM_X86_64, EM_AARCH64, EM_386) under the
  // given glibc release, with default tunables. nullopt: not modelled.
  static std::optional<StaticTlsParams> for_machine(u16 e_machine, GlibcVersion glibc);
  // Applies a GLIBC_TUNABLES value the way glibc parses it, clamping to each
  // tunable's range (out-of-range values are ignored, as glibc does). Returns
  // human-readable notes about ignored or malformed items.
  std::vector<std::string> apply_tunables(std::string_view glibc_tunables);
  // GLRO(dl_tls_static_surplus).
  u64 surplus() const;
  // for_machine() with what the process's environment on `host` changes:
  // GLIBC_TUNABLES (its notes go to *notes) and one audit module per
  // LD_AUDIT entry.
  static std::optional<StaticTlsParams> for_process(const host::Host& host, u16 e_machine,
                                                    GlibcVersion glibc,
                                                    std::vector<std::string>* notes);
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
  StaticTlsArena(const StaticTlsParams& params, const std::vector<TlsBlock>& startup_modules);

  u64 static_size() const { return static_size_; }  // GLRO(dl_tls_static_size)
  u64 static_align() const { return static_align_; }
  u64 used() const { return used_; }  // GL(dl_tls_static_used)
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
  // The bytes an allocation of `block` needs now, the number glibc compares
  // with bytes_left() (x86: blocksize + firstbyte_offset; aarch64: alignment
  // padding + blocksize). nullopt when its alignment exceeds static_align(),
  // which no amount of room fixes.
  std::optional<u64> bytes_needed(const TlsBlock& block) const;
  // elf/dl-close.c: give a module's static TLS back, which glibc does only
  // when the module's chunk is the last one allocated.
  void release(const TlsBlock& block, u64 offset, u64 used_before);
  // One module of a close: its block, the offset try_allocate returned and
  // used() just before that allocation.
  struct Released {
    TlsBlock block;
    u64 offset = 0;
    u64 used_before = 0;
  };
  // elf/dl-close.c for all modules one dlclose (or failed dlopen) removes, in
  // the order it removes them: contiguous chunks merge, and the merged chunk
  // is reclaimed only when it ends at used(). The optional (TLSDESC) budget
  // is never given back, as in glibc.
  void release_all(const std::vector<Released>& freed);

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
  std::string name;  // as written in DT_NEEDED
  How how = How::NotFound;
  std::optional<size_t> object;  // index into Process::objects
  std::string via;               // whose RPATH/RUNPATH, when relevant
  std::vector<Attempt> tried;    // in order
};

// A link map: one object in the simulated process.
struct Object {
  std::string path;                // l_name (the path as opened)
  std::vector<std::string> names;  // l_libname: names it answers to
  // l_file_id (st_dev, st_ino). Zero, as in glibc, for the main program and
  // for ld.so itself: no file ever matches them by inode (dlopen() of the
  // program's file fails, ld.so under another path is mapped a second time).
  host::FileId file_id;
  // The main program started by exec() (ProgramStart::Exec): its l_name and
  // l_libname are "", so it answers to no name (only to its DT_SONAME, if it
  // has one; `path` and `names` are kept for display), and its $ORIGIN is
  // the directory of /proc/self/exe, `path` with every symlink resolved.
  // Every other object's $ORIGIN is the directory of `path` as opened.
  bool started_by_exec = false;
  std::optional<size_t> loader;            // l_loader (index), nullopt for inputs
  int depth = 0;                           // BFS depth from the input
  bool faked = false;                      // trace-mode entry for a missing library
  bool removed = false;                    // l_removed: unloaded after a failed dlopen
  std::shared_ptr<const ByteSource> file;  // the bytes `elf` reads
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
  static SearchConfig for_host(const host::Host& host, u16 e_machine, bool is_64,
                               GlibcVersion glibc);
};

// Whether the loader of `e_machine` (ELFCLASS64 when is_64) is modelled:
// x86-64 (and x32), AArch64 and i386, whose multiarch directories, cache
// flags and loader names search.cc knows.
bool loader_modelled(u16 e_machine, bool is_64);
// That loader's path as Debian installs it ("/lib/ld-linux-aarch64.so.1");
// "" when not modelled.
std::string loader_path(u16 e_machine, bool is_64);

// A simulated process (the base namespace): the objects in link-map order.
struct Process {
  std::vector<Object> objects;
  std::vector<std::string> errors;  // per-input errors
};

// How the main program is started: this decides its $ORIGIN and the names
// it answers to (elf/rtld.c dl_main, elf/dl-object.c _dl_new_object,
// sysdeps/unix/sysv/linux/dl-origin.c _dl_get_origin).
enum class ProgramStart {
  // The kernel executes PATH (a shell, execve(), a venv's bin/python link):
  // the main map has l_name "" and answers to no name, and its $ORIGIN is
  // computed from /proc/self/exe: PATH's directory with every symlink
  // resolved. What the program really does when it runs. A file without
  // PT_INTERP (a shared library) cannot be started so: it is taken as
  // LdSo takes it, which is also how a process that loads it by that path
  // sees it.
  Exec,
  // `ld.so PATH`, `ld.so --list PATH`, ldd: the main map answers to PATH as
  // given and its $ORIGIN is PATH's directory as given (made absolute with
  // the cwd, symlinks not resolved). PATH should contain a '/' (ldd adds
  // "./"): ld.so would look a bare name up in ld.so.cache only.
  LdSo,
};

class Loader {
 public:
  Loader(const host::Host& host, SearchConfig config);
  // The search state refers to this object's config: one Loader per place,
  // never copied or moved (hold it in an optional or a unique_ptr).
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Loads `path` as the main program, started as `start` says, with
  // LD_PRELOAD and the breadth-first DT_NEEDED closure. Missing libraries are
  // listed as trace mode (LD_TRACE_LOADED_OBJECTS, ldd) lists them.
  Process load_program(const std::string& path, ProgramStart start = ProgramStart::Exec);
  // dlopen(name) into an existing process, with `caller` (an object index)
  // as the caller whose RUNPATH/RPATH applies and whose $ORIGIN a DST in
  // `name` takes. Returns the indices of the objects newly added, in load
  // order; on failure (the first missing or unusable object ends the call)
  // sets *error to the dlerror() text and adds nothing.
  std::vector<size_t> dlopen(Process& process, const std::string& name,
                             std::optional<size_t> caller, std::string* error);

  const SearchConfig& config() const { return config_; }
  const host::Host& host() const { return host_; }

 public:
  struct Impl;  // search state shared by every load (search.cc)

 private:
  const host::Host& host_;
  SearchConfig config_;
  std::shared_ptr<Impl> impl_;
};

// The file offset of the first `needle` inside `range` of `src`, read a
// chunk at a time (a string near the start of a large section costs one
// small read); nullopt when absent.
std::optional<u64> find_in_source(const ByteSource& src, elf::FileRange range,
                                  std::string_view needle);

// The glibc release of the C library under `host`: the one the tree records
// (Host::recorded_glibc_release, a snapshot), else read from the version
// banner inside libc.so.6 in the given system directories.
std::optional<GlibcVersion> detect_glibc_version(const host::Host& host,
                                                 const std::vector<std::string>& system_dirs);

struct DlopenSequence;

// ─── versions.cc ────────────────────────────────────────────────────────────
// glibc elf/dl-version.c (_dl_check_map_versions, match_symbol).

struct VersionProblem {
  enum Kind {
    NotFound,       // "version `X' not found (required by R)": fatal
    WeakNotFound,   // a weak version need that is missing: a warning
    NoVersionInfo,  // the provider has no DT_VERDEF at all: a warning
  };
  Kind kind = NotFound;
  size_t requirer = 0;  // object index
  std::string file;     // vn_file: the name the versions come from
  std::string version;  // "GLIBCXX_3.4.30"
  size_t provider = 0;  // object index of the provider
};

// Every version need of every loaded object checked against the object that
// actually answers to vn_file in the process (missing objects are skipped).
std::vector<VersionProblem> check_versions(const Process& process);
// The same for `objects` only (indices, checked in that order), against the
// whole process: what dlopen() checks for the objects it has just mapped.
std::vector<VersionProblem> check_versions(const Process& process,
                                           const std::vector<size_t>& objects);
// The line ld.so prints for it: "<provider>: version `X' not found
// (required by <requirer>)".
std::string version_problem_text(const Process& process, const VersionProblem& p);
// The oldest glibc that satisfies every GLIBC_x.y version `object` needs
// (from any file: libc.so.6, libm.so.6...); nullopt when it needs none.
std::optional<GlibcVersion> oldest_glibc_needed(const elf::ElfFile& object);

// ─── objects.cc ─────────────────────────────────────────────────────────────
// What the objects of a process are. The hazards of a simulated process
// (LD001 missing library, LD002 unmet symbol version, LD003 one soname from
// two files, LD004 one runtime under two sonames, LD005 a load that stops,
// OMP001, TLS001) are detected from it in src/detect/rules/.

enum class OpenMpKind { None, Gnu, Llvm, Intel };
std::string_view openmp_kind_name(OpenMpKind k);
// Which OpenMP runtime an object is (by soname and defined symbols).
OpenMpKind openmp_kind(const Object& o);

// The library name an LLVM/Intel runtime prints in its messages (compiled
// in: "libomp.so.5" for Debian's libomp under any soname); "" if not read.
std::string kmp_library_name(const Object& o);
// The objects of `process` that are OpenMP runtimes, in load order.
std::vector<size_t> openmp_runtimes(const Process& process);
// The soname an object goes by (else its file name).
std::string_view object_soname(const Object& o);
// The paths of the objects whose DT_NEEDED resolved to object `index`,
// comma-separated.
std::string needed_by(const Process& process, size_t index);
// Wheels repaired by auditwheel vendor a library as "libgomp-a34b3233.so.1":
// the position of the "-<hex>" suffix (8+ digits) before ".so", npos if none;
// and the name without it, the real name of the vendored copy.
size_t vendor_hash_at(std::string_view soname);
std::string strip_vendor_hash(std::string_view soname);

// ─── dlopen.cc ──────────────────────────────────────────────────────────────
// glibc elf/dl-open.c (dl_open_worker: relocation order, failure rollback),
// elf/dl-reloc.c (CHECK_STATIC_TLS / TRY_STATIC_TLS) and elf/dl-close.c.

// Why a dlopen() of the sequence failed: each rolls the call back alike.
enum class StepFailure {
  None,
  Load,       // an object is missing or unusable (not found, wrong class, not ELF)
  Version,    // an unmet symbol version need (elf/dl-version.c)
  StaticTls,  // no room in the static TLS area (or the 2.10-2.21 DTV limit)
};
std::string_view step_failure_name(StepFailure f);  // "load", "version", "static_tls"

struct DlopenStep {
  std::string object;  // the name passed to dlopen()
  bool ok = true;
  StepFailure failure = StepFailure::None;
  std::string error;  // the dlerror() text glibc would print
  // Version: the unmet need that failed the call (glibc stops at the first),
  // its object indices valid in the process (the objects stay there marked
  // `removed`).
  std::vector<VersionProblem> version_problems;
  std::string tls_module;  // l_name of the module whose TLS did not fit
  u64 bytes_needed = 0;    // what that allocation needed
  u64 bytes_left = 0;      // what was left in the static TLS area
  // Paths of the objects this call added (for a failed call: mapped, then
  // unloaded again by the rollback).
  std::vector<std::string> loaded;
};

struct DlopenSequence {
  StaticTlsParams params;
  u64 surplus = 0;
  u64 static_size = 0;
  u64 startup_used = 0;  // static TLS used by the startup modules
  std::vector<DlopenStep> steps;
  // The smallest GLIBC_TUNABLES setting under which every step would load
  // (e.g. "glibc.rtld.optional_static_tls=1536"); nullopt when all load, or
  // when no setting helps (alignment, or an object that is missing).
  std::optional<std::string> tunables_fix;
};

// Simulates dlopen(name, RTLD_NOW | RTLD_LOCAL) for each name in order into
// `process` (normally the result of Loader::load_program on the executable),
// with static TLS as glibc allocates it. Objects of a failed call are removed
// again, as glibc's rollback does.
// `current` (a GLIBC_TUNABLES value or nullopt) with `item` ("name=value")
// in place of any item of that name it had, the others kept in order.
std::string merge_glibc_tunables(const std::optional<std::string>& current,
                                 const std::string& item);

DlopenSequence simulate_dlopen_sequence(Loader& loader, Process& process,
                                        const std::vector<std::string>& names,
                                        const StaticTlsParams& params);

}  // namespace mld::loader
