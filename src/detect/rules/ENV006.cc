// ENV006 — NUMBA_THREADING_LAYER names no numba threading layer: the first
// parallel function raises ValueError (rules/ENV006.toml). hostfacts reads it
// as numba's parallel.py does (lower-cased, blanks trimmed).
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV006) {
  using namespace mld;
  if (!facts.host || !facts.host->env.rejects("NUMBA_THREADING_LAYER")) return;
  const std::string* value = facts.host->env.value_of("NUMBA_THREADING_LAYER");
  if (!value) return;
  Detection d = detect::env_detection("ENV006", "NUMBA_THREADING_LAYER", *value);
  d.message = "NUMBA_THREADING_LAYER=\"" + *value +
              "\" is not a numba threading layer: the first parallel function raises ValueError";
  d.fix =
      "Set NUMBA_THREADING_LAYER to one of default, safe, threadsafe, forksafe, tbb, omp, "
      "workqueue.";
  out.push_back(std::move(d));
}
