// GPU004 — CUDA_VISIBLE_DEVICES names an index beyond the GPUs present: CUDA
// stops at it and keeps only the entries before it. Escalated (the rule's
// `escalated_severity`, a warning) when some GPUs before it stay visible;
// an error when CUDA shows none. The reading of the variable is
// gpu::cuda_visibility's.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(GPU004) {
  using namespace mld;
  using namespace mld::detect::gpu_text;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const gpu::CudaVisibility v = gpu::cuda_visibility(f);
  if (v.stop != gpu::CudaVisibility::Stop::IndexBeyond) return;
  Detection d;
  d.rule = "GPU004";
  d.escalated = !v.before.empty();
  d.subject = "CUDA_VISIBLE_DEVICES";
  d.message = "CUDA_VISIBLE_DEVICES=" + *f.env.cuda_visible_devices + ": index " + v.entry +
              " is beyond the " + gpus_present(f) + ": CUDA stops at it and shows " +
              stays_visible(v);
  d.fix = "Use indices below " + std::to_string(f.gpus.size()) +
          " (nvidia-smi -L lists them), or GPU UUIDs.";
  d.evidence.push_back(gpus_evidence(f));
  out.push_back(std::move(d));
}
