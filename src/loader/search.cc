// search.cc — which file glibc's ld.so maps for each DT_NEEDED name, and in
// which order, modelled on glibc 2.36 elf/dl-load.c and elf/dl-deps.c:
//
//  * _dl_map_object: a name is first matched against the objects already
//    loaded (any l_libname, l_name, or DT_SONAME); a name with '/' is only
//    DST-expanded and opened; otherwise the search runs DT_RPATH of the loader
//    and up its l_loader chain (only when the loader has no DT_RUNPATH), the
//    executable's DT_RPATH, LD_LIBRARY_PATH, the loader's own DT_RUNPATH,
//    /etc/ld.so.cache (unless DF_1_NODEFLIB rules a system path out), then the
//    system directories (unless DF_1_NODEFLIB).
//  * open_path: each directory is tried with its glibc-hwcaps and legacy
//    hwcap subdirectories first. A file open(2) cannot open (ENOENT, EACCES:
//    unreadable, or in a directory the user cannot search) is passed over;
//    after the last try in a directory any other errno (ENOTDIR, ELOOP...)
//    ends that list, and the search goes on with the next one. A relative
//    directory is never known not to exist (fillin_rpath), so a relative
//    entry that names a file ends its list with ENOTDIR where an absolute one
//    is skipped. Files of the wrong class or machine are skipped silently
//    (open_verify, Debian's machine-mismatch patch); a file that opens but
//    fails open_verify's checks ("file too short", "invalid ELF header",
//    "cannot read file data") ends the whole load, as ld.so stops there; so
//    does a truncated file whose PT_LOAD segments reach past its end, which
//    ld.so maps and the process dies of (SIGBUS) at the first touch.
//    ld.so reads the ELF header and the program headers, never the section
//    headers: a library whose section header table is garbage loads.
//  * origins (elf/dl-object.c, dl-origin.c): an object's $ORIGIN is the
//    directory of the path it was opened by, made absolute with the cwd and
//    not otherwise normalised ("/a/./lib", "/venv/site/../libs" stay as they
//    are, and the kernel resolves ".." after a symlink); only the main
//    program started by exec() takes its origin from /proc/self/exe, with
//    every symlink resolved (ProgramStart).
//  * _dl_map_object_from_fd: a file whose st_dev/st_ino (_dl_file_id_match_p)
//    matches a loaded object is that object, whatever path reached it. The
//    main program and ld.so have no file id and never match.
//  * _dl_map_object_deps: breadth-first over DT_NEEDED in dynamic-section
//    order, the main program first, then LD_PRELOAD, then dependencies.
//
// In trace mode (`ld.so --list`) a missing library becomes a "faked" map that
// never matches a later lookup, so every later need of it is searched and
// reported again. The model does the same, which is what the differential
// test compares against. dlopen() is not traced: the first object that cannot
// be found ends the call with "cannot open shared object file: <errno>" (or
// "wrong ELF class" when only files of the other class were found).
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <unordered_map>

#include "loader/loader.h"

