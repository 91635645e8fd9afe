// base.cc — checked byte views and read-only file mappings. Every parser in
// mldoctor reads untrusted files (a corrupt .so, a truncated ld.so.cache) only
// through these, so a bad offset becomes a ParseError and never a crash.
#include "base/base.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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

MappedFile MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(path + ": " + errno_text(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw IoError(path + ": " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(path + ": not a regular file");
  }
  MappedFile f;
  f.size_ = static_cast<u64>(st.st_size);
  if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      throw IoError(path + ": mmap: " + errno_text(err));
    }
    f.data_ = static_cast<const u8*>(p);
    f.mapped_ = true;
  }
  ::close(fd);
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

}  // namespace mld
