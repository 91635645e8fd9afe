// host.cc — reads the analysed machine under a root directory. With root "/"
// it is the live system; with any other root every absolute path (and every
// absolute symlink met on the way) is resolved inside that tree, the way a
// chroot would see it, using openat2(RESOLVE_IN_ROOT) where the kernel has it
// and a bounded manual walk otherwise. Nothing here writes, except remove_file
// (`--fix` only), which unlinks one file and never follows a symlink. Files
// are opened for reading only when they are regular files (base's
// open_regular()): a FIFO, a socket or a device of the tree is refused,
// never waited on, and every such refusal is kept for the report.
#include "host/host.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

// glibc's <sys/syscall.h> names only the system calls of its own release:
// 2.31's (the portable build's) predates openat2, the kernel's header has it.
#ifndef SYS_openat2
#define SYS_openat2 __NR_openat2
#endif

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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
  // EAGAIN: a ".." step raced a rename or mount somewhere on the system
  // (the kernel then cannot prove the walk stayed inside the root). Nothing
  // was wrong with the path; openat2(2) says to try again. A sysfs tree is
  // all "../../devices" links, and on a busy machine renames never stop.
  long fd = -1;
  for (int attempt = 0; attempt < 1000; attempt++) {
    fd = syscall(SYS_openat2, root_fd, rel.c_str(), &how, sizeof how);
    if (fd >= 0 || errno != EAGAIN) break;
  }
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
// A FileStat from a stat()/lstat() result (rc and errno as they returned).
FileStat stat_result(int rc, const struct stat& st) {
  FileStat out;
  if (rc != 0) {
    out.error = errno;
    out.kind = (errno == ENOENT || errno == ENOTDIR) ? FileKind::Missing : FileKind::Error;
    return out;
  }
  out.id = FileId{static_cast<u64>(st.st_dev), static_cast<u64>(st.st_ino)};
  out.size = static_cast<u64>(st.st_size);
  out.mtime = static_cast<i64>(st.st_mtim.tv_sec);
  out.uid = static_cast<u32>(st.st_uid);
  out.gid = static_cast<u32>(st.st_gid);
  out.mode = static_cast<u32>(st.st_mode);
  out.symlink = S_ISLNK(st.st_mode);
  out.kind = S_ISREG(st.st_mode)   ? FileKind::Regular
             : S_ISDIR(st.st_mode) ? FileKind::Directory
                                   : FileKind::Other;
  return out;
}
}  // namespace

FileStat Host::stat_unlogged(std::string_view path) const {
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
  return stat_result(rc, st);
}

