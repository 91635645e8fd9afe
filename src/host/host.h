// host.h — the only door to the machine. Every fact mldoctor reads about a
// host (files under /etc, /proc, /sys, the library directories, environment
// variables, CPU features) goes through a Host, which resolves absolute paths
// under a configurable root. `--root DIR` therefore analyses a mounted image
// or a fixture tree exactly as it would analyse the live machine.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"

namespace mld::host {

// Identity of a file as the loader sees it (glibc compares st_dev/st_ino to
// decide that two paths name an object that is already loaded).
struct FileId {
  u64 dev = 0;
  u64 ino = 0;
  bool operator==(const FileId&) const = default;
  bool operator<(const FileId& o) const { return dev != o.dev ? dev < o.dev : ino < o.ino; }
};

enum class FileKind { Missing, Regular, Directory, Other, Error };

struct FileStat {
  FileKind kind = FileKind::Missing;
  FileId id;
  u64 size = 0;
  int error = 0;  // errno when kind is Error or Missing
  i64 mtime = 0;  // seconds since the epoch
  u32 uid = 0;
  u32 gid = 0;
  u32 mode = 0;          // st_mode (type and permission bits, setuid/setgid)
  bool symlink = false;  // lstat() only: the entry itself is a symbolic link
};

// A symbolic link met while resolving a path: where it is (in the path as
// resolved so far), what it says, and who owns it.
struct SymlinkStep {
  std::string path;
  std::string target;
  u32 uid = 0;
};

// Where a path leads, resolved one component at a time as the kernel does
// (a link relative to its directory, an absolute one from the root, at most
// 40 links): the real path, or why there is none, with every link followed.
struct PathResolution {
  enum class End { Found, Missing, Loop, Error };
  End end = End::Found;
  // Found: the real path. Missing: the first component (links before it
  // resolved) that does not exist. Loop, Error: where it stopped.
  std::string path;
  std::vector<SymlinkStep> links;
};

// x86-64 micro-architecture levels as glibc's glibc-hwcaps names them.
struct CpuFeatures {
  int x86_64_level = 1;  // 1..4; 0 when not x86-64
  // glibc's AT_PLATFORM for $PLATFORM and legacy subdirectories: "haswell" or
  // "xeon_phi" on capable Intel CPUs, else "x86_64" (x86-64 only).
  std::string platform = "x86_64";
  bool avx512_1 = false;  // glibc's legacy "avx512_1" hwcap (Intel only)
};

// One answer of the CPUID instruction.
struct CpuidRegs {
  u32 eax = 0, ebx = 0, ecx = 0, edx = 0;
};

// The CPUID answers of one logical CPU, keyed by (leaf, sub-leaf), as Todd
// Allen's `cpuid -r` prints them (cpuid.cc). What models of CPUID-reading
// software (PyTorch's cpuinfo) run on, live or replayed from a snapshot.
struct CpuidDump {
  u32 cpu = 0;  // the logical CPU that answered
  std::map<std::pair<u32, u32>, CpuidRegs> leaves;
  // The registers of a leaf; zeros when it was not recorded (callers check
  // the maximum leaf first, as software on the CPU does).
  CpuidRegs query(u32 leaf, u32 subleaf = 0) const;
  bool has(u32 leaf, u32 subleaf = 0) const;
  std::string vendor() const;  // leaf 0: "GenuineIntel", "AuthenticAMD", ...
};

// The file of an analysed tree that holds the CPUID dump: written by
// `mldoctor snapshot`, present in CPU fixtures.
inline constexpr std::string_view kCpuidFile = "/.mldoctor/cpuid";
// The file of an analysed tree that holds the C library's release ("2.36"):
// written by `mldoctor snapshot`, whose tree has no libc.so.6 to read it from.
inline constexpr std::string_view kGlibcReleaseFile = "/.mldoctor/glibc";

// Parses `cpuid -r` text: "CPU n:" sections of "0xLEAF 0xSUB: eax=0x..
// ebx=0x.. ecx=0x.. edx=0x.." lines (other lines are skipped). Keeps the
// section of `want_cpu`, else the first one. nullopt with *error set when a
// leaf line is malformed or no leaf is found.
std::optional<CpuidDump> parse_cpuid_dump(std::string_view text, std::string* error,
                                          std::optional<u32> want_cpu = std::nullopt);
// Every "CPU n:" section of such text, by CPU (text without sections is
// CPU 0's). nullopt with *error set as parse_cpuid_dump's.
std::optional<std::map<u32, CpuidDump>> parse_cpuid_dumps(std::string_view text,
                                                          std::string* error);
std::string format_cpuid_dump(const CpuidDump& dump);

// What a Host was asked to read, for `mldoctor snapshot`: every file's
// contents as returned, every directory listing, every symlink target, the
// paths stat()ed with what stat said, the byte ranges read from files
// opened by ranges (the ELF objects the loader model parsed: a few KiB of
// each, never the whole file), and facts learnt by running something (the
// Python probe's answer). Shared by copies of the Host; thread-safe.
struct AccessLog {
  std::mutex mutex;
  std::map<std::string, std::string> files;                     // path -> contents read
  std::map<std::string, std::vector<std::string>> directories;  // path -> entries
  std::map<std::string, std::string> links;                     // path -> target
  std::map<std::string, FileStat> stats;                        // paths stat()ed
  // A file read by ranges: its identity and size, the path every symlink
  // of it resolves to, and the bytes read, by offset (overlaps allowed).
  struct Pieces {
    FileStat stat;
    std::string real_path;
    std::map<u64, std::string> ranges;
  };
  std::map<std::string, Pieces> pieces;  // path as opened -> what was read
  // Real paths of stat()ed regular files (identity across their names).
  std::map<std::string, std::string> real_paths;
  std::map<std::string, std::string> facts;  // name under /.mldoctor/ -> text
};

// A file of the analysed tree that was not opened because it is no regular
// file (a FIFO, a socket, a device): what it is, for the report.
struct RefusedFile {
  std::string path;  // inside the root
  std::string why;   // "not a regular file (a FIFO)"
};

class Host {
 public:
  // The live machine: root "/", the process environment.
  static Host live();
  // A tree mounted at `root` with an explicit environment.
  Host(std::string root, std::map<std::string, std::string> env);