namespace mld::loader {

std::string_view how_name(How how) {
  switch (how) {
    case How::Input: return "input";
    case How::Preload: return "LD_PRELOAD";
    case How::Loaded: return "already loaded";
    case How::Direct: return "path";
    case How::Rpath: return "DT_RPATH";
    case How::ExeRpath: return "DT_RPATH of the executable";
    case How::LdLibraryPath: return "LD_LIBRARY_PATH";
    case How::Runpath: return "DT_RUNPATH";
    case How::Cache: return "ld.so.cache";
    case How::Default: return "default path";
    case How::NotFound: return "not found";
  }
  return "?";
}

namespace {

// _DL_CACHE_DEFAULT_ID per architecture (sysdeps/*/dl-cache.h): the flags
// word a cache entry must carry to be usable by this loader.
i32 cache_default_flags(u16 machine, bool is_64) {
  switch (machine) {
    case elf::EM_X86_64: return is_64 ? 0x0303 : 0x0803;  // x32 is 0x0800|ELF_LIBC6
    case elf::EM_AARCH64: return 0x0a03;
    case elf::EM_386: return 0x0003;
    default: return 0x0003;
  }
}

std::string default_interp(u16 machine, bool is_64) {
  switch (machine) {
    case elf::EM_X86_64: return is_64 ? "/lib64/ld-linux-x86-64.so.2" : "/libx32/ld-linux-x32.so.2";
    case elf::EM_AARCH64: return "/lib/ld-linux-aarch64.so.1";
    case elf::EM_386: return "/lib/ld-linux.so.2";
    default: return "";
  }
}

std::string multiarch_triplet(u16 machine, bool is_64) {
  switch (machine) {
    case elf::EM_X86_64: return is_64 ? "x86_64-linux-gnu" : "x86_64-linux-gnux32";
    case elf::EM_AARCH64: return "aarch64-linux-gnu";
    case elf::EM_386: return "i386-linux-gnu";
    default: return "";
  }
}

// A search directory after DST expansion, with the label used in messages.
struct SearchDir {
  std::string dir;     // no trailing slash except "/"; "" means the cwd
  std::string source;  // "RPATH of X", "LD_LIBRARY_PATH", "system search path"
};

}  // namespace

bool loader_modelled(u16 e_machine, bool is_64) {
  return !multiarch_triplet(e_machine, is_64).empty();
}

std::string loader_path(u16 e_machine, bool is_64) { return default_interp(e_machine, is_64); }

SearchConfig SearchConfig::for_host(const host::Host& host, u16 e_machine, bool is_64,
                                    GlibcVersion glibc) {
  SearchConfig c;
  c.e_machine = e_machine;
  c.is_64 = is_64;
  c.glibc = glibc;
  c.ld_library_path = host.getenv("LD_LIBRARY_PATH");
  if (std::optional<std::string> pre = host.getenv("LD_PRELOAD")) {
    // elf/rtld.c handle_preload_list: separators are ' ', ':' and tabs.
    std::string cur;
    for (char ch : *pre + " ") {
      if (ch == ' ' || ch == ':' || ch == '\t') {
        if (!cur.empty()) c.preload.push_back(cur);
        cur.clear();
      } else {
        cur.push_back(ch);
      }
    }
  }
  // SYSTEM_DIRS is a build-time constant of each distribution's ld.so. Find
  // which layout this root's loader was built with by looking for the
  // contiguous string table in the loader binary itself.
  std::string triplet = multiarch_triplet(e_machine, is_64);
  std::vector<std::vector<std::string>> layouts;
  if (!triplet.empty())
    layouts.push_back({"/lib/" + triplet, "/usr/lib/" + triplet, "/lib", "/usr/lib"});
  if (is_64) layouts.push_back({"/lib64", "/usr/lib64"});
  layouts.push_back({"/lib", "/usr/lib"});
  c.system_dirs = layouts.front();
  std::string interp = default_interp(e_machine, is_64);
  // The live machine's loader does not change during a run, and the CLI
  // builds a configuration twice per target (before and after detecting
  // the glibc release): remember its answer. A --root tree may be a
  // fixture that a test rewrites, so it is always read.
  static std::mutex live_mutex;
  static std::map<std::string, std::vector<std::string>> live_layouts;
  if (host.is_live_root()) {
    std::lock_guard<std::mutex> lock(live_mutex);
    auto it = live_layouts.find(interp);
    if (it != live_layouts.end()) c.system_dirs = it->second;
  }
  try {
    if (!interp.empty() && !(host.is_live_root() && live_layouts.count(interp))) {
      // The table sits in the loader's .rodata: search there first (one
      // small read), then the whole file, so the answer is the same.
      std::shared_ptr<SparseFile> ld = host.open_sparse(interp);
      std::optional<elf::FileRange> rodata;
      try {
        rodata = elf::ElfFile::parse(ld).progbits_range(".rodata");
      } catch (const ParseError&) {
      }
      for (const std::vector<std::string>& l : layouts) {
        std::string needle;
        for (size_t i = 0; i < l.size(); i++) {
          if (i) needle.push_back('\0');
          needle += l[i] + "/";
        }
        if ((rodata && find_in_source(*ld, *rodata, needle)) ||
            find_in_source(*ld, elf::FileRange{0, ld->size()}, needle)) {
          c.system_dirs = l;
          break;
        }
      }
    }
  } catch (const std::exception&) {
    // No loader under this root: keep the distribution-neutral guess.
  }
  if (host.is_live_root()) {
    std::lock_guard<std::mutex> lock(live_mutex);
    live_layouts.emplace(interp, c.system_dirs);
  }
  c.dst_lib = c.system_dirs.front().substr(1);
  host::CpuFeatures cpu = host.cpu_features();
  if (e_machine == elf::EM_X86_64 && is_64) {
    c.dst_platform = cpu.platform;
    if (glibc >= GlibcVersion{2, 33}) {
      for (int level = cpu.x86_64_level; level >= 2; level--)
        c.hwcaps_subdirs.push_back("x86-64-v" + std::to_string(level));
    }
    if (glibc < GlibcVersion{2, 37}) {
      // _dl_important_hwcaps (legacy part): every subset of
      // [tls, platform, avx512_1, x86_64], largest first, as
      // "tls/haswell/avx512_1/x86_64" ... "x86_64"; the empty subset is the
      // directory itself and is not listed here.
      // The platform is a component even when it is the plain "x86_64"
      // (the kernel's AT_PLATFORM) and so equals the "x86_64" hwcap name:
      // glibc does not merge them, and lists "tls/x86_64/x86_64",
      // "tls/x86_64" twice, ... (`ld.so --list-diagnostics` and LD_DEBUG
      // agree; searching a directory twice finds nothing new).
      std::vector<std::string> parts = {"tls"};
      if (!cpu.platform.empty()) parts.push_back(cpu.platform);
      if (cpu.avx512_1) parts.push_back("avx512_1");
      parts.push_back("x86_64");
      u32 n = static_cast<u32>(parts.size());
      for (u32 mask = (1u << n) - 1; mask > 0; mask--) {
        std::string sub;
        for (u32 i = 0; i < n; i++) {
          if (mask & (1u << (n - 1 - i))) {
            if (!sub.empty()) sub.push_back('/');
            sub += parts[i];
          }
        }
        c.legacy_subdirs.push_back(sub);
      }
    }
  } else if (e_machine == elf::EM_AARCH64) {
    c.dst_platform = "aarch64";
    if (glibc < GlibcVersion{2, 37}) c.legacy_subdirs = {"tls"};
  } else {
    c.dst_platform = e_machine == elf::EM_386 ? "i686" : "";
    if (glibc < GlibcVersion{2, 37}) c.legacy_subdirs = {"tls"};
  }
  return c;
}

// ─── The loader state shared by every load ────────────────────────────────

struct ParsedFile {
  std::shared_ptr<const ByteSource> file;
  std::shared_ptr<const elf::ElfFile> elf;
  std::string error;           // non-empty: the file cannot be used (message as ld.so)
  int open_error = 0;          // errno of a failed open(2): the file is passed over
  bool other_class = false;    // skipped silently: wrong ELF class
  bool other_machine = false;  // skipped silently: wrong e_machine
};

// The errno of a failed open(2); 0 when it is not one open gives for a path
// stat(2) found (an error of another kind is not a search outcome).
int open_errno(const IoError& e) {
  static const int kOpenErrors[] = {EACCES, EPERM,   ENOENT, ENOTDIR, ELOOP,  ENAMETOOLONG, ENXIO,
                                    ENODEV, ETXTBSY, EMFILE, ENFILE,  ENOMEM, EOVERFLOW,    EIO};
  for (int err : kOpenErrors)
    if (e.error_number() == err) return err;
  return 0;
}

struct Loader::Impl {
  const host::Host& host;
  const SearchConfig& config;
  std::string cwd;
  MappedFile cache_file;
  std::optional<LdCache> cache;
  std::optional<std::string> cache_note;  // cache_no_entry()
  std::string cache_error;
  std::unordered_map<std::string, bool> dir_exists;
  std::unordered_map<std::string, std::vector<std::string>> existing_subdirs;
  // stat(2) of each candidate path once per loader: the model runs against
  // a file system that does not change under it, and the same candidates
  // (the cache's libc.so.6, a RUNPATH directory's files) come up for every
  // input of a `libs` run.
  std::unordered_map<std::string, host::FileStat> stats;
  std::map<host::FileId, std::shared_ptr<ParsedFile>> parsed;
  // _dl_load_cache_lookup's answer per name (it depends only on the name
  // and this loader's configuration).
  std::unordered_map<std::string, std::optional<std::string_view>> cache_answers;
  std::vector<std::string> subdirs;    // hwcaps then legacy, "" last
  std::vector<SearchDir> system_dirs;  // config.system_dirs, labelled

