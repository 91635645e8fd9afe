// host.cc — reads the analysed machine under a root directory. With root "/"
// it is the live system; with any other root every absolute path (and every
// absolute symlink met on the way) is resolved inside that tree, the way a
// chroot would see it, using openat2(RESOLVE_IN_ROOT) where the kernel has it
// and a bounded manual walk otherwise. Nothing here writes.
#include "host/host.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <set>

extern char** environ;

namespace mld::host {

namespace {

// Opens `path` (absolute, inside the root) relative to root_fd with symlinks
// confined to the root. Returns -1 with errno set on failure.
int open_in_root(int root_fd, std::string_view path, int flags) {
  std::string rel(path);
  while (!rel.empty() && rel.front() == '/') rel.erase(0, 1);
  if (rel.empty()) rel = ".";
  struct open_how how = {};
  how.flags = static_cast<u64>(flags) | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  long fd = syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how);
  if (fd >= 0 || errno != ENOSYS) return static_cast<int>(fd);
  // Kernels before 5.6: resolve relative to the root without confinement of
  // absolute symlinks. Good enough for fixture trees, which use relative links.
  return openat(root_fd, rel.c_str(), flags | O_CLOEXEC);
}

}  // namespace

Host Host::live() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; e++) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return Host("/", std::move(env));
}

Host::Host(std::string root, std::map<std::string, std::string> env)
    : root_(std::move(root)), env_(std::move(env)) {
  if (root_.empty()) root_ = "/";
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

std::optional<std::string> Host::getenv(std::string_view name) const {
  auto it = env_.find(std::string(name));
  if (it == env_.end()) return std::nullopt;
  return it->second;
}

std::string Host::native_path(std::string_view path) const {
  if (is_live_root()) return std::string(path);
  return join_path(root_, path);
}

namespace {
// RAII for a file descriptor.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};
}  // namespace

FileStat Host::stat(std::string_view path) const {
  FileStat out;
  struct stat st;
  int rc;
  if (is_live_root()) {
    rc = ::stat(std::string(path).c_str(), &st);
  } else {
    Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (root.fd < 0) {
      out.kind = FileKind::Error;
      out.error = errno;
      return out;
    }
    Fd f(open_in_root(root.fd, path, O_PATH));
    rc = f.fd < 0 ? -1 : fstat(f.fd, &st);
  }
  if (rc != 0) {
    out.error = errno;
    out.kind = (errno == ENOENT || errno == ENOTDIR) ? FileKind::Missing : FileKind::Error;
    return out;
  }
  out.id = FileId{static_cast<u64>(st.st_dev), static_cast<u64>(st.st_ino)};
  out.size = static_cast<u64>(st.st_size);
  out.kind = S_ISREG(st.st_mode)   ? FileKind::Regular
             : S_ISDIR(st.st_mode) ? FileKind::Directory
                                   : FileKind::Other;
  return out;
}

MappedFile Host::map(std::string_view path) const {
  if (is_live_root()) return MappedFile::open(std::string(path));
  // Resolve inside the root, then map through /proc/self/fd so the mapping
  // uses the confined descriptor.
  Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.fd < 0) throw IoError(root_ + ": " + errno_text(errno));
  Fd f(open_in_root(root.fd, path, O_RDONLY));
  if (f.fd < 0) throw IoError(std::string(path) + ": " + errno_text(errno));
  return MappedFile::open("/proc/self/fd/" + std::to_string(f.fd));
}