  const std::string& root() const { return root_; }
  bool is_live_root() const { return root_ == "/"; }

  // Environment of the analysed process (a snapshot; tests may change it).
  std::optional<std::string> getenv(std::string_view name) const;
  void setenv(std::string name, std::string value) { env_[std::move(name)] = std::move(value); }
  void unsetenv(const std::string& name) { env_.erase(name); }
  const std::map<std::string, std::string>& environment() const { return env_; }

  // Path on this machine for an absolute path inside the analysed root.
  // Symlinks are resolved by the kernel inside the root (RESOLVE_IN_ROOT)
  // when opening through the methods below.
  std::string native_path(std::string_view path) const;

  // stat(2) following symlinks, under the root.
  FileStat stat(std::string_view path) const;
  // The entry itself, not what a final symlink points to (kind Other and
  // symlink true for a link).
  FileStat lstat(std::string_view path) const;
  // The one writing primitive, for `--fix`: removes the regular file or
  // symbolic link at `path` (never a directory, never the target of a link)
  // after resolving every directory on the way without following any
  // symlink: a link anywhere in the path fails with ELOOP instead of leading
  // out of the tree. With `expected`, only the file of that identity: one
  // put in its place since the caller checked it fails with ESTALE. False
  // with *error set when it did not remove it.
  bool remove_file(std::string_view path, std::string* error,
                   const FileId* expected = nullptr) const;
  // Every file below is opened only when it is a regular file, without
  // waiting and without opening anything else (base's open_regular()): a
  // FIFO, a socket or a device named like a file of the tree is refused.
  //
  // Maps a regular file under the root. Throws IoError.
  MappedFile map(std::string_view path) const;
  // Opens a regular file under the root to be read by ranges (pread), for
  // readers that need a few small pieces of it. Throws IoError as map().
  std::shared_ptr<SparseFile> open_sparse(std::string_view path) const;
  // Reads at most `max_bytes` of a regular file; nullopt when it cannot be
  // read, with *why set when given: "not a regular file (a FIFO)", or the
  // errno text ("No such file or directory").
  std::optional<std::string> read_file(std::string_view path, u64 max_bytes = 1 << 20,
                                       std::string* why = nullptr) const;
  // The files read_file, map and open_sparse refused so far because they
  // are FIFOs, sockets or devices (a directory is no news), by path; shared
  // by copies of this Host, so a command can report every one.
  std::vector<RefusedFile> refused_files() const;
  // Names in a directory (no "." / ".."), sorted; nullopt when unreadable.
  std::optional<std::vector<std::string>> list_dir(std::string_view path) const;
  // Target of a symlink under the root, nullopt when not a symlink.
  std::optional<std::string> read_link(std::string_view path) const;

  // `name` on the analysed environment's $PATH, as execvp searches it
  // (relative elements, which name the caller's directory, are skipped);
  // the path as found, not resolved. nullopt when PATH is unset or lacks it.
  std::optional<std::string> find_on_path(std::string_view name) const;
  // The path with every symlink resolved inside the root (realpath(3));
  // nullopt when a component is missing. /proc/<pid>/fd links name files
  // by this path.
  std::optional<std::string> real_path(std::string_view path) const;
  // The path resolved inside the root with every link it passes through
  // (a relative path on the live machine is taken from the working
  // directory). Bounded: a loop ends it, never a hang.
  PathResolution resolve(std::string_view path) const;

