// base.cc — checked byte views, read-only file mappings and files read by
// ranges. Every parser in mldoctor reads untrusted files (a corrupt .so, a
// truncated ld.so.cache) only through these, so a bad offset becomes a
// ParseError and never a crash.
#include "base/base.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <string>

namespace mld {

void ByteView::fail(const char* what, u64 off) const {
  throw ParseError(std::string(what) + " out of bounds", base_ + off);
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r returns the message pointer.
  return std::string(strerror_r(err, buf, sizeof buf));
}

std::string to_hex(ByteView bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (u64 i = 0; i < bytes.size(); i++) {
    out.push_back(digits[bytes.data()[i] >> 4]);
    out.push_back(digits[bytes.data()[i] & 15]);
  }
  return out;
}

std::string format_ranges(std::vector<u32> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  std::string out;
  for (size_t i = 0; i < values.size();) {
    size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) j++;
    out += (out.empty() ? "" : ",") + std::to_string(values[i]);
    if (j > i) out += (j == i + 1 ? "," : "-") + std::to_string(values[j]);
    i = j + 1;
  }
  return out;
}

void append_utf8(std::string& out, u32 cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string repair_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; k++) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && n > 1) {
      // Overlong forms, surrogates and code points above U+10FFFF.
      u32 cp = c & (0x7F >> n);
      for (size_t k = 1; k < n; k++) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      static const u32 min_for_length[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min_for_length[n] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
    }
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += 1;
    }
  }
  return out;
}

// ─── Opening files of trees mldoctor does not own ──────────────────────────

std::string_view file_type_name(u32 st_mode) {
  switch (st_mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
    default: return "of an unknown type";
  }
}

namespace {

OpenedFile open_failed(int err) {
  OpenedFile f;
  f.error = err;
  f.why = errno_text(err);
  return f;
}

OpenedFile not_regular(u32 mode) {
  OpenedFile f;
  f.mode = mode;
  f.why = "not a regular file (" + std::string(file_type_name(mode)) + ")";
  return f;
}

}  // namespace

