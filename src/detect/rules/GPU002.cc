// GPU002 — the ACS state of the PCIe ports between GPUs cannot be read: an
// unprivileged read of a bridge's config space stops at 64 bytes, before the
// extended capabilities where ACS lives, so GPU001 cannot be ruled out.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(GPU002) {
  using namespace mld;
  if (!facts.gpu || facts.gpu->acs_unreadable.empty()) return;
  const gpu::GpuFacts& f = *facts.gpu;
  Detection d;
  d.rule = "GPU002";
  d.subject = "ACS";
  d.message = "ACS on the " + std::to_string(f.acs_unreadable.size()) +
              " PCIe port(s) between GPUs (" + detect::gpu_text::join(f.acs_unreadable) +
              ") cannot be read: config space beyond 64 bytes needs root";
  d.fix =
      "Run mldoctor check as root, or: sudo lspci -vvv | grep ACSCtl (look for ReqRedir+ or "
      "CmpltRedir+).";
  d.evidence.push_back({"/sys/bus/pci/devices/" + f.acs_unreadable.front() + "/config: " +
                            std::to_string(f.bridges.at(f.acs_unreadable.front()).config_bytes) +
                            " bytes readable",
                        "", std::nullopt});
  out.push_back(std::move(d));
}
