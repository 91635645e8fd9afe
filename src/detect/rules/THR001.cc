// THR001 — the thread budget of a node. Every OpenMP runtime, OpenBLAS and
// numba start one thread per CPU of the affinity mask unless told otherwise,
// and none of them reads the cgroup CPU quota; with several ranks per node
// each rank does the same. The usable CPUs are min(affinity, ceil(quota))
// (hostfacts), the recommendation is usable / ranks per rank, for every pool,
// before any import (research/threading.md §6).
//
// Which ranks share those CPUs is the launcher's doing: ranks bound to CPUs of
// their own (mpirun --bind-to core, srun --cpu-bind=cores) each have their
// mask to themselves, and one thread per CPU of it is exactly right; ranks
// left unbound all hold the same mask. The budget is counted over the ranks
// whose masks meet this rank's, on the union of their CPUs, when the masks
// are known (fleet, srun's list), over this rank alone when the launcher
// says it bound each rank, else over every rank of the node on this mask.
#include <algorithm>

#include "detect/detect.h"

namespace {

std::optional<mld::u32> first_count(const std::optional<std::vector<mld::u32>>& v) {
  if (!v || v->empty()) return std::nullopt;
  return v->front();
}

}  // namespace

MLD_DETECTOR(THR001) {
  using namespace mld;
  if (!facts.host || !facts.threads) return;
  const hostfacts::HostFacts& h = facts.host->host;
  const hostfacts::ThreadSettings& t = facts.host->env.threads;
  if (!h.cpu.usable) return;
  u32 usable = *h.cpu.usable;
  const u32 affinity = h.cpu.affinity ? static_cast<u32>(h.cpu.affinity->size())
                       : h.cpu.online ? static_cast<u32>(h.cpu.online->size())
                                      : usable;
  const u32 node_ranks = std::max<u32>(1, h.ranks_per_node.count.value_or(1));

  // The ranks that share this rank's CPUs, and what those CPUs are.
  const hostfacts::RankBinding& b = h.rank_binding;
  u32 ranks = node_ranks;
  std::string sharing;  // says which budget, for the evidence
  std::string basis = h.cpu.usable_basis;
  const std::optional<std::vector<u32>>& own = h.cpu.affinity;
  if (b.masks && own) {
    std::vector<u32> cpus;
    ranks = 0;
    for (const std::vector<u32>& m : *b.masks) {
      const bool meets = std::any_of(m.begin(), m.end(), [&](u32 c) {
        return std::binary_search(own->begin(), own->end(), c);
      });
      if (!meets) continue;
      ranks++;
      cpus.insert(cpus.end(), m.begin(), m.end());
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    ranks = std::max<u32>(1, ranks);
    usable = static_cast<u32>(cpus.size());
    basis = ranks == 1 ? "this rank's own CPUs " + hostfacts::format_cpu_list(cpus)
                       : "CPUs " + hostfacts::format_cpu_list(cpus) + " of the ranks sharing them";
    if (h.cpu.quota && h.cpu.quota->ceil_cpus() < usable) {
      usable = h.cpu.quota->ceil_cpus();
      basis = "cgroup v" + std::to_string(h.cpu.quota->cgroup_version) + " quota";
    }
    sharing = std::to_string(ranks) + " of the node's " + std::to_string(b.masks->size()) +
              " ranks run on CPUs that meet this rank's (" + b.source + ")";
  } else if (b.bound) {
    ranks = 1;
    basis = "this rank's own CPUs" + (own ? " " + hostfacts::format_cpu_list(*own) : "");
    sharing = "each rank of the node is bound to CPUs of its own (" + b.source + ")";
  } else if (node_ranks > 1) {
    sharing = "the ranks are taken to share this rank's CPUs: no launcher said it bound them";
  }

  struct Pool {
    std::string what;
    u32 threads;
  };
  std::vector<Pool> pools;
  if (std::optional<u32> omp = first_count(t.omp_num_threads))
    pools.push_back({"OpenMP: OMP_NUM_THREADS=" + std::to_string(*omp), *omp});
  else
    pools.push_back(
        {"OpenMP (libgomp, LLVM): OMP_NUM_THREADS unset, one thread per CPU of the affinity mask "
         "= " +
             std::to_string(affinity),
         affinity});
  const bool numba = facts.threads->numba;
  if (numba) {
    if (t.numba_num_threads)
      pools.push_back({"numba: NUMBA_NUM_THREADS=" + std::to_string(*t.numba_num_threads),
                       *t.numba_num_threads});
    else
      pools.push_back(
          {"numba: NUMBA_NUM_THREADS unset, the affinity mask = " + std::to_string(affinity),
           affinity});
  }
  u32 per_process = 0;
  for (const Pool& p : pools) per_process = std::max(per_process, p.threads);
  if (u64{per_process} * ranks <= usable) return;

  const u32 per_rank = std::max<u32>(1, usable / ranks);
  Detection f;
  f.rule = "THR001";
  f.subject = "thread budget";
  f.message = std::to_string(ranks) + " rank(s) × " + std::to_string(per_process) +
              " threads = " + std::to_string(u64{per_process} * ranks) + " busy threads on " +
              std::to_string(usable) + " usable CPUs (" + basis + "): " +
              (ranks == node_ranks ? "the ranks oversubscribe the node"
               : ranks == 1        ? "the rank oversubscribes its CPUs"
                                   : "the ranks oversubscribe the CPUs they share");
  for (const Pool& p : pools) f.evidence.push_back({p.what, "", std::nullopt});
  std::string cpus = "usable CPUs " + std::to_string(usable) + " (" + basis + "), affinity mask " +
                     std::to_string(affinity);
  if (h.cpu.quota)
    cpus += ", cgroup v" + std::to_string(h.cpu.quota->cgroup_version) + " quota " +
            std::to_string(h.cpu.quota->quota_us) + "/" + std::to_string(h.cpu.quota->period_us) +
            " (read by no runtime)";
  f.evidence.push_back({cpus, h.cpu.quota ? h.cpu.quota->file : std::string(), std::nullopt});
  f.evidence.push_back(
      {"ranks per node " + std::to_string(node_ranks) +
           (h.ranks_per_node.source.empty() ? " (assumed: no launcher variable)"
                                            : " (" + h.ranks_per_node.source + ")") +
           (sharing.empty() ? "" : "; " + sharing),
       "", std::nullopt});
  const std::string n = std::to_string(per_rank);
  f.fix = "give each rank " + n + " thread(s) — " + std::to_string(usable) + " usable CPUs / " +
          std::to_string(ranks) + " rank(s)" + (ranks == node_ranks ? "" : " sharing them") +
          " — for every pool, before Python starts";
  // More ranks than CPUs: one thread each is the least, and still too many.
  // No setting resolves that; say what does, and offer settings only where
  // they still lower the count (`mldoctor fix` then stops printing them).
  if (ranks > usable)
    f.fix += "; " + std::to_string(ranks) + " ranks on " + std::to_string(usable) +
             " usable CPUs oversubscribe with any thread count: run at most " +
             std::to_string(usable) + " ranks on these CPUs, or give the job more";
  if (per_process > per_rank) {
    for (const char* var : {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
      f.env_fix.push_back(std::string(var) + "=" + n);
    if (numba) f.env_fix.push_back("NUMBA_NUM_THREADS=" + n);
  }
  out.push_back(std::move(f));
}
