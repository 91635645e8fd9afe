// jit.cc — finds extension build directories and their locks, decides
// whether a lock is stale, reads the toolchain the next build would use, and
// removes stale locks on request. It gathers facts; what they mean for the
// user is the JIT rules' detectors' to say (src/detect/rules/JIT00*.cc).
//
// Build roots, as torch.utils.cpp_extension computes them
// (research/jit-nccl.md §A1): $TORCH_EXTENSIONS_DIR/<name> (no tag level),
// else ~/.cache/torch_extensions/py{maj}{min}_{cuXY|cpu}/<name>; DeepSpeed's
// JIT ops use the same roots. Megatron/GPT-NeoX build in
// megatron/fused_kernels/build itself (one lock for every kernel, every rank
// and, on a shared filesystem, every node).
//
// A lock is held when a live process has it open (/proc/*/fd), since
// FileBaton keeps the O_EXCL descriptor until it removes the file. Waiters
// only poll os.path.exists and hold nothing.
//
// Before any build, `import torch.utils.cpp_extension` itself must work:
// its module-level imports of setuptools and friends are read from the file
// and looked for on the interpreter's sys.path (MissingImport).
//
// Symbolic links: caches are often linked to scratch or shared storage (the
// build directory, the tag level, the root, or a directory above). torch
// follows every link, so the scan does too, recording them; a link that
// leads nowhere (missing target, loop) is reported, not followed, and
// resolution is bounded (host::Host::resolve). fix() removes only at the
// real path, after checking it is still the entry torch tests and that no
// link on the way was planted by another user.
#include "jit/jit.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>
#include <map>
#include <set>

#include "hostfacts/hostfacts.h"
#include "loader/loader.h"

