// THR003 — one library changed the thread count of a threading runtime
// after another library had set it (seed 003: numba's omppool resets the
// count torch gave the libgomp both use). The facts are each process's
// thread-count calls in time order, from run's trace: per runtime, a call
// from another caller that leaves a different count than the previous
// caller had set, reported once per pair of callers and runtime.
#include <map>
#include <set>

#include "detect/detect.h"

MLD_DETECTOR(THR003) {
  using namespace mld;
  auto base = [](const std::string& p) { return std::string(base_name(p)); };
  for (const detect::ThreadCountCalls& p : facts.thread_counts) {
    std::map<std::string, const detect::ThreadCountCall*> last;  // runtime -> last count setter
    std::set<std::string> reported;
    for (const detect::ThreadCountCall& c : p.calls) {
      if (c.fn.find("threading_layer") != std::string::npos ||
          c.fn.find("Threading_Layer") != std::string::npos)
        continue;
      const detect::ThreadCountCall*& l = last[c.runtime];
      const long long now = c.after.value_or(c.value);
      if (l && l->caller != c.caller) {
        const long long had = l->after.value_or(l->value);
        const long long before = c.before.value_or(had);
        if (before != now && reported.insert(c.caller + "|" + l->caller + "|" + c.runtime).second) {
          Detection d;
          d.rule = "THR003";
          d.subject = base(c.caller);
          d.message = base(c.caller) + " changed " + base(c.runtime) + "'s thread count from " +
                      std::to_string(before) + " to " + std::to_string(now) + " in " + p.process +
                      ", after " + base(l->caller) + " had set it to " + std::to_string(had);
          d.evidence.push_back({l->fn + "(" + std::to_string(l->value) + ") from " + l->caller +
                                    " into " + l->runtime,
                                "", std::nullopt});
          d.evidence.push_back({c.fn + "(" + std::to_string(c.value) + ") from " + c.caller +
                                    " into " + c.runtime + ": " + std::to_string(before) + " -> " +
                                    std::to_string(now),
                                "", std::nullopt});
          if (c.caller.find("numba") != std::string::npos) {
            d.fix = "give numba the count the other library set: export NUMBA_NUM_THREADS=" +
                    std::to_string(had) + " before Python starts, or call torch.set_num_threads(" +
                    std::to_string(had) +
                    ") after numba's first parallel call, or keep numba off this runtime with "
                    "NUMBA_THREADING_LAYER=workqueue";
            d.env_fix.push_back("NUMBA_NUM_THREADS=" + std::to_string(had));
          } else {
            d.fix =
                "set the count once for every library before the process starts "
                "(OMP_NUM_THREADS, MKL_NUM_THREADS, OPENBLAS_NUM_THREADS, NUMBA_NUM_THREADS), or "
                "set it again after " +
                base(c.caller) + " has run";
          }
          out.push_back(std::move(d));
        }
      }
      l = &c;
    }
  }
}
