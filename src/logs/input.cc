// input.cc — getting a log's bytes to the scanner as cheaply as the source
// allows: files, pipes and terminals are read in blocks into one reused
// buffer; gzip (found by its magic bytes, not its name) is inflated with
// zlib. --follow keeps reading a growing file like
// `tail -F` (truncation and rotation included) and reports idle periods, so
// end-of-log rules can say that a job has stalled.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "logs/logs.h"

namespace mld::logs {
namespace {

constexpr size_t kBlock = 4 << 20;

// A read buffer that is not zero-filled: its pages are touched only as far
// as data arrives, so a small log costs no 4 MiB of page faults.
class Buffer {
 public:
  explicit Buffer(size_t size) : data_(new u8[size]), size_(size) {}
  u8* data() { return data_.get(); }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<u8[]> data_;
  size_t size_;
};

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw IoError(path + ": " + what + (err ? ": " + errno_text(err) : std::string()));
}

bool is_gzip(int fd) {
  unsigned char magic[2];
  ssize_t n = ::pread(fd, magic, 2, 0);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

// Fills blocks on a reader thread, up to three ahead, and feeds them to the
// scanner on this thread in order, so reading (a copy out of the page cache,
// or inflating gzip) overlaps scanning. `fill` returns the bytes it put in
// the buffer, 0 at the end, or throws; blocks read before an error are still
// scanned, then the error is rethrown.
void read_ahead(const std::function<size_t(u8*, size_t)>& fill, Scanner& scanner,
                const ReadOptions& options) {
  constexpr size_t kBlocks = 3;
  struct Slot {
    Buffer buf{kBlock};
    size_t len = 0;
  };
  std::vector<std::unique_ptr<Slot>> slots;
  for (size_t i = 0; i < kBlocks; i++) slots.push_back(std::make_unique<Slot>());
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Slot*> full, empty;
  for (auto& slot : slots) empty.push_back(slot.get());
  bool done = false, stop = false;
  std::exception_ptr error;

  std::thread reader([&] {
    for (;;) {
      Slot* slot;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !empty.empty(); });
        if (stop) return;
        slot = empty.front();
        empty.pop_front();
      }
      size_t n = 0;
      std::exception_ptr e;
      try {
        n = fill(slot->buf.data(), slot->buf.size());
      } catch (...) {
        e = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu);
      if (n > 0) {
        slot->len = n;
        full.push_back(slot);
      } else {
        empty.push_back(slot);
      }
      if (e) error = e;
      if (n == 0 || e) done = true;
      cv.notify_all();
      if (done) return;
    }
  });
  auto finish_reader = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    reader.join();
  };
  try {
    for (;;) {
      Slot* slot;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return done || !full.empty(); });
        if (full.empty()) break;
        slot = full.front();
        full.pop_front();
      }
      scanner.feed(ByteView(slot->buf.data(), slot->len));
      if (options.on_progress) options.on_progress();
      std::lock_guard<std::mutex> lock(mu);
      empty.push_back(slot);
      cv.notify_all();
    }
  } catch (...) {
    finish_reader();
    throw;
  }
  finish_reader();
  if (error) std::rethrow_exception(error);
}

// Reads until `buf` is full or the input ends (pipes deliver small pieces).
size_t read_full(const std::string& path, int fd, u8* buf, size_t size) {
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::read(fd, buf + got, size - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "read", errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

void scan_gzip(const std::string& path, int fd, Scanner& scanner, const ReadOptions& options) {
  int own = ::dup(fd);
  if (own < 0) fail(path, "dup", errno);
  gzFile gz = ::gzdopen(own, "rb");
  if (!gz) {
    ::close(own);
    fail(path, "cannot open gzip stream", 0);
  }
  ::gzbuffer(gz, 1 << 20);
  u64 inflated = 0;
  auto fill = [&](u8* buf, size_t size) -> size_t {
    int n = ::gzread(gz, buf, static_cast<unsigned>(std::min<size_t>(size, 1u << 30)));
    int errnum = Z_OK;
    const char* msg = ::gzerror(gz, &errnum);
    if (n < 0)
      fail(path, "corrupt gzip data after " + std::to_string(inflated) + " bytes (" + msg + ")", 0);
    // A stream cut short reads as a clean end with Z_BUF_ERROR set.
    if (n == 0 && errnum != Z_OK && errnum != Z_STREAM_END)
      fail(path, "gzip data ends early after " + std::to_string(inflated) + " bytes (" + msg + ")",
           0);
    inflated += static_cast<u64>(n);
    return static_cast<size_t>(n);
  };
  try {
    read_ahead(fill, scanner, options);
  } catch (...) {
    ::gzclose(gz);
    throw;
  }
  ::gzclose(gz);
}

// Reads what is there now; returns bytes read (0 at end of data).
size_t read_available(const std::string& path, int fd, Buffer& buf, Scanner& scanner) {
  size_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return total;
      fail(path, "read", errno);
    }
    if (n == 0) return total;
    scanner.feed(ByteView(buf.data(), static_cast<size_t>(n)));
    total += static_cast<size_t>(n);
  }
}