  Impl(const host::Host& h, const SearchConfig& c) : host(h), config(c) {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) cwd = buf;
    for (const std::string& s : c.hwcaps_subdirs) subdirs.push_back("glibc-hwcaps/" + s);
    for (const std::string& s : c.legacy_subdirs) subdirs.push_back(s);
    subdirs.push_back("");
    for (const std::string& d : c.system_dirs) system_dirs.push_back({d, "system search path"});
    if (!c.inhibit_cache) {
      try {
        cache_file = host.map(c.cache_path);
        cache = LdCache::parse(cache_file.view());
      } catch (const std::exception& e) {
        cache_error = e.what();
        cache.reset();
      }
    }
  }

  // The directories open_path tries for a search directory `dir` that
  // exists: its glibc-hwcaps and legacy hwcap subdirectories that exist,
  // best first, then `dir` itself (last). Computed once per directory.
  const std::vector<std::string>& subdirs_of(const std::string& dir) {
    auto it = existing_subdirs.find(dir);
    if (it != existing_subdirs.end()) return it->second;
    std::vector<std::string> out;
    for (const std::string& sub : subdirs) {
      if (sub.empty()) {
        out.push_back(dir);
        continue;
      }
      std::string d = host::join_path(dir, sub);
      if (directory_exists(d)) out.push_back(std::move(d));
    }
    return existing_subdirs.emplace(dir, std::move(out)).first->second;
  }

  bool directory_exists(const std::string& dir) {
    auto it = dir_exists.find(dir);
    if (it != dir_exists.end()) return it->second;
    bool ok = host.stat(dir.empty() ? cwd : dir).kind == host::FileKind::Directory;
    dir_exists.emplace(dir, ok);
    return ok;
  }

  const host::FileStat& stat_path(const std::string& path) {
    auto it = stats.find(path);
    if (it == stats.end())
      it = stats
               .emplace(
                   path,
                   host.stat(path.empty() || path[0] == '/' ? path : host::join_path(cwd, path)))
               .first;
    return it->second;
  }

  // "no entry", saying so when the cache holds nothing for this loader at
  // all (a tree whose ld.so.cache was made for another architecture).
  std::string cache_no_entry() {
    if (!cache_note) {
      const i32 flags = cache_default_flags(config.e_machine, config.is_64);
      size_t ours = 0;
      for (const LdCacheEntry& e : cache->entries()) ours += e.flags == flags;
      cache_note = ours || cache->entries().empty()
                       ? "no entry"
                       : "no entry: none of its " + std::to_string(cache->entries().size()) +
                             " entries is for " + std::string(elf::machine_name(config.e_machine));
    }
    return *cache_note;
  }

  std::optional<std::string_view> cache_lookup(const std::string& name) {
    auto it = cache_answers.find(name);
    if (it == cache_answers.end())
      it = cache_answers
               .emplace(name, cache->lookup(name, config.hwcaps_subdirs,
                                            cache_default_flags(config.e_machine, config.is_64),
                                            config.glibc))
               .first;
    return it->second;
  }

  // The file at `path`, parsed once per inode. Mirrors open_verify's verdicts.
  std::shared_ptr<ParsedFile> open_verify(const std::string& path, host::FileStat* st_out) {
    const host::FileStat& st = stat_path(path);
    if (st_out) *st_out = st;
    if (st.kind == host::FileKind::Missing || st.kind == host::FileKind::Error) return nullptr;
    auto it = parsed.find(st.id);
    if (it != parsed.end()) return it->second;
    auto pf = std::make_shared<ParsedFile>();
    if (st.kind == host::FileKind::Directory) {
      pf->error = "cannot read file data: Is a directory";
    } else {
      try {
        // Read by ranges, not mapped: the model needs a few hundred bytes of
        // each object (header, program headers, dynamic section, some
        // strings, the version tables), and on the machines measured a
        // first touch of a mapped page costs several small preads.
        std::shared_ptr<SparseFile> sf;
        try {
          sf = host.open_sparse(path[0] == '/' ? path : host::join_path(cwd, path));
        } catch (const IoError& e) {
          // open(2) failed on a file stat(2) found: unreadable by this user.
          pf->open_error = open_errno(e);
          if (!pf->open_error) throw;
          parsed.emplace(st.id, pf);
          return pf;
        }
        pf->file = sf;
        try {
          verify_header(*sf, pf.get());
          if (pf->error.empty() && !pf->other_class && !pf->other_machine) {
            pf->elf = std::make_shared<const elf::ElfFile>(elf::ElfFile::parse(sf));
            pf->error = segment_past_end(*pf->elf, sf->size());
          }
        } catch (const ParseError& e) {
          pf->error = std::string("malformed ELF: ") + e.what();
        }
      } catch (const IoError& e) {
        pf->error = std::string("cannot open shared object file: ") + e.what();
      }
    }
    parsed.emplace(st.id, pf);
    return pf;
  }

