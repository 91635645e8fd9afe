// base.h — the bottom layer: fixed-width integer names, checked arithmetic,
// bounds-checked byte views over untrusted input, memory-mapped files and the
// typed errors every parser throws. Nothing here knows about ELF or Linux
// beyond mmap(2).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace mld {

using u8 = std::uint8_t;
using u16 = std::uint16_t;
using u32 = std::uint32_t;
using u64 = std::uint64_t;
using i32 = std::int32_t;
using i64 = std::int64_t;

// ParseError: malformed untrusted input. `offset` is the byte offset in the
// input where the problem was seen. Parsers throw it; each command catches it
// at the per-file boundary so one corrupt file never ends a run.
class ParseError : public std::runtime_error {
 public:
  ParseError(std::string what, u64 offset)
      : std::runtime_error(std::move(what)), offset_(offset) {}
  u64 offset() const { return offset_; }

 private:
  u64 offset_;
};

// IoError: a file or directory could not be read (errno text included).
class IoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Checked arithmetic on untrusted sizes and offsets.
inline std::optional<u64> checked_add(u64 a, u64 b) {
  u64 r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<u64> checked_mul(u64 a, u64 b) {
  u64 r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// ByteView: a non-owning view over bytes that refuses every out-of-range
// access with a ParseError instead of reading past the end. Integers are read
// with memcpy (no alignment assumptions) in the byte order the caller names.
class ByteView {
 public:
  ByteView() = default;
  ByteView(const u8* data, u64 size, u64 base_offset = 0)
      : data_(data), size_(size), base_(base_offset) {}
  explicit ByteView(std::string_view s)
      : data_(reinterpret_cast<const u8*>(s.data())), size_(s.size()) {}

  const u8* data() const { return data_; }
  u64 size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Offset of this view's first byte in the original input (for messages).
  u64 base_offset() const { return base_; }

  // Requires: [off, off+n) inside the view; else throws ParseError(what).
  ByteView sub(u64 off, u64 n, const char* what = "range") const {
    std::optional<u64> end = checked_add(off, n);
    if (!end || *end > size_) fail(what, off);
    return ByteView(data_ + off, n, base_ + off);
  }
  ByteView sub_from(u64 off, const char* what = "range") const {
    if (off > size_) fail(what, off);
    return ByteView(data_ + off, size_ - off, base_ + off);
  }
  bool contains(u64 off, u64 n) const {
    std::optional<u64> end = checked_add(off, n);
    return end && *end <= size_;
  }

  u8 u8_at(u64 off) const { return sub(off, 1).data_[0]; }
  u16 u16_at(u64 off, bool big_endian) const { return read<u16>(off, big_endian); }
  u32 u32_at(u64 off, bool big_endian) const { return read<u32>(off, big_endian); }
  u64 u64_at(u64 off, bool big_endian) const { return read<u64>(off, big_endian); }

  // NUL-terminated string starting at off; throws if no NUL before the end.
  std::string_view cstr_at(u64 off, const char* what = "string") const {
    if (off >= size_) fail(what, off);
    const void* nul = std::memchr(data_ + off, 0, size_ - off);
    if (!nul) fail(what, off);
    return std::string_view(reinterpret_cast<const char*>(data_ + off),
                            static_cast<const u8*>(nul) - (data_ + off));
  }
  std::string_view as_string_view() const {
    return std::string_view(reinterpret_cast<const char*>(data_), size_);
  }

 private:
  template <typename T>
  T read(u64 off, bool big_endian) const {
    ByteView v = sub(off, sizeof(T), "integer");
    T x;
    std::memcpy(&x, v.data_, sizeof(T));
    if (big_endian != (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)) x = bswap(x);
    return x;
  }
  static u16 bswap(u16 x) { return __builtin_bswap16(x); }
  static u32 bswap(u32 x) { return __builtin_bswap32(x); }
  static u64 bswap(u64 x) { return __builtin_bswap64(x); }
  [[noreturn]] void fail(const char* what, u64 off) const;

  const u8* data_ = nullptr;
  u64 size_ = 0;
  u64 base_ = 0;
};

// MappedFile: a read-only private mapping of a whole file. Empty files map to
// an empty view. Throws IoError with the path and errno text on failure.
class MappedFile {
 public:
  static MappedFile open(const std::string& path);
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  ByteView view() const { return ByteView(data_, size_); }
  u64 size() const { return size_; }

 private:
  const u8* data_ = nullptr;
  u64 size_ = 0;
  bool mapped_ = false;
};

// errno as text: "No such file or directory".
std::string errno_text(int err);

// Lowercase hex of bytes ("build-id" style).
std::string to_hex(ByteView bytes);

}  // namespace mld
