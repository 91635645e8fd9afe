// GPU007 — several GPUs are visible to each process (seed 004): every local
// rank must select its own GPU before its first collective, or
// ProcessGroupNCCL's barrier() guesses GPU rank % GPUs and can hang. How many
// a process sees is gpu::cuda_visibility's reading of CUDA_VISIBLE_DEVICES.
#include "detect/detect.h"

MLD_DETECTOR(GPU007) {
  using namespace mld;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const size_t visible = gpu::cuda_visibility(f).visible;
  if (visible < 2) return;
  const std::string n = std::to_string(visible);
  Detection d;
  d.rule = "GPU007";
  d.subject = "rank binding";
  d.message = n +
              " GPUs are visible to each process: every local rank must select its own GPU "
              "before its first collective, or ProcessGroupNCCL guesses GPU rank % " +
              n +
              " for barrier() (\"devices used by this process are currently unknown\") and can "
              "hang";
  d.fix =
      "In each rank, before init_process_group: torch.cuda.set_device(local_rank) with "
      "local_rank = int(os.environ[\"LOCAL_RANK\"]); or init_process_group(..., "
      "device_id=torch.device(\"cuda\", local_rank)); or dist.barrier(device_ids=[local_rank]).";
  if (f.env.local_rank) d.evidence.push_back({"LOCAL_RANK=" + *f.env.local_rank, "", std::nullopt});
  out.push_back(std::move(d));
}
