// ENV004 — MKL_THREADING_LAYER names no threading layer MKL knows (INTEL,
// SEQUENTIAL, GNU, TBB in any case; PGI is gone since oneMKL 2025.0). MKL
// then keeps its default, Intel's libiomp5, beside the libgomp torch loads
// (rules/ENV004.toml). hostfacts reads it as mkl-service does (empty = unset).
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV004) {
  using namespace mld;
  if (!facts.host || !facts.host->env.rejects("MKL_THREADING_LAYER")) return;
  const std::string* value = facts.host->env.value_of("MKL_THREADING_LAYER");
  if (!value) return;
  const std::string why = ascii_lower(trim(*value)) == "pgi"
                              ? "PGI was removed in oneMKL 2025.0"
                              : "MKL accepts INTEL, SEQUENTIAL, GNU or TBB (any case)";
  Detection d = detect::env_detection("ENV004", "MKL_THREADING_LAYER", *value);
  d.message = "MKL_THREADING_LAYER=\"" + *value + "\" is not a threading layer MKL knows: " + why;
  d.fix =
      "Set MKL_THREADING_LAYER to GNU when torch or another package brings libgomp, to INTEL "
      "with Intel's libiomp5 only, or SEQUENTIAL for no MKL threads.";
  d.env_fix.push_back("MKL_THREADING_LAYER=GNU");
  out.push_back(std::move(d));
}