namespace {
// The regular file at `path` (inside `root`, a directory that is not "/")
// opened for reading as base's open_regular() opens one: resolved with
// O_PATH inside the root, and read only when it is a regular file.
OpenedFile open_regular_in_root(const std::string& root, std::string_view path) {
  Fd r(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (r.fd < 0) {
    OpenedFile f;
    f.error = errno;
    f.why = root + ": " + errno_text(f.error);
    return f;
  }
  const int root_fd = r.fd;
  return open_regular_at(open_in_root(root_fd, path, O_PATH),
                         [root_fd, path](int flags) { return open_in_root(root_fd, path, flags); });
}
}  // namespace

OpenedFile Host::open_regular_file(std::string_view path) const {
  OpenedFile f =
      is_live_root() ? open_regular(std::string(path)) : open_regular_in_root(root_, path);
  if (f.fd < 0 && f.error == 0 && !S_ISDIR(f.mode)) {
    std::lock_guard<std::mutex> lock(refusals_->mutex);
    refusals_->files.emplace(path, f.why);
  }
  return f;
}

std::vector<RefusedFile> Host::refused_files() const {
  std::lock_guard<std::mutex> lock(refusals_->mutex);
  std::vector<RefusedFile> out;
  for (const auto& [path, why] : refusals_->files) out.push_back({path, why});
  return out;
}

MappedFile Host::map(std::string_view path) const {
  return MappedFile::adopt(open_regular_file(path), std::string(path));
}

std::shared_ptr<SparseFile> Host::open_sparse(std::string_view path) const {
  // A descriptor closed for the open-file limit is reopened the same way
  // (inside the root under one).
  OpenedFile f = open_regular_file(path);
  if (f.fd < 0) throw IoError(std::string(path) + ": " + f.why, f.error);
  std::string root = root_, name(path);
  std::shared_ptr<SparseFile> file = SparseFile::adopt(f.fd, name, [root, name]() -> int {
    OpenedFile again = root == "/" ? open_regular(name) : open_regular_in_root(root, name);
    if (again.fd < 0) errno = again.error ? again.error : EINVAL;
    return again.fd;
  });
  if (log_ && is_live_root()) record_pieces(path, *file);
  return file;
}

FileStat Host::lstat(std::string_view path) const {
  struct stat st;
  int rc;
  if (is_live_root()) {
    rc = ::lstat(std::string(path).c_str(), &st);
  } else {
    // The directories on the way are confined to the root; the last
    // component is not followed.
    std::string p(path);
    size_t slash = p.find_last_of('/');
    std::string dir = slash == std::string::npos || slash == 0 ? "/" : p.substr(0, slash);
    std::string name = slash == std::string::npos ? p : p.substr(slash + 1);
    Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    Fd d(root.fd < 0 ? -1 : open_in_root(root.fd, dir, O_PATH | O_DIRECTORY));
    rc = d.fd < 0 ? -1 : fstatat(d.fd, name.empty() ? "." : name.c_str(), &st, AT_SYMLINK_NOFOLLOW);
  }
  return stat_result(rc, st);
}

bool Host::remove_file(std::string_view path, std::string* error, const FileId* expected) const {
  auto fail = [&](const std::string& what, int err) {
    if (error) *error = what + ": " + errno_text(err);
    return false;
  };
  std::string p(path);
  if (p.empty() || p[0] != '/') return fail(p, EINVAL);
  // Walk from the root one component at a time, refusing symlinks.
  int dir = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return fail(root_, errno);
  Fd current(dir);
  std::vector<std::string> parts;
  for (size_t i = 1; i <= p.size();) {
    size_t j = p.find('/', i);
    if (j == std::string::npos) j = p.size();
    std::string c = p.substr(i, j - i);
    if (c == "..") return fail(p, EINVAL);
    if (!c.empty() && c != ".") parts.push_back(c);
    i = j + 1;
  }
  if (parts.empty()) return fail(p, EISDIR);
  for (size_t k = 0; k + 1 < parts.size(); k++) {
    int next = openat(current.fd, parts[k].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) {
      int err = errno;
      struct stat link;
      // O_NOFOLLOW|O_DIRECTORY on a symlink reports ENOTDIR; say what it is.
      if (fstatat(current.fd, parts[k].c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(link.st_mode))
        err = ELOOP;
      return fail(p, err);
    }
    Fd n(next);
    std::swap(current.fd, n.fd);
  }
  struct stat st;
  if (fstatat(current.fd, parts.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return fail(p, errno);
  if (S_ISDIR(st.st_mode)) return fail(p, EISDIR);
  // The directory is pinned by its descriptor: only this entry can have
  // changed since the caller checked the file, and then it is not removed.
  if (expected && !(FileId{static_cast<u64>(st.st_dev), static_cast<u64>(st.st_ino)} == *expected))
    return fail(p, ESTALE);
  if (unlinkat(current.fd, parts.back().c_str(), 0) != 0) return fail(p, errno);
  return true;
}

std::optional<std::string> Host::read_file_unlogged(std::string_view path, u64 max_bytes,
                                                    std::string* why) const {
  OpenedFile opened = open_regular_file(path);
  if (opened.fd < 0) {
    if (why) *why = opened.why;
    return std::nullopt;
  }
  Fd f(opened.fd);
  std::string out;
  char buf[65536];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(f.fd, buf, std::min<u64>(sizeof buf, max_bytes - out.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (why) *why = errno_text(errno);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::optional<std::vector<std::string>> Host::list_dir_unlogged(std::string_view path) const {
  int fd;
  if (is_live_root()) {
    fd = ::open(std::string(path).c_str(), O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
  } else {
    Fd root(::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (root.fd < 0) return std::nullopt;
    fd = open_in_root(root.fd, path, O_RDONLY | O_DIRECTORY | O_NONBLOCK);
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

std::optional<std::string> Host::read_link_unlogged(std::string_view path) const {
  std::string native = native_path(path);
  char buf[4096];
  ssize_t n = readlink(native.c_str(), buf, sizeof buf);
  if (n < 0 || static_cast<size_t>(n) >= sizeof buf) return std::nullopt;
  return std::string(buf, static_cast<size_t>(n));
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
// The live CPU as glibc's ld.so sees it: CPUID, with AVX and AVX-512 usable
// only when the OS saves their registers (XGETBV), as sysdeps/x86/
// cpu-features.c (update_active) decides, then sysdeps/x86/get-isa-level.h
// for the x86-64 level and init_cpu_features for AT_PLATFORM and the legacy
// "avx512_1" hwcap. /proc/cpuinfo is not enough: a hypervisor may hide a
// flag there ("abm" on some AMD EPYC VMs) that CPUID reports and ld.so uses.
CpuFeatures cpuid_features() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 1) return f;
  char vendor[13] = {};
  __cpuid(0, a, b, c, d);
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  const bool intel = std::string_view(vendor) == "GenuineIntel";
  __cpuid(1, a, b, c, d);
  const unsigned ecx1 = c, edx1 = d;
  unsigned ebx7 = 0;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    ebx7 = b;
  }
  unsigned ecx81 = 0;
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000001) {
    __cpuid(0x80000001, a, b, c, d);
    ecx81 = c;
  }
  auto bit = [](unsigned reg, int n) { return (reg >> n) & 1u; };
  // XCR0: bit 1 SSE, 2 AVX (YMM), 5-7 AVX-512 (opmask, ZMM_Hi256, Hi16_ZMM).
  u64 xcr0 = 0;
  if (bit(ecx1, 27)) {  // OSXSAVE
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (u64{hi} << 32) | lo;
  }
  const bool avx_os = (xcr0 & 0x6) == 0x6;
  const bool avx512_os = avx_os && (xcr0 & 0xe0) == 0xe0;
  const bool avx = avx_os && bit(ecx1, 28);
  const bool avx2 = avx && bit(ebx7, 5);
  const bool fma = avx && bit(ecx1, 12), f16c = avx && bit(ecx1, 29);
  const bool lzcnt = bit(ecx81, 5), movbe = bit(ecx1, 22), popcnt = bit(ecx1, 23);
  const bool bmi1 = bit(ebx7, 3), bmi2 = bit(ebx7, 8);
  const bool avx512f = avx512_os && bit(ebx7, 16);
  auto avx512 = [&](int n) { return avx512f && bit(ebx7, n); };
  const bool avx512dq = avx512(17), avx512pf = avx512(26), avx512er = avx512(27),
             avx512cd = avx512(28), avx512bw = avx512(30), avx512vl = avx512(31);
  // Baseline: CMOV, CX8, FPU, FXSR, MMX, SSE, SSE2 (EDX of leaf 1).
  const bool baseline = bit(edx1, 15) && bit(edx1, 8) && bit(edx1, 0) && bit(edx1, 24) &&
                        bit(edx1, 23) && bit(edx1, 25) && bit(edx1, 26);
  f.x86_64_level = 0;
  if (baseline) {
    f.x86_64_level = 1;
    // CMPXCHG16B, LAHF64_SAHF64, POPCNT, SSE3, SSSE3, SSE4_1, SSE4_2.
    if (bit(ecx1, 13) && bit(ecx81, 0) && popcnt && bit(ecx1, 0) && bit(ecx1, 9) && bit(ecx1, 19) &&
        bit(ecx1, 20)) {
      f.x86_64_level = 2;
      if (avx && avx2 && f16c && fma && lzcnt && movbe) {
        f.x86_64_level = 3;
        if (avx512f && avx512bw && avx512cd && avx512dq && avx512vl) f.x86_64_level = 4;
      }
    }
  }
  if (intel) {
    if (avx512cd && avx512er) {
      if (avx512pf) f.platform = "xeon_phi";
    } else if (avx512cd && avx512bw && avx512dq && avx512vl) {
      f.avx512_1 = true;
    }
    if (f.platform == "x86_64" && avx2 && fma && bmi1 && bmi2 && lzcnt && movbe && popcnt)
      f.platform = "haswell";
  }
  return f;
}
#endif

}  // namespace

CpuFeatures Host::cpu_features() const {
#if defined(__x86_64__)
  // The live machine: ask the CPU, as ld.so does. Under --root the analysed
  // machine is not this one; its /proc/cpuinfo (a fixture or a capture) is
  // all there is.
  if (is_live_root()) return cpuid_features();
#endif
  CpuFeatures f;
  std::optional<std::string> info = read_file("/proc/cpuinfo", 1 << 20);
  if (!info) return f;
  // The first "flags" line describes every CPU well enough for the loader.
  const std::set<std::string> flags = cpu_flags();
  if (flags.empty()) {
    f.x86_64_level = 0;
    return f;
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
    if (f.platform == "x86_64" && has({"avx2", "fma", "bmi1", "bmi2", "abm", "movbe", "popcnt"}))
      f.platform = "haswell";
  }
  return f;
}

std::set<std::string> Host::cpu_flags() const {
  std::set<std::string> flags;
  std::optional<std::string> info = read_file("/proc/cpuinfo", 1 << 20);
  if (!info) return flags;
  size_t pos = info->find("\nflags\t");
  if (pos == std::string::npos) return flags;
  size_t colon = info->find(':', pos);
  if (colon == std::string::npos) return flags;
  size_t end = info->find('\n', colon);
  if (end == std::string::npos) end = info->size();
  std::string_view line = std::string_view(*info).substr(colon + 1, end - colon - 1);
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') i++;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') j++;
    if (j > i) flags.emplace(line.substr(i, j - i));
    i = j;
  }
  return flags;
}

namespace {

// One /dev/kmsg record, "<prio>,<seq>,<usec>,<flags>[,...];<message>\n[ KEY=value\n...]":
// its timestamp and the message's first line; false when it is no record.
bool parse_kmsg_record(std::string_view r, Host::KernelRecord& out) {
  size_t semi = r.find(';');
  if (semi == std::string_view::npos) return false;
  std::string_view head = r.substr(0, semi);
  size_t c1 = head.find(',');
  size_t c2 = c1 == std::string_view::npos ? c1 : head.find(',', c1 + 1);
  if (c2 == std::string_view::npos) return false;
  size_t c3 = head.find(',', c2 + 1);
  std::string_view usec =
      head.substr(c2 + 1, c3 == std::string_view::npos ? std::string_view::npos : c3 - c2 - 1);
  if (usec.empty() || usec.size() > 19) return false;
  u64 v = 0;
  for (char c : usec) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<u64>(c - '0');
  }
  std::string_view msg = r.substr(semi + 1);
  out.usec = v;
  out.message = std::string(msg.substr(0, msg.find('\n')));
  return true;
}

}  // namespace

std::optional<std::vector<Host::KernelRecord>> Host::kernel_log(u64 since_usec, size_t max,
                                                                std::string* error) const {
  std::vector<KernelRecord> out;
  auto keep = [&](std::string_view r) {
    KernelRecord rec;
    if (parse_kmsg_record(r, rec) && rec.usec >= since_usec && out.size() < max)
      out.push_back(std::move(rec));
  };
  if (!is_live_root()) {
    std::optional<std::string> text = read_file("/dev/kmsg", 64u << 20);
    if (!text) {
      if (error) *error = "no dev/kmsg under " + root();
      return std::nullopt;
    }
    for (size_t at = 0; at < text->size();) {
      size_t end = text->find('\n', at);
      if (end == std::string::npos) end = text->size();
      std::string_view line(text->data() + at, end - at);
      at = end + 1;
      if (!line.empty() && line.front() != ' ') keep(line);  // " KEY=value" continues a record
    }
    return out;
  }
  // The live log: one record per read(2), the buffer large enough for any
  // record (a shorter read fails with EINVAL), EAGAIN at the end.
  int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (error)
      *error = std::string("/dev/kmsg: ") + std::strerror(errno) +
               " (needs root or kernel.dmesg_restrict=0)";
    return std::nullopt;
  }
  std::string record(8192, '\0');
  for (size_t records = 0; records < 1000000; records++) {
    ssize_t n = ::read(fd, record.data(), record.size());
    if (n < 0 && errno == EPIPE) continue;  // overwritten while reading: the next one
    if (n <= 0) break;
    keep(std::string_view(record.data(), static_cast<size_t>(n)));
  }
  ::close(fd);
  return out;
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  while (!name.empty() && name.front() == '/') name.remove_prefix(1);
  if (out.empty() || out.back() != '/') out.push_back('/');
  out.append(name);
  return out;
}

std::vector<std::string> companion_dirs(const Host& host) {
  if (std::optional<std::string> d = host.getenv("MLDOCTOR_SHIM_DIR"); d && !d->empty())
    return {*d};
  std::optional<std::string> exe = host.read_link("/proc/self/exe");
  if (!exe) return {};
  const std::string dir = dir_name(*exe);
  return {dir, dir + "/../lib/mldoctor", dir + "/../lib64/mldoctor"};
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
      if (!parts.empty() && parts.back() != "..")
        parts.pop_back();
      else if (!absolute)
        parts.push_back(part);
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

// ─── Paths, space and limits ────────────────────────────────────────────────

std::optional<std::string> Host::find_on_path(std::string_view name) const {
  std::optional<std::string> path_var = getenv("PATH");
  if (!path_var) return std::nullopt;
  std::string_view rest = *path_var;
  while (true) {
    size_t colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    if (!dir.empty() && dir.front() == '/') {
      std::string candidate = join_path(dir, name);
      if (stat(candidate).kind == FileKind::Regular) return candidate;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return std::nullopt;
}

std::optional<std::string> Host::real_path(std::string_view path) const {
  if (is_live_root()) {
    char* real = ::realpath(std::string(path).c_str(), nullptr);
    if (!real) return std::nullopt;
    std::string out = real;
    std::free(real);
    return out;
  }
  PathResolution r = resolve(path);
  if (r.end != PathResolution::End::Found) return std::nullopt;
  return r.path;
}

PathResolution Host::resolve(std::string_view path) const {
  PathResolution out;
  std::string start(path);
  if (is_live_root() && (start.empty() || start[0] != '/')) {
    char buf[4096];
    if (!getcwd(buf, sizeof buf)) {
      out.end = PathResolution::End::Error;
      out.path = start;
      return out;
    }
    start = join_path(buf, start);
  }
  // Component by component, links relative to their directory, absolute
  // ones from the root; at most 40 links (the kernel's MAXSYMLINKS).
  std::vector<std::string> todo, done;
  auto push_parts = [&todo](std::string_view p) {
    std::vector<std::string> parts;
    for (size_t i = 0; i < p.size();) {
      size_t j = p.find('/', i);
      if (j == std::string_view::npos) j = p.size();
      if (j > i) parts.emplace_back(p.substr(i, j - i));
      i = j + 1;
    }
    todo.insert(todo.end(), parts.rbegin(), parts.rend());
  };
  auto joined = [&done](std::string_view last) {
    std::string p;
    for (const std::string& d : done) p += "/" + d;
    if (!last.empty()) p += "/" + std::string(last);
    return p.empty() ? std::string("/") : p;
  };
  push_parts(start);
  while (!todo.empty()) {
    std::string part = std::move(todo.back());
    todo.pop_back();
    if (part == ".") continue;
    if (part == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    const std::string current = joined(part);
    FileStat st = lstat(current);
    if (st.kind == FileKind::Missing || st.kind == FileKind::Error) {
      out.end =
          st.kind == FileKind::Missing ? PathResolution::End::Missing : PathResolution::End::Error;
      out.path = current;
      return out;
    }
    if (st.symlink) {
      std::optional<std::string> target = read_link(current);
      if (!target) {
        out.end = PathResolution::End::Error;
        out.path = current;
        return out;
      }
      out.links.push_back({current, *target, st.uid});
      if (out.links.size() > 40) {
        out.end = PathResolution::End::Loop;
        out.path = current;
        return out;
      }
      if (!target->empty() && (*target)[0] == '/') done.clear();
      push_parts(*target);
      continue;
    }
    done.push_back(part);
  }
  out.path = joined("");
  return out;
}

std::optional<Host::Space> Host::filesystem_space(std::string_view path) const {
  struct statfs st;
  if (::statfs(native_path(path).c_str(), &st) != 0) return std::nullopt;
  const u64 unit = static_cast<u64>(st.f_frsize ? st.f_frsize : st.f_bsize);
  return Space{static_cast<u64>(st.f_blocks) * unit, static_cast<u64>(st.f_bavail) * unit,
               static_cast<u64>(st.f_type)};
}

std::optional<Host::Limit> Host::resource_limit(int resource) const {
  if (!is_live_root()) return std::nullopt;
  struct rlimit r;
  if (getrlimit(resource, &r) != 0) return std::nullopt;
  auto value = [](rlim_t v) { return v == RLIM_INFINITY ? ~u64{0} : static_cast<u64>(v); };
  return Limit{value(r.rlim_cur), value(r.rlim_max)};
}

// ─── Recording for `snapshot` ───────────────────────────────────────────────

std::optional<std::string> Host::read_file(std::string_view path, u64 max_bytes,
                                           std::string* why) const {
  std::optional<std::string> out = read_file_unlogged(path, max_bytes, why);
  if (log_ && out) {
    // Outside the kernel's trees a file is also known by its identity and
    // real path, so the snapshot keeps one copy under all its names.
    std::optional<FileStat> st;
    std::optional<std::string> real;
    if (!path.starts_with("/proc/") && !path.starts_with("/sys/")) {
      st = stat_unlogged(path);
      if (st->kind == FileKind::Regular) real = real_path_unlogged(path);
    }
    std::lock_guard<std::mutex> lock(log_->mutex);
    std::string& kept = log_->files[std::string(path)];
    if (out->size() > kept.size()) kept = *out;  // the longest read of a file
    if (real) {
      log_->stats[std::string(path)] = *st;
      log_->real_paths[std::string(path)] = *real;
    }
  }
  return out;
}

std::optional<std::vector<std::string>> Host::list_dir(std::string_view path) const {
  std::optional<std::vector<std::string>> out = list_dir_unlogged(path);
  if (log_ && out) {
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->directories[std::string(path)] = *out;
  }
  return out;
}

std::optional<std::string> Host::read_link(std::string_view path) const {
  std::optional<std::string> out = read_link_unlogged(path);
  if (log_ && out) {
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->links[std::string(path)] = *out;
  }
  return out;
}

FileStat Host::stat(std::string_view path) const {
  FileStat out = stat_unlogged(path);
  if (log_ && out.kind != FileKind::Missing && out.kind != FileKind::Error) {
    std::optional<std::string> real;
    if (out.kind == FileKind::Regular) real = real_path_unlogged(path);
    std::lock_guard<std::mutex> lock(log_->mutex);
    log_->stats[std::string(path)] = out;
    if (real) log_->real_paths[std::string(path)] = *real;
  }
  return out;
}

// real_path() without recording the links it passes, for the recorder
// itself. Only a live Host records (snapshots are of this machine), so
// realpath(3) answers.
std::optional<std::string> Host::real_path_unlogged(std::string_view path) const {
  if (!is_live_root()) return std::nullopt;
  char* r = ::realpath(std::string(path).c_str(), nullptr);
  if (!r) return std::nullopt;
  std::string out(r);
  std::free(r);
  return out;
}

void Host::record_pieces(std::string_view path, SparseFile& file) const {
  const std::string key(path);
  FileStat st = stat_unlogged(path);
  std::optional<std::string> real = real_path_unlogged(path);
  {
    std::lock_guard<std::mutex> lock(log_->mutex);
    AccessLog::Pieces& p = log_->pieces[key];
    p.stat = st;
    p.real_path = real.value_or(key);
  }
  std::shared_ptr<AccessLog> log = log_;
  file.observe_reads([log, key](u64 off, const u8* data, u64 n) {
    std::lock_guard<std::mutex> lock(log->mutex);
    std::string& kept = log->pieces[key].ranges[off];
    if (n > kept.size()) kept.assign(reinterpret_cast<const char*>(data), n);
  });
}

void Host::record_fact(std::string_view name, std::string_view text) const {
  if (!log_) return;
  std::lock_guard<std::mutex> lock(log_->mutex);
  log_->facts[std::string(name)] = std::string(text);
}

std::optional<std::string> Host::recorded_fact(std::string_view name) const {
  if (is_live_root()) return std::nullopt;
  return read_file_unlogged("/.mldoctor/" + std::string(name), 64 << 20, nullptr);
}

}  // namespace mld::host
