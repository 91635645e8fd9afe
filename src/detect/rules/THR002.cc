// THR002 — seed 003: numba's OpenMP layer calls omp_set_num_threads(
// NUMBA_NUM_THREADS) at its first parallel use, and torch's get_num_threads()
// is omp_get_max_threads() of the same libgomp — so torch's count silently
// becomes numba's (numba/numba#9387). The facts come from check's replayed
// process (numba's omppool and torch resolving libgomp.so.1 to one object)
// and torch's count from the rule of the installed build
// (check/torch-threads.cc). When that count cannot be known, the finding says
// why and asks to pin both pools to one value: never a silent "no findings"
// on seed 003.
#include <algorithm>
#include <cstdio>

#include "detect/detect.h"

MLD_DETECTOR(THR002) {
  using namespace mld;
  if (!facts.host || !facts.threads || facts.threads->shared_gomp.empty()) return;
  const hostfacts::HostFacts& h = facts.host->host;
  const hostfacts::ThreadSettings& t = facts.host->env.threads;
  const detect::TorchThreads& torch = facts.threads->torch;
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

  const std::string& gomp = facts.threads->shared_gomp;
  const std::string& omppool = facts.threads->omppool;
  Detection f;
  f.rule = "THR002";
  f.subject = "torch.get_num_threads()";
  const std::string torch_line =
      torch.rule.empty() ? std::string("torch") : "torch's rule: " + torch.rule;
  // torch's first use in a thread (a parallel op, get_num_threads(),
  // set_num_threads()) runs its lazy init. In torch 2.6 and 2.14 (Debian 13
  // and unstable, measured) that re-applies torch's own default, so numba's
  // count replaces torch's only in a thread where torch already ran before
  // numba's first parallel call; 1.7 and 1.13 keep numba's count in either
  // order. 2.0-2.5 were not measured (Debian ships none).
  int torch_major = -1, torch_minor = -1;
  if (facts.torch_store)
    std::sscanf(facts.torch_store->version.c_str(), "%d.%d", &torch_major, &torch_minor);
  const bool reapplies = torch_major > 2 || (torch_major == 2 && torch_minor >= 6);
  const bool unmeasured = torch_major == 2 && torch_minor < 6;
  const std::string order_line =
      reapplies ? "torch " + facts.torch_store->version +
                      ": its first use in a thread re-applies its own default (lazy init), so "
                      "numba's count replaces torch's only in threads where torch ran before "
                      "numba's first parallel call (measured in torch 2.6 and 2.14)"
      : unmeasured ? "torch " + facts.torch_store->version +
                         ": whether its first use in a thread re-applies its default was not "
                         "measured (torch 2.6 and 2.14 do; 1.7 and 1.13 keep numba's count)"
                   : std::string();
  if (torch.count && after) {
    f.message = "numba's OpenMP threading layer would change torch's thread count from " +
                std::to_string(*torch.count) + " to " + std::to_string(*after) +
                " at numba's first parallel call" +
                (reapplies ? std::string(" in threads where torch already ran") : std::string()) +
                ": both run on " + gomp;
    f.evidence.push_back(
        {"torch: " + std::to_string(*torch.count) + " (" + torch.basis + ")", "", std::nullopt});
    f.evidence.push_back(
        {"numba: omp_set_num_threads(" + std::to_string(*after) + ") (" + after_why + ")", "",
         std::nullopt});
    f.evidence.push_back(
        {omppool + " and torch resolve libgomp.so.1 to " + gomp, "", std::nullopt});
    f.evidence.push_back({torch_line, "", std::nullopt});
    if (!order_line.empty()) f.evidence.push_back({order_line, "", std::nullopt});
    for (const std::string& e : torch.evidence) f.evidence.push_back({e, "", std::nullopt});
    f.fix = "export NUMBA_NUM_THREADS=" + std::to_string(*torch.count) +
            " so numba asks for torch's count; or call torch.set_num_threads() after numba's first "
            "parallel "
            "call; or NUMBA_THREADING_LAYER=workqueue to keep numba off libgomp";
    f.env_fix.push_back("NUMBA_NUM_THREADS=" + std::to_string(*torch.count));
    out.push_back(std::move(f));
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
  out.push_back(std::move(f));
}
