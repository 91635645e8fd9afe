// host-facts.cc — memory, /dev/shm, resource limits, kernel, container and
// launcher facts of the analysed host.
//
// These are the host properties that decide whether a multi-process training
// job can start at all: DataLoader workers and NCCL's shared-memory transport
// put their buffers in /dev/shm (Docker's default is 64 MiB), RDMA transports
// pin memory up to RLIMIT_MEMLOCK, DataLoader's fd-passing needs open files,
// and the number of ranks the launcher puts on this node divides the CPUs.
// Live, a tmpfs mounted at /dev/shm is measured with statvfs(2) and the
// limits with getrlimit(2); under --root the same facts come from the tree's
// /proc/self/mountinfo (or /proc/mounts) "size=" option and
// /proc/self/limits, because statvfs of a fixture directory would describe
// the test machine's disk. That holds live too where /dev/shm is no mount of
// its own (a chroot's or an image's plain directory): statvfs would report
// the root disk as shared memory, so the report says which filesystem holds
// the directory instead, from the mount table or statfs(2)'s f_type.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

using namespace detail;

namespace {

MemoryFacts collect_memory(const host::Host& host) {
  MemoryFacts m;
  std::optional<std::string> text = host.read_file("/proc/meminfo", 1 << 16);
  if (!text) return m;
  if (std::optional<std::string_view> v = field_of(*text, "MemTotal"))
    m.total_bytes = parse_kb_value(*v);
  if (std::optional<std::string_view> v = field_of(*text, "MemAvailable"))
    m.available_bytes = parse_kb_value(*v);
  return m;
}

// tmpfs "size=" option: bytes with an optional k/m/g/t suffix, or a
// percentage of RAM. "0" means no limit.
std::optional<u64> parse_tmpfs_size(std::string_view v, const MemoryFacts& mem) {
  if (v.empty()) return std::nullopt;
  char suffix = v.back();
  if (suffix == '%') {
    std::optional<u64> pct = parse_u64(v.substr(0, v.size() - 1));
    if (!pct || !mem.total_bytes) return std::nullopt;
    return *mem.total_bytes / 100 * *pct;
  }
  u64 mul = 1;
  switch (suffix) {
    case 'k':
    case 'K': mul = u64{1} << 10; break;
    case 'm':
    case 'M': mul = u64{1} << 20; break;
    case 'g':
    case 'G': mul = u64{1} << 30; break;
    case 't':
    case 'T': mul = u64{1} << 40; break;
    default: break;
  }
  std::optional<u64> n = parse_u64(mul == 1 ? v : v.substr(0, v.size() - 1));
  if (!n) return std::nullopt;
  if (*n == 0) return kUnlimited;
  return checked_mul(*n, mul);
}

bool shm_from_statvfs(const host::Host& host, ShmFacts& shm) {
  std::optional<host::Host::Space> space = host.filesystem_space("/dev/shm");
  if (!space) return false;
  shm.present = true;
  shm.size_bytes = space->size_bytes;
  shm.free_bytes = space->free_bytes;
  shm.source = "statvfs";
  return true;
}

// The filesystems whose files live in memory (a directory of one is shared
// memory as good as a tmpfs mount).
bool in_memory(std::string_view fstype) {
  return fstype == "tmpfs" || fstype == "ramfs" || fstype == "devtmpfs";
}

// statfs(2)'s f_type in the words mountinfo uses (include/uapi/linux/magic.h).
std::string filesystem_name(u64 magic) {
  switch (magic) {
    case 0x01021994: return "tmpfs";
    case 0x858458f6: return "ramfs";
    case 0xEF53: return "ext4";  // ext2, ext3 and ext4 share it
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x794c7630: return "overlay";
    case 0x2FC12FC1: return "zfs";
    case 0x6969: return "nfs";
    case 0x65735546: return "fuse";
    case 0x73717368: return "squashfs";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof hex, "filesystem type 0x%llx",
                    static_cast<unsigned long long>(magic));
      return hex;
    }
  }
}

