// GPU005 — CUDA_VISIBLE_DEVICES names a GPU UUID that no GPU here has (the
// driver reported the UUIDs of this node's GPUs): CUDA stops at it. The
// evidence lists the UUIDs that exist.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(GPU005) {
  using namespace mld;
  using namespace mld::detect::gpu_text;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const gpu::CudaVisibility v = gpu::cuda_visibility(f);
  if (v.stop != gpu::CudaVisibility::Stop::UnknownUuid) return;
  Detection d;
  d.rule = "GPU005";
  d.subject = "CUDA_VISIBLE_DEVICES";
  d.message = "CUDA_VISIBLE_DEVICES names " + v.entry +
              ", which no GPU here has: CUDA stops at it and shows " + stays_visible(v);
  d.fix =
      "Use the UUIDs of this node (nvidia-smi -L, or \"GPU UUID\" in "
      "/proc/driver/nvidia/gpus/*/information), or indices.";
  for (const gpu::Gpu& g : f.gpus)
    if (!g.uuid.empty())
      d.evidence.push_back({gpu_name(g) + " " + g.uuid,
                            "/proc/driver/nvidia/gpus/" + g.pci.address + "/information",
                            std::nullopt});
  out.push_back(std::move(d));
}
