// facts.cc — turns the collected host and environment facts into findings
// (HOST rules; the ENV findings are made while the variables are parsed) and
// into the JSON objects `mldoctor check --json` embeds.
//
// The host findings are the limits that break multi-process training before
// any Python code is wrong: a small /dev/shm (Docker's 64 MiB default) under
// DataLoader workers and NCCL's SHM transport, a locked-memory limit below
// "unlimited" beside RDMA devices (NCCL's InfiniBand transport registers its
// buffers), and a low open-file limit under DataLoader's fd passing.
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

namespace {

std::string limit_text(u64 v) { return v == kUnlimited ? "unlimited" : std::to_string(v); }

// Threads per rank that keep ranks x threads within the usable CPUs.
std::optional<u32> threads_per_rank(const HostFacts& h) {
  if (!h.cpu.usable) return std::nullopt;
  u32 ranks = h.ranks_per_node.count.value_or(1);
  return std::max<u32>(1, *h.cpu.usable / std::max<u32>(1, ranks));
}

}  // namespace

std::string human_bytes(u64 b) {
  if (b == kUnlimited) return "unlimited";
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  char buf[64];
  if (u == 0 || v == static_cast<double>(static_cast<u64>(v)))
    std::snprintf(buf, sizeof buf, "%llu %s", static_cast<unsigned long long>(v), units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

Facts collect(const host::Host& host, const CollectOptions& options) {
  Facts f;
  f.host = collect_host_facts(host, options);
  f.env = collect_env_facts(host);
  return f;
}

std::vector<Finding> host_findings(const HostFacts& h) {
  std::vector<Finding> out;
  if (h.shm.size_bytes && *h.shm.size_bytes != kUnlimited && *h.shm.size_bytes < kSmallShmBytes) {
    Finding f;
    f.rule = "HOST001";
    f.severity = Severity::Warning;
    f.subject = "/dev/shm";
    f.message =
        "/dev/shm holds only " + human_bytes(*h.shm.size_bytes) +
        ": DataLoader workers and NCCL's shared-memory transport fail with \"Bus error\" or "
        "\"No space left on device\" once it fills";
    f.evidence.push_back(
        {"/dev/shm size " + human_bytes(*h.shm.size_bytes) +
             (h.shm.free_bytes ? ", " + human_bytes(*h.shm.free_bytes) + " free" : std::string()),
         h.shm.source, std::nullopt, false});
    if (h.container.detected)
      f.evidence.push_back(
          {"running in a container (" + h.container.kind + ")", "", std::nullopt, false});
    f.fix =
        "Give /dev/shm several GiB: `docker run --shm-size=16g` (or `--ipc=host`); on Kubernetes "
        "mount an "
        "emptyDir with `medium: Memory` at /dev/shm; on a host `mount -o remount,size=16G "
        "/dev/shm`.";
    out.push_back(std::move(f));
  }
  const ResourceLimit& ml = h.limits.memlock;
  if (!h.rdma_devices.empty() && ml.known && ml.soft != kUnlimited) {
    std::string devices;
    for (const std::string& d : h.rdma_devices) devices += (devices.empty() ? "" : ", ") + d;
    Finding f;
    f.rule = "HOST002";
    f.severity = Severity::Warning;
    f.subject = "RLIMIT_MEMLOCK";
    f.message = "locked-memory limit is " + human_bytes(ml.soft) +
                " while RDMA devices are present (" + devices +
                "): NCCL's InfiniBand transport cannot register its buffers";
    f.evidence.push_back(
        {"memlock soft " + limit_text(ml.soft) + ", hard " + limit_text(ml.hard) + " bytes",
         ml.source, std::nullopt, false});
    f.evidence.push_back(
        {"RDMA devices: " + devices, "/sys/class/infiniband", std::nullopt, false});
    f.fix =
        "Raise the limit to unlimited for the job: `ulimit -l unlimited` (needs the hard limit: "
        "/etc/security/limits.conf `* - memlock unlimited`); Docker `--ulimit memlock=-1:-1`; "
        "Slurm "
        "propagates the submitting shell's limit.";
    out.push_back(std::move(f));
  }
  const ResourceLimit& nf = h.limits.nofile;
  if (nf.known && nf.soft < kLowNofile) {
    Finding f;
    f.rule = "HOST003";
    f.severity = Severity::Info;
    f.subject = "RLIMIT_NOFILE";
    f.message = "open-file limit is " + limit_text(nf.soft) +
                ": DataLoader workers passing tensors by file descriptor can fail with \"Too many "
                "open files\" "
                "or \"received 0 items of ancdata\"";
    f.evidence.push_back({"nofile soft " + limit_text(nf.soft) + ", hard " + limit_text(nf.hard),
                          nf.source, std::nullopt, false});
    f.fix =
        nf.hard > nf.soft
            ? "Raise the soft limit up to the hard limit: `ulimit -n " + limit_text(nf.hard) + "`."
            : "Raise the hard limit (/etc/security/limits.conf, `docker --ulimit nofile=65536`), "
              "or use torch.multiprocessing.set_sharing_strategy('file_system').";
    out.push_back(std::move(f));
  }
  return out;
}

void emit_findings(const Facts& facts, FindingSink& sink) {
  std::optional<u32> per_rank = threads_per_rank(facts.host);
  for (Finding f : facts.env.findings) {
    // A thread count that fixes a malformed one: the usable CPUs divided
    // among the ranks of this node.
    if (f.rule == "ENV001" && per_rank && f.env_fix.empty()) {
      f.env_fix.push_back(f.subject + "=" + std::to_string(*per_rank));
      f.fix += " On this node: " + std::to_string(*facts.host.cpu.usable) + " usable CPUs / " +
               std::to_string(facts.host.ranks_per_node.count.value_or(1)) +
               " rank(s) = " + std::to_string(*per_rank) + ".";
    }
    sink.add(std::move(f));
  }
  for (Finding& f : host_findings(facts.host)) sink.add(std::move(f));
}

// JSON ////////////////////////////////////////////////////////////////////////

namespace {

using nlohmann::json;

json opt(const std::optional<u64>& v) {
  if (!v) return nullptr;
  if (*v == kUnlimited) return "unlimited";
  return *v;
}

json opt(const std::optional<u32>& v) { return v ? json(*v) : json(nullptr); }

json opt(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }

json cpu_list(const std::optional<std::vector<u32>>& v) {
  return v ? json(format_cpu_list(*v)) : json(nullptr);
}

json cpu_count(const std::optional<std::vector<u32>>& v) {
  return v ? json(v->size()) : json(nullptr);
}

json limit(const ResourceLimit& l) {
  if (!l.known) return nullptr;
  return {{"soft", opt(std::optional<u64>(l.soft))},
          {"hard", opt(std::optional<u64>(l.hard))},
          {"source", l.source}};
}

}  // namespace

void to_json(json& j, const HostFacts& f) {
  json quota = nullptr;
  if (f.cpu.quota)
    quota = {{"cpus", f.cpu.quota->cpus()},
             {"quota_us", f.cpu.quota->quota_us},
             {"period_us", f.cpu.quota->period_us},
             {"file", f.cpu.quota->file}};
  json cgroup = nullptr;
  if (f.cpu.cgroup_version)
    cgroup = {{"version", f.cpu.cgroup_version},
              {"path", f.cpu.cgroup_path},
              {"dir", f.cpu.cgroup_dir},
              {"quota_readable", f.cpu.quota_readable},
              {"quota", quota}};
  json numa = json::array();
  for (const NumaNode& n : f.numa_nodes)
    numa.push_back({{"id", n.id},
                    {"cpus", cpu_list(n.cpus)},
                    {"cpu_count", cpu_count(n.cpus)},
                    {"mem_total_bytes", opt(n.mem_total_bytes)},
                    {"mem_free_bytes", opt(n.mem_free_bytes)}});
  j = {
      {"cpus",
       {{"online", cpu_list(f.cpu.online)},
        {"online_count", cpu_count(f.cpu.online)},
        {"possible", cpu_list(f.cpu.possible)},
        {"possible_count", cpu_count(f.cpu.possible)},
        {"affinity", cpu_list(f.cpu.affinity)},
        {"affinity_count", cpu_count(f.cpu.affinity)},
        {"affinity_source", f.cpu.affinity ? json(f.cpu.affinity_source) : json(nullptr)},
        {"cgroup", cgroup},
        {"usable", opt(f.cpu.usable)},
        {"usable_basis", f.cpu.usable ? json(f.cpu.usable_basis) : json(nullptr)}}},
      {"numa_nodes", numa},
      {"memory",
       {{"total_bytes", opt(f.memory.total_bytes)},
        {"available_bytes", opt(f.memory.available_bytes)}}},
      {"shm",
       {{"present", f.shm.present},
        {"size_bytes", opt(f.shm.size_bytes)},
        {"free_bytes", opt(f.shm.free_bytes)},
        {"source", f.shm.source}}},
      {"limits",
       {{"memlock", limit(f.limits.memlock)},
        {"nofile", limit(f.limits.nofile)},
        {"nproc", limit(f.limits.nproc)}}},
      {"kernel_release", opt(f.kernel_release)},
      {"hostname", opt(f.hostname)},
      {"boot_id", opt(f.boot_id)},
      {"glibc_version", opt(f.glibc_version)},
      {"container",
       {{"detected", f.container.detected},
        {"kind", f.container.kind},
        {"markers", f.container.markers}}},
      {"ranks_per_node",
       {{"count", opt(f.ranks_per_node.count)},
        {"source", f.ranks_per_node.count ? json(f.ranks_per_node.source) : json(nullptr)},
        {"raw", f.ranks_per_node.count ? json(f.ranks_per_node.raw) : json(nullptr)},
        {"ignored", f.ranks_per_node.ignored}}},
      {"rdma_devices", f.rdma_devices},
      {"os", opt(f.os_name)},
      {"cpu_model", opt(f.cpu_model)},
      {"architecture", f.architecture.empty() ? json(nullptr) : json(f.architecture)},
      {"cpuinfo",
       {{"unknown", f.cpuinfo.unknown.empty() ? json(nullptr) : json(f.cpuinfo.unknown)},
        {"initialised", f.cpuinfo.initialised},
        {"processors", opt(f.cpuinfo.processors)},
        {"cores", opt(f.cpuinfo.cores)},
        {"steps", f.cpuinfo.steps}}},
      {"nvidia_driver", opt(f.nvidia_driver)},
      {"gpus", f.gpus},
  };
}

void to_json(json& j, const EnvFacts& f) {
  json vars = json::object();
  for (const EnvVar& v : f.variables) vars[v.name] = v.value;
  json omp = f.threads.omp_num_threads ? json(*f.threads.omp_num_threads) : json(nullptr);
  json cvd = nullptr;
  if (f.cuda_visible_devices)
    cvd = {{"raw", f.cuda_visible_devices->raw},
           {"devices", f.cuda_visible_devices->devices},
           {"stopped_at", opt(f.cuda_visible_devices->stopped_at)},
           {"duplicate", opt(f.cuda_visible_devices->duplicate)}};
  json tunables = json::array();
  for (const GlibcTunable& t : f.glibc_tunables)
    tunables.push_back({{"key", t.key}, {"value", t.value}, {"known", t.known}});
  j = {{"variables", vars},
       {"threads",
        {{"omp_num_threads", omp},
         {"mkl_num_threads", opt(f.threads.mkl_num_threads)},
         {"openblas_num_threads", opt(f.threads.openblas_num_threads)},
         {"numba_num_threads", opt(f.threads.numba_num_threads)},
         {"mkl_threading_layer", opt(f.threads.mkl_threading_layer)},
         {"numba_threading_layer", opt(f.threads.numba_threading_layer)}}},
       {"cuda_visible_devices", cvd},
       {"ld_library_path", f.ld_library_path},
       {"ld_preload", f.ld_preload},
       {"glibc_tunables", tunables}};
}

void to_json(json& j, const Facts& f) {
  json host, env;
  to_json(host, f.host);
  to_json(env, f.env);
  j = {{"host", host}, {"environment", env}};
}

}  // namespace mld::hostfacts