namespace mld::jit {

namespace {

const char* const kNetworkFilesystems[] = {
    "nfs",   "nfs4",   "lustre", "gpfs",      "cifs",           "smb3",
    "smbfs", "beegfs", "ceph",   "glusterfs", "fuse.glusterfs", "fuse.sshfs",
    "panfs", "wekafs", "9p",     "afs",       "fuse.s3fs"};

bool is_network_fs(const std::string& fstype) {
  return std::find(std::begin(kNetworkFilesystems), std::end(kNetworkFilesystems), fstype) !=
         std::end(kNetworkFilesystems);
}

bool is_dir(const host::Host& host, const std::string& p) {
  return host.stat(p).kind == host::FileKind::Directory;
}

// A symlink chain resolved inside the root (relative links against their
// directory), at most 16 deep.
std::string resolve_links(const host::Host& host, std::string p) {
  for (int depth = 0; depth < 16; depth++) {
    std::optional<std::string> t = host.read_link(p);
    if (!t) break;
    p = (*t)[0] == '/' ? *t : host::join_path(p.substr(0, p.rfind('/')), *t);
  }
  return p;
}

void add_extension(const host::Host& host, const std::string& dir, const BuildRoot& root,
                   std::optional<std::string> tag, std::vector<Extension>& out) {
  Extension e;
  e.path = dir;
  e.name = dir.substr(dir.rfind('/') + 1);
  e.root = root.path;
  e.root_kind = root.kind;
  e.tag = std::move(tag);
  host::PathResolution real = host.resolve(dir);
  e.real_path = real.end == host::PathResolution::End::Found ? real.path : dir;
  e.links = std::move(real.links);
  e.has_build_ninja =
      host.stat(host::join_path(dir, "build.ninja")).kind == host::FileKind::Regular;
  const std::string module = host::join_path(dir, e.name + ".so");
  if (host.stat(module).kind == host::FileKind::Regular) e.module = module;
  const std::string lock = host::join_path(dir, "lock");
  host::FileStat st = host.lstat(lock);
  if (st.kind != host::FileKind::Missing && st.kind != host::FileKind::Error) {
    LockState l;
    l.path = lock;
    l.real_path = host::join_path(e.real_path, "lock");
    l.symlink = st.symlink;
    l.id = st.id;
    l.uid = st.uid;
    const i64 now = static_cast<i64>(std::time(nullptr));
    if (st.mtime > 0 && now >= st.mtime) l.age_seconds = now - st.mtime;
    if (std::optional<std::string> fs = hostfacts::filesystem_of(host, lock)) {
      l.filesystem = *fs;
      l.network_filesystem = is_network_fs(*fs);
    }
    e.lock = std::move(l);
  }
  out.push_back(std::move(e));
}

// What an entry of a build root is, following a symbolic link as torch
// does: a directory (the link's target), a link leading nowhere (filled
// into *broken), or anything else.
enum class EntryKind { Directory, BrokenLink, Other };
EntryKind follow_entry(const host::Host& host, const std::string& path, BrokenLink* broken) {
  host::FileStat st = host.lstat(path);
  if (!st.symlink)
    return st.kind == host::FileKind::Directory ? EntryKind::Directory : EntryKind::Other;
  host::PathResolution r = host.resolve(path);
  if (r.end == host::PathResolution::End::Found)
    return host.stat(r.path).kind == host::FileKind::Directory ? EntryKind::Directory
                                                               : EntryKind::Other;
  if (r.end == host::PathResolution::End::Error) return EntryKind::Other;
  broken->path = path;
  broken->loop = r.end == host::PathResolution::End::Loop;
  if (!broken->loop && !r.links.empty()) {
    const host::SymlinkStep& last = r.links.back();
    broken->target = host::normalize_path(
        last.target.starts_with('/') ? last.target
                                     : host::join_path(host::dir_name(last.path), last.target));
    broken->missing = r.path;
  }
  broken->links = std::move(r.links);
  return EntryKind::BrokenLink;
}

// A directory that is itself a build directory (a lock or build.ninja in it).
bool looks_like_build_dir(const host::Host& host, const std::string& dir) {
  return host.lstat(host::join_path(dir, "lock")).kind != host::FileKind::Missing ||
         host.stat(host::join_path(dir, "build.ninja")).kind == host::FileKind::Regular;
}

const char* const kCacheKind = "torch_extensions cache";

bool looks_like_tag(const std::string& name) {
  return name.size() > 3 && name.starts_with("py") &&
         std::isdigit(static_cast<unsigned char>(name[2])) && name.find('_') != std::string::npos;
}

// The extensions of one root: `flat` roots hold build directories directly;
// the cache holds a tag level first. Linked directories are followed (torch
// follows them); the depth is fixed, so a link back up cannot recurse.
void scan_root(const host::Host& host, const BuildRoot& root, JitReport& r) {
  if (looks_like_build_dir(host, root.path)) {
    add_extension(host, root.path, root, std::nullopt, r.extensions);
    return;
  }
  std::optional<std::vector<std::string>> entries = host.list_dir(root.path);
  if (!entries) return;
  std::sort(entries->begin(), entries->end());
  auto broken_link = [&](BrokenLink b, const std::string& what, const std::string& name) {
    b.what = what;
    b.name = name;
    b.root_kind = root.kind;
    r.broken_links.push_back(std::move(b));
  };
  for (const std::string& name : *entries) {
    const std::string dir = host::join_path(root.path, name);
    const bool tag = looks_like_tag(name);
    BrokenLink broken;
    EntryKind kind = follow_entry(host, dir, &broken);
    if (kind == EntryKind::BrokenLink)
      broken_link(std::move(broken),
                  tag && root.kind == kCacheKind ? "tag directory" : "build directory", name);
    if (kind != EntryKind::Directory) continue;
    if (tag && !looks_like_build_dir(host, dir)) {
      std::optional<std::vector<std::string>> inner = host.list_dir(dir);
      if (!inner) continue;
      std::sort(inner->begin(), inner->end());
      for (const std::string& ext : *inner) {
        const std::string edir = host::join_path(dir, ext);
        BrokenLink b;
        EntryKind k = follow_entry(host, edir, &b);
        if (k == EntryKind::BrokenLink) broken_link(std::move(b), "build directory", ext);
        if (k == EntryKind::Directory) add_extension(host, edir, root, name, r.extensions);
      }
    } else {
      add_extension(host, dir, root, std::nullopt, r.extensions);
    }
  }
}

void find_roots(const host::Host& host, const JitOptions& o, JitReport& r) {
  // `report_dangling`: torch fails under a root that leads nowhere, except
  // the default cache, which it resolves with os.path.realpath and creates.
  auto add = [&](std::string p, const std::string& kind, bool report_dangling) {
    if (p.empty()) return;
    if (p[0] != '/' && !o.cwd.empty()) p = host::join_path(o.cwd, p);
    BrokenLink broken;
    EntryKind k = follow_entry(host, p, &broken);
    if (k == EntryKind::BrokenLink && (report_dangling || broken.loop)) {
      broken.what = "root";
      broken.root_kind = kind;
      for (const BrokenLink& b : r.broken_links)
        if (b.path == broken.path) return;
      r.broken_links.push_back(std::move(broken));
    }
    if (k != EntryKind::Directory) return;
    const std::string real = host.real_path(p).value_or(p);
    // One directory scanned once, under the first name it was reached by.
    for (const BuildRoot& b : r.roots)
      if (b.path == p || b.real_path == real) return;
    r.roots.push_back({p, kind, real});
  };
  for (const std::string& p : o.paths) add(p, "--path", true);
  if (std::optional<std::string> d = host.getenv("TORCH_EXTENSIONS_DIR"))
    add(*d, "TORCH_EXTENSIONS_DIR", true);
  // torch._appdirs.user_cache_dir: $XDG_CACHE_HOME, else ~/.cache.
  std::optional<std::string> cache = host.getenv("XDG_CACHE_HOME");
  if (!cache || cache->empty() || (*cache)[0] != '/') {
    if (std::optional<std::string> home = host.getenv("HOME"))
      cache = host::join_path(*home, ".cache");
  }
  if (cache) add(host::join_path(*cache, "torch_extensions"), kCacheKind, false);
  if (!o.cwd.empty())
    add(host::join_path(o.cwd, "megatron/fused_kernels/build"), "megatron fused_kernels", true);
}

// Who has each lock open: one pass over /proc/<pid>/fd.
void find_holders(const host::Host& host, std::vector<Extension>& exts, u32* scanned) {
  std::map<std::string, LockState*> by_path;
  for (Extension& e : exts) {
    if (!e.lock || e.lock->symlink) continue;
    by_path[e.lock->path] = &*e.lock;
    // /proc/<pid>/fd links name the file by its real path: a symlinked
    // directory on the way ($HOME, ~/.cache, the build directory) makes it
    // differ.
    by_path[e.lock->real_path] = &*e.lock;
  }
  if (by_path.empty()) return;
  std::optional<std::vector<std::string>> procs = host.list_dir("/proc");
  if (!procs) {
    for (auto& [p, l] : by_path) l->holders_complete = false;
    return;
  }
  bool complete = true;
  for (const std::string& pid : *procs) {
    if (pid.empty() ||
        !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    (*scanned)++;
    const std::string fd_dir = "/proc/" + pid + "/fd";
    std::optional<std::vector<std::string>> fds = host.list_dir(fd_dir);
    if (!fds) {
      // Gone since the listing, or another user's process we may not read.
      if (host.stat("/proc/" + pid).kind == host::FileKind::Directory) complete = false;
      continue;
    }
    for (const std::string& fd : *fds) {
      std::optional<std::string> target = host.read_link(fd_dir + "/" + fd);
      if (!target) continue;
      auto it = by_path.find(*target);
      if (it == by_path.end()) continue;
      LockState& l = *it->second;
      const u32 p = static_cast<u32>(std::stoul(pid));
      if (std::any_of(l.holders.begin(), l.holders.end(),
                      [&](const LockHolder& h) { return h.pid == p; }))
        continue;
      std::string comm(trim(host.read_file("/proc/" + pid + "/comm", 256).value_or("")));
      l.holders.push_back({p, comm});
    }
  }
  for (auto& [p, l] : by_path) l->holders_complete = complete;
}

Toolchain find_toolchain(const host::Host& host) {
  Toolchain t;
  t.ninja = host.find_on_path("ninja");
  // torch.utils.cpp_extension._find_cuda_home: CUDA_HOME, CUDA_PATH, the
  // directory above nvcc on PATH, /usr/local/cuda.
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    std::optional<std::string> v = host.getenv(var);
    if (v && !v->empty()) {
      t.cuda_home = *v;
      t.cuda_home_source = var;
      break;
    }
  }
  if (!t.cuda_home) {
    if (std::optional<std::string> nvcc = host.find_on_path("nvcc")) {
      std::string real = resolve_links(host, *nvcc);
      std::string bin = real.substr(0, real.rfind('/'));
      t.cuda_home = bin.substr(0, bin.rfind('/'));
      t.cuda_home_source = "nvcc on PATH";
    } else if (is_dir(host, "/usr/local/cuda")) {
      t.cuda_home = "/usr/local/cuda";
      t.cuda_home_source = "/usr/local/cuda";
    }
  }
  if (t.cuda_home) {
    const std::string nvcc = host::join_path(*t.cuda_home, "bin/nvcc");
    if (host.stat(nvcc).kind == host::FileKind::Regular) t.nvcc = nvcc;
    // The toolkit's own headers: `#define CUDA_VERSION 13000` (what nvcc
    // compiles against; nvcc --version reports the same release).
    for (const char* h : {"include/cuda.h", "targets/x86_64-linux/include/cuda.h",
                          "targets/sbsa-linux/include/cuda.h"}) {
      std::optional<std::string> text = host.read_file(host::join_path(*t.cuda_home, h), 1 << 20);
      if (!text) continue;
      size_t at = text->find("#define CUDA_VERSION ");
      if (at == std::string::npos) continue;
      unsigned long v = std::strtoul(text->c_str() + at + 21, nullptr, 10);
      if (v >= 1000)
        t.cuda_version = std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
      break;
    }
    // crt/host_config.h: "#if __GNUC__ > 15" guards "unsupported GNU version!".
    for (const char* h :
         {"include/crt/host_config.h", "targets/x86_64-linux/include/crt/host_config.h"}) {
      std::optional<std::string> text = host.read_file(host::join_path(*t.cuda_home, h), 1 << 20);
      if (!text) continue;
      size_t err = text->find("unsupported GNU version");
      if (err == std::string::npos) break;
      size_t guard = text->rfind("__GNUC__ >", err);
      if (guard != std::string::npos) t.nvcc_max_gcc = std::atoi(text->c_str() + guard + 10);
      break;
    }
  }
  if (std::optional<std::string> gcc = host.find_on_path("gcc")) {
    std::string real = resolve_links(host, *gcc);
    t.gcc = real;
    // Debian names the driver gcc-<major>; a bare "gcc" has no version in
    // its name and is left unknown rather than executed.
    std::string base = real.substr(real.rfind('/') + 1);
    size_t dash = base.rfind('-');
    if (dash != std::string::npos && dash + 1 < base.size() &&
        std::all_of(base.begin() + dash + 1, base.end(),
                    [](char c) { return c >= '0' && c <= '9'; }))
      t.gcc_major = std::atoi(base.c_str() + dash + 1);
  }
  return t;
}

// The tag torch gives this environment's cache directory: py311_cpu, py311_cu121,
// py313t_cpu (torch 2.6 and later add sys.abiflags). Before torch 1.9 there is
// no tag level: builds sit in the cache itself (Debian 11's torch 1.7).
std::optional<std::string> current_tag(const JitOptions& o) {
  if (!o.python_tag) return std::nullopt;
  if (!o.torch_cuda) return *o.python_tag + "_cpu";
  std::string digits;
  for (char c : *o.torch_cuda)
    if (c != '.') digits += c;
  return *o.python_tag + "_cu" + digits;
}

// Loads each extension module of this environment into the interpreter's
// simulated process after the preloaded modules (torch._C brings libc10,
// libtorch, libtorch_python), as `import` would after `import torch`, and
// lists what the process lacks for it: DT_NEEDED not found, and undefined
// non-weak symbols no loaded object defines. A build from another torch
// release fails exactly so ("undefined symbol: _ZN3c10...").
void check_modules(const host::Host& host, const JitOptions& o, std::vector<Extension>& exts) {
  const std::optional<std::string> tag = current_tag(o);
  bool any = false;
  for (Extension& e : exts) {
    e.for_this_environment = !e.tag || (tag && *e.tag == *tag);
    any |= e.for_this_environment && e.module;
  }
  if (!any || !o.program) return;
  try {
    loader::SearchConfig config = loader::SearchConfig::for_host(host, elf::EM_X86_64, true, {});
    std::optional<loader::GlibcVersion> glibc =
        loader::detect_glibc_version(host, config.system_dirs);
    if (!glibc) return;
    loader::Loader loader(host, loader::SearchConfig::for_host(host, elf::EM_X86_64, true, *glibc));
    loader::Process base = loader.load_program(*o.program);
    for (const std::string& m : o.preload) {
      std::string error;
      loader.dlopen(base, m, std::nullopt, &error);
    }
    for (Extension& e : exts) {
      if (!e.for_this_environment || !e.module) continue;
      loader::Process p = base;
      const size_t before = p.objects.size();
      std::string error;
      std::vector<size_t> added = loader.dlopen(p, *e.module, std::nullopt, &error);
      std::optional<size_t> mod;
      for (size_t i = 0; i < p.objects.size(); i++)
        if (p.objects[i].path == *e.module && p.objects[i].elf) mod = i;
      for (size_t i = before; i < p.objects.size(); i++)
        if (p.objects[i].faked && !p.objects[i].names.empty())
          e.missing_libraries.push_back(p.objects[i].names.front());
      if (!mod) continue;
      for (const elf::DynamicSymbol& s : p.objects[*mod].elf->dynamic_symbols()) {
        if (s.defined() || s.bind == elf::STB_WEAK || s.name.empty()) continue;
        bool found = false;
        for (size_t i = 0; i < p.objects.size() && !found; i++) {
          const loader::Object& obj = p.objects[i];
          if (i == *mod || obj.faked || obj.removed || !obj.elf) continue;
          try {
            found = obj.elf->defines_symbol(s.name);
          } catch (const ParseError&) {
          }
        }
        if (!found) e.missing_symbols.emplace_back(s.name);
      }
    }
  } catch (const std::exception&) {
    // No interpreter to load under this root: nothing to compare against.
  }
}

struct ModelArch {
  std::string_view needle;
  std::string_view cc;
};
// First match wins: longer names before their prefixes (A100 before A10).
constexpr ModelArch kModelArches[] = {
    {"GB200", "10.0"},    {"B200", "10.0"},        {"B100", "10.0"},        {"GH200", "9.0"},
    {"H200", "9.0"},      {"H100", "9.0"},         {"H800", "9.0"},         {"H20", "9.0"},
    {"A100", "8.0"},      {"A800", "8.0"},         {"A30", "8.0"},          {"L40", "8.9"},
    {"L4", "8.9"},        {"RTX 6000 Ada", "8.9"}, {"RTX 5000 Ada", "8.9"}, {"RTX 4000 Ada", "8.9"},
    {"RTX 40", "8.9"},    {"A40", "8.6"},          {"A10", "8.6"},          {"A16", "8.6"},
    {"A2", "8.6"},        {"RTX A", "8.6"},        {"RTX 30", "8.6"},       {"V100", "7.0"},
    {"TITAN V", "7.0"},   {"T4", "7.5"},           {"RTX 20", "7.5"},       {"Quadro RTX", "7.5"},
    {"TITAN RTX", "7.5"}, {"P100", "6.0"},         {"P40", "6.1"},          {"P4", "6.1"},
    {"GTX 10", "6.1"},
};

}  // namespace

namespace {

// sys.abiflags, read from the SOABI: "cpython-313td-x86_64-linux-gnu" -> "td"
// (a free-threaded debug build); "" for a standard build.
std::string abiflags(const std::string& soabi) {
  if (!soabi.starts_with("cpython-")) return {};
  size_t i = 8;
  while (i < soabi.size() && std::isdigit(static_cast<unsigned char>(soabi[i]))) i++;
  size_t end = i;
  while (end < soabi.size() && std::isalpha(static_cast<unsigned char>(soabi[end]))) end++;
  return soabi.substr(i, end - i);
}

// Whether `import <top>` finds something on sys.path as importlib's
// FileFinder would for a pure-Python module: a package or namespace
// directory, or <top>.py. nullopt when it cannot be told: an entry that is a
// zip or egg file (zipimport), or no sys.path at all.
std::optional<bool> module_on_sys_path(const host::Host& host,
                                       const std::vector<std::string>& sys_path,
                                       const std::string& top) {
  if (sys_path.empty()) return std::nullopt;
  bool unknown = false;
  for (const std::string& dir : sys_path) {
    if (dir.empty()) continue;  // the current directory: the job's, not known here
    const host::FileKind kind = host.stat(dir).kind;
    if (kind == host::FileKind::Regular) unknown = true;  // a zip on sys.path
    if (kind != host::FileKind::Directory) continue;
    const std::string base = host::join_path(dir, top);
    if (host.stat(base).kind == host::FileKind::Directory ||
        host.stat(base + ".py").kind == host::FileKind::Regular)
      return true;
  }
  if (unknown) return std::nullopt;
  return false;
}

// The third-party modules torch/utils/cpp_extension.py imports at load that
// no sys.path entry holds (MissingImport).
std::vector<MissingImport> missing_imports(const host::Host& host, const pyenv::Environment& env,
                                           const std::string& file, const std::string& text) {
  static const std::set<std::string> third_party = {"setuptools", "pkg_resources", "packaging",
                                                    "typing_extensions", "filelock"};
  std::vector<MissingImport> out;
  std::set<std::string> seen;
  for (const pyenv::ImportStatement& st : pyenv::module_level_imports(text)) {
    if (st.level != 0 || st.line == 0) continue;
    const std::string top = st.module.substr(0, st.module.find('.'));
    if (!third_party.count(top) || seen.count(top)) continue;
    // The statement's own line, unindented: one inside try/except or an if
    // at module level may be guarded.
    size_t begin = 0;
    for (size_t n = 1; n < st.line && begin != std::string::npos; n++) {
      begin = text.find('\n', begin);
      if (begin != std::string::npos) begin++;
    }
    if (begin == std::string::npos) continue;
    const std::string line = text.substr(begin, text.find('\n', begin) - begin);
    if (!line.starts_with("import ") && !line.starts_with("from ")) continue;
    seen.insert(top);
    if (module_on_sys_path(host, env.python.sys_path, top).value_or(true)) continue;
    MissingImport m;
    m.module = top;
    m.statement = line.substr(0, line.find('#'));  // without a trailing comment
    m.statement.erase(m.statement.find_last_not_of(" \t\r") + 1);
    m.file = file;
    m.line = st.line;
    m.searched = env.python.sys_path.size();
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

void describe_environment(JitOptions& o, const host::Host& host, const pyenv::Environment& env) {
  const pyenv::TorchBuild build = pyenv::torch_build(host, env);
  // torch 2.6 and later add sys.abiflags (pytorch#136890: py313t for a
  // free-threaded build, py314d for a debug one); a torch of unknown version
  // is taken to be a current one.
  const bool with_abiflags =
      !build.major || *build.major > 2 || (*build.major == 2 && build.minor && *build.minor >= 6);
  o.python_tag = "py" + std::to_string(env.python.major) + std::to_string(env.python.minor) +
                 (with_abiflags ? abiflags(env.python.soabi) : "");
  o.program = env.python.executable.empty() ? env.interpreter.path : env.python.executable;
  const pyenv::ImportedPackage* torch = env.find_package("torch");
  o.torch_installed = torch != nullptr;
  o.torch_cuda = build.cuda;
  // _jit_compile's lock: `with FileLock(os.path.join(build_directory, 'lock'))`
  // since pytorch#190543 (an OS advisory lock), FileBaton's O_EXCL file before.
  if (torch) {
    const std::string cpp_extension = host::join_path(torch->path, "utils/cpp_extension.py");
    std::optional<std::string> text = host.read_file(cpp_extension, 8u << 20);
    o.torch_advisory_lock = text && text->find("with FileLock(") != std::string::npos &&
                            text->find("FileBaton(") == std::string::npos;
    if (text) o.cpp_extension_missing = missing_imports(host, env, cpp_extension, *text);
    o.installer.debian_system = torch->site_dir == "/usr/lib/python3/dist-packages";
    o.installer.pip = module_on_sys_path(host, env.python.sys_path, "pip").value_or(true);
    o.installer.python = o.program ? *o.program : std::string("python3");
  }
  if (torch)
    for (const pyenv::NativeFile& f : torch->extension_modules)
      if (f.module == "torch._C") o.preload.push_back(f.path);
}

LockStatus lock_status(const LockState& lock) {
  if (!lock.holders.empty()) return LockStatus::Held;
  if (lock.advisory) return LockStatus::Unlocked;
  return lock.network_filesystem ? LockStatus::Network : LockStatus::Stale;
}

bool arch_runs_on(const CudaArch& a, int major, int minor) {
  if (a.major == major && a.minor <= minor) return true;
  return a.ptx && (a.major < major || (a.major == major && a.minor <= minor));
}

std::optional<size_t> lock_index(const JitReport& report, std::string_view path) {
  for (size_t i = 0; i < report.extensions.size(); i++)
    if (report.extensions[i].lock && report.extensions[i].lock->path == path) return i;
  return std::nullopt;
}

std::optional<std::string> compute_capability(std::string_view model) {
  for (const ModelArch& m : kModelArches)
    if (model.find(m.needle) != std::string_view::npos) return std::string(m.cc);
  return std::nullopt;
}

std::optional<std::vector<CudaArch>> parse_cuda_arch_list(std::string_view text) {
  static const std::map<std::string, std::string, std::less<>> named = {
      {"Kepler+Tesla", "3.7"},    {"Kepler", "3.5+PTX"},     {"Maxwell+Tegra", "5.3"},
      {"Maxwell", "5.0;5.2+PTX"}, {"Pascal", "6.0;6.1+PTX"}, {"Volta+Tegra", "7.2"},
      {"Volta", "7.0+PTX"},       {"Turing", "7.5+PTX"},     {"Ampere+Tegra", "8.7"},
      {"Ampere", "8.0;8.6+PTX"},  {"Ada", "8.9+PTX"},        {"Hopper", "9.0+PTX"}};
  std::vector<std::string> entries;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) entries.push_back(cur);
    cur.clear();
  };
  for (char c : text) {
    if (c == ';' || c == ' ')
      flush();
    else
      cur += c;
  }
  flush();
  std::vector<CudaArch> out;
  for (size_t i = 0; i < entries.size(); i++) {
    std::string e = entries[i];
    if (auto it = named.find(e); it != named.end()) {
      std::optional<std::vector<CudaArch>> expanded = parse_cuda_arch_list(it->second);
      out.insert(out.end(), expanded->begin(), expanded->end());
      continue;
    }
    CudaArch a;
    if (e.ends_with("+PTX")) {
      a.ptx = true;
      e.resize(e.size() - 4);
    }
    if (!e.empty() && (e.back() == 'a' || e.back() == 'f')) e.pop_back();  // 9.0a, 10.0f
    size_t dot = e.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 >= e.size() ||
        e.find_first_not_of("0123456789.") != std::string::npos ||
        e.find('.', dot + 1) != std::string::npos || e.size() > 6)
      return std::nullopt;
    a.major = std::atoi(e.c_str());
    a.minor = std::atoi(e.c_str() + dot + 1);
    out.push_back(a);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

JitReport scan_locks(const host::Host& host, const JitOptions& options) {
  JitReport r;
  find_roots(host, options, r);
  for (const BuildRoot& root : r.roots) scan_root(host, root, r);
  find_holders(host, r.extensions, &r.processes_scanned);
  return r;
}

JitReport scan(const host::Host& host, const JitOptions& options) {
  JitReport r = scan_locks(host, options);
  check_modules(host, options, r.extensions);
  // The lock protocol is the installed torch's for the builds it would use;
  // another environment's builds (another tag) may be an older torch's.
  for (Extension& e : r.extensions)
    if (e.lock && e.for_this_environment) e.lock->advisory = options.torch_advisory_lock;
  r.toolchain = find_toolchain(host);
  r.torch_installed = options.torch_installed;
  r.torch_cuda = options.torch_cuda;
  r.cpp_extension_missing = options.cpp_extension_missing;
  r.installer = options.installer;
  r.cuda_arch_list = host.getenv("TORCH_CUDA_ARCH_LIST");
  if (r.cuda_arch_list) r.cuda_archs = parse_cuda_arch_list(*r.cuda_arch_list);
  for (const std::string& m : options.gpu_models) r.gpus.push_back({m, compute_capability(m)});
  return r;
}

namespace {

std::string uid_text(u32 uid) { return "uid " + std::to_string(uid); }

// Where fix() may remove inside the build directory of `e`: its real path,
// when every symbolic link followed to reach it is root's or the directory
// owner's (the kernel's fs.protected_symlinks trusts a link in a shared
// directory on the same terms): a link another user planted never steers a
// removal, even for root. nullopt with *why set otherwise.
std::optional<std::string> trusted_build_dir(const host::Host& host, const Extension& e,
                                             host::FileStat* dir, std::string* why) {
  host::PathResolution r = host.resolve(e.path);
  if (r.end != host::PathResolution::End::Found) {
    *why = "its build directory " + e.path + " no longer leads to a directory";
    return std::nullopt;
  }
  *dir = host.lstat(r.path);
  if (dir->kind != host::FileKind::Directory) {
    *why = r.path + " is no longer a directory";
    return std::nullopt;
  }
  if (r.path != e.real_path) {
    *why = "its build directory now leads to " + r.path + ", not to " + e.real_path +
           " where the scan found it";
    return std::nullopt;
  }
  for (const host::SymlinkStep& link : r.links)
    if (link.uid != 0 && link.uid != dir->uid) {
      *why = "reached through the symbolic link " + link.path + " → " + link.target + " of " +
             uid_text(link.uid) + ", neither root nor the build directory's owner (" +
             uid_text(dir->uid) + "); not followed to remove anything";
      return std::nullopt;
    }
  return r.path;
}

// Whether the stale lock of `e` may be removed now: the entry torch tests,
// <build dir's real path>/lock, must be the one the scan saw (same
// identity: a regular file, or a symbolic link, which is removed, never its
// target), owned by the build directory's owner, reached through trusted
// links only. The reason to keep it, or nullopt with *entry and *id set.
std::optional<std::string> lock_removal_refused(const host::Host& host, const Extension& e,
                                                std::string* entry, host::FileId* id) {
  const LockState& l = *e.lock;
  std::string why;
  host::FileStat dir;
  std::optional<std::string> real_dir = trusted_build_dir(host, e, &dir, &why);
  if (!real_dir) return why;
  *entry = host::join_path(*real_dir, "lock");
  host::FileStat st = host.lstat(*entry);
  if (st.kind == host::FileKind::Missing) return "gone since the scan";
  if (!(st.id == l.id)) return "replaced by another file since the scan";
  if (!st.symlink && st.kind != host::FileKind::Regular)
    return "not a regular file (torch's lock is one)";
  if (st.uid != dir.uid)
    return "owned by " + uid_text(st.uid) + ", its build directory " + *real_dir + " by " +
           uid_text(dir.uid) + ": not left by that user's build; check and rm it yourself";
  *id = st.id;
  return std::nullopt;
}

}  // namespace

std::vector<FixAction> fix(const host::Host& host, const JitReport& report, bool dry_run) {
  std::vector<FixAction> actions;
  // Real paths already acted on: two names of one build directory (links)
  // are one lock.
  std::map<std::string, size_t> acted;
  for (const Extension& e : report.extensions) {
    if (!e.lock) continue;
    const LockState& l = *e.lock;
    FixAction a;
    a.path = l.path;
    const LockStatus status = lock_status(l);
    if (status == LockStatus::Held) {
      a.action = "keep";
      a.reason = "held by pid " + std::to_string(l.holders.front().pid) + " (" +
                 l.holders.front().command + "): a build in progress";
    } else if (status == LockStatus::Unlocked) {
      a.action = "keep";
      a.reason =
          "torch's OS advisory lock (filelock), held by no process: the file blocks "
          "nothing, and removing it could let two builds run at once";
    } else if (status == LockStatus::Network) {
      a.action = "keep";
      a.reason = "on " + l.filesystem + ": a builder on another node may hold it";
    } else if (!l.holders_complete) {
      a.action = "keep";
      a.reason = "some processes' open files could not be read (run as root to check them all)";
    } else if (auto it = acted.find(l.real_path); it != acted.end()) {
      const FixAction& first = actions[it->second];
      a.action = first.action;
      a.real_path = first.real_path;
      a.done = first.done;
      a.reason = "the same file as " + first.path;
    } else {
      // Check again right before removing: a build may have started.
      std::vector<Extension> again = {e};
      u32 scanned = 0;
      find_holders(host, again, &scanned);
      const LockState& now = *again.front().lock;
      std::string entry;
      host::FileId id;
      if (!now.holders.empty() || !now.holders_complete) {
        a.action = "keep";
        a.reason = now.holders.empty() ? "a process's open files could not be read"
                                       : "held by pid " + std::to_string(now.holders.front().pid) +
                                             " since the scan";
      } else if (std::optional<std::string> why = lock_removal_refused(host, e, &entry, &id)) {
        a.action = "keep";
        a.reason = *why;
      } else {
        a.action = "remove";
        a.real_path = entry;
        a.reason = "stale: no process holds it";
        if (!dry_run) {
          std::string error;
          a.done = host.remove_file(entry, &error, &id);
          if (!a.done) a.reason = error;
        }
      }
      acted[l.real_path] = actions.size();
    }
    actions.push_back(std::move(a));
  }
  // Stale builds (a module the installed torch cannot satisfy): remove the module and its objects
  // so the next load() compiles everything again; ninja would otherwise relink the old objects into
  // the same undefined symbols. Sources and build.ninja stay. Not while a build of that extension
  // holds its lock; at the build directory's real path, through trusted links only.
  std::set<std::string> cleaned;
  for (const Extension& e : report.extensions) {
    if (e.missing_symbols.empty() && e.missing_libraries.empty()) continue;
    if (e.lock && !e.lock->holders.empty()) {
      actions.push_back({"keep", e.path, "", false, "a build in progress holds its lock"});
      continue;
    }
    std::string why;
    host::FileStat dir_stat;
    std::optional<std::string> dir = trusted_build_dir(host, e, &dir_stat, &why);
    if (!dir) {
      actions.push_back({"keep", e.path, "", false, why});
      continue;
    }
    if (!cleaned.insert(*dir).second) continue;
    std::optional<std::vector<std::string>> entries = host.list_dir(*dir);
    if (!entries) continue;
    for (const std::string& name : *entries) {
      if (!(name.ends_with(".so") || name.ends_with(".o") || name == ".ninja_deps" ||
            name == ".ninja_log"))
        continue;
      const std::string real = host::join_path(*dir, name);
      if (host.lstat(real).kind == host::FileKind::Directory) continue;
      FixAction a{"remove", host::join_path(e.path, name), real, false,
                  "stale build output (JIT004)"};
      if (!dry_run) {
        std::string error;
        a.done = host.remove_file(real, &error);
        if (!a.done) a.reason = error;
      }
      actions.push_back(std::move(a));
    }
  }
  return actions;
}

}  // namespace mld::jit
