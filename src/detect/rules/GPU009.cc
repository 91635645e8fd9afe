// GPU009 — NVIDIA GPUs on the PCI bus but no /proc/driver/nvidia: the nvidia
// kernel module is not loaded and CUDA sees no device.
#include "detect/detect.h"

MLD_DETECTOR(GPU009) {
  using namespace mld;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  if (f.gpus.empty() || f.driver_version || f.driver_loaded) return;
  Detection d;
  d.rule = "GPU009";
  d.subject = "NVIDIA driver";
  d.message = std::to_string(f.gpus.size()) + " NVIDIA GPU(s) (" + f.gpus.front().pci.address +
              (f.gpus.size() > 1 ? ", ..." : "") +
              ") but no /proc/driver/nvidia: the nvidia kernel module is not loaded, CUDA sees no "
              "device";
  d.fix = "Load the driver (modprobe nvidia, or install it: nvidia-smi must list the GPUs).";
  out.push_back(std::move(d));
}