// /dev/shm as the mount table has it: a mount of its own (a tmpfs, as Docker
// and systemd make it, with its size= option), or a directory of the mount
// that holds it. Live, the holder is the mount with /dev/shm's device, and
// where the table lists none (a chroot sees only the mounts below its root)
// statfs(2) names the filesystem.
bool shm_from_mounts(const host::Host& host, const MemoryFacts& mem, ShmFacts& shm) {
  std::string source;
  std::vector<MountEntry> mounts = read_mounts(host, &source);
  const MountEntry* last = nullptr;  // the mount on top wins
  for (const MountEntry& m : mounts)
    if (m.mount_point == "/dev/shm") last = &m;
  if (!last) return false;
  shm.present = true;
  shm.source = source;
  shm.fstype = last->fstype;
  shm.mount_point = last->mount_point;
  if (last->fstype != "tmpfs") {
    shm.source += " (" + last->fstype + ", no size option)";
    shm.disk_backed = !in_memory(last->fstype);
    return true;
  }
  for (std::string_view o : split(last->super_options, ','))
    if (o.starts_with("size=")) {
      shm.size_bytes = parse_tmpfs_size(o.substr(5), mem);
      shm.source += " " + std::string(o);
      return true;
    }
  // The kernel prints size= only when it differs from tmpfs's default, half
  // of RAM (shmem_default_max_blocks); an unbounded tmpfs shows "size=0k".
  if (mem.total_bytes) shm.size_bytes = *mem.total_bytes / 2;
  shm.source += " (no size option: tmpfs default, half of RAM)";
  return true;
}

// /dev/shm is no mount of its own: what holds the directory. Live, the mount
// the table says holds the path when it has /dev/shm's device; a chroot's
// table lists no mount of its root (only those below it), so then another
// mount of the same device names the filesystem (not the mount point: a
// bind mount of /usr is no parent of /dev/shm), else statfs(2) does. In a
// tree, the mount its table says holds the path, else, when the tree's
// /dev/shm is a mount on this machine (a mounted image), statfs of it.
void shm_directory(const host::Host& host, ShmFacts& shm) {
  host::FileStat dir = host.stat("/dev/shm");
  if (dir.kind != host::FileKind::Directory) return;
  shm.present = true;
  std::string source;
  std::vector<MountEntry> mounts = read_mounts(host, &source);
  const MountEntry* holder = holding_mount(mounts, "/dev/shm");
  const MountEntry* same_device = nullptr;
  std::optional<host::Host::Space> space;
  if (host.is_live_root()) {
    if (holder && holder->device != dir.id.dev) holder = nullptr;
    for (const MountEntry& m : mounts)
      if (!same_device && m.device == dir.id.dev) same_device = &m;
    space = host.filesystem_space("/dev/shm");
  } else if (!holder) {
    host::FileStat parent = host.stat("/dev");
    if (parent.kind == host::FileKind::Directory && dir.id.dev != parent.id.dev)
      space = host.filesystem_space("/dev/shm");
  }
  const std::string unlisted =
      source.empty() ? std::string("no mount table") : source + " lists no mount that holds it";
  if (holder) {
    shm.fstype = holder->fstype;
    shm.mount_point = holder->mount_point;
    shm.source = source + " (" + holder->fstype + " at " + holder->mount_point + ")";
  } else if (same_device) {
    shm.fstype = same_device->fstype;
    shm.source = source + " (" + shm.fstype + ", the device of " + same_device->mount_point + "; " +
                 unlisted + ")";
  } else if (space) {
    shm.fstype = filesystem_name(space->type);
    shm.mount_point = host.is_live_root() ? "" : "/dev/shm";
    shm.source = "statfs (" + shm.fstype + "; " + unlisted + ")";
  } else {
    shm.source = "directory (not a mount; size unknown)";
    return;
  }
  shm.disk_backed = !in_memory(shm.fstype);
  // A directory of a tmpfs (a container's /dev) shares that tmpfs's size.
  if (!shm.disk_backed && space) {
    shm.size_bytes = space->size_bytes;
    shm.free_bytes = space->free_bytes;
  }
}

