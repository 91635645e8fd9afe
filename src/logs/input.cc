// input.cc — getting a log's bytes to the scanner as cheaply as the source
// allows: a large regular file is scanned from a read-only mapping (no copy
// out of the page cache; a guard turns a truncation under the scan into an
// error instead of SIGBUS); small files, pipes and terminals are read in
// blocks into one reused buffer; gzip (found by its magic bytes, not its
// name) is inflated with zlib. --follow keeps reading a growing file like
// `tail -F` (truncation and rotation included) and reports idle periods, so
// end-of-log rules can say that a job has stalled.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "logs/logs.h"

namespace mld::logs {
namespace {

constexpr size_t kBlock = 4 << 20;
constexpr u64 kMapAtLeast = 2 * kBlock;  // smaller files are read
// Blocks of a mapped file: each costs the scanning threads a hand-over and
// the process a TLB shootdown when its pages are dropped (a few tens of
// microseconds in a VM), so they are larger than read()'s.
constexpr size_t kMapBlock = 16 << 20;
// Touching a mapped page costlier than this and read() is used instead
// (scan_mapped): copying 4 KiB out of the page cache takes 0.4-0.8 µs.
constexpr double kMaxNsPerPage = 1000;

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
// The end is remembered in *ended: a terminal signals it once (Ctrl-D), and
// asking again would wait for a second one.
size_t read_full(const std::string& path, int fd, u8* buf, size_t size, bool* ended) {
  size_t got = 0;
  while (got < size && !*ended) {
    ssize_t n = ::read(fd, buf + got, size - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "read", errno);
    }
    if (n == 0) {
      *ended = true;
      break;
    }
    got += static_cast<size_t>(n);
  }
  return got;
}

// The mapping being scanned, for the SIGBUS handler: a page of a file
// mapping past the file's end (truncated under the scan: logrotate's
// copytruncate) or one the kernel cannot read (an I/O error) raises SIGBUS
// on access. The handler maps zero pages over the rest of the mapping, so
// the access that faulted reads zeros and the scan goes on to its end; the
// lowest such offset is kept, and the scan reports the input as cut there.
struct MappingGuard {
  static std::atomic<uintptr_t> begin, end;
  static std::atomic<uintptr_t> first_fault;  // address, or UINTPTR_MAX
  static uintptr_t page_size;
  static struct sigaction previous;

