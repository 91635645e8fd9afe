// death.cc — what the machine recorded when the command `run` started died
// of a signal, gathered as facts for the RUN003-RUN006 detectors. A process
// killed with SIGKILL says nothing; the kernel does: the memory cgroup counts
// its OOM kills (cgroup v2 `memory.events` "oom_kill", v1
// `memory.oom_control` "oom_kill", Linux ≥ 4.13), and the kernel log names
// the process the OOM killer chose ("Killed process 8250 (python3)"), the
// object an invalid opcode trapped in ("traps: python3[8455] trap invalid
// opcode ... in libill.so[...]") and where a segfault hit ("segfault at 0 ...
// in libfoo.so"). /dev/shm full explains a SIGBUS; the CPU's instruction-set
// extensions a SIGILL.
//
// Everything is read through the host layer, read-only and best effort: an
// unreadable file leaves its fact unknown, with the reason (the kernel log
// needs CAP_SYSLOG or kernel.dmesg_restrict=0).
#include <time.h>

#include <algorithm>
#include <set>

#include "run/run.h"

namespace mld::run {
namespace {

std::optional<u64> parse_u64(std::string_view s) {
  s = trim(s);
  if (s.empty() || s.size() > 19) return std::nullopt;
  u64 v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<u64>(c - '0');
  }
  return v;
}

// "key value" lines (memory.events, memory.oom_control).
std::optional<u64> keyed_value(std::string_view text, std::string_view key) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.starts_with(key) && line.size() > key.size() && line[key.size()] == ' ')
      return parse_u64(line.substr(key.size() + 1));
  }
  return std::nullopt;
}

// The memory cgroup directory of this process (the job inherits it):
// cgroup v1's "memory" hierarchy when mounted, else the v2 unified one.
std::string memory_cgroup_dir(const host::Host& host, std::string* path) {
  std::optional<std::string> text = host.read_file("/proc/self/cgroup");
  if (!text) return {};
  std::string v2;
  size_t at = 0;
  while (at < text->size()) {
    size_t end = text->find('\n', at);
    if (end == std::string::npos) end = text->size();
    std::string_view line(text->data() + at, end - at);
    at = end + 1;
    size_t c1 = line.find(':'), c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::string_view where = line.substr(c2 + 1);
    if (controllers == "memory" || controllers.find("memory,") != std::string_view::npos ||
        controllers.ends_with(",memory")) {
      for (std::string_view mount : {"/sys/fs/cgroup/memory", "/sys/fs/cgroup/memory,cpuset"}) {
        std::string dir = std::string(mount) + std::string(where == "/" ? "" : where);
        if (host.stat(dir + "/memory.oom_control").kind == host::FileKind::Regular) {
          *path = std::string(where);
          return dir;
        }
      }
    }
    if (controllers.empty() && line.starts_with("0::")) v2 = std::string(where);
  }
  if (v2.empty()) return {};
  for (std::string_view mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    std::string dir = std::string(mount) + (v2 == "/" ? "" : v2);
    if (host.stat(dir + "/memory.events").kind == host::FileKind::Regular) {
      *path = v2;
      return dir;
    }
  }
  return {};
}

struct CgroupMemory {
  std::optional<u64> oom_kills, limit, peak;
};

CgroupMemory read_cgroup_memory(const host::Host& host, const std::string& dir) {
  CgroupMemory m;
  if (dir.empty()) return m;
  if (std::optional<std::string> events = host.read_file(dir + "/memory.events")) {  // v2
    m.oom_kills = keyed_value(*events, "oom_kill");
    if (std::optional<std::string> max = host.read_file(dir + "/memory.max"))
      m.limit = parse_u64(*max);
    if (std::optional<std::string> peak = host.read_file(dir + "/memory.peak"))
      m.peak = parse_u64(*peak);
  } else if (std::optional<std::string> oc = host.read_file(dir + "/memory.oom_control")) {  // v1
    m.oom_kills = keyed_value(*oc, "oom_kill");
    if (std::optional<std::string> lim = host.read_file(dir + "/memory.limit_in_bytes")) {
      m.limit = parse_u64(*lim);
      // v1 writes "no limit" as the largest page-aligned long.
      if (m.limit && *m.limit >= (u64{1} << 62)) m.limit.reset();
    }
    if (std::optional<std::string> peak = host.read_file(dir + "/memory.max_usage_in_bytes"))
      m.peak = parse_u64(*peak);
  }
  return m;
}

u64 monotonic_usec() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<u64>(ts.tv_sec) * 1000000u + static_cast<u64>(ts.tv_nsec) / 1000u;
}

