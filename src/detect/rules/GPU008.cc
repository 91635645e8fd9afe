// GPU008 — LOCAL_WORLD_SIZE starts more ranks on this node than it has GPUs
// (CUDA_VISIBLE_DEVICES unset, so every rank sees them all): two ranks share
// a GPU and NCCL stops with "Duplicate GPU detected".
#include "detect/detect.h"

MLD_DETECTOR(GPU008) {
  using namespace mld;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const std::optional<std::string>& lws = f.env.local_world_size;
  if (!lws || f.env.cuda_visible_devices || f.gpus.empty()) return;
  u64 ranks = 0;
  try {
    size_t pos = 0;
    ranks = std::stoull(*lws, &pos);
    if (pos != lws->size()) return;
  } catch (const std::exception&) {
    return;
  }
  if (ranks <= f.gpus.size()) return;
  const std::string gpus = std::to_string(f.gpus.size());
  Detection d;
  d.rule = "GPU008";
  d.subject = "LOCAL_WORLD_SIZE";
  d.message = "LOCAL_WORLD_SIZE=" + *lws + " ranks on this node but " + gpus +
              " GPUs: at least two ranks share a GPU and NCCL stops with \"Duplicate GPU "
              "detected\"";
  d.fix = "Start at most one rank per GPU: torchrun --nproc-per-node=" + gpus + ".";
  out.push_back(std::move(d));
}