ShmFacts collect_shm(const host::Host& host, const MemoryFacts& mem) {
  ShmFacts shm;
  if (shm_from_mounts(host, mem, shm)) {
    // Live, statvfs measures the mounted tmpfs exactly (and its free space).
    if (host.is_live_root() && !shm.disk_backed) {
      ShmFacts measured = shm;
      if (shm_from_statvfs(host, measured)) shm = measured;
    }
    return shm;
  }
  shm_directory(host, shm);
  return shm;
}

ResourceLimit limit_from_getrlimit(const host::Host& host, int resource) {
  ResourceLimit l;
  std::optional<host::Host::Limit> r = host.resource_limit(resource);
  if (!r) return l;
  l.known = true;
  l.soft = r->soft;  // ~0 is "unlimited" in both layers
  l.hard = r->hard;
  l.source = "getrlimit";
  return l;
}

// "Max locked memory         8388608              8388608              bytes"
ResourceLimit limit_from_proc(const std::optional<std::string>& text, std::string_view name) {
  ResourceLimit l;
  if (!text) return l;
  for (std::string_view line : lines_of(*text)) {
    if (!line.starts_with(name)) continue;
    std::vector<std::string_view> w = split_words(line.substr(name.size()));
    if (w.size() < 2) return l;
    auto value = [](std::string_view v) -> std::optional<u64> {
      if (v == "unlimited") return kUnlimited;
      return parse_u64(v);
    };
    std::optional<u64> soft = value(w[0]), hard = value(w[1]);
    if (!soft || !hard) return l;
    l.known = true;
    l.soft = *soft;
    l.hard = *hard;
    l.source = "/proc/self/limits";
    return l;
  }
  return l;
}

Limits collect_limits(const host::Host& host) {
  Limits limits;
  if (host.is_live_root()) {
    limits.memlock = limit_from_getrlimit(host, RLIMIT_MEMLOCK);
    limits.nofile = limit_from_getrlimit(host, RLIMIT_NOFILE);
    limits.nproc = limit_from_getrlimit(host, RLIMIT_NPROC);
  }
  std::optional<std::string> text;
  if (!limits.memlock.known || !limits.nofile.known || !limits.nproc.known)
    text = host.read_file("/proc/self/limits", 1 << 16);
  if (!limits.memlock.known) limits.memlock = limit_from_proc(text, "Max locked memory");
  if (!limits.nofile.known) limits.nofile = limit_from_proc(text, "Max open files");
  if (!limits.nproc.known) limits.nproc = limit_from_proc(text, "Max processes");
  return limits;
}

// A path that stat(2) finds (an unreadable root is an Error, not a file).
bool exists(const host::Host& host, std::string_view path) {
  host::FileKind k = host.stat(path).kind;
  return k != host::FileKind::Missing && k != host::FileKind::Error;
}