std::optional<std::string> Host::read_file(std::string_view path, u64 max_bytes) const {
  int fd;
  if (is_live_root()) {
    fd = ::open(std::string(path).c_str(), O_RDONLY | O_CLOEXEC);
  } else {
    Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (root.fd < 0) return std::nullopt;
    fd = open_in_root(root.fd, path, O_RDONLY);
  }
  if (fd < 0) return std::nullopt;
  Fd f(fd);
  std::string out;
  char buf[65536];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(f.fd, buf, std::min<u64>(sizeof buf, max_bytes - out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::optional<std::vector<std::string>> Host::list_dir(std::string_view path) const {
  int fd;
  if (is_live_root()) {
    fd = ::open(std::string(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } else {
    Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (root.fd < 0) return std::nullopt;
    fd = open_in_root(root.fd, path, O_RDONLY | O_DIRECTORY);
  }
  if (fd < 0) return std::nullopt;
  DIR* d = fdopendir(fd);
  if (!d) {
    close(fd);
    return std::nullopt;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string_view n(e->d_name);
    if (n == "." || n == "..") continue;
    names.emplace_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<std::string> Host::read_link(std::string_view path) const {
  std::string native = native_path(path);
  char buf[4096];
  ssize_t n = readlink(native.c_str(), buf, sizeof buf);
  if (n < 0 || static_cast<size_t>(n) >= sizeof buf) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

CpuFeatures Host::cpu_features() const {
  CpuFeatures f;
  std::optional<std::string> info = read_file("/proc/cpuinfo", 1 << 20);
  if (!info) return f;
  // The first "flags" line describes every CPU well enough for the loader.
  size_t pos = info->find("\nflags\t");
  if (pos == std::string::npos) {
    f.x86_64_level = 0;
    return f;
  }
  size_t colon = info->find(':', pos);
  size_t end = info->find('\n', colon);
  std::set<std::string> flags;
  std::string_view line = std::string_view(*info).substr(colon + 1, end - colon - 1);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') i++;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') j++;
    if (j > i) flags.emplace(line.substr(i, j - i));
    i = j;
  }
  auto has = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (!flags.count(n)) return false;
    return true;
  };
  // x86-64 psABI micro-architecture levels, as glibc's
  // sysdeps/x86/get-isa-level.h derives them from CPUID (cpuinfo names:
  // "abm" is LZCNT, "pni" is SSE3, "lahf_lm" is LAHF/SAHF in 64-bit mode).
  f.x86_64_level = 1;
  if (has({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})) {
    f.x86_64_level = 2;
    if (has({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"})) {
      f.x86_64_level = 3;
      if (has({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})) f.x86_64_level = 4;
    }
  }
  // sysdeps/x86/cpu-features.c (init_cpu_features): on Intel CPUs only,
  // AT_PLATFORM becomes "xeon_phi" (AVX512ER+PF) or "haswell", and the
  // legacy "avx512_1" hwcap is set when AVX512CD/BW/DQ/VL are usable.
  bool intel = info->find("GenuineIntel") != std::string::npos;
  if (intel) {
    if (has({"avx512cd"}) && has({"avx512er"})) {
      if (has({"avx512pf"})) f.platform = "xeon_phi";
    } else if (has({"avx512cd", "avx512bw", "avx512dq", "avx512vl"})) {
      f.avx512_1 = true;
    }
    if (f.platform == "x86_64" &&
        has({"avx2", "fma", "bmi1", "bmi2", "abm", "movbe", "popcnt"}))
      f.platform = "haswell";
  }
  return f;
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  while (!name.empty() && name.front() == '/') name.remove_prefix(1);
  if (out.empty() || out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

std::string dir_name(std::string_view path) {
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

std::string normalize_path(std::string_view path) {
  bool absolute = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  size_t i = 0;
  while (i <= path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view part = path.substr(i, j - i);
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") parts.pop_back();
      else if (!absolute) parts.push_back(part);
    } else if (!part.empty() && part != ".") {
      parts.push_back(part);
    }
    i = j + 1;
  }
  std::string out = absolute ? "/" : "";
  for (size_t k = 0; k < parts.size(); k++) {
    if (k) out.push_back('/');
    out.append(parts[k]);
  }
  if (out.empty()) out = ".";
  return out;
}

}  // namespace mld::host