void follow_file(const std::string& path, Fd& fd, Scanner& scanner, const ReadOptions& options) {
  using clock = std::chrono::steady_clock;
  Buffer buf(1 << 20);
  auto last_data = clock::now();
  bool idle_reported = false;
  off_t offset = 0;
  for (;;) {
    size_t n = read_available(path, fd.get(), buf, scanner);
    offset += static_cast<off_t>(n);
    if (n > 0) {
      last_data = clock::now();
      idle_reported = false;
      if (options.on_progress) options.on_progress();
      continue;
    }
    if (options.stop && options.stop()) return;
    struct stat now_fd {
    }, now_path{};
    if (::fstat(fd.get(), &now_fd) == 0 && now_fd.st_size < offset) {
      ::lseek(fd.get(), 0, SEEK_SET);  // truncated in place (copytruncate)
      offset = 0;
      continue;
    }
    if (::stat(path.c_str(), &now_path) == 0 &&
        (now_path.st_ino != now_fd.st_ino || now_path.st_dev != now_fd.st_dev)) {
      int nfd = ::open(path.c_str(),
                       O_RDONLY | O_CLOEXEC);  // rotated: the old file is drained, read the new
      if (nfd >= 0) {
        fd.reset(nfd);
        offset = 0;
        continue;
      }
    }
    if (!idle_reported &&
        clock::now() - last_data >= std::chrono::duration<double>(options.stall_seconds)) {
      idle_reported = true;
      if (options.on_idle) options.on_idle();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void follow_stream(const std::string& path, int fd, Scanner& scanner, const ReadOptions& options) {
  Buffer buf(1 << 20);
  bool idle_reported = false;
  for (;;) {
    if (options.stop && options.stop()) return;
    pollfd pfd{fd, POLLIN, 0};
    int timeout_ms = static_cast<int>(options.stall_seconds * 1000);
    int rc = ::poll(&pfd, 1, std::min(timeout_ms, 500));
    if (rc < 0 && errno != EINTR) fail(path, "poll", errno);
    if (rc <= 0) {
      static thread_local int idle_ms = 0;
      idle_ms += std::min(timeout_ms, 500);
      if (!idle_reported && idle_ms >= timeout_ms) {
        idle_reported = true;
        if (options.on_idle) options.on_idle();
      }
      continue;
    }
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      fail(path, "read", errno);
    }
    if (n == 0) return;
    idle_reported = false;
    scanner.feed(ByteView(buf.data(), static_cast<size_t>(n)));
    if (options.on_progress) options.on_progress();
  }
}

}  // namespace

void scan_input(const std::string& path, Scanner& scanner, const ReadOptions& options) {
  bool is_stdin = path == "-";
  Fd fd(is_stdin ? ::dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail(is_stdin ? "standard input" : path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat", errno);
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory", 0);
  bool regular = S_ISREG(st.st_mode);

  if (regular && is_gzip(fd.get())) {
    scan_gzip(path, fd.get(), scanner, options);
    return;
  }
  if (options.follow) {
    if (regular)
      follow_file(path, fd, scanner, options);
    else
      follow_stream(path, fd.get(), scanner, options);
    return;
  }
  // read() into one reused buffer, also for regular files: on the machines
  // measured (docs/benchmarks.md) first-touch page faults of a mapping cost
  // six times what copying the same bytes out of the page cache does.
  if (regular) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  read_ahead([&](u8* buf, size_t size) { return read_full(path, fd.get(), buf, size); }, scanner,
             options);
}

}  // namespace mld::logs