ContainerFacts collect_container(const host::Host& host) {
  ContainerFacts c;
  bool docker = false, podman = false, kubernetes = false, lxc = false;
  if (exists(host, "/.dockerenv")) {
    c.markers.push_back("/.dockerenv exists");
    docker = true;
  }
  if (exists(host, "/run/.containerenv")) {
    c.markers.push_back("/run/.containerenv exists");
    podman = true;
  }
  if (std::optional<std::string> cg = host.read_file("/proc/1/cgroup", 1 << 16)) {
    for (std::string_view line : lines_of(*cg)) {
      bool hit = false;
      if (line.find("kubepods") != std::string_view::npos) kubernetes = hit = true;
      if (line.find("/docker") != std::string_view::npos ||
          line.find("docker-") != std::string_view::npos)
        docker = hit = true;
      if (line.find("libpod") != std::string_view::npos) podman = hit = true;
      if (line.find("/lxc") != std::string_view::npos) lxc = hit = true;
      if (line.find("containerd") != std::string_view::npos) hit = true;
      if (hit) {
        c.markers.push_back("/proc/1/cgroup: " + std::string(line));
        break;
      }
    }
  }
  std::string mounts_source;
  for (const MountEntry& m : read_mounts(host, &mounts_source))
    if (m.mount_point == "/" && m.fstype == "overlay") {
      c.markers.push_back(mounts_source + ": root filesystem is overlay");
      break;
    }
  if (host.getenv("KUBERNETES_SERVICE_HOST")) {
    c.markers.push_back("KUBERNETES_SERVICE_HOST is set");
    kubernetes = true;
  }
  c.detected = !c.markers.empty();
  c.kind = kubernetes   ? "kubernetes"
           : podman     ? "podman"
           : docker     ? "docker"
           : lxc        ? "lxc"
           : c.detected ? "container"
                        : "";
  return c;
}

std::optional<u32> positive_count(std::string_view v) {
  std::optional<u64> n = parse_u64(trim(v));
  if (!n || *n == 0 || *n > 1000000) return std::nullopt;
  return static_cast<u32>(*n);
}

RanksPerNode collect_ranks_per_node(const host::Host& host, const CollectOptions& options) {
  RanksPerNode r;
  if (options.ranks_per_node && *options.ranks_per_node > 0) {
    r.count = options.ranks_per_node;
    r.source = "--ranks-per-node";
    r.raw = std::to_string(*options.ranks_per_node);
    return r;
  }
  if (options.node_masks && !options.node_masks->empty()) {
    r.count = static_cast<u32>(options.node_masks->size());
    r.source = "fleet: ranks on this node";
    r.raw = std::to_string(*r.count);
    return r;
  }
  for (const char* name : {"LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
                           "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE"}) {
    std::optional<std::string> v = host.getenv(name);
    if (!v) continue;
    std::optional<u32> count;
    if (std::string_view(name) == "SLURM_TASKS_PER_NODE") {
      if (std::optional<std::vector<u32>> per_node = parse_slurm_tasks_per_node(*v)) {
        // This node's entry when SLURM_NODEID says which; else a uniform
        // value; else the largest (the tightest budget).
        std::optional<u64> node_id;
        if (std::optional<std::string> id = host.getenv("SLURM_NODEID"))
          node_id = parse_u64(trim(*id));
        if (node_id && *node_id < per_node->size())
          count = (*per_node)[*node_id];
        else if (!per_node->empty())
          count = *std::max_element(per_node->begin(), per_node->end());
      }
    } else {
      count = positive_count(*v);
    }
    if (!count) {
      r.ignored.push_back(std::string(name) + "=" + *v);
      continue;
    }
    r.count = count;
    r.source = name;
    r.raw = *v;
    return r;
  }
  return r;
}

}  // namespace

std::optional<std::vector<u32>> parse_slurm_tasks_per_node(std::string_view text) {
  std::vector<u32> out;
  text = trim(text);
  if (text.empty()) return std::nullopt;
  for (std::string_view item : split(text, ',')) {
    u64 repeat = 1;
    size_t paren = item.find('(');
    if (paren != std::string_view::npos) {
      // "4(x2)"
      if (!item.ends_with(")") || item.substr(paren, 2) != "(x") return std::nullopt;
      std::optional<u64> r = parse_u64(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r == 0 || *r > 100000) return std::nullopt;
      repeat = *r;
      item = item.substr(0, paren);
    }
    std::optional<u32> n = positive_count(item);
    if (!n) return std::nullopt;
    for (u64 i = 0; i < repeat; i++) out.push_back(*n);
  }
  return out;
}

