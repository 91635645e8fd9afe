// snapshot.cc — turns an access log into a gzip'd POSIX tar (ustar, with GNU
// long-name records for sysfs paths over 100 bytes) and masks secrets in the
// environment. The archive is written with zlib's gzip framing, one entry at
// a time; nothing but the output file is created, and only if it does not
// exist.
#include "snapshot/snapshot.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <set>

namespace mld::snapshot {

namespace {

// The parts of the machine a snapshot may hold.
const char* const kPrefixes[] = {"/proc/", "/sys/", "/etc/", "/dev/shm"};
const char* const kExtraFiles[] = {"/.dockerenv", "/run/.containerenv"};

bool wanted(const std::string& path) {
  for (const char* x : kExtraFiles)
    if (path == x) return true;
  bool under = false;
  for (const char* p : kPrefixes) under |= path.starts_with(p) || path + "/" == p;
  if (!under) return false;
  // /proc/<pid>/... of other processes (lock holders): not ours to copy.
  // /proc/1 stays: container detection reads its cgroup.
  if (path.starts_with("/proc/") && path.size() > 6 &&
      std::isdigit(static_cast<unsigned char>(path[6])))
    return (path.starts_with("/proc/1/") || path == "/proc/1") && !path.starts_with("/proc/1/fd");
  return true;
}

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

// gzip'd ustar output.
class TarWriter {
 public:
  explicit TarWriter(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError(path + ": " + errno_text(errno));
    std::memset(&z_, 0, sizeof z_);
    if (deflateInit2(&z_, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
      ::close(fd_);
      throw IoError(path + ": zlib initialisation failed");
    }
    mtime_ = static_cast<u64>(std::time(nullptr));
  }
  ~TarWriter() {
    if (fd_ >= 0) {
      deflateEnd(&z_);
      ::close(fd_);
    }
  }

  void file(const std::string& name, const std::string& data, u32 mode = 0644) {
    header(name, '0', data.size(), mode, "");
    write(data.data(), data.size());
    pad(data.size());
  }
  void directory(const std::string& name) { header(name + "/", '5', 0, 0755, ""); }
  void link(const std::string& name, const std::string& target) {
    header(name, '2', 0, 0777, target);
  }

  u64 finish() {
    static const char zeros[1024] = {};
    write(zeros, sizeof zeros);
    deflate_out(Z_FINISH);
    deflateEnd(&z_);
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw IoError(path_ + ": " + errno_text(errno));
    }
    fd_ = -1;
    return written_;
  }

 private:
  void octal(char* field, size_t width, u64 v) {
    std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1),
                  static_cast<unsigned long long>(v));
  }

  // A GNU long-name record ('L' or 'K') for a name the header cannot hold.
  void long_record(char type, const std::string& text) {
    raw_header("././@LongLink", type, text.size() + 1, 0644, "");
    write(text.c_str(), text.size() + 1);
    pad(text.size() + 1);
  }

  void header(const std::string& name, char type, u64 size, u32 mode, const std::string& target) {
    if (target.size() > 100) long_record('K', target);
    if (name.size() > 100) long_record('L', name);
    raw_header(name.substr(0, 100), type, size, mode, target.substr(0, 100));
  }

  void raw_header(const std::string& name, char type, u64 size, u32 mode,
                  const std::string& target) {
    char h[512] = {};
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    octal(h + 100, 8, mode);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, size);
    octal(h + 136, 12, mtime_);
    h[156] = type;
    std::memcpy(h + 157, target.data(), std::min<size_t>(target.size(), 100));
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    std::memcpy(h + 265, "root", 4);
    std::memcpy(h + 297, "root", 4);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
    write(h, sizeof h);
  }

  void pad(u64 size) {
    static const char zeros[512] = {};
    if (size % 512) write(zeros, 512 - size % 512);
  }

  void write(const void* data, size_t n) {
    z_.next_in = static_cast<Bytef*>(const_cast<void*>(data));
    z_.avail_in = static_cast<uInt>(n);
    deflate_out(Z_NO_FLUSH);
  }

  void deflate_out(int flush) {
    unsigned char buf[1 << 16];
    do {
      z_.next_out = buf;
      z_.avail_out = sizeof buf;
      int rc = deflate(&z_, flush);
      if (rc == Z_STREAM_ERROR) throw IoError(path_ + ": zlib error");
      const size_t have = sizeof buf - z_.avail_out;
      for (size_t off = 0; off < have;) {
        ssize_t w = ::write(fd_, buf + off, have - off);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) throw IoError(path_ + ": " + errno_text(errno));
        off += static_cast<size_t>(w);
      }
      written_ += have;
    } while (z_.avail_out == 0 || (flush == Z_FINISH && z_.avail_in != 0));
  }

  std::string path_;
  int fd_ = -1;
  z_stream z_;
  u64 mtime_ = 0;
  u64 written_ = 0;
};

}  // namespace