  // A truncated file whose headers survived: glibc checks no PT_LOAD against
  // the file's size (_dl_map_segments maps each as its header says), so the
  // load goes on, and the first touch of a page past the end of the file
  // (a relocation, a call into it) kills the process with SIGBUS. The
  // object is unusable: "" when every segment is inside the file.
  static std::string segment_past_end(const elf::ElfFile& elf, u64 size) {
    for (const elf::ProgramHeader& ph : elf.program_headers()) {
      if (ph.p_type != elf::PT_LOAD) continue;
      std::optional<u64> end = checked_add(ph.p_offset, ph.p_filesz);
      if (end && *end <= size) continue;
      char text[256];
      std::snprintf(text, sizeof text,
                    "file truncated: a PT_LOAD segment spans bytes 0x%llx-0x%llx of a 0x%llx-byte "
                    "file; ld.so maps it anyway, and the process dies of SIGBUS (Bus error) when "
                    "it touches a page past the end",
                    static_cast<unsigned long long>(ph.p_offset),
                    static_cast<unsigned long long>(end.value_or(~u64{0})),
                    static_cast<unsigned long long>(size));
      return text;
    }
    return "";
  }

  // elf/dl-load.c open_verify: the header checks, in glibc's order.
  void verify_header(const ByteSource& src, ParsedFile* pf) const {
    const u64 ehsize = config.is_64 ? 64u : 52u;
    if (src.size() < ehsize) {
      pf->error = "file too short";
      return;
    }
    // The first KiB: the header, and the program headers ElfFile::parse
    // reads next (one read from a file).
    const ByteView v = src.range(0, std::min<u64>(src.size(), 1024));
    const u8* id = v.data();
    if (!(id[0] == 0x7f && id[1] == 'E' && id[2] == 'L' && id[3] == 'F')) {
      pf->error = "invalid ELF header";
      return;
    }
    u8 want_class = config.is_64 ? 2 : 1;
    if (id[4] != want_class) {
      pf->other_class = true;
      return;
    }
    bool big = id[5] == 2;
    if (id[5] != 1) {  // every modelled target is little-endian
      pf->error = "ELF file data encoding not little-endian";
      return;
    }
    if (id[6] != 1) {
      pf->error = "ELF file version ident does not match current one";
      return;
    }
    if (id[7] != 0 && id[7] != 3) {  // ELFOSABI_SYSV, ELFOSABI_GNU
      pf->error = "ELF file OS ABI invalid";
      return;
    }
    if (id[8] != 0 && !(id[7] == 3 && id[8] <= 1)) {
      pf->error = "ELF file ABI version invalid";
      return;
    }
    for (int i = 9; i < 16; i++) {
      if (id[i] != 0) {
        pf->error = "nonzero padding in e_ident";
        return;
      }
    }
    if (v.u32_at(20, big) != 1) {
      pf->error = "ELF file version does not match current one";
      return;
    }
    if (v.u16_at(18, big) != config.e_machine) {
      pf->other_machine = true;
      return;
    }
    u16 type = v.u16_at(16, big);
    if (type != elf::ET_DYN && type != elf::ET_EXEC) {
      pf->error = "only ET_DYN and ET_EXEC can be loaded";
      return;
    }
    u16 phentsize = v.u16_at(config.is_64 ? 54 : 42, big);
    if (phentsize != (config.is_64 ? 56 : 32)) {
      pf->error = "ELF file's phentsize not the expected size";
      return;
    }
    // The program headers are read next (pread of e_phnum entries at
    // e_phoff); a short read is "cannot read file data" with errno 0.
    u64 phoff = config.is_64 ? v.u64_at(32, big) : v.u32_at(28, big);
    u64 phnum = v.u16_at(config.is_64 ? 56 : 44, big);
    std::optional<u64> end = checked_add(phoff, phnum * phentsize);
    if (!end || *end > src.size()) {
      pf->error = "cannot read file data";
      return;
    }
  }
};

Loader::Loader(const host::Host& host, SearchConfig config)
    : host_(host), config_(std::move(config)) {
  impl_ = std::make_shared<Impl>(host_, config_);
}

namespace {

// State of one _dl_map_object_deps / dlopen run over a Process.
class Mapper {
 public:
  Mapper(Loader::Impl& impl, const SearchConfig& config, Process& process)
      : impl_(impl), config_(config), p_(process) {}

  // glibc's l_origin: directory of the absolute form of the path as opened
  // (_dl_new_object). For the main program started by exec(), what
  // _dl_get_origin reads from /proc/self/exe when a DST first needs it: the
  // file the kernel executed, every symlink resolved.
  std::string origin_of(const Object& o) const {
    std::string abs = o.path;
    if (abs.empty()) return "";
    if (abs[0] != '/') abs = impl_.cwd + (impl_.cwd.size() > 1 ? "/" : "") + abs;
    if (o.started_by_exec) {
      if (std::optional<std::string> real = impl_.host.real_path(abs)) abs = *real;
    }
    size_t slash = abs.rfind('/');
    return slash == 0 ? "/" : abs.substr(0, slash);
  }

  // _dl_dst_substitute: replaces $ORIGIN, $PLATFORM, $LIB (bare or braced).
  // Returns nullopt when a known DST has no value (the element is dropped).
  std::optional<std::string> expand_dst(std::string_view in, const Object& o) const {
    std::string out;
    for (size_t i = 0; i < in.size();) {
      if (in[i] != '$') {
        out.push_back(in[i++]);
        continue;
      }
      std::string_view rest = in.substr(i + 1);
      const char* names[] = {"ORIGIN", "PLATFORM", "LIB"};
      size_t len = 0;
      int which = -1;
      for (int k = 0; k < 3 && which < 0; k++) {
        len = dst_length(rest, names[k]);
        if (len) which = k;
      }
      if (which < 0) {
        out.push_back('$');
        i++;
        continue;
      }
      std::string repl = which == 0   ? origin_of(o)
                         : which == 1 ? config_.dst_platform
                                      : config_.dst_lib;
      if (repl.empty()) return std::nullopt;
      out += repl;
      i += 1 + len;
    }
    return out;
  }

