// GPU003 — an IOMMU in translation mode on a node with several GPUs: NCCL's
// guide warns that IO virtualization can send PCI peer-to-peer traffic to
// the root complex. Active IOMMU units (/sys/class/iommu) or a kernel command
// line that turns it on, without iommu=pt, as gpu::collect read them.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(GPU003) {
  using namespace mld;
  using detect::gpu_text::join;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  if (f.gpus.size() < 2 || f.iommu.passthrough) return;
  bool on_cmdline = false;
  for (const std::string& flag : f.iommu.cmdline_flags)
    if (flag == "intel_iommu=on" || flag == "amd_iommu=on" || flag == "iommu=force" ||
        flag == "iommu.passthrough=0")
      on_cmdline = true;
  if (f.iommu.units.empty() && !on_cmdline) return;
  std::string why =
      !f.iommu.units.empty() ? "IOMMU units " + join(f.iommu.units) + " are active" : "";
  if (on_cmdline)
    why += std::string(why.empty() ? "" : " and ") + "the kernel command line has " +
           join(f.iommu.cmdline_flags, " ");
  Detection d;
  d.rule = "GPU003";
  d.subject = "IOMMU";
  d.message = why + " without iommu=pt: DMA between the " + std::to_string(f.gpus.size()) +
              " GPUs is translated, and NCCL's guide warns that IO virtualization can send PCI "
              "peer-to-peer traffic to the root complex (slow, or a hang)";
  d.fix =
      "On bare metal add iommu=pt to the kernel command line (or disable VT-d/IOMMU in the BIOS) "
      "and reboot; inside a VM this is expected.";
  if (f.iommu.cmdline) d.evidence.push_back({*f.iommu.cmdline, "/proc/cmdline", std::nullopt});
  out.push_back(std::move(d));
}