// Whether a kernel message is about one of `pids`: "Killed process 8250 (",
// "pid=8250,", "python3[8455]", "[8455]: segfault".
bool mentions_pid(std::string_view msg, const std::set<long>& pids) {
  for (size_t i = 0; i < msg.size(); i++) {
    if (msg[i] < '0' || msg[i] > '9' || (i > 0 && msg[i - 1] >= '0' && msg[i - 1] <= '9')) continue;
    size_t j = i;
    long v = 0;
    while (j < msg.size() && msg[j] >= '0' && msg[j] <= '9' && j - i < 10)
      v = v * 10 + (msg[j++] - '0');
    if (!pids.count(v)) continue;
    const char before = i > 0 ? msg[i - 1] : ' ';
    const char after = j < msg.size() ? msg[j] : ' ';
    if ((before == '[' && after == ']') || (before == '=' && (after == ',' || after == ' ')) ||
        (msg.substr(0, i).ends_with("process ") && after == ' '))
      return true;
  }
  return false;
}

}  // namespace

DeathBaseline death_baseline(const host::Host& host) {
  DeathBaseline b;
  b.cgroup_dir = memory_cgroup_dir(host, &b.cgroup_path);
  b.oom_kills = read_cgroup_memory(host, b.cgroup_dir).oom_kills;
  b.started_usec = monotonic_usec();
  return b;
}

std::vector<std::string> kernel_log_since(const host::Host& host, u64 since_usec,
                                          const std::vector<long>& pids, std::string* note) {
  std::vector<std::string> out;
  std::string error;
  // Two seconds of slack: the kernel's clock and CLOCK_MONOTONIC drift apart.
  std::optional<std::vector<host::Host::KernelRecord>> records =
      host.kernel_log(since_usec > 2000000u ? since_usec - 2000000u : 0, 1000000, &error);
  if (!records) {
    *note = "the kernel log is not readable: " + error;
    return out;
  }
  const std::set<long> wanted(pids.begin(), pids.end());
  for (const host::Host::KernelRecord& r : *records)
    if (mentions_pid(r.message, wanted) && out.size() < 32) out.push_back(r.message);
  return out;
}

detect::DeathFacts gather_death(const host::Host& host, const DeathBaseline& baseline,
                                const ExitStatus& status, long pid, std::vector<long> job_pids,
                                std::optional<u64> peak_rss_bytes) {
  detect::DeathFacts d;
  d.pid = pid;
  d.signal = status.code;
  d.core_dumped = status.core_dumped;
  if (std::find(job_pids.begin(), job_pids.end(), pid) == job_pids.end()) job_pids.push_back(pid);
  std::sort(job_pids.begin(), job_pids.end());
  d.job_pids = job_pids;
  d.peak_rss_bytes = peak_rss_bytes;

  d.memory_cgroup = baseline.cgroup_path;
  if (baseline.cgroup_dir.empty()) {
    d.cgroup_note = "no memory cgroup of this process was found under /sys/fs/cgroup";
  } else {
    CgroupMemory now = read_cgroup_memory(host, baseline.cgroup_dir);
    d.oom_kills_before = baseline.oom_kills;
    d.oom_kills_after = now.oom_kills;
    d.memory_limit = now.limit;
    d.memory_peak = now.peak;
    if (!now.oom_kills)
      d.cgroup_note = baseline.cgroup_dir + " has no oom_kill count (kernel older than 4.13?)";
  }
  d.kernel_lines = kernel_log_since(host, baseline.started_usec, job_pids, &d.kernel_note);

  if (std::optional<host::Host::Space> shm = host.filesystem_space("/dev/shm")) {
    d.shm_size = shm->size_bytes;
    d.shm_free = shm->free_bytes;
  }
  // The CPU: its model, its x86-64 level (as ld.so computes it) and which
  // of the extensions wheels and extensions are built for it lacks.
  if (std::optional<std::string> info = host.read_file("/proc/cpuinfo", 4u << 20))
    d.cpu_model = line_field(*info, "model name", ':').value_or("");
  const std::set<std::string> flags = host.cpu_flags();
  if (!flags.empty()) {
    const int level = host.cpu_features().x86_64_level;
    d.cpu_level = level > 1 ? "x86-64-v" + std::to_string(level) : "x86-64 (baseline)";
    for (const char* f : {"sse4_2", "popcnt", "avx", "avx2", "fma", "bmi2", "f16c", "avx512f",
                          "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                          "avx_vnni", "amx_tile", "amx_bf16", "sse4a", "xop", "fma4"})
      if (!flags.count(f)) d.cpu_lacks.emplace_back(f);
  }
  return d;
}

}  // namespace mld::run