  // is_dst: length of the token after '$' (with braces), 0 if no match.
  static size_t dst_length(std::string_view s, std::string_view ref) {
    bool curly = !s.empty() && s[0] == '{';
    std::string_view t = curly ? s.substr(1) : s;
    if (t.substr(0, ref.size()) != ref) return 0;
    char next = t.size() > ref.size() ? t[ref.size()] : '\0';
    if (curly && next != '}') return 0;
    if ((next >= 'A' && next <= 'Z') || (next >= 'a' && next <= 'z') ||
        (next >= '0' && next <= '9') || next == '_')
      return 0;
    return curly ? ref.size() + 2 : ref.size();
  }

  // fillin_rpath: split, expand, drop trailing slashes and duplicates.
  std::vector<SearchDir> decompose(std::string_view list, std::string_view seps, const Object* o,
                                   const std::string& source) const {
    std::vector<SearchDir> out;
    size_t i = 0;
    while (true) {
      size_t j = list.find_first_of(seps, i);
      std::string_view elem =
          list.substr(i, j == std::string_view::npos ? std::string_view::npos : j - i);
      std::optional<std::string> dir = std::string(elem);
      if (!elem.empty()) {
        dir = o ? expand_dst(elem, *o) : expand_dst_main(elem);
        if (dir && dir->empty()) dir.reset();
        if (dir) {
          while (dir->size() > 1 && dir->back() == '/') dir->pop_back();
        }
      }
      if (dir) {
        bool dup = false;
        for (const SearchDir& d : out) dup |= d.dir == *dir;
        if (!dup) out.push_back({*dir, source});
      }
      if (j == std::string_view::npos) break;
      i = j + 1;
    }
    return out;
  }

  // LD_LIBRARY_PATH DSTs expand relative to the main program.
  std::optional<std::string> expand_dst_main(std::string_view elem) const {
    if (p_.objects.empty()) return std::string(elem);
    return expand_dst(elem, p_.objects[0]);
  }

  // The object's DT_RPATH or DT_RUNPATH directories, decomposed once per
  // object and load (glibc keeps them in l_rpath_dirs / l_runpath_dirs).
  const std::vector<SearchDir>& rpath_dirs(size_t idx, bool runpath) {
    std::vector<std::unique_ptr<std::vector<SearchDir>>>& memo = rpath_memo_[runpath];
    if (memo.size() <= idx) memo.resize(p_.objects.size());
    std::unique_ptr<std::vector<SearchDir>>& dirs = memo[idx];
    if (dirs) return *dirs;
    dirs = std::make_unique<std::vector<SearchDir>>();
    const Object& o = p_.objects[idx];
    if (!o.elf) return *dirs;
    std::optional<std::string_view> v = runpath ? o.elf->runpath() : o.elf->rpath();
    // get-dynamic-info.h: an object with DT_RUNPATH has its DT_RPATH dropped.
    if (!runpath && o.elf->runpath()) return *dirs;
    if (!v || v->empty()) return *dirs;
    *dirs = decompose(*v, ":", &o, std::string(runpath ? "RUNPATH" : "RPATH") + " of " + o.path);
    return *dirs;
  }

  // LD_LIBRARY_PATH, decomposed once per load (its DSTs expand for the
  // main program, which does not change).
  const std::vector<SearchDir>& ld_library_path_dirs() {
    if (!llp_dirs_)
      llp_dirs_ = decompose(*config_.ld_library_path, ":;", nullptr, "LD_LIBRARY_PATH");
    return *llp_dirs_;
  }

  enum class Verdict { Found, Continue, Fatal };

  // Tries `path` (open_verify); on success sets *found to the parsed file.
  // A file that cannot be opened, or is of another class or machine, is
  // passed over (Continue) with last_errno_ set as open_verify leaves errno;
  // a file that opens but is unusable ends the load (Fatal, fatal_ set).
  Verdict try_file(const std::string& path, const std::string& source, Resolution& r,
                   std::shared_ptr<ParsedFile>* found, host::FileStat* st) {
    std::shared_ptr<ParsedFile> pf = impl_.open_verify(path, st);
    int err = !pf ? (st->error ? st->error : ENOENT) : pf->open_error;
    if (err) {
      last_errno_ = err;
      r.tried.push_back({path, source,
                         err == ENOENT   ? "no such file"
                         : err == EACCES ? "permission denied"
                                         : errno_text(err)});
      return Verdict::Continue;
    }
    if (pf->other_class) {
      last_errno_ = ENOENT;
      found_other_class_ = true;
      r.tried.push_back({path, source, "wrong ELF class"});
      return Verdict::Continue;
    }
    if (pf->other_machine) {
      last_errno_ = ENOENT;
      r.tried.push_back({path, source, "wrong machine"});
      return Verdict::Continue;
    }
    if (!pf->error.empty()) {
      r.tried.push_back({path, source, pf->error});
      fatal_ = path + ": " + pf->error;
      return Verdict::Fatal;
    }
    r.tried.push_back({path, source, "found"});
    *found = pf;
    return Verdict::Found;
  }