  // statfs(2) of the filesystem holding `path` under the root.
  struct Space {
    u64 size_bytes = 0;
    u64 free_bytes = 0;  // available to unprivileged users
    u64 type = 0;        // f_type: TMPFS_MAGIC, EXT4_SUPER_MAGIC... (statfs(2))
  };
  std::optional<Space> filesystem_space(std::string_view path) const;
  // getrlimit(2) of this process: the live machine only (nullopt under a
  // root, whose /proc/self/limits says it). ~0 means unlimited.
  struct Limit {
    u64 soft = 0;
    u64 hard = 0;
  };
  std::optional<Limit> resource_limit(int resource) const;

  // From now on, record what this Host (and its copies) reads into `log`.
  void record_to(std::shared_ptr<AccessLog> log) { log_ = std::move(log); }
  bool recording() const { return log_ != nullptr; }
  // A fact learnt by running something on the live machine (the Python
  // probe's answer), kept under /.mldoctor/<name> of a snapshot; nothing
  // when not recording. `name` is a relative path ("python-probe/usr/bin/python3").
  void record_fact(std::string_view name, std::string_view text) const;
  // Such a fact as a tree records it; nullopt on the live machine (which
  // learns it by running the thing) and in trees without it.
  std::optional<std::string> recorded_fact(std::string_view name) const;

  // CPU features from /proc/cpuinfo under the root (x86 flags).
  CpuFeatures cpu_features() const;
  // The flags of /proc/cpuinfo's first "flags" line under the root ("avx2",
  // "sse4a"...); empty when there is none.
  std::set<std::string> cpu_flags() const;

  // One record of the kernel log: its timestamp (microseconds since boot)
  // and its message's first line.
  struct KernelRecord {
    u64 usec = 0;
    std::string message;
  };
  // The kernel log's records from `since_usec` on, at most `max` of them:
  // the live machine's /dev/kmsg (needs CAP_SYSLOG or
  // kernel.dmesg_restrict=0), under a root a dev/kmsg file holding records
  // in /dev/kmsg's format, one per line. nullopt with *error set when it
  // cannot be read.
  std::optional<std::vector<KernelRecord>> kernel_log(u64 since_usec, size_t max,
                                                      std::string* error) const;
  // The CPUID answers of the analysed machine: on the live x86 machine the
  // CPU this thread runs on, under a root the dump at kCpuidFile. nullopt
  // with *why set when there is none (not x86, a tree without a dump, a
  // malformed dump).
  std::optional<CpuidDump> cpuid(std::string* why) const;
  // The topology leaves of each CPU of `cpus` (0, 1, 4, 0xB, 0x1F and
  // 0x80000000-0x80000008: what OpenMP runtimes read, one CPU at a time,
  // to number cores): live, this thread is moved to each CPU in turn and
  // back (CPUs it may not run on are left out); under a root, the sections
  // of the dump at kCpuidFile that name those CPUs. Empty with *why set
  // when there are none (not x86, no dump).
  std::map<u32, CpuidDump> cpuid_per_cpu(const std::vector<u32>& cpus, std::string* why) const;
  // The C library's release a tree records at kGlibcReleaseFile (a
  // snapshot); nullopt on the live machine, which has its libc.so.6 to read,
  // and in trees without one.
  std::optional<std::string> recorded_glibc_release() const;

 private:
  FileStat stat_unlogged(std::string_view path) const;
  std::optional<std::string> real_path_unlogged(std::string_view path) const;
  void record_pieces(std::string_view path, SparseFile& file) const;
  OpenedFile open_regular_file(std::string_view path) const;
  std::optional<std::string> read_file_unlogged(std::string_view path, u64 max_bytes,
                                                std::string* why) const;
  std::optional<std::vector<std::string>> list_dir_unlogged(std::string_view path) const;
  std::optional<std::string> read_link_unlogged(std::string_view path) const;

  std::string root_;
  std::map<std::string, std::string> env_;
  std::shared_ptr<AccessLog> log_;
  struct Refusals {
    std::mutex mutex;
    std::map<std::string, std::string> files;  // path -> why
  };
  std::shared_ptr<Refusals> refusals_ = std::make_shared<Refusals>();
};

// Where mldoctor's companion objects (the shims of `run`, the MPI plugin of
// `fleet`) may be, best first, read on `host` (the live machine):
// $MLDOCTOR_SHIM_DIR alone when set, else the binary's own directory (a build
// tree), then <prefix>/lib/mldoctor and <prefix>/lib64/mldoctor relative to
// it (an install, relocatable). Empty when neither is known.
std::vector<std::string> companion_dirs(const Host& host);

// Joins a directory and a name with exactly one '/'.
std::string join_path(std::string_view dir, std::string_view name);
// Directory part of a path as glibc computes l_origin: everything before the
// last '/', "/" for top-level files.
std::string dir_name(std::string_view path);
// Lexically normalises "a//b/./c/../d" to "a/b/d" (no symlink resolution).
std::string normalize_path(std::string_view path);

}  // namespace mld::host