  static void on_sigbus(int, siginfo_t* info, void*) {
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    const uintptr_t b = begin.load(), e = end.load();
    if (b != 0 && addr >= b && addr < e) {
      const uintptr_t page = addr & ~(page_size - 1);
      if (::mmap(reinterpret_cast<void*>(page), e - page, PROT_READ,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
        uintptr_t seen = first_fault.load();
        while (page < seen && !first_fault.compare_exchange_weak(seen, page)) {
        }
        return;  // the faulting access is retried and reads zeros
      }
    }
    // Not ours: the previous disposition takes the retried fault.
    ::sigaction(SIGBUS, &previous, nullptr);
  }
};
std::atomic<uintptr_t> MappingGuard::begin{0}, MappingGuard::end{0};
std::atomic<uintptr_t> MappingGuard::first_fault{UINTPTR_MAX};
uintptr_t MappingGuard::page_size = 4096;
struct sigaction MappingGuard::previous {};

// Feeds a regular file from a read-only mapping, one block at a time; a
// block's pages are dropped from this process (not from the page cache)
// once it is scanned, so the resident size stays that of a few blocks.
//
// Whether mapping beats read() depends on the machine: on the one of
// 2026-11-26 in docs/benchmarks.md the kernel maps the page cache's large
// folios at once (70 ns a 4 KiB page); the machine of 2026-11-23 took 3 µs
// a page in first-touch faults, several times what copying the page out
// costs. So the first block's pages are touched and timed, and where that
// was slower than kMaxNsPerPage (or MLDOCTOR_LOG_MAP_MAX_NS) the rest of
// the file is read instead.
//
// Returns the bytes scanned from the mapping (the caller reads the rest),
// or nullopt, having fed nothing, when the file cannot be mapped (or
// another scan holds the guard).
std::optional<size_t> scan_mapped(const std::string& path, int fd, size_t size, Scanner& scanner,
                                  const ReadOptions& options) {
  static std::mutex one_mapping;
  std::unique_lock<std::mutex> lock(one_mapping, std::try_to_lock);
  if (!lock.owns_lock()) return std::nullopt;
  const char* limit = std::getenv("MLDOCTOR_LOG_MAP_MAX_NS");
  const double max_ns_per_page = limit && *limit ? std::strtod(limit, nullptr) : kMaxNsPerPage;
  if (max_ns_per_page < 0) return std::nullopt;  // mapping disabled
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) return std::nullopt;
  const auto* base = static_cast<const u8*>(map);
  ::madvise(map, size, MADV_SEQUENTIAL);
  MappingGuard::page_size = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  MappingGuard::first_fault = UINTPTR_MAX;
  MappingGuard::begin = reinterpret_cast<uintptr_t>(base);
  MappingGuard::end = reinterpret_cast<uintptr_t>(base) + size;
  struct sigaction guard {};
  guard.sa_sigaction = MappingGuard::on_sigbus;
  guard.sa_flags = SA_SIGINFO;
  sigemptyset(&guard.sa_mask);
  ::sigaction(SIGBUS, &guard, &MappingGuard::previous);
  auto release = [&] {
    ::sigaction(SIGBUS, &MappingGuard::previous, nullptr);
    MappingGuard::begin = 0;
    MappingGuard::end = 0;
    ::munmap(map, size);
  };
  size_t cut = size;     // bytes of the file that were really there
  size_t mapped = size;  // bytes scanned from the mapping
  try {
    for (size_t off = 0; off < size; off += kMapBlock) {
      const size_t len = std::min(kMapBlock, size - off);
      bool slow = false;
      if (off == 0) {
        const auto start = std::chrono::steady_clock::now();
        unsigned char sum = 0;
        for (size_t at = 0; at < len; at += MappingGuard::page_size) sum ^= base[at];
        asm volatile("" : : "r"(sum));  // the touches are the point
        const double ns =
            std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start)
                .count();
        slow = ns / static_cast<double>((len + MappingGuard::page_size - 1) /
                                        MappingGuard::page_size) >
               max_ns_per_page;
      }
      if (off + len < size && !slow)  // start reading the next block from disk now
        ::madvise(const_cast<u8*>(base + off + len), std::min(kMapBlock, size - off - len),
                  MADV_WILLNEED);
      scanner.feed(ByteView(base + off, len));
      ::madvise(const_cast<u8*>(base + off), len, MADV_DONTNEED);
      if (options.on_progress) options.on_progress();
      const uintptr_t fault = MappingGuard::first_fault.load();
      if (fault != UINTPTR_MAX) {
        cut = static_cast<size_t>(fault - reinterpret_cast<uintptr_t>(base));
        break;
      }
      if (slow) {
        mapped = off + len;
        break;
      }
    }
  } catch (...) {
    release();
    throw;
  }
  release();
  if (cut < size) {
    struct stat now {};
    bool shrank = ::fstat(fd, &now) == 0 && static_cast<size_t>(now.st_size) < size;
    fail(path,
         shrank ? "truncated while it was read (log rotation with copytruncate?): scanned the "
                  "first " +
                      std::to_string(cut) + " of " + std::to_string(size) + " bytes"
                : "read error at byte " + std::to_string(cut) + " of " + std::to_string(size) +
                      ": the rest was not scanned",
         0);
  }
  return mapped;
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
      // Rotated: the old file is drained, read the new one, if it is a
      // regular file like the one followed (a FIFO there is not waited on).
      OpenedFile next = open_regular(path);
      if (next.fd >= 0) {
        fd.reset(next.fd);
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

// A named pipe opened without blocking: waits until a program writes to it
// (or one that did has closed it), calling `options.on_waiting_for_writer`
// once a second has passed without one, so the caller can say what it waits
// for. Returns false when `options.stop` asked to stop first.
bool wait_for_writer(const std::string& path, int fd, const ReadOptions& options) {
  bool said = false;
  for (;;) {
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, 1000);
    if (rc < 0 && errno != EINTR) fail(path, "poll", errno);
    if (rc > 0) return true;  // data, or a writer came and went (POLLHUP)
    if (options.stop && options.stop()) return false;
    if (!said && options.on_waiting_for_writer) options.on_waiting_for_writer();
    said = true;
  }
}

}  // namespace

void scan_input(const std::string& path, Scanner& scanner, const ReadOptions& options) {
  bool is_stdin = path == "-";
  // A path given on the command line is read as named: a pipe or a
  // terminal is a stream, like `-` (O_NOCTTY: never this process's
  // controlling terminal).
  // O_NONBLOCK: opening a named pipe no program writes to would block
  // before a word is said; it is waited on below, saying so.
  Fd fd(is_stdin ? ::dup(STDIN_FILENO)
                 : ::open(path.c_str(), O_RDONLY | O_NOCTTY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) fail(is_stdin ? "standard input" : path, "cannot open", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail(path, "cannot stat", errno);
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory", 0);
  bool regular = S_ISREG(st.st_mode);
  if (!is_stdin && S_ISFIFO(st.st_mode) && !wait_for_writer(path, fd.get(), options)) return;
  if (!is_stdin) {
    int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  }

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
  // A large file is scanned where it lies in the page cache: on the 2-core
  // machine of docs/benchmarks.md, read()'s copy was a quarter of all the
  // CPU time of a 1 GB scan, and touching the mapping costs a tenth of that
  // (kernels map the page cache's large folios at once). Small files and
  // anything that is not a regular file are read.
  if (regular && static_cast<u64>(st.st_size) >= kMapAtLeast &&
      static_cast<u64>(st.st_size) <= std::numeric_limits<size_t>::max()) {
    if (auto mapped =
            scan_mapped(path, fd.get(), static_cast<size_t>(st.st_size), scanner, options)) {
      if (*mapped == static_cast<size_t>(st.st_size)) return;
      if (::lseek(fd.get(), static_cast<off_t>(*mapped), SEEK_SET) < 0) fail(path, "seek", errno);
    }
  }
  if (regular) ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  bool ended = false;
  read_ahead([&](u8* buf, size_t size) { return read_full(path, fd.get(), buf, size, &ended); },
             scanner, options);
}

}  // namespace mld::logs