  // open_path over a list of directories with hwcaps subdirectories.
  Verdict search_dirs(const std::vector<SearchDir>& dirs, std::string_view name, Resolution& r,
                      std::shared_ptr<ParsedFile>* found, std::string* path_out,
                      host::FileStat* st) {
    for (const SearchDir& d : dirs) {
      // fillin_rpath: a relative directory is never marked nonexisting (the
      // cwd may change), so open_path always opens in it; an absolute one
      // that is not a directory is skipped without an errno that counts.
      bool relative = d.dir.empty() || d.dir[0] != '/';
      if (!relative && !impl_.directory_exists(d.dir)) {
        r.tried.push_back({host::join_path(d.dir, name), d.source, "directory does not exist"});
        last_errno_ = ENOENT;
        continue;
      }
      const std::vector<std::string>& tried_dirs = impl_.subdirs_of(d.dir);
      for (size_t k = 0; k < tried_dirs.size(); k++) {
        const std::string& dir = tried_dirs[k];
        bool itself = k + 1 == tried_dirs.size();
        std::string path = d.dir.empty() && itself ? std::string(name) : host::join_path(dir, name);
        Verdict v = try_file(path, d.source, r, found, st);
        if (v == Verdict::Found) {
          *path_out = path;
          return v;
        }
        if (v == Verdict::Fatal) return v;
      }
      // open_path: after the last try in a directory (the directory itself),
      // an errno other than ENOENT or EACCES ends this list; the caller goes
      // on with the next one.
      if (last_errno_ != ENOENT && last_errno_ != EACCES) return Verdict::Continue;
    }
    return Verdict::Continue;
  }

  bool in_system_dirs(std::string_view path) const {
    for (const std::string& d : config_.system_dirs) {
      std::string prefix = d + "/";
      if (path.substr(0, prefix.size()) == prefix) return true;
    }
    return false;
  }

  // Finds `name` among the loaded objects (_dl_map_object's first loop:
  // _dl_name_match_p on l_name and l_libname, then DT_SONAME).
  std::optional<size_t> find_loaded(std::string_view name) {
    for (size_t i = 0; i < p_.objects.size(); i++) {
      Object& o = p_.objects[i];
      if (o.faked || o.removed) continue;
      if (!o.started_by_exec) {
        if (o.path == name) return i;
        for (const std::string& n : o.names)
          if (n == name) return i;
      }
      if (o.elf && o.elf->soname() && *o.elf->soname() == name) {
        o.names.emplace_back(name);
        return i;
      }
    }
    return std::nullopt;
  }

  // _dl_map_object for `name` needed by `loader` (nullopt: the main program
  // or a dlopen from it; `caller` supplies RPATH/RUNPATH for dlopen).
  Resolution map_object(const std::string& name, std::optional<size_t> loader,
                        std::optional<size_t> caller, int depth) {
    Resolution r;
    r.name = name;
    last_errno_ = 0;
    found_other_class_ = false;
    if (std::optional<size_t> hit = find_loaded(name)) {
      r.how = How::Loaded;
      r.object = *hit;
      return r;
    }
    std::optional<size_t> search_loader = loader ? loader : caller;
    std::shared_ptr<ParsedFile> found;
    std::string path;
    host::FileStat st;
    Verdict v = Verdict::Continue;
    if (name.find('/') != std::string::npos) {
      std::optional<std::string> expanded =
          search_loader ? expand_dst(name, p_.objects[*search_loader]) : std::string(name);
      r.how = How::Direct;
      if (expanded) {
        v = try_file(*expanded, "path", r, &found, &st);
        path = *expanded;
      }
    } else {
      const Object* lo = search_loader ? &p_.objects[*search_loader] : nullptr;
      bool loader_has_runpath = lo && lo->elf && lo->elf->runpath();
      if (!loader_has_runpath) {
        bool did_main = false;
        for (std::optional<size_t> l = search_loader; l && v == Verdict::Continue;
             l = p_.objects[*l].loader) {
          const std::vector<SearchDir>& dirs = rpath_dirs(*l, false);
          if (dirs.empty()) continue;
          v = search_dirs(dirs, name, r, &found, &path, &st);
          if (v == Verdict::Found) {
            r.how = How::Rpath;
            r.via = p_.objects[*l].path;
          }
          did_main |= *l == 0;
        }
        if (v == Verdict::Continue && !did_main && !p_.objects.empty()) {
          const std::vector<SearchDir>& dirs = rpath_dirs(0, false);
          if (!dirs.empty()) {
            v = search_dirs(dirs, name, r, &found, &path, &st);
            if (v == Verdict::Found) {
              r.how = How::ExeRpath;
              r.via = p_.objects[0].path;
            }
          }
        }
      }
      if (v == Verdict::Continue && config_.ld_library_path && !config_.ld_library_path->empty()) {
        v = search_dirs(ld_library_path_dirs(), name, r, &found, &path, &st);
        if (v == Verdict::Found) r.how = How::LdLibraryPath;
      }
      if (v == Verdict::Continue && search_loader) {
        const std::vector<SearchDir>& dirs = rpath_dirs(*search_loader, true);
        if (!dirs.empty()) {
          v = search_dirs(dirs, name, r, &found, &path, &st);
          if (v == Verdict::Found) {
            r.how = How::Runpath;
            r.via = p_.objects[*search_loader].path;
          }
        }
      }
      bool nodeflib = false;
      {
        const Object* l = lo ? lo : (p_.objects.empty() ? nullptr : &p_.objects[0]);
        nodeflib = l && l->elf && (l->elf->dt_flags_1() & elf::DF_1_NODEFLIB);
      }
      if (v == Verdict::Continue && impl_.cache) {
        std::optional<std::string_view> cached = impl_.cache_lookup(name);
        if (cached) {
          std::string cpath(*cached);
          if (nodeflib && in_system_dirs(cpath)) {
            r.tried.push_back({cpath, "ld.so.cache", "skipped: DF_1_NODEFLIB"});
          } else {
            v = try_file(cpath, "ld.so.cache", r, &found, &st);
            if (v == Verdict::Found) {
              r.how = How::Cache;
              path = cpath;
            } else if (v == Verdict::Fatal && fatal_.empty()) {
              v = Verdict::Continue;
            }
          }
        } else {
          r.tried.push_back({std::string(name), "ld.so.cache", impl_.cache_no_entry()});
        }
      }
      if (v == Verdict::Continue && !nodeflib) {
        v = search_dirs(impl_.system_dirs, name, r, &found, &path, &st);
        if (v == Verdict::Found) r.how = How::Default;
      }
    }
    if (v != Verdict::Found) {
      r.how = How::NotFound;
      if (!fatal_.empty()) return r;
      if (!trace_) {
        // _dl_map_object outside trace mode: the load ends here.
        fatal_ = found_other_class_ ? name + (config_.is_64 ? ": wrong ELF class: ELFCLASS32"
                                                            : ": wrong ELF class: ELFCLASS64")
                                    : name + ": cannot open shared object file: " +
                                          errno_text(last_errno_ ? last_errno_ : ENOENT);
        return r;
      }
      // Trace mode: a faked map that never matches later lookups.
      Object o;
      o.path = name;
      o.names = {name};
      o.loader = loader;
      o.depth = depth;
      o.faked = true;
      r.object = add(std::move(o));
      return r;
    }
    // _dl_map_object_from_fd: same inode as a loaded object means that
    // object (_dl_file_id_match_p; the main program and ld.so have none).
    for (size_t i = 0; i < p_.objects.size(); i++) {
      Object& o = p_.objects[i];
      if (o.faked || o.removed || !o.file || o.file_id == host::FileId{}) continue;
      if (o.file_id == st.id) {
        if (std::find(o.names.begin(), o.names.end(), name) == o.names.end())
          o.names.push_back(name);
        r.object = i;
        return r;
      }
    }
    Object o;
    o.path = path;
    o.names = {name};
    o.file_id = st.id;
    o.loader = loader;
    o.depth = depth;
    o.file = found->file;
    o.elf = found->elf;
    // _dl_map_object_from_fd's errors name the object as it was asked for.
    if (o.elf->e_type() != elf::ET_DYN) {
      fatal_ = name + ": cannot dynamically load executable";
      r.how = How::NotFound;
      return r;
    }
    if (o.elf->dt_flags_1() & elf::DF_1_PIE) {
      fatal_ = name + ": cannot dynamically load position-independent executable";
      r.how = How::NotFound;
      return r;
    }
    if (!o.elf->has_dynamic()) {
      fatal_ = name + ": object file has no dynamic section";
      r.how = How::NotFound;
      return r;
    }
    r.object = add(std::move(o));
    return r;
  }

