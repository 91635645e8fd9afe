// base.h — the bottom layer: fixed-width integer names, checked arithmetic,
// bounds-checked byte views over untrusted input, memory-mapped files and the
// typed errors every parser throws, and the one way files of untrusted trees
// are opened (regular files only). Nothing here knows about ELF, and of
// Linux only mmap(2), O_PATH and /proc/self/fd.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

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
  ParseError(std::string what, u64 offset) : std::runtime_error(std::move(what)), offset_(offset) {}
  u64 offset() const { return offset_; }

 private:
  u64 offset_;
};

// The last component of a path ("libgomp.so.1" of "/lib/x/libgomp.so.1"),
// the whole string when it has no '/'.
inline std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Integers as ranges, sorted and without repeats: "0-3,5,7"; two neighbours
// stay a list ("4,5"). Ranks of a finding, ranks of a node.
std::string format_ranges(std::vector<u32> values);

// IoError: a file or directory could not be read (errno text included).
// `error_number()` is the errno of the failed call, 0 when none applies.
class IoError : public std::runtime_error {
 public:
  explicit IoError(const std::string& what, int error_number = 0)
      : std::runtime_error(what), error_number_(error_number) {}
  int error_number() const { return error_number_; }

 private:
  int error_number_;
};

// ─── Opening files of trees mldoctor does not own ──────────────────────────
// site-packages, a --root image, another process's /proc: any name there may
// be a FIFO (open(2) for reading waits for a writer, forever), a device (its
// driver runs at open: a watchdog, a tape, a serial line) or a socket. Every
// file of such a tree is opened by open_regular(): the path is resolved once
// with O_PATH, which opens nothing, that descriptor is fstat()ed, and only a
// regular file is then opened for reading, through /proc/self/fd so that the
// file opened is the one examined, with O_NONBLOCK (a lease cannot make the
// open wait either) and O_NOCTTY. procfs and sysfs files are regular files.

// What a file is, in words: "a FIFO", "a socket", "a directory", "a character
// device", "a block device", "a symbolic link", "a regular file".
std::string_view file_type_name(u32 st_mode);

// A file opened by open_regular(): the descriptor (O_RDONLY, O_CLOEXEC; the
// caller closes it) and what fstat() said, or why there is none.
struct OpenedFile {
  int fd = -1;
  u64 size = 0, dev = 0, ino = 0;
  u32 mode = 0;     // st_mode of what the path names, when it could be examined
  int error = 0;    // errno of the call that failed; 0 when refused for its type
  std::string why;  // fd < 0: "not a regular file (a FIFO)", else the errno text
};

// Opens what `path_fd` (an O_PATH descriptor, closed here) names for reading
// when it is a regular file. Where /proc is not mounted (a bare chroot),
// `open_again(flags)` opens the same path again (-1 with errno on failure)
// and the file is accepted only when it is the same inode.
OpenedFile open_regular_at(int path_fd, const std::function<int(int flags)>& open_again);
// The same for a path of this machine.
OpenedFile open_regular(const std::string& path);
// At most `max_bytes` of the regular file at `path`; nullopt with *why set
// ("not a regular file (a FIFO)", an errno text) and errno (0 when refused
// for its type) when it is not read.
std::optional<std::string> read_regular_file(const std::string& path, u64 max_bytes,
                                             std::string* why = nullptr);

// Checked arithmetic on untrusted sizes and offsets.
// `s` without leading and trailing ASCII whitespace (space, \t, \n, \r,
// \f, \v): the one trim of every text parser.
inline std::string_view trim(std::string_view s) {
  auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
  };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// `s` with ASCII letters in lower case (other bytes kept): the one lower of
// every parser of names and settings.
inline std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// The value of the first "key<sep>value" line of `text` whose key, trimmed,
// is `key` ("model name: X", PRETTY_NAME="X", cuda = '12.1'): trimmed, and
// without one pair of matching quotes around it.
std::optional<std::string> line_field(std::string_view text, std::string_view key, char sep);

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
  // Only a regular file is mapped (open_regular()).
  static MappedFile open(const std::string& path);
  // Maps the regular file `f` opened (and closes its descriptor); throws
  // IoError naming `name` when f holds none.
  static MappedFile adopt(OpenedFile f, const std::string& name);
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