bool is_secret_name(std::string_view name) {
  const std::string n = upper(name);
  for (const char* word :
       {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "API_KEY", "APIKEY",
        "ACCESS_KEY", "PRIVATE_KEY", "AUTH", "COOKIE", "SESSION"})
    if (n.find(word) != std::string::npos) return true;
  return n.ends_with("_KEY") || n.ends_with("_PASS") || n.ends_with("_PWD");
}

std::string masked_value(std::string_view name, std::string_view value) {
  if (is_secret_name(name)) return "<masked>";
  for (const char* prefix : {"ghp_", "gho_", "ghu_", "ghs_", "github_pat_", "hf_", "sk-", "xoxb-",
                             "xoxp-", "AKIA", "glpat-"})
    if (value.starts_with(prefix) && value.size() >= 16) return "<masked>";
  // scheme://user:password@host...
  std::string v(value);
  size_t scheme = v.find("://");
  while (scheme != std::string::npos) {
    size_t start = scheme + 3;
    size_t end = v.find_first_of("/ ,;", start);
    if (end == std::string::npos) end = v.size();
    size_t at = v.rfind('@', end);
    size_t colon = v.find(':', start);
    if (at != std::string::npos && at > start && colon != std::string::npos && colon < at)
      v.replace(colon + 1, at - colon - 1, "***");
    scheme = v.find("://", start);
  }
  return v;
}

Written write_snapshot(const host::AccessLog& log, const std::map<std::string, std::string>& env,
                       const std::map<std::string, std::string>& facts,
                       const std::string& out_path) {
  Written w;
  TarWriter tar(out_path);
  std::set<std::string> dirs;  // every directory emitted, parents first
  auto ensure_parents = [&](const std::string& path) {
    for (size_t i = 1; i < path.size(); i++) {
      if (path[i] != '/') continue;
      std::string d = path.substr(1, i - 1);
      if (dirs.insert(d).second) {
        tar.directory(d);
        w.directories++;
      }
    }
  };
  // Listed directories first (so empty ones exist), then files and links.
  for (const auto& [path, entries] : log.directories) {
    if (!wanted(path) || path == "/proc" || path == "/sys") continue;
    ensure_parents(path + "/");
  }
  // A link that files were also read through (/sys/class/net/eth0 ->
  // ../../devices/...) becomes a directory holding them; a tar cannot hold
  // both, and readers under --root only need the files.
  std::set<std::string> read_through;
  auto note_parents = [&](const std::string& path) {
    for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1))
      read_through.insert(path.substr(0, i));
  };
  for (const auto& [path, data] : log.files) note_parents(path);
  for (const auto& [path, entries] : log.directories) note_parents(path + "/");
  for (const std::string& path : log.stats) note_parents(path);
  for (const auto& [path, target] : log.links) {
    if (!wanted(path) || read_through.count(path) || log.files.count(path)) continue;
    ensure_parents(path);
    tar.link(path.substr(1), target);
    w.links++;
  }
  for (const auto& [path, data] : log.files) {
    if (!wanted(path) || read_through.count(path))
      continue;  // a file read through a link: its contents
    ensure_parents(path);
    tar.file(path.substr(1), data);
    w.files++;
  }
  // Paths only stat()ed (the container markers, /dev/shm): present, empty.
  for (const std::string& path : log.stats) {
    if (!wanted(path) || log.files.count(path) || log.links.count(path) ||
        log.directories.count(path) || read_through.count(path))
      continue;
    if (path == "/dev/shm") {
      ensure_parents("/dev/shm/");
      continue;
    }
    ensure_parents(path);
    tar.file(path.substr(1), "");
    w.files++;
  }
  std::string environ;
  for (const auto& [name, value] : env) {
    std::string m = masked_value(name, value);
    if (m != value) w.masked++;
    environ += name + "=" + m;
    environ.push_back('\0');
  }
  ensure_parents(std::string(kEnvironFile));
  tar.file(std::string(kEnvironFile.substr(1)), environ, 0600);
  w.files++;
  for (const auto& [name, value] : facts) {
    tar.file(".mldoctor/" + name, value + "\n");
    w.files++;
  }
  w.bytes = tar.finish();
  return w;
}

host::Host host_at_root(const std::string& root,
                        const std::map<std::string, std::string>& fallback) {
  host::Host probe(root, {});
  std::optional<std::string> environ = probe.read_file(kEnvironFile, 4 << 20);
  if (!environ) return host::Host(root, fallback);
  std::map<std::string, std::string> env;
  size_t i = 0;
  while (i < environ->size()) {
    size_t j = environ->find('\0', i);
    if (j == std::string::npos) j = environ->size();
    std::string kv = environ->substr(i, j - i);
    size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    i = j + 1;
  }
  return host::Host(root, std::move(env));
}

}  // namespace mld::snapshot
