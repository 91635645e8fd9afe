// facts.cc — gathers the host and environment facts in one call, and turns
// them into the JSON objects `mldoctor check --json` embeds. The rules that
// judge them are detectors (src/detect/rules/HOST00*.cc, ENV0*.cc).
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

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

json rank_binding(const RankBinding& b) {
  json masks = nullptr;
  if (b.masks) {
    masks = json::array();
    for (const std::vector<u32>& m : *b.masks) masks.push_back(format_cpu_list(m));
  }
  return {{"masks", masks},
          {"bound", b.bound},
          {"source", b.source.empty() ? json(nullptr) : json(b.source)},
          {"ignored", b.ignored}};
}

// What each OpenMP runtime numbers among the mask's CPUs (the counts and
// how; the places follow from them and the variables, THR004).
json openmp_topology(const OpenMpTopology& t) {
  auto text = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json llvm = {{"unknown", text(t.llvm.unknown)}};
  if (t.llvm.unknown.empty())
    llvm.update({{"method", t.llvm.method},
                 {"skipped", t.llvm.skipped},
                 {"packages", t.llvm.packages},
                 {"cores", t.llvm.cores},
                 {"ids_from", text(t.llvm.ids_from)},
                 {"steps", t.llvm.steps}});
  json gnu = {{"unknown", text(t.gomp.unknown)}};
  if (t.gomp.unknown.empty()) {
    std::set<std::vector<u32>> cores, packages;
    for (const auto& [cpu, c] : t.gomp.core_cpus) cores.insert(c);
    for (const auto& [cpu, c] : t.gomp.package_cpus) packages.insert(c);
    gnu.update({{"packages", packages.size()}, {"cores", cores.size()}});
  }
  return {{"cpus", t.mask.empty() ? json(nullptr) : json(format_cpu_list(t.mask))},
          {"llvm", llvm},
          {"gnu", gnu}};
}

json paths(const std::vector<LoaderPathEntry>& entries) {
  json out = json::array();
  for (const LoaderPathEntry& e : entries) out.push_back(e.path);
  return out;
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
        {"source", f.shm.source},
        {"fstype", f.shm.fstype.empty() ? json(nullptr) : json(f.shm.fstype)},
        {"mount_point", f.shm.mount_point.empty() ? json(nullptr) : json(f.shm.mount_point)},
        {"disk_backed", f.shm.disk_backed}}},
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
      {"rank_binding", rank_binding(f.rank_binding)},
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
      {"openmp_topology", openmp_topology(f.openmp_topology)},
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
       {"ld_library_path", paths(f.ld_library_path)},
       {"ld_preload", paths(f.ld_preload)},
       {"glibc_tunables", tunables}};
}

void to_json(json& j, const Facts& f) {
  json host, env;
  to_json(host, f.host);
  to_json(env, f.env);
  j = {{"host", host}, {"environment", env}};
}

}  // namespace mld::hostfacts