// The reopen through /proc/self/fd is what makes the check and the open one
// file: a path checked with stat(2) and then opened could be swapped for a
// symlink to /dev/watchdog in between. Measured on the 2-core CI VM over the
// 1,889 files `check` of Debian's torch environment reads: 14 µs a file,
// against 7 for a plain open and read (about 20 ms of a 0.4 s check).
OpenedFile open_regular_at(int path_fd, const std::function<int(int flags)>& open_again) {
  if (path_fd < 0) return open_failed(errno);
  struct stat st;
  if (fstat(path_fd, &st) != 0) {
    const int err = errno;
    ::close(path_fd);
    return open_failed(err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(path_fd);
    return not_regular(st.st_mode);
  }
  constexpr int kRead = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  int fd = ::open(("/proc/self/fd/" + std::to_string(path_fd)).c_str(), kRead);
  const int proc_err = errno;
  ::close(path_fd);
  // No /proc (a chroot without it): the path once more, accepted only when
  // it still names the file examined.
  const bool by_path = fd < 0 && proc_err == ENOENT && open_again;
  if (by_path) fd = open_again(kRead);
  if (fd < 0) return open_failed(by_path ? errno : proc_err);
  struct stat now;
  if (fstat(fd, &now) != 0) {
    const int err = errno;
    ::close(fd);
    return open_failed(err);
  }
  if (!S_ISREG(now.st_mode) || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    ::close(fd);
    OpenedFile f = not_regular(now.st_mode);
    if (S_ISREG(now.st_mode)) f.why = "replaced while it was opened";
    return f;
  }
  // O_NONBLOCK stays: reads of a regular file ignore it (open(2)), save on a
  // file under a mandatory lock (kernels before 5.15), which then fails
  // with EAGAIN instead of waiting.
  OpenedFile f;
  f.fd = fd;
  f.size = static_cast<u64>(now.st_size);
  f.dev = static_cast<u64>(now.st_dev);
  f.ino = static_cast<u64>(now.st_ino);
  f.mode = static_cast<u32>(now.st_mode);
  return f;
}

OpenedFile open_regular(const std::string& path) {
  return open_regular_at(::open(path.c_str(), O_PATH | O_CLOEXEC),
                         [&path](int flags) { return ::open(path.c_str(), flags); });
}

std::optional<std::string> read_regular_file(const std::string& path, u64 max_bytes,
                                             std::string* why) {
  OpenedFile f = open_regular(path);
  if (f.fd < 0) {
    if (why) *why = f.why;
    errno = f.error;
    return std::nullopt;
  }
  std::string out;
  char buf[65536];
  while (out.size() < max_bytes) {
    ssize_t n = ::read(f.fd, buf, std::min<u64>(sizeof buf, max_bytes - out.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      if (why) *why = errno_text(err);
      ::close(f.fd);
      errno = err;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(f.fd);
  return out;
}

MappedFile MappedFile::open(const std::string& path) { return adopt(open_regular(path), path); }

MappedFile MappedFile::adopt(OpenedFile opened, const std::string& name) {
  if (opened.fd < 0) throw IoError(name + ": " + opened.why, opened.error);
  MappedFile f;
  f.size_ = opened.size;
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, opened.fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(opened.fd);
      throw IoError(name + ": mmap: " + errno_text(err), err);
    }
    f.data_ = static_cast<const u8*>(p);
    f.mapped_ = true;
  }
  ::close(opened.fd);
  return f;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (mapped_) munmap(const_cast<u8*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    mapped_ = o.mapped_;
    o.data_ = nullptr;
    o.size_ = 0;
    o.mapped_ = false;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (mapped_) munmap(const_cast<u8*>(data_), size_);
}

// ─── SparseFile ──────────────────────────────────────────────────────────

namespace {

// Descriptors of SparseFiles, most recently used first. A `libs` run keeps
// an ElfFile (and its SparseFile) for every object of every closure, more
// than RLIMIT_NOFILE allows open at once; beyond kMaxOpen the least
// recently used descriptor is closed and reopened on its next read.
constexpr size_t kMaxOpen = 64;
std::mutex open_mutex;
std::list<const SparseFile*> open_files;

// Every miss reads at least this much: the next small range (the next
// version entry, the next string) is then usually already there, and few
// bytes are wasted.
constexpr u64 kReadAhead = 512;

// Small extents are carved from 64 KiB chunks populated in one system call
// (MAP_POPULATE). On the machines measured a first write to an anonymous
// page costs 10-60 µs as a page fault and 2-3 µs populated in bulk, and a
// `libs` run reads a few hundred extents of a few hundred bytes. A chunk
// is unmapped when its last extent is released and it is not the one being
// filled. Guarded by open_mutex.
struct Chunk {
  u8* base = nullptr;
  u64 used = 0;
  u64 live = 0;
};
constexpr u64 kChunkSize = 64 << 10, kArenaMax = 4 << 10;
Chunk* filling = nullptr;

// nullptr when n is too large for the arena or no chunk can be mapped.
u8* arena_alloc(u64 n, void** chunk_out) {
  if (n > kArenaMax) return nullptr;
  n = (n + 15) & ~u64{15};
  if (!filling || filling->used + n > kChunkSize) {
    if (filling && filling->live == 0) {
      munmap(filling->base, kChunkSize);
      delete filling;
    }
    filling = nullptr;
    void* p = mmap(nullptr, kChunkSize, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    filling = new Chunk{static_cast<u8*>(p), 0, 0};
  }
  u8* out = filling->base + filling->used;
  filling->used += n;
  filling->live++;
  *chunk_out = filling;
  return out;
}

void arena_release(void* chunk) {
  Chunk* c = static_cast<Chunk*>(chunk);
  if (--c->live == 0 && c != filling) {
    munmap(c->base, kChunkSize);
    delete c;
  }
}

}  // namespace

std::shared_ptr<SparseFile> SparseFile::open(const std::string& path) {
  OpenedFile f = open_regular(path);
  if (f.fd < 0) throw IoError(path + ": " + f.why, f.error);
  return adopt(f.fd, path, [path] {
    OpenedFile again = open_regular(path);
    if (again.fd < 0) errno = again.error ? again.error : EINVAL;
    return again.fd;
  });
}

std::shared_ptr<SparseFile> SparseFile::adopt(int fd, std::string name,
                                              std::function<int()> reopen) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw IoError(name + ": " + errno_text(err), err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(name + ": not a regular file (" + std::string(file_type_name(st.st_mode)) + ")");
  }
  std::shared_ptr<SparseFile> f(new SparseFile());
  f->name_ = std::move(name);
  f->size_ = static_cast<u64>(st.st_size);
  f->dev_ = static_cast<u64>(st.st_dev);
  f->ino_ = static_cast<u64>(st.st_ino);
  f->reopen_ = std::move(reopen);
  std::lock_guard<std::mutex> lock(open_mutex);
  f->fd_ = fd;
  open_files.push_front(f.get());
  f->lru_ = open_files.begin();
  while (open_files.size() > kMaxOpen) {
    const SparseFile* old = open_files.back();
    open_files.pop_back();
    ::close(old->fd_);
    old->fd_ = -1;
  }
  return f;
}

SparseFile::~SparseFile() {
  std::lock_guard<std::mutex> lock(open_mutex);
  if (fd_ >= 0) {
    open_files.erase(lru_);
    ::close(fd_);
  }
  for (Extent& e : extents_) {
    if (e.chunk) {
      arena_release(e.chunk);
    } else {
      delete[] e.data;
    }
  }
}

// The descriptor, reopened when it was closed for the limit. Requires: the
// caller holds open_mutex.
int SparseFile::descriptor() const {
  if (fd_ >= 0) {
    open_files.splice(open_files.begin(), open_files, lru_);
    return fd_;
  }
  int fd = reopen_ ? reopen_() : -1;
  if (fd < 0) throw ParseError(name_ + ": cannot reopen to read: " + errno_text(errno), 0);
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<u64>(st.st_dev) != dev_ ||
      static_cast<u64>(st.st_ino) != ino_ || static_cast<u64>(st.st_size) != size_) {
    ::close(fd);
    throw ParseError(name_ + ": the file changed while it was being read", 0);
  }
  fd_ = fd;
  open_files.push_front(this);
  lru_ = open_files.begin();
  while (open_files.size() > kMaxOpen) {
    const SparseFile* old = open_files.back();
    open_files.pop_back();
    ::close(old->fd_);
    old->fd_ = -1;
  }
  return fd_;
}

// Reads [off, off+n) into out. Requires: the caller holds open_mutex.
void SparseFile::pread_all(u64 off, u64 n, u8* out) const {
  int fd = descriptor();
  u64 got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, out + got, n - got, static_cast<off_t>(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw ParseError(name_ + ": read: " + errno_text(errno), off + got);
    if (r == 0) throw ParseError(name_ + ": the file shrank while it was being read", off + got);
    got += static_cast<u64>(r);
  }
  bytes_read_ += n;
  if (observer_) observer_(off, out, n);
}

ByteView SparseFile::range(u64 off, u64 n, const char* what) const {
  std::optional<u64> end = checked_add(off, n);
  if (!end || *end > size_) throw ParseError(std::string(what) + " out of bounds", off);
  auto inside = [&](const Extent& e) { return off >= e.off && *end <= e.off + e.size; };
  if (last_ < extents_.size() && inside(extents_[last_])) {
    const Extent& e = extents_[last_];
    return ByteView(e.data + (off - e.off), n, off);
  }
  for (size_t i = 0; i < extents_.size(); i++) {
    if (inside(extents_[i])) {
      last_ = i;
      const Extent& e = extents_[i];
      return ByteView(e.data + (off - e.off), n, off);
    }
  }
  if (n == 0) return ByteView(nullptr, 0, off);
  Extent e;
  e.off = off;
  e.size = std::min(std::max(n, kReadAhead), size_ - off);
  {
    std::lock_guard<std::mutex> lock(open_mutex);
    e.data = arena_alloc(e.size, &e.chunk);
    if (!e.data) e.data = new u8[e.size];
    try {
      pread_all(e.off, e.size, e.data);
    } catch (...) {
      if (e.chunk) {
        arena_release(e.chunk);
      } else {
        delete[] e.data;
      }
      throw;
    }
  }
  extents_.push_back(e);
  last_ = extents_.size() - 1;
  return ByteView(e.data, n, off);
}

void SparseFile::copy_out(u64 off, u64 n, u8* out, const char* what) const {
  std::optional<u64> end = checked_add(off, n);
  if (!end || *end > size_) throw ParseError(std::string(what) + " out of bounds", off);
  if (n == 0) return;
  for (const Extent& e : extents_) {
    if (off >= e.off && *end <= e.off + e.size) {
      std::memcpy(out, e.data + (off - e.off), n);
      return;
    }
  }
  std::lock_guard<std::mutex> lock(open_mutex);
  pread_all(off, n, out);
}

std::optional<std::string> line_field(std::string_view text, std::string_view key, char sep) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    size_t at = line.find(sep);
    if (at == std::string_view::npos || trim(line.substr(0, at)) != key) continue;
    std::string_view v = trim(line.substr(at + 1));
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    return std::string(v);
  }
  return std::nullopt;
}

}  // namespace mld
