// GPU006 — CUDA_VISIBLE_DEVICES lists one GPU twice: the CUDA runtime then
// shows no device at all. It names the GPUs present, so it replaces ENV009
// (rules/GPU006.toml), which reports the repeated entry alone.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(GPU006) {
  using namespace mld;
  using namespace mld::detect::gpu_text;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const gpu::CudaVisibility v = gpu::cuda_visibility(f);
  if (v.stop != gpu::CudaVisibility::Stop::Duplicate) return;
  std::vector<std::string> indices;
  for (const gpu::Gpu& g : f.gpus) indices.push_back(std::to_string(g.index));
  Detection d;
  d.rule = "GPU006";
  d.subject = "CUDA_VISIBLE_DEVICES";
  d.message = "CUDA_VISIBLE_DEVICES=" + *f.env.cuda_visible_devices + " lists " + v.entry +
              " twice: CUDA then shows none of the " + gpus_present(f);
  d.fix = "List each GPU once, e.g. CUDA_VISIBLE_DEVICES=" + join(indices, ",") +
          "; a launcher that gives each rank its own GPU sets one index per rank.";
  d.evidence.push_back(gpus_evidence(f));
  out.push_back(std::move(d));
}
