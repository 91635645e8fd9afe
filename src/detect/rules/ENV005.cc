// ENV005 — MKL_SERVICE_FORCE_INTEL is set, whatever its value: mkl-service
// then goes on with MKL's INTEL threading layer although GNU libgomp is
// already loaded, where it would print "MKL_THREADING_LAYER=INTEL is
// incompatible with libgomp.so.1 library" and exit (rules/ENV005.toml).
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV005) {
  using namespace mld;
  if (!facts.host) return;
  const std::string* value = facts.host->env.value_of("MKL_SERVICE_FORCE_INTEL");
  if (!value) return;
  Detection d = detect::env_detection("ENV005", "MKL_SERVICE_FORCE_INTEL", *value);
  d.message =
      "MKL_SERVICE_FORCE_INTEL is set: mkl-service keeps MKL's INTEL threading layer even when "
      "GNU libgomp is already loaded, instead of stopping the process";
  d.fix =
      "Unset MKL_SERVICE_FORCE_INTEL and set MKL_THREADING_LAYER=GNU, so MKL uses the libgomp "
      "that is loaded.";
  d.env_fix.push_back("MKL_THREADING_LAYER=GNU");
  out.push_back(std::move(d));
}