  size_t add(Object o) {
    p_.objects.push_back(std::move(o));
    return p_.objects.size() - 1;
  }

  // _dl_map_object_deps: breadth-first from `first` (already in the process).
  void map_deps(std::vector<size_t> queue) {
    std::vector<bool> listed(p_.objects.size(), false);
    for (size_t q : queue) listed[q] = true;
    for (size_t qi = 0; qi < queue.size() && fatal_.empty(); qi++) {
      size_t idx = queue[qi];
      if (p_.objects[idx].faked || !p_.objects[idx].elf) continue;
      if (idx < first_new_) {
        // Loaded by an earlier call: its dependencies are already resolved
        // (glibc keeps l_initfini); walk them without searching again.
        for (const Resolution& r : p_.objects[idx].needed) {
          if (!r.object) continue;
          if (listed.size() < p_.objects.size()) listed.resize(p_.objects.size(), false);
          if (!listed[*r.object]) {
            listed[*r.object] = true;
            queue.push_back(*r.object);
          }
        }
        continue;
      }
      std::shared_ptr<const elf::ElfFile> e = p_.objects[idx].elf;
      for (std::string_view needed : e->needed()) {
        std::string name(needed);
        // expand_dst in dl-deps.c: DSTs in DT_NEEDED expand for this object.
        if (name.find('$') != std::string::npos) {
          std::optional<std::string> x = expand_dst(name, p_.objects[idx]);
          if (!x) {
            fatal_ = p_.objects[idx].path + ": cannot load auxiliary `" + name +
                     "' because of empty dynamic string token substitution";
            break;
          }
          name = *x;
        }
        Resolution r = map_object(name, idx, std::nullopt, p_.objects[idx].depth + 1);
        r.name = std::string(needed);
        size_t dep = r.object.value_or(SIZE_MAX);
        p_.objects[idx].needed.push_back(std::move(r));
        if (!fatal_.empty()) break;
        if (dep == SIZE_MAX) continue;
        if (listed.size() < p_.objects.size()) listed.resize(p_.objects.size(), false);
        if (!listed[dep]) {
          listed[dep] = true;
          queue.push_back(dep);
        }
      }
    }
    order_ = queue;
  }

  // Adds the dynamic loader itself, as rtld has it in the namespace before
  // any dependency is mapped.
  void add_rtld(const std::string& interp) {
    host::FileStat st;
    std::shared_ptr<ParsedFile> pf = impl_.open_verify(interp, &st);
    Object o;
    o.path = interp;
    o.names = {interp};
    if (pf && pf->elf) {
      // No l_file_id: rtld.c never sets one for its own map.
      o.file = pf->file;
      o.elf = pf->elf;
      if (pf->elf->soname()) o.names.emplace_back(*pf->elf->soname());
    }
    o.depth = 1;
    rtld_ = add(std::move(o));
  }

  std::string fatal_;
  // Trace mode (LD_TRACE_LOADED_OBJECTS): a missing object becomes a faked
  // map and the load goes on; false for dlopen(), where it ends the call.
  bool trace_ = true;
  // errno as open_verify/open_path leave it for the current map_object, and
  // whether a file of the other ELF class was passed over.
  int last_errno_ = 0;
  bool found_other_class_ = false;
  std::vector<size_t> order_;
  std::vector<std::unique_ptr<std::vector<SearchDir>>> rpath_memo_[2];  // [runpath]
  std::optional<std::vector<SearchDir>> llp_dirs_;
  size_t first_new_ = 0;  // objects below this index existed before this call
  std::optional<size_t> rtld_;

