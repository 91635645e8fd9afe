// snapshot.cc — turns an access log into a gzip'd tar and masks secrets in
// the environment. Files read whole go in whole; an object the loader model
// read by ranges goes in as a GNU sparse member holding exactly those
// ranges at their offsets, over a file of the real size (unpacked, the rest
// is a hole: a 400 MB libtorch costs the few KiB the model looked at); the
// names one file had (/lib/... and /usr/lib/..., a venv's copy of a link)
// become hard links of one member, so the loader model sees one inode as
// the live loader did. Written with zlib's gzip framing, one entry at a
// time; nothing but the output file is created, and only if it does not
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
#include <vector>

namespace mld::snapshot {

namespace {

// What a snapshot may hold: whatever the checks read, except other
// processes' /proc/<pid> entries (lock holders: not ours to copy; /proc/1
// stays, container detection reads its cgroup) and devices other than
// /dev/shm.
bool wanted(const std::string& path) {
  if (path.starts_with("/dev/") || path == "/dev") return path == "/dev/shm";
  if (path.starts_with("/proc/") && path.size() > 6 &&
      std::isdigit(static_cast<unsigned char>(path[6])))
    return (path.starts_with("/proc/1/") || path == "/proc/1") && !path.starts_with("/proc/1/fd");
  return true;
}

// Kernel trees: their files are what they say now, sizes and all; a path
// only stat()ed there is written present and empty.
bool kernel_tree(const std::string& path) {
  return path.starts_with("/proc/") || path.starts_with("/sys/") || path.starts_with("/dev/");
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

  void file(const std::string& name, const std::string& data, u32 mode = 0644,
            std::optional<u64> mtime = std::nullopt) {
    header(name, '0', data.size(), mode, "", mtime);
    write(data.data(), data.size());
    pad(data.size());
  }
  void directory(const std::string& name) { header(name + "/", '5', 0, 0755, ""); }
  void link(const std::string& name, const std::string& target) {
    header(name, '2', 0, 0777, target);
  }
  void hard_link(const std::string& name, const std::string& target) {
    header(name, '1', 0, 0644, target);
  }

  // One stretch of a sparse member: `data` at `offset` of the file.
  struct Chunk {
    u64 offset = 0;
    std::string data;
  };
  // A GNU sparse member (old GNU format, typeflag 'S', as GNU tar writes
  // it): the map of (offset, size) entries, 4 in the header and 21 in each
  // extension block, a final (size, 0) entry so the file ends at `size`,
  // then the chunks' bytes back to back. GNU tar, bsdtar and Python's
  // tarfile unpack it as a file of `size` bytes with holes between.
  void sparse(const std::string& name, u64 size, const std::vector<Chunk>& chunks, u32 mode,
              std::optional<u64> mtime) {
    std::vector<std::pair<u64, u64>> map;
    u64 stored = 0;
    for (const Chunk& c : chunks) {
      map.emplace_back(c.offset, c.data.size());
      stored += c.data.size();
    }
    map.emplace_back(size, 0);
    if (name.size() > 100) long_record('L', name);
    char h[512] = {};
    fill_header(h, name.substr(0, 100), 'S', stored, mode, "", mtime);
    std::memcpy(h + 257, "ustar  ", 8);  // old GNU magic: what makes 'S' sparse to GNU tar
    size_t i = 0;
    for (; i < map.size() && i < 4; i++) {
      octal(h + 386 + i * 24, 12, map[i].first);
      octal(h + 386 + i * 24 + 12, 12, map[i].second);
    }
    h[482] = i < map.size() ? 1 : 0;
    octal(h + 483, 12, size);
    checksum(h);
    write(h, sizeof h);
    while (i < map.size()) {
      char x[512] = {};
      for (size_t k = 0; k < 21 && i < map.size(); k++, i++) {
        octal(x + k * 24, 12, map[i].first);
        octal(x + k * 24 + 12, 12, map[i].second);
      }
      x[504] = i < map.size() ? 1 : 0;
      write(x, sizeof x);
    }
    for (const Chunk& c : chunks) write(c.data.data(), c.data.size());
    pad(stored);
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
  // An octal number field; beyond what its digits hold (8 GiB for a size),
  // the base-256 form GNU tar and tarfile read (first byte 0x80).
  static void octal(char* field, size_t width, u64 v) {
    if (width - 1 < 22 && v >> (3 * (width - 1))) {
      std::memset(field, 0, width);
      field[0] = static_cast<char>(0x80);
      for (size_t i = width - 1; i > 0 && v; i--, v >>= 8) field[i] = static_cast<char>(v & 0xff);
      return;
    }
    std::snprintf(field, width, "%0*llo", static_cast<int>(width - 1),
                  static_cast<unsigned long long>(v));
  }

  // A GNU long-name record ('L' or 'K') for a name the header cannot hold.
  void long_record(char type, const std::string& text) {
    raw_header("././@LongLink", type, text.size() + 1, 0644, "");
    write(text.c_str(), text.size() + 1);
    pad(text.size() + 1);
  }

  void header(const std::string& name, char type, u64 size, u32 mode, const std::string& target,
              std::optional<u64> mtime = std::nullopt) {
    if (target.size() > 100) long_record('K', target);
    if (name.size() > 100) long_record('L', name);
    raw_header(name.substr(0, 100), type, size, mode, target.substr(0, 100), mtime);
  }

  void raw_header(const std::string& name, char type, u64 size, u32 mode, const std::string& target,
                  std::optional<u64> mtime = std::nullopt) {
    char h[512] = {};
    fill_header(h, name, type, size, mode, target, mtime);
    std::memcpy(h + 257, "ustar", 6);
    std::memcpy(h + 263, "00", 2);
    checksum(h);
    write(h, sizeof h);
  }

  void fill_header(char* h, const std::string& name, char type, u64 size, u32 mode,
                   const std::string& target, std::optional<u64> mtime) {
    std::memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
    octal(h + 100, 8, mode & 07777);
    octal(h + 108, 8, 0);
    octal(h + 116, 8, 0);
    octal(h + 124, 12, size);
    octal(h + 136, 12, mtime.value_or(mtime_));
    h[156] = type;
    std::memcpy(h + 157, target.data(), std::min<size_t>(target.size(), 100));
    std::memcpy(h + 265, "root", 4);
    std::memcpy(h + 297, "root", 4);
  }

  static void checksum(char* h) {
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += static_cast<unsigned char>(h[i]);
    std::snprintf(h + 148, 8, "%06o", sum);
    h[155] = ' ';
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

namespace {

// The ranges read from one file as a sparse member's chunks: widened to
// 512-byte blocks (GNU tar reads each chunk's data from a block boundary,
// tarfile reads them back to back; block-sized chunks satisfy both, as GNU
// tar's own do), merged where they touch; what was not read is zeros, as
// the hole would read.
std::vector<TarWriter::Chunk> merged_chunks(std::vector<std::pair<u64, const std::string*>> ranges,
                                            u64 size) {
  constexpr u64 kBlock = 512;
  std::sort(ranges.begin(), ranges.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<TarWriter::Chunk> out;
  for (const auto& [off, bytes] : ranges) {
    if (off >= size || bytes->empty()) continue;
    const u64 n = std::min<u64>(bytes->size(), size - off);
    const u64 start = off / kBlock * kBlock;
    const u64 end = std::min(size, (off + n + kBlock - 1) / kBlock * kBlock);
    if (out.empty() || start > out.back().offset + out.back().data.size())
      out.push_back({start, std::string()});
    TarWriter::Chunk& c = out.back();
    if (end - c.offset > c.data.size()) c.data.resize(end - c.offset, '\0');
    std::memcpy(c.data.data() + (off - c.offset), bytes->data(), n);
  }
  return out;
}

// One file of the machine and the names the checks reached it by. The bytes
// stay in the access log: a member points at them (the log of a torch
// environment holds tens of MiB; a copy per step doubled the peak).
struct Member {
  std::string real_path;  // where its data goes; the other names link here
  host::FileStat stat;
  std::set<std::string> names;
  std::vector<std::pair<u64, const std::string*>> ranges;  // read by ranges
  const std::string* read_whole = nullptr;                 // the longest read_file() of it
  bool whole() const { return read_whole && read_whole->size() == stat.size; }
};

}  // namespace

// The log with every path as a tar member name needs it: lexically
// normalised ("pkg/../pkg.libs/x", a RUNPATH of $ORIGIN/.., is
// "pkg.libs/x"; GNU tar refuses names with ".."). Where two spellings of a
// path were recorded, the longer read or the later stat is kept.
struct Paths {
  std::map<std::string, const std::string*> files;
  std::map<std::string, std::vector<std::string>> directories;
  std::map<std::string, std::string> links;
  std::map<std::string, host::FileStat> stats;
  struct Pieces {
    host::FileStat stat;
    std::string real_path;
    std::vector<const std::map<u64, std::string>*> ranges;
  };
  std::map<std::string, Pieces> pieces;
  std::map<std::string, std::string> real_paths;
};

Paths normalized(const host::AccessLog& log) {
  auto norm = [](const std::string& p) { return host::normalize_path(p); };
  Paths n;
  for (const auto& [p, data] : log.files) {
    const std::string*& kept = n.files[norm(p)];
    if (!kept || data.size() > kept->size()) kept = &data;
  }
  for (const auto& [p, entries] : log.directories) n.directories[norm(p)] = entries;
  for (const auto& [p, target] : log.links) n.links[norm(p)] = target;
  for (const auto& [p, st] : log.stats) n.stats[norm(p)] = st;
  for (const auto& [p, pieces] : log.pieces) {
    Paths::Pieces& kept = n.pieces[norm(p)];
    kept.stat = pieces.stat;
    kept.real_path = norm(pieces.real_path);
    kept.ranges.push_back(&pieces.ranges);
  }
  for (const auto& [p, real] : log.real_paths) n.real_paths[norm(p)] = norm(real);
  return n;
}

Written write_snapshot(const host::AccessLog& log, const std::map<std::string, std::string>& env,
                       const std::map<std::string, std::string>& facts,
                       const std::string& out_path) {
  const Paths n = normalized(log);
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
  for (const auto& [path, entries] : n.directories) {
    if (!wanted(path) || path == "/proc" || path == "/sys") continue;
    ensure_parents(path + "/");
  }
  for (const auto& [path, st] : n.stats)
    if (st.kind == host::FileKind::Directory && wanted(path) && !kernel_tree(path + "/"))
      ensure_parents(path + "/");
  // A link that files were also read through (/sys/class/net/eth0 ->
  // ../../devices/..., /lib -> usr/lib) becomes a directory holding them; a
  // tar cannot hold both, and readers under --root only need the files.
  std::set<std::string> read_through;
  auto note_parents = [&](const std::string& path) {
    for (size_t i = path.find('/', 1); i != std::string::npos; i = path.find('/', i + 1))
      read_through.insert(path.substr(0, i));
  };
  for (const auto& [path, data] : n.files) note_parents(path);
  for (const auto& [path, entries] : n.directories) note_parents(path + "/");
  for (const auto& [path, st] : n.stats) note_parents(path);
  for (const auto& [path, p] : n.pieces) note_parents(path), note_parents(p.real_path);
  for (const auto& [path, real] : n.real_paths) note_parents(real);
  auto is_link = [&](const std::string& path) {
    return n.links.count(path) && !read_through.count(path);
  };

  // Regular files outside the kernel trees, by identity: each one member
  // at its real path, its other names linked to it.
  std::map<host::FileId, Member> members;
  auto member_of = [&](const std::string& name, const host::FileStat& st,
                       const std::string& real) -> Member& {
    Member& m = members[st.id];
    if (m.names.empty()) {
      m.real_path = real;
      m.stat = st;
    }
    m.names.insert(name);
    return m;
  };
  // (A name of a kernel file, /etc/mtab -> ../proc/self/mounts, stays a
  // plain file of what was read.)
  auto outside_kernel = [&](const std::string& name, const std::string& real) {
    return wanted(name) && !kernel_tree(name) && wanted(real) && !kernel_tree(real);
  };
  for (const auto& [path, p] : n.pieces) {
    if (!outside_kernel(path, p.real_path) || p.stat.kind != host::FileKind::Regular) continue;
    Member& m = member_of(path, p.stat, p.real_path);
    for (const std::map<u64, std::string>* ranges : p.ranges)
      for (const auto& [off, bytes] : *ranges) m.ranges.emplace_back(off, &bytes);
  }
  for (const auto& [path, st] : n.stats) {
    auto real = n.real_paths.find(path);
    const std::string& real_path = real == n.real_paths.end() ? path : real->second;
    if (!outside_kernel(path, real_path) || st.kind != host::FileKind::Regular) continue;
    member_of(path, st, real_path);
  }
  // A recorded symlink among a file's names leads to it only if its target
  // does too: a target the checks never named (python3 -> python3.11 when
  // only python3 was asked for) joins the names, a hard link like the rest.
  for (auto& [id, m] : members) {
    std::vector<std::string> todo(m.names.begin(), m.names.end());
    for (size_t i = 0; i < todo.size() && i < 64; i++) {
      if (!is_link(todo[i])) continue;
      const std::string& target = n.links.at(todo[i]);
      std::string next = host::normalize_path(
          target.starts_with("/") ? target : host::join_path(host::dir_name(todo[i]), target));
      if (next != m.real_path && m.names.insert(next).second) todo.push_back(next);
    }
  }
  std::set<std::string> in_members;
  for (auto& [id, m] : members) {
    for (const std::string& name : m.names) {
      auto f = n.files.find(name);
      if (f == n.files.end()) continue;
      if (!m.read_whole || f->second->size() > m.read_whole->size()) m.read_whole = f->second;
    }
    if (m.read_whole && !m.whole()) m.ranges.emplace_back(0, m.read_whole);
    m.names.insert(m.real_path);
    for (const std::string& name : m.names) in_members.insert(name);
  }

  for (const auto& [path, target] : n.links) {
    if (!wanted(path) || read_through.count(path)) continue;
    if (n.files.count(path) && kernel_tree(path)) continue;
    ensure_parents(path);
    tar.link(path.substr(1), target);
    w.links++;
  }
  for (const auto& [id, m] : members) {
    if (!wanted(m.real_path) || is_link(m.real_path)) continue;
    ensure_parents(m.real_path);
    const u64 mtime = static_cast<u64>(std::max<i64>(m.stat.mtime, 0));
    const u32 mode = m.stat.mode ? m.stat.mode : 0644;
    if (m.whole()) {
      tar.file(m.real_path.substr(1), *m.read_whole, mode, mtime);
    } else {
      std::vector<TarWriter::Chunk> chunks = merged_chunks(m.ranges, m.stat.size);
      for (const TarWriter::Chunk& c : chunks) w.sparse_bytes += c.data.size();
      tar.sparse(m.real_path.substr(1), m.stat.size, chunks, mode, mtime);
      w.sparse_files++;
    }
    w.files++;
    for (const std::string& name : m.names) {
      if (name == m.real_path || is_link(name) || !wanted(name)) continue;
      ensure_parents(name);
      tar.hard_link(name.substr(1), m.real_path.substr(1));
      w.links++;
    }
  }
  for (const auto& [path, data] : n.files) {
    if (!wanted(path) || read_through.count(path) || in_members.count(path) ||
        (is_link(path) && !kernel_tree(path)))
      continue;  // a file read through a link: its contents
    ensure_parents(path);
    tar.file(path.substr(1), *data);
    w.files++;
  }
  // Paths only stat()ed in the kernel trees (the container markers,
  // /dev/shm): present, empty.
  for (const auto& [path, st] : n.stats) {
    if (!wanted(path) || n.files.count(path) || n.links.count(path) || n.directories.count(path) ||
        read_through.count(path) || in_members.count(path) || st.kind == host::FileKind::Directory)
      continue;
    if (path == "/dev/shm") {
      ensure_parents("/dev/shm/");
      continue;
    }
    ensure_parents(path);
    tar.file(path.substr(1), "");
    w.files++;
  }
  // A listed directory's other entries, outside the kernel trees: present
  // and empty, so a listing under --root names what the live one did (the
  // checks stat or read every entry whose kind or contents they use).
  std::set<std::string> written(in_members);
  for (const auto& [path, data] : n.files) written.insert(path);
  for (const auto& [path, target] : n.links) written.insert(path);
  for (const auto& [path, st] : n.stats) written.insert(path);
  for (const auto& [path, entries] : n.directories) written.insert(path);
  for (const std::string& d : read_through) written.insert(d);
  for (const auto& [path, entries] : n.directories) {
    if (!wanted(path) || kernel_tree(path + "/") || path == "/proc" || path == "/sys") continue;
    for (const std::string& e : entries) {
      const std::string child = path == "/" ? "/" + e : path + "/" + e;
      if (!written.insert(child).second || !wanted(child)) continue;
      ensure_parents(child);
      tar.file(child.substr(1), "");
      w.placeholders++;
    }
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
  std::map<std::string, std::string> all_facts = log.facts;
  for (const auto& [name, value] : facts) all_facts[name] = value + "\n";
  for (const auto& [name, value] : all_facts) {
    ensure_parents("/.mldoctor/" + name);
    tar.file(".mldoctor/" + name, value);
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
