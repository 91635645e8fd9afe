// ENV010 — CUDA_VISIBLE_DEVICES has an entry the CUDA runtime cannot read
// (a blank, an empty entry, a UUID among indices): it stops there, and the
// devices after it are hidden (rules/ENV010.toml). The usual ways to hide
// every GPU on purpose ("", "-1", Slurm's "NoDevFiles") are not reported.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV010) {
  using namespace mld;
  if (!facts.host || !facts.host->env.cuda_visible_devices) return;
  const hostfacts::CudaVisibleDevices& cvd = *facts.host->env.cuda_visible_devices;
  if (cvd.duplicate || !cvd.stopped_at || cvd.hides_all) return;
  std::string visible = cvd.devices.empty() ? "no GPU" : "only " + detect::joined(cvd.devices, ",");
  Detection d = detect::env_detection("ENV010", "CUDA_VISIBLE_DEVICES", cvd.raw);
  d.message = "CUDA_VISIBLE_DEVICES stops at the invalid entry \"" +
              std::string(trim(*cvd.stopped_at)) + "\": " + visible + " stays visible";
  d.fix =
      "Write CUDA_VISIBLE_DEVICES as comma-separated indices (0,1), or GPU UUIDs (GPU-...), or "
      "MIG UUIDs (MIG-...), one kind only, without blanks or empty entries.";
  out.push_back(std::move(d));
}