namespace {

// What collect_env reports about the GPUs, from the NVIDIA kernel module
// alone (no driver library is loaded): its version and each GPU's model.
void collect_gpus(const host::Host& host, HostFacts& f) {
  if (std::optional<std::string> v = host.read_file("/proc/driver/nvidia/version", 4096)) {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..."
    std::string_view t = *v;
    size_t km = t.find("Kernel Module");
    if (km != std::string_view::npos) {
      std::string_view rest = trim(t.substr(km + 13));
      f.nvidia_driver = std::string(rest.substr(0, rest.find_first_of(" \t\n")));
    }
  }
  std::optional<std::vector<std::string>> gpus = host.list_dir("/proc/driver/nvidia/gpus");
  if (!gpus) return;
  std::sort(gpus->begin(), gpus->end());
  for (const std::string& bus : *gpus) {
    std::optional<std::string> info =
        host.read_file("/proc/driver/nvidia/gpus/" + bus + "/information", 1 << 16);
    f.gpus.push_back(info ? line_field(*info, "Model", ':').value_or("unknown model")
                          : "unknown model");
  }
}

}  // namespace

std::optional<std::string> filesystem_of(const host::Host& host, std::string_view path) {
  std::string source;
  std::vector<detail::MountEntry> mounts = detail::read_mounts(host, &source);
  const detail::MountEntry* best = detail::holding_mount(mounts, path);
  if (!best) return std::nullopt;
  return best->fstype;
}

namespace detail {

const MountEntry* holding_mount(const std::vector<MountEntry>& mounts, std::string_view path) {
  const MountEntry* best = nullptr;
  for (const MountEntry& m : mounts) {
    const std::string& mp = m.mount_point;
    const bool under =
        mp == "/" || path == mp ||
        (path.size() > mp.size() && path.substr(0, mp.size()) == mp && path[mp.size()] == '/');
    // Later entries of the same mount point are mounted over earlier ones.
    if (under && (!best || mp.size() >= best->mount_point.size())) best = &m;
  }
  return best;
}

}  // namespace detail

HostFacts collect_host_facts(const host::Host& host, const CollectOptions& options) {
  HostFacts f;
  f.cpu = collect_cpu_facts(host);
  f.numa_nodes = collect_numa_nodes(host);
  f.memory = collect_memory(host);
  f.shm = collect_shm(host, f.memory);
  f.limits = collect_limits(host);
  if (std::optional<std::string> rel = host.read_file("/proc/sys/kernel/osrelease", 4096)) {
    std::string_view t = trim(*rel);
    if (!t.empty()) f.kernel_release = std::string(t);
  }
  for (auto [file, field] : {std::pair{"/proc/sys/kernel/hostname", &f.hostname},
                             std::pair{"/proc/sys/kernel/random/boot_id", &f.boot_id}})
    if (std::optional<std::string> text = host.read_file(file, 4096)) {
      std::string_view t = trim(*text);
      if (!t.empty()) *field = std::string(t);
    }
  f.container = collect_container(host);
  f.ranks_per_node = collect_ranks_per_node(host, options);
  f.rank_binding = collect_rank_binding(host, f.cpu.affinity, options.node_masks);
  if (std::optional<std::vector<std::string>> ib = host.list_dir("/sys/class/infiniband"))
    f.rdma_devices = *ib;
  if (std::optional<std::string> os = host.read_file("/etc/os-release", 1 << 16))
    f.os_name = line_field(*os, "PRETTY_NAME", '=');
  if (std::optional<std::string> info = host.read_file("/proc/cpuinfo", 4 << 20))
    f.cpu_model = line_field(*info, "model name", ':');
  f.architecture = analysed_architecture(host);
  f.cpuinfo = count_cpuinfo(host, f.architecture);
  const std::vector<u32> mask =
      f.cpu.affinity ? *f.cpu.affinity : f.cpu.online.value_or(std::vector<u32>{});
  f.openmp_topology =
      model_openmp_topology(read_openmp_topology_inputs(host, f.architecture, mask));
  collect_gpus(host, f);
  return f;
}

}  // namespace mld::hostfacts
