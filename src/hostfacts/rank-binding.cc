// rank-binding.cc — which CPUs the other ranks of this node run on. A rank
// reads only its own affinity mask, and the same mask means opposite things:
// 1 CPU of a 2-CPU node is the whole budget of a rank that `mpirun` bound to
// its own core (each rank has one), but a shared half of the node when two
// ranks were bound to one socket. The thread budget (THR001) needs to know
// which, so this reads what the launcher says, and checks it against the
// rank's own mask before believing it:
//   - `fleet` gathers every rank's mask over MPI: exact, wins over the rest.
//   - srun (task/affinity) exports SLURM_CPU_BIND_TYPE "map_cpu:" with one
//     CPU per local task, or "mask_cpu:" with one hex mask per local task, in
//     SLURM_CPU_BIND_LIST; the entry at SLURM_LOCALID must be this mask.
//   - Open MPI's mpirun exports OMPI_MCA_orte_bound_at_launch=1 when it bound
//     the ranks, and OMPI_MCA_hwloc_base_binding_policy when the policy was
//     asked for; without one, Open MPI 4 binds to a core for up to 2 ranks
//     and to a socket or NUMA node beyond (mpirun(1), "--bind-to").
#include <algorithm>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

using namespace detail;

namespace {

// "0x3" / "3" as a CPU set: bit i is CPU i.
std::optional<std::vector<u32>> parse_hex_mask(std::string_view text) {
  text = trim(text);
  if (text.starts_with("0x") || text.starts_with("0X")) text.remove_prefix(2);
  if (text.empty() || text.size() > 256) return std::nullopt;
  std::vector<u32> cpus;
  u32 bit = 0;
  for (size_t i = text.size(); i-- > 0; bit += 4) {
    const char c = text[i] >= 'A' && text[i] <= 'F' ? char(text[i] - 'A' + 'a') : text[i];
    const int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (v < 0) return std::nullopt;
    for (u32 b = 0; b < 4; b++)
      if (v & (1 << b)) cpus.push_back(bit + b);
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

bool disjoint(const std::vector<std::vector<u32>>& masks) {
  std::vector<u32> all;
  for (const std::vector<u32>& m : masks) all.insert(all.end(), m.begin(), m.end());
  std::sort(all.begin(), all.end());
  return std::adjacent_find(all.begin(), all.end()) == all.end();
}

}  // namespace

std::optional<std::vector<std::vector<u32>>> parse_slurm_cpu_bind_list(std::string_view type,
                                                                       std::string_view list) {
  const bool map = type.find("map_cpu") != std::string_view::npos;
  const bool mask = type.find("mask_cpu") != std::string_view::npos;
  if (!map && !mask) return std::nullopt;
  std::vector<std::vector<u32>> out;
  for (std::string_view item : split(trim(list), ',')) {
    if (map) {
      std::optional<u64> cpu = parse_u64(trim(item));
      if (!cpu || *cpu > 1u << 20) return std::nullopt;
      out.push_back({static_cast<u32>(*cpu)});
    } else {
      std::optional<std::vector<u32>> cpus = parse_hex_mask(item);
      if (!cpus || cpus->empty()) return std::nullopt;
      out.push_back(std::move(*cpus));
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

RankBinding collect_rank_binding(const host::Host& host, const std::optional<std::vector<u32>>& own,
                                 const std::optional<std::vector<std::vector<u32>>>& masks) {
  RankBinding b;
  if (masks && !masks->empty()) {
    b.masks = masks;
    b.bound = masks->size() > 1 && disjoint(*masks);
    b.source = "fleet: every rank's affinity mask";
    return b;
  }
  std::optional<std::string> type = host.getenv("SLURM_CPU_BIND_TYPE");
  std::optional<std::string> list = host.getenv("SLURM_CPU_BIND_LIST");
  if (type && list) {
    const std::string var = "SLURM_CPU_BIND_TYPE=" + *type + " SLURM_CPU_BIND_LIST=" + *list;
    std::optional<std::vector<std::vector<u32>>> tasks = parse_slurm_cpu_bind_list(*type, *list);
    std::optional<u64> local;
    if (std::optional<std::string> id = host.getenv("SLURM_LOCALID")) local = parse_u64(trim(*id));
    if (!tasks) {
      b.ignored.push_back(var + ": not a CPU map or mask list");
    } else if (!local || *local >= tasks->size() || !own || (*tasks)[*local] != *own) {
      // srun cycles the list when there are more tasks than entries, and a
      // list in Slurm's abstract CPU numbering need not match the kernel's:
      // believed only where this rank's entry is its own mask.
      b.ignored.push_back(var + ": this task's entry (SLURM_LOCALID) is not its affinity mask");
    } else {
      b.masks = std::move(tasks);
      b.bound = b.masks->size() > 1 && disjoint(*b.masks);
      b.source = var;
      return b;
    }
  }
  if (std::optional<std::string> at = host.getenv("OMPI_MCA_orte_bound_at_launch");
      at && trim(*at) == "1") {
    std::optional<std::string> policy = host.getenv("OMPI_MCA_hwloc_base_binding_policy");
    std::optional<u64> size;
    if (std::optional<std::string> s = host.getenv("OMPI_COMM_WORLD_SIZE"))
      size = parse_u64(trim(*s));
    std::string p = policy ? ascii_lower(trim(*policy)) : std::string();
    const bool overload = p.find("overload-allowed") != std::string::npos;
    p = p.substr(0, p.find(':'));
    const bool per_rank =
        !overload && (p == "core" || p == "hwthread" || (!policy && size && *size <= 2));
    const std::string var =
        "OMPI_MCA_orte_bound_at_launch=1" +
        (policy ? " OMPI_MCA_hwloc_base_binding_policy=" + *policy
         : size ? " (no binding policy asked: Open MPI binds " +
                      std::string(*size <= 2 ? "each of up to 2 ranks to a core"
                                             : "more than 2 ranks to a socket or NUMA node") +
                      ", OMPI_COMM_WORLD_SIZE=" + std::to_string(*size) + ")"
                : std::string(" (no binding policy, no OMPI_COMM_WORLD_SIZE)"));
    if (per_rank) {
      b.bound = true;
      b.source = var;
      return b;
    }
    b.ignored.push_back(var + ": ranks may share the CPUs they are bound to");
  }
  return b;
}

}  // namespace mld::hostfacts