 private:
  Loader::Impl& impl_;
  const SearchConfig& config_;
  Process& p_;
};

// Rebuilds Process::objects in link-map order: the order in which maps were
// created (faked entries included), except that rtld.c moves its own map to
// just after its predecessor in the main program's search list (the
// breadth-first list without faked entries), and leaves it out of the list
// when nothing needs it. Indices in Object::needed/loader are remapped.
void reorder(Process& p, const std::vector<size_t>& bfs, std::optional<size_t> rtld) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.objects.size(); i++)
    if (!(rtld && i == *rtld)) order.push_back(i);
  if (rtld) {
    std::optional<size_t> pred;
    bool needed = false;
    for (size_t i : bfs) {
      if (p.objects[i].faked) continue;
      if (i == *rtld) {
        needed = true;
        break;
      }
      pred = i;
    }
    if (needed && pred) {
      auto at = std::find(order.begin(), order.end(), *pred);
      order.insert(at + 1, *rtld);
    }
  }
  std::vector<size_t> new_index(p.objects.size(), SIZE_MAX);
  for (size_t k = 0; k < order.size(); k++) new_index[order[k]] = k;
  std::vector<Object> out;
  out.reserve(order.size());
  for (size_t k : order) out.push_back(std::move(p.objects[k]));
  for (Object& o : out) {
    if (o.loader)
      o.loader = new_index[*o.loader] == SIZE_MAX ? std::nullopt
                                                  : std::optional<size_t>(new_index[*o.loader]);
    for (Resolution& r : o.needed)
      if (r.object)
        r.object = new_index[*r.object] == SIZE_MAX ? std::nullopt
                                                    : std::optional<size_t>(new_index[*r.object]);
  }
  p.objects = std::move(out);
}

}  // namespace

Process Loader::load_program(const std::string& path, ProgramStart start) {
  Process p;
  p.objects.reserve(64);
  Mapper m(*impl_, config_, p);
  host::FileStat st;
  std::shared_ptr<ParsedFile> pf = impl_->open_verify(path, &st);
  if (!pf) {
    p.errors.push_back(path + ": " +
                       (st.error ? errno_text(st.error) : std::string("cannot open")));
    return p;
  }
  if (pf->other_class || pf->other_machine) {
    p.errors.push_back(path + ": not an object for this loader (" +
                       std::string(pf->other_class ? "wrong ELF class" : "wrong machine") + ")");
    return p;
  }
  if (!pf->error.empty()) {
    p.errors.push_back(path + ": " + pf->error);
    return p;
  }
  // The main map has no l_file_id (the kernel mapped it, or rtld.c clears it
  // for __RTLD_OPENEXEC).
  Object main;
  main.path = path;
  main.names = {path};
  main.file = pf->file;
  main.elf = pf->elf;
  // Only a file with PT_INTERP can be started by exec(); a shared library
  // given as the input is seen as `ld.so PATH` sees it, which is also how it
  // is seen when some process loads it by that path.
  main.started_by_exec = start == ProgramStart::Exec && pf->elf->interp();
  p.objects.push_back(std::move(main));
  if (!pf->elf->has_dynamic()) {
    p.errors.push_back(path + ": not a dynamic executable");
    return p;
  }
  std::string interp = pf->elf->interp() ? std::string(*pf->elf->interp())
                                         : default_interp(config_.e_machine, config_.is_64);
  // The loader itself is in the namespace from the start.
  m.add_rtld(interp);
  std::vector<size_t> queue = {0};
  for (const std::string& pre : config_.preload) {
    Resolution r = m.map_object(pre, std::nullopt, 0, 1);
    r.how = r.how == How::NotFound ? How::NotFound : How::Preload;
    if (r.object && !p.objects[*r.object].faked) queue.push_back(*r.object);
    if (!m.fatal_.empty()) break;
  }
  if (m.fatal_.empty()) m.map_deps(queue);
  if (!m.fatal_.empty()) p.errors.push_back(m.fatal_);
  reorder(p, m.order_, m.rtld_);
  return p;
}

std::vector<size_t> Loader::dlopen(Process& process, const std::string& name,
                                   std::optional<size_t> caller, std::string* error) {
  size_t before = process.objects.size();
  Mapper m(*impl_, config_, process);
  m.trace_ = false;
  // Without a caller the main program's RPATH applies, as for a dlopen from
  // it; a process without objects yet has none.
  std::optional<size_t> from = caller;
  if (!from && !process.objects.empty()) from = 0;
  Resolution r = m.map_object(name, std::nullopt, from, 0);
  std::vector<size_t> added;
  if (!m.fatal_.empty()) {
    if (error) *error = m.fatal_;
    return added;
  }
  if (!r.object || process.objects[*r.object].faked) {
    if (r.object) process.objects[*r.object].removed = true;
    if (error) *error = name + ": cannot open shared object file: No such file or directory";
    return added;
  }
  if (*r.object < before) return added;  // already loaded: nothing new
  m.first_new_ = before;
  m.map_deps({*r.object});
  for (size_t i = before; i < process.objects.size(); i++) {
    if (process.objects[i].faked) {
      if (error && error->empty())
        *error =
            process.objects[i].path + ": cannot open shared object file: No such file or directory";
    }
  }
  if (!m.fatal_.empty() && error) *error = m.fatal_;
  for (size_t i : m.order_)
    if (i >= before) added.push_back(i);
  if (error && !error->empty()) {
    for (size_t i = before; i < process.objects.size(); i++) process.objects[i].removed = true;
    added.clear();
  }
  return added;
}

}  // namespace mld::loader
