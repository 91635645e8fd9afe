// threads.cc — thread counts that the job does not get to choose.
//
// THR001, the budget: every OpenMP runtime, OpenBLAS and numba start one
// thread per CPU of the affinity mask unless told otherwise, and none of them
// reads the cgroup CPU quota; with several ranks per node each rank does the
// same. The usable CPUs are min(affinity, ceil(quota)) (hostfacts), the
// recommendation is usable / ranks per rank, for every pool, before any import
// (research/threading.md §6).
//
// THR002, seed 003: numba's OpenMP layer calls omp_set_num_threads(
// NUMBA_NUM_THREADS) at its first parallel use, and torch's get_num_threads()
// is omp_get_max_threads() of the same libgomp — so torch's count silently
// becomes numba's (numba/numba#9387). Predicted from the replayed process:
// numba's omppool and torch resolving libgomp.so.1 to the same object, and
// torch's count from the rule of the installed build (torch-threads.cc).
// When that count cannot be known, the finding says why and asks to pin both
// pools to one value: never a silent "no findings" on seed 003.
#include <algorithm>

#include "check/check.h"

namespace mld::check {

namespace {

std::optional<u32> first_count(const std::optional<std::vector<u32>>& v) {
  if (!v || v->empty()) return std::nullopt;
  return v->front();
}

// The libgomp object a loaded object's DT_NEEDED resolves to.
std::optional<size_t> gomp_of(const loader::Process& p, size_t i) {
  for (const loader::Resolution& r : p.objects[i].needed)
    if (r.name.starts_with("libgomp") && r.object && !p.objects[*r.object].faked) return r.object;
  return std::nullopt;
}

void find_budget(const CheckReport& report, FindingSink& sink) {
  const hostfacts::HostFacts& h = report.facts.host;
  const hostfacts::ThreadSettings& t = report.facts.env.threads;
  if (!h.cpu.usable) return;
  const u32 usable = *h.cpu.usable;
  const u32 affinity = h.cpu.affinity ? static_cast<u32>(h.cpu.affinity->size())
                       : h.cpu.online ? static_cast<u32>(h.cpu.online->size())
                                      : usable;
  const u32 ranks = std::max<u32>(1, h.ranks_per_node.count.value_or(1));

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
  const bool numba = report.python && report.python->find_package("numba");
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
  Finding f;
  f.rule = "THR001";
  f.severity = Severity::Warning;
  f.subject = "thread budget";
  f.message = std::to_string(ranks) + " rank(s) × " + std::to_string(per_process) +
              " threads = " + std::to_string(u64{per_process} * ranks) + " busy threads on " +
              std::to_string(usable) + " usable CPUs (" + h.cpu.usable_basis +
              "): the ranks oversubscribe the node";
  for (const Pool& p : pools) f.evidence.push_back({p.what, "", std::nullopt});
  std::string cpus = "usable CPUs " + std::to_string(usable) + " (" + h.cpu.usable_basis +
                     "), affinity mask " + std::to_string(affinity);
  if (h.cpu.quota)
    cpus += ", cgroup v" + std::to_string(h.cpu.quota->cgroup_version) + " quota " +
            std::to_string(h.cpu.quota->quota_us) + "/" + std::to_string(h.cpu.quota->period_us) +
            " (read by no runtime)";
  f.evidence.push_back({cpus, h.cpu.quota ? h.cpu.quota->file : std::string(), std::nullopt});
  f.evidence.push_back(
      {"ranks per node " + std::to_string(ranks) +
           (h.ranks_per_node.source.empty() ? " (assumed: no launcher variable)"
                                            : " (" + h.ranks_per_node.source + ")"),
       "", std::nullopt});
  const std::string n = std::to_string(per_rank);
  f.fix = "give each rank " + n + " thread(s) — " + std::to_string(usable) + " usable CPUs / " +
          std::to_string(ranks) + " rank(s) — for every pool, before Python starts";
  for (const char* var : {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
    f.env_fix.push_back(std::string(var) + "=" + n);
  if (numba) f.env_fix.push_back("NUMBA_NUM_THREADS=" + n);
  sink.add(std::move(f));
}

void find_numba_resets_torch(const CheckReport& report, FindingSink& sink) {
  if (!report.imports || report.imports->numba_layer != "omp") return;
  const ImportSimulation& sim = *report.imports;
  const loader::Process& p = sim.process;
  std::optional<size_t> numba_gomp, torch_gomp;
  std::string omppool;
  for (size_t i = 0; i < p.objects.size(); i++) {
    const loader::Object& o = p.objects[i];
    if (o.faked || o.removed) continue;
    const std::string& by = sim.loaded_by[i];
    if (!numba_gomp && o.path.find("omppool") != std::string::npos) {
      numba_gomp = gomp_of(p, i);
      omppool = o.path;
    }
    if (!torch_gomp && by.starts_with("import torch")) torch_gomp = gomp_of(p, i);
  }
  if (!numba_gomp || !torch_gomp || *numba_gomp != *torch_gomp) return;

  const hostfacts::HostFacts& h = report.facts.host;
  const hostfacts::ThreadSettings& t = report.facts.env.threads;
  const TorchThreads& torch = report.torch_threads;
  // numba: NUMBA_NUM_THREADS, else len(os.sched_getaffinity(0)).
  std::optional<u32> after;
  std::string after_why;
  if (t.numba_num_threads) {
    after = *t.numba_num_threads;
    after_why = "NUMBA_NUM_THREADS=" + std::to_string(*t.numba_num_threads);
  } else if (h.cpu.affinity || h.cpu.online) {
    after = static_cast<u32>(h.cpu.affinity ? h.cpu.affinity->size() : h.cpu.online->size());
    after_why = "NUMBA_NUM_THREADS unset: the affinity mask, cgroup quota ignored";
  }
  if (torch.count && after && *torch.count == *after) return;

  const std::string gomp = p.objects[*numba_gomp].path;
  Finding f;
  f.rule = "THR002";
  f.severity = Severity::Warning;
  f.subject = "torch.get_num_threads()";
  const std::string torch_line =
      torch.rule.empty() ? std::string("torch") : "torch's rule: " + torch.rule;
  if (torch.count && after) {
    f.message = "numba's OpenMP threading layer would change torch's thread count from " +
                std::to_string(*torch.count) + " to " + std::to_string(*after) +
                " at numba's first parallel call: both run on " + gomp;
    f.evidence.push_back(
        {"torch: " + std::to_string(*torch.count) + " (" + torch.basis + ")", "", std::nullopt});
    f.evidence.push_back(
        {"numba: omp_set_num_threads(" + std::to_string(*after) + ") (" + after_why + ")", "",
         std::nullopt});
    f.evidence.push_back(
        {omppool + " and torch resolve libgomp.so.1 to " + gomp, "", std::nullopt});
    f.evidence.push_back({torch_line, "", std::nullopt});
    for (const std::string& e : torch.evidence) f.evidence.push_back({e, "", std::nullopt});
    f.fix = "export NUMBA_NUM_THREADS=" + std::to_string(*torch.count) +
            " so numba asks for torch's count; or call torch.set_num_threads() after numba's first "
            "parallel "
            "call; or NUMBA_THREADING_LAYER=workqueue to keep numba off libgomp";
    f.env_fix.push_back("NUMBA_NUM_THREADS=" + std::to_string(*torch.count));
    sink.add(std::move(f));
    return;
  }
  // Not sure: the two pools share one runtime and nothing pins them to one
  // value, so torch's count may change. Pin both: right whatever torch's
  // default is. The value is the per-rank share THR001 also recommends.
  const u32 ranks = std::max<u32>(1, h.ranks_per_node.count.value_or(1));
  const u32 pin = h.cpu.usable ? std::max<u32>(1, *h.cpu.usable / ranks) : after.value_or(1);
  const std::string why =
      !torch.count
          ? "torch's default cannot be known here: " + torch.unknown
          : "numba's count cannot be known here: the affinity mask and the online CPUs are unknown";
  f.message = "numba's OpenMP threading layer sets the thread count of " + gomp +
              ", which torch shares, at numba's first parallel call" +
              (after ? " (to " + std::to_string(*after) + ")" : std::string()) +
              "; whether that changes torch's count is not certain: " + why;
  if (torch.count)
    f.evidence.push_back(
        {"torch: " + std::to_string(*torch.count) + " (" + torch.basis + ")", "", std::nullopt});
  else
    f.evidence.push_back({"torch: unknown (" + torch.unknown + ")", "", std::nullopt});
  if (after)
    f.evidence.push_back(
        {"numba: omp_set_num_threads(" + std::to_string(*after) + ") (" + after_why + ")", "",
         std::nullopt});
  f.evidence.push_back({omppool + " and torch resolve libgomp.so.1 to " + gomp, "", std::nullopt});
  f.evidence.push_back({torch_line, "", std::nullopt});
  for (const std::string& e : torch.evidence) f.evidence.push_back({e, "", std::nullopt});
  f.fix = "pin both pools to one value before Python starts: export OMP_NUM_THREADS=" +
          std::to_string(pin) + " NUMBA_NUM_THREADS=" + std::to_string(pin) +
          " (right whatever torch's default is); or NUMBA_THREADING_LAYER=workqueue to keep numba "
          "off libgomp";
  f.env_fix.push_back("OMP_NUM_THREADS=" + std::to_string(pin));
  f.env_fix.push_back("NUMBA_NUM_THREADS=" + std::to_string(pin));
  sink.add(std::move(f));
}

}  // namespace

void find_thread_hazards(const CheckReport& report, FindingSink& sink) {
  find_budget(report, sink);
  find_numba_resets_torch(report, sink);
}

}  // namespace mld::check
