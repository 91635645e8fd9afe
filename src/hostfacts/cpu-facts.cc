// cpu-facts.cc — how many CPUs a process of this host may really use.
//
// Runtimes size their thread pools from different numbers: os.cpu_count()
// and OpenBLAS's default from the online CPUs, numba and libgomp from the
// affinity mask (sched_getaffinity), and none of them from the cgroup CPU
// quota that Docker, Kubernetes and Slurm use to limit a job. The usable
// count is the affinity count capped by the tightest CFS quota on the way from
// the process's cgroup to the hierarchy root:
//   cgroup v2: "0::/path" in /proc/self/cgroup -> <cgroup2 mount>/path/cpu.max
//              ("max 100000" or "<quota> <period>"), every ancestor too;
//   cgroup v1: the "cpu" controller's line -> <cpu mount>/path/cpu.cfs_quota_us
//              and cpu.cfs_period_us (quota -1 = none), every ancestor too.
// The mount point and the mount's root inside the hierarchy come from
// /proc/self/mountinfo, so a container whose cgroup namespace hides the host
// path still maps to the right directory (the JDK's and Go's rule). Fixture
// trees without a mountinfo use the conventional /sys/fs/cgroup layout.
#include <sys/sysmacros.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

using namespace detail;

std::optional<std::vector<u32>> parse_cpu_list(std::string_view text) {
  std::vector<u32> cpus;
  text = trim(text);
  if (text.empty()) return cpus;
  for (std::string_view item : split(text, ',')) {
    item = trim(item);
    if (item.empty()) return std::nullopt;
    u64 stride = 1;
    size_t colon = item.find(':');
    if (colon != std::string_view::npos) {
      std::optional<u64> s = parse_u64(item.substr(colon + 1));
      if (!s || *s == 0) return std::nullopt;
      stride = *s;
      item = item.substr(0, colon);
    }
    size_t dash = item.find('-');
    std::optional<u64> first =
        parse_u64(dash == std::string_view::npos ? item : item.substr(0, dash));
    std::optional<u64> last =
        dash == std::string_view::npos ? first : parse_u64(item.substr(dash + 1));
    // 1 << 20 CPUs is far beyond any kernel's NR_CPUS; it bounds the work.
    if (!first || !last || *first > *last || *last >= (u64{1} << 20)) return std::nullopt;
    for (u64 c = *first; c <= *last; c += stride) {
      cpus.push_back(static_cast<u32>(c));
      if (*last - c < stride) break;  // the next step passes `last` (or would wrap around)
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string format_cpu_list(const std::vector<u32>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) j++;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

u32 CpuQuota::ceil_cpus() const {
  if (period_us <= 0 || quota_us <= 0) return 1;
  i64 n = (quota_us + period_us - 1) / period_us;
  return static_cast<u32>(std::max<i64>(1, n));
}

namespace detail {

namespace {
// mountinfo escapes blanks and backslashes in paths as \040, \011, \012, \134.
std::string unescape_mount_path(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); i++) {
    if (s[i] == '\\' && s.size() - i >= 4 && s[i + 1] >= '0' && s[i + 1] <= '7' &&
        s[i + 2] >= '0' && s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}
}  // namespace

std::vector<MountEntry> read_mounts(const host::Host& host, std::string* source) {
  std::vector<MountEntry> mounts;
  if (std::optional<std::string> text = host.read_file("/proc/self/mountinfo")) {
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue"
    for (std::string_view line : lines_of(*text)) {
      std::vector<std::string_view> w = split_words(line);
      auto dash = std::find(w.begin(), w.end(), std::string_view("-"));
      if (w.size() < 7 || dash == w.end() || w.end() - dash < 3 || dash - w.begin() < 6) continue;
      MountEntry m;
      m.root = unescape_mount_path(w[3]);
      m.mount_point = unescape_mount_path(w[4]);
      m.fstype = std::string(dash[1]);
      m.super_options = std::string(dash[3]);  // after fstype and source
      if (size_t colon = w[2].find(':'); colon != std::string_view::npos) {
        std::optional<u64> major = parse_u64(w[2].substr(0, colon));
        std::optional<u64> minor = parse_u64(w[2].substr(colon + 1));
        if (major && minor && *major < (1u << 12) && *minor < (1u << 20))
          m.device = makedev(static_cast<unsigned>(*major), static_cast<unsigned>(*minor));
      }
      mounts.push_back(std::move(m));
    }
    if (source) *source = "/proc/self/mountinfo";
    if (!mounts.empty()) return mounts;
  }
  for (const char* file : {"/proc/mounts", "/etc/mtab"}) {
    std::optional<std::string> text = host.read_file(file);
    if (!text) continue;
    // "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=65536k 0 0"
    for (std::string_view line : lines_of(*text)) {
      std::vector<std::string_view> w = split_words(line);
      if (w.size() < 4) continue;
      mounts.push_back(
          {"/", unescape_mount_path(w[1]), std::string(w[2]), std::string(w[3]), std::nullopt});
    }
    if (source) *source = file;
    return mounts;
  }
  if (source) source->clear();
  return mounts;
}

}  // namespace detail

namespace {

// One line of /proc/self/cgroup: "hierarchy-ID:controller-list:cgroup-path".
struct CgroupLine {
  std::string hierarchy;
  std::vector<std::string> controllers;
  std::string path;
};

std::vector<CgroupLine> read_cgroup_lines(const host::Host& host) {
  std::vector<CgroupLine> out;
  std::optional<std::string> text = host.read_file("/proc/self/cgroup");
  if (!text) return out;
  for (std::string_view line : lines_of(*text)) {
    size_t c1 = line.find(':');
    size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    CgroupLine l;
    l.hierarchy = std::string(line.substr(0, c1));
    for (std::string_view c : split(line.substr(c1 + 1, c2 - c1 - 1), ','))
      if (!c.empty()) l.controllers.emplace_back(c);
    l.path = std::string(trim(line.substr(c2 + 1)));
    out.push_back(std::move(l));
  }
  return out;
}

bool has_option(std::string_view options, std::string_view name) {
  for (std::string_view o : split(options, ','))
    if (o == name) return true;
  return false;
}

// The directory of `cgroup_path` under a hierarchy mounted at `mount_point`
// whose own root inside the hierarchy is `mount_root`.
std::string cgroup_directory(const std::string& mount_point, const std::string& mount_root,
                             const std::string& cgroup_path) {
  if (mount_root == "/" || mount_root.empty())
    return host::normalize_path(mount_point + "/" + cgroup_path);
  if (cgroup_path == mount_root) return mount_point;
  if (cgroup_path.starts_with(mount_root + "/"))
    return host::normalize_path(mount_point + "/" + cgroup_path.substr(mount_root.size()));
  // A cgroup namespace: the process sees its own cgroup as the mount's root.
  return mount_point;
}

// Reads one level's quota; nullopt when the files are absent; sets
// `readable` when they exist (also for "no quota").
std::optional<CpuQuota> read_quota_v2(const host::Host& host, const std::string& dir,
                                      bool& readable) {
  std::string file = host::join_path(dir, "cpu.max");
  std::optional<std::string> text = host.read_file(file, 4096);
  if (!text) return std::nullopt;
  std::vector<std::string_view> w = split_words(*text);
  if (w.empty()) return std::nullopt;
  readable = true;
  if (w[0] == "max") return std::nullopt;
  std::optional<i64> quota = parse_i64(w[0]);
  std::optional<i64> period = w.size() >= 2 ? parse_i64(w[1]) : std::optional<i64>(100000);
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return CpuQuota{2, *quota, *period, file};
}

std::optional<CpuQuota> read_quota_v1(const host::Host& host, const std::string& dir,
                                      bool& readable) {
  std::string quota_file = host::join_path(dir, "cpu.cfs_quota_us");
  std::optional<std::string> q = host.read_file(quota_file, 4096);
  std::optional<std::string> p = host.read_file(host::join_path(dir, "cpu.cfs_period_us"), 4096);
  if (!q) return std::nullopt;
  std::optional<i64> quota = parse_i64(trim(*q));
  if (!quota) return std::nullopt;
  readable = true;
  std::optional<i64> period = p ? parse_i64(trim(*p)) : std::nullopt;
  if (*quota <= 0 || !period || *period <= 0) return std::nullopt;  // -1: no limit
  return CpuQuota{1, *quota, *period, quota_file};
}

// Walks from `leaf` up to `top` (inclusive) keeping the tightest quota.
void walk_quotas(const host::Host& host, int version, const std::string& leaf,
                 const std::string& top, CpuFacts& facts) {
  std::string dir = leaf;
  for (int depth = 0; depth < 64; depth++) {
    std::optional<CpuQuota> q = version == 2 ? read_quota_v2(host, dir, facts.quota_readable)
                                             : read_quota_v1(host, dir, facts.quota_readable);
    if (q && (!facts.quota || q->cpus() < facts.quota->cpus())) facts.quota = q;
    if (dir == top || dir == "/" || dir.size() <= top.size()) break;
    dir = host::dir_name(dir);
  }
}

void collect_cgroup_quota(const host::Host& host, CpuFacts& facts) {
  std::vector<CgroupLine> lines = read_cgroup_lines(host);
  if (lines.empty()) return;
  std::vector<MountEntry> mounts = read_mounts(host, nullptr);

  // cgroup v1 with a cpu controller takes precedence: in the "hybrid" layout
  // the cpu controller lives there and the v2 hierarchy has none.
  for (const CgroupLine& l : lines) {
    if (std::find(l.controllers.begin(), l.controllers.end(), "cpu") == l.controllers.end())
      continue;
    std::string mount_point, mount_root = "/";
    for (const MountEntry& m : mounts)
      if (m.fstype == "cgroup" && has_option(m.super_options, "cpu")) {
        mount_point = m.mount_point;
        mount_root = m.root;
      }
    if (mount_point.empty()) {
      // No mount table (a fixture): the conventional directories.
      std::string joined;
      for (const std::string& c : l.controllers) joined += (joined.empty() ? "" : ",") + c;
      for (std::string candidate :
           {"/sys/fs/cgroup/" + joined, std::string("/sys/fs/cgroup/cpu,cpuacct"),
            std::string("/sys/fs/cgroup/cpu")})
        if (host.stat(candidate).kind == host::FileKind::Directory) {
          mount_point = candidate;
          break;
        }
    }
    if (mount_point.empty()) continue;
    facts.cgroup_version = 1;
    facts.cgroup_path = l.path;
    facts.cgroup_dir = cgroup_directory(mount_point, mount_root, l.path);
    walk_quotas(host, 1, facts.cgroup_dir, mount_point, facts);
    return;
  }

  for (const CgroupLine& l : lines) {
    if (l.hierarchy != "0" || !l.controllers.empty()) continue;
    std::string mount_point, mount_root = "/";
    for (const MountEntry& m : mounts)
      if (m.fstype == "cgroup2") {
        mount_point = m.mount_point;
        mount_root = m.root;
      }
    if (mount_point.empty()) mount_point = "/sys/fs/cgroup";
    facts.cgroup_version = 2;
    facts.cgroup_path = l.path;
    facts.cgroup_dir = cgroup_directory(mount_point, mount_root, l.path);
    walk_quotas(host, 2, facts.cgroup_dir, mount_point, facts);
    return;
  }
}

std::optional<std::vector<u32>> read_cpu_list_file(const host::Host& host, std::string_view path) {
  std::optional<std::string> text = host.read_file(path, 1 << 16);
  if (!text) return std::nullopt;
  return parse_cpu_list(*text);
}

}  // namespace

CpuFacts collect_cpu_facts(const host::Host& host) {
  CpuFacts f;
  f.online = read_cpu_list_file(host, "/sys/devices/system/cpu/online");
  f.possible = read_cpu_list_file(host, "/sys/devices/system/cpu/possible");
  if (std::optional<std::string> status = host.read_file("/proc/self/status")) {
    if (std::optional<std::string_view> list = field_of(*status, "Cpus_allowed_list")) {
      f.affinity = parse_cpu_list(*list);
      if (f.affinity) f.affinity_source = "/proc/self/status";
      // Cpus_allowed_list is the task's mask as set; sched_getaffinity(2)
      // (what numba, libgomp and os.sched_getaffinity count) returns it
      // intersected with the active CPUs (kernel/sched/core.c). Offline CPUs
      // (nosmt, maxcpus=, hot-unplug) stay in the mask but are not counted.
      if (f.affinity && f.online) {
        std::vector<u32> active;
        std::set_intersection(f.affinity->begin(), f.affinity->end(), f.online->begin(),
                              f.online->end(), std::back_inserter(active));
        if (active.size() != f.affinity->size()) {
          f.affinity = std::move(active);
          f.affinity_source = "/proc/self/status ∩ online CPUs";
        }
      }
      if (f.affinity && f.affinity->empty()) f.affinity.reset();
    }
  }
  collect_cgroup_quota(host, f);

  std::optional<u32> base;
  if (f.affinity) {
    base = static_cast<u32>(f.affinity->size());
    f.usable_basis = "affinity";
  } else if (f.online && !f.online->empty()) {
    base = static_cast<u32>(f.online->size());
    f.usable_basis = "online CPUs";
  }
  if (f.quota) {
    u32 q = f.quota->ceil_cpus();
    if (!base || q < *base) {
      base = q;
      f.usable_basis = "cgroup v" + std::to_string(f.quota->cgroup_version) + " quota";
    }
  }
  f.usable = base;
  return f;
}

std::vector<NumaNode> collect_numa_nodes(const host::Host& host) {
  std::vector<NumaNode> nodes;
  std::optional<std::vector<std::string>> names = host.list_dir("/sys/devices/system/node");
  if (!names) return nodes;
  for (const std::string& name : *names) {
    if (!name.starts_with("node")) continue;
    std::optional<u64> id = parse_u64(std::string_view(name).substr(4));
    if (!id || *id > 0xffffffffu) continue;
    NumaNode n;
    n.id = static_cast<u32>(*id);
    std::string dir = "/sys/devices/system/node/" + name;
    n.cpus = read_cpu_list_file(host, dir + "/cpulist");
    if (std::optional<std::string> meminfo = host.read_file(dir + "/meminfo", 1 << 16)) {
      // "Node 0 MemTotal:       32768000 kB"
      std::string prefix = "Node " + std::to_string(n.id) + " ";
      for (std::string_view line : lines_of(*meminfo)) {
        if (!line.starts_with(prefix)) continue;
        std::string_view rest = line.substr(prefix.size());
        if (rest.starts_with("MemTotal:")) n.mem_total_bytes = parse_kb_value(rest.substr(9));
        if (rest.starts_with("MemFree:")) n.mem_free_bytes = parse_kb_value(rest.substr(8));
      }
    }
    nodes.push_back(std::move(n));
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return nodes;
}

}  // namespace mld::hostfacts
