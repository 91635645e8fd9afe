// ENV001 — a thread-count variable that is not a positive integer. GNU
// libgomp and LLVM/Intel OpenMP warn and start one thread per CPU, MKL and
// OpenBLAS fall back to their defaults, numba refuses it: the
// oversubscription the variable was meant to prevent (rules/ENV001.toml).
// hostfacts reads each as its runtime does; where the usable CPUs are known,
// the fix is the count that divides them among this node's ranks.
#include <algorithm>

#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV001) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::HostFacts& h = facts.host->host;
  const hostfacts::EnvFacts& e = facts.host->env;
  // Threads per rank that keep ranks x threads within the usable CPUs.
  const u32 ranks = h.ranks_per_node.count.value_or(1);
  std::optional<u32> per_rank;
  if (h.cpu.usable) per_rank = std::max<u32>(1, *h.cpu.usable / std::max<u32>(1, ranks));

  struct Count {
    const char* name;
    const char* consequence;
  };
  for (const Count& c : {
           Count{"OMP_NUM_THREADS",
                 "GNU libgomp prints \"Invalid value for environment variable OMP_NUM_THREADS\" "
                 "and LLVM/Intel OpenMP a warning, and both run one thread per CPU instead"},
           Count{"MKL_NUM_THREADS", "MKL ignores it and uses its default"},
           Count{"OPENBLAS_NUM_THREADS", "OpenBLAS ignores it and starts one thread per CPU"},
           Count{"GOTO_NUM_THREADS", "OpenBLAS ignores it and starts one thread per CPU"},
           Count{"NUMBA_NUM_THREADS",
                 "numba rejects it (a warning for text, an error for values below 1)"},
       }) {
    const std::string* value = e.value_of(c.name);
    if (!value || !e.rejects(c.name)) continue;
    const std::string name = c.name;
    Detection d = detect::env_detection("ENV001", name, *value);
    d.message = name + "=\"" + *value + "\" is not a thread count: " + c.consequence;
    d.fix = "Set " + name + " to a positive integer (threads per process), or unset it.";
    if (per_rank) {
      d.env_fix.push_back(name + "=" + std::to_string(*per_rank));
      d.fix += " On this node: " + std::to_string(*h.cpu.usable) + " usable CPUs / " +
               std::to_string(ranks) + " rank(s) = " + std::to_string(*per_rank) + ".";
    }
    out.push_back(std::move(d));
  }
}