// ByteSource: an input read by ranges, for readers that need a few small
// pieces of a large file (the ELF reader over a shared object: its header,
// program headers, dynamic section, a few strings and the version tables).
// range() returns a view of exactly the bytes asked for, whose base_offset()
// is `off`; it stays valid as long as the source does.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual u64 size() const = 0;
  // Requires: [off, off+n) inside size(); else throws ParseError(what).
  virtual ByteView range(u64 off, u64 n, const char* what = "range") const = 0;
  // True when every range is already in memory (range() costs nothing, so
  // readers need not ration what they ask for).
  virtual bool in_memory() const { return false; }
  // Copies [off, off+n) into `out` without keeping it (a scan through a
  // large range with one small buffer). Requires: inside size(); else
  // throws ParseError(what).
  virtual void copy_out(u64 off, u64 n, u8* out, const char* what = "range") const {
    ByteView v = range(off, n, what);
    if (n) std::memcpy(out, v.data(), n);
  }
};

// ViewSource: a ByteSource over bytes already in memory (a mapping, a test
// buffer). Requires: the bytes outlive the source.
class ViewSource final : public ByteSource {
 public:
  explicit ViewSource(ByteView bytes) : bytes_(bytes) {}
  u64 size() const override { return bytes_.size(); }
  ByteView range(u64 off, u64 n, const char* what = "range") const override {
    return bytes_.sub(off, n, what);
  }
  bool in_memory() const override { return true; }

 private:
  ByteView bytes_;
};

// SparseFile: a regular file read piecewise with pread(2) into buffers it
// owns, each range once (a range inside one already read is served from
// it). On the machines measured a first touch of a mapped page costs
// 16-33 µs and unmapping tens of µs, a small pread 2-5 µs; a loader model
// that needs a few hundred bytes from each of many libraries reads them.
// The file is assumed not to change while read: a descriptor closed to stay
// under the open-file limit is reopened and checked to be the same inode.
// Not synchronised: one thread at a time per SparseFile.
class SparseFile final : public ByteSource {
 public:
  // Opens `path` when it is a regular file (open_regular(); throws IoError
  // as MappedFile::open does).
  static std::shared_ptr<SparseFile> open(const std::string& path);
  // Adopts `fd`, an open descriptor of `name`; `reopen` gives a new
  // descriptor of the same path (-1 with errno on failure), and must open
  // it as open_regular() does. Throws IoError when fd is not a regular file
  // (and closes it).
  static std::shared_ptr<SparseFile> adopt(int fd, std::string name, std::function<int()> reopen);
  SparseFile(const SparseFile&) = delete;
  SparseFile& operator=(const SparseFile&) = delete;
  ~SparseFile() override;

  u64 size() const override { return size_; }
  // A read error or a file that shrank throws ParseError (per-file, like
  // any other unreadable input).
  ByteView range(u64 off, u64 n, const char* what = "range") const override;
  void copy_out(u64 off, u64 n, u8* out, const char* what = "range") const override;
  const std::string& name() const { return name_; }
  // Bytes read from the file so far (for tests and measurements).
  u64 bytes_read() const { return bytes_read_; }
  // Calls `observer` with every range read from the file from now on (its
  // offset and bytes), as it is read: `mldoctor snapshot` keeps exactly the
  // pieces of each object the loader model looked at. The observer runs
  // under the descriptor lock and must not read any SparseFile.
  using ReadObserver = std::function<void(u64 off, const u8* data, u64 n)>;
  void observe_reads(ReadObserver observer) { observer_ = std::move(observer); }

  struct Extent {
    u64 off = 0;
    u64 size = 0;
    u8* data = nullptr;
    void* chunk = nullptr;  // the arena chunk holding `data`; null: new[]
  };

 private:
  SparseFile() = default;
  int descriptor() const;
  void pread_all(u64 off, u64 n, u8* out) const;

  std::string name_;
  u64 size_ = 0;
  u64 dev_ = 0, ino_ = 0;
  std::function<int()> reopen_;
  mutable int fd_ = -1;
  mutable std::list<const SparseFile*>::iterator lru_;
  mutable std::vector<Extent> extents_;
  mutable size_t last_ = 0;
  mutable u64 bytes_read_ = 0;
  ReadObserver observer_;
};

// errno as text: "No such file or directory".
std::string errno_text(int err);

// Lowercase hex of bytes ("build-id" style).
std::string to_hex(ByteView bytes);

// Appends code point `cp` (below 0x110000) to `out` as UTF-8.
void append_utf8(std::string& out, u32 cp);

// `s` with every byte that is not part of valid UTF-8 replaced by U+FFFD
// (paths and program output are bytes; JSON wants text).
std::string repair_utf8(std::string_view s);

}  // namespace mld
