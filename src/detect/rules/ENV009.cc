// ENV009 — CUDA_VISIBLE_DEVICES lists a device twice: the CUDA runtime then
// shows no GPU at all (torch's _parse_visible_devices mirrors it), and
// torch.cuda.is_available() is False (rules/ENV009.toml). GPU006, where the
// GPUs are known, names the ones hidden and replaces this finding.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV009) {
  using namespace mld;
  if (!facts.host || !facts.host->env.cuda_visible_devices) return;
  const hostfacts::CudaVisibleDevices& cvd = *facts.host->env.cuda_visible_devices;
  if (!cvd.duplicate) return;
  Detection d = detect::env_detection("ENV009", "CUDA_VISIBLE_DEVICES", cvd.raw);
  d.message =
      "CUDA_VISIBLE_DEVICES lists " + *cvd.duplicate + " twice: CUDA then shows no GPU at all";
  d.fix = "List every device once, e.g. CUDA_VISIBLE_DEVICES=0,1,2,3.";
  out.push_back(std::move(d));
}
