// DIST001 — a rank created its NCCL communicator without having bound a
// GPU: no cudaSetDevice (or cuCtxSetCurrent) on the thread that called
// ncclCommInitRank, so the communicator was made on CUDA's default device
// 0 while the rank's LOCAL_RANK names another GPU. This is the state behind
// torch's "using GPU N to perform barrier as devices used by this process
// are currently unknown" and the hang of field report seed 004. The facts
// are run's trace of the job's device calls (detect/device-binding.h).
//
// A rank whose LOCAL_RANK is 0 is not reported: device 0 is its own GPU,
// and torch's device guard skips cudaSetDevice when the device asked for is
// already current, so no call is expected there.
#include "detect/detect.h"
#include "detect/device-binding.h"

MLD_DETECTOR(DIST001) {
  using namespace mld;
  using namespace mld::detect;
  for (const DeviceProcess& p : facts.device_bindings) {
    for (const NcclInit& init : p.inits) {
      const InitDevice d = init_device(p, init);
      if (d.request || d.ordinal != 0) continue;  // bound, or on another device by other means
      const std::optional<long long> local = env_number(p.local_rank);
      const std::optional<long long> rank = env_number(p.rank);
      if (local ? *local == 0 : !rank || *rank == 0) continue;
      Detection det;
      det.rule = "DIST001";
      det.subject = rank_name(p, &init);
      det.message = rank_name(p, &init) + " created its NCCL communicator (" + init.fn +
                    ") on device 0 without binding a GPU first";
      if (local)
        det.message += ", while its LOCAL_RANK is " + std::to_string(*local);
      else
        det.message += "; LOCAL_RANK is not set, RANK is " + std::to_string(*rank);
      det.evidence.push_back({init_text(p, init), "", std::nullopt});
      if (!init.current_device && !init.current_device_unknown.empty())
        det.evidence.push_back(
            {"current device not asked: " + init.current_device_unknown, "", std::nullopt});
      for (const DeviceRequest& r : p.requests)
        if (r.tid != init.tid) {
          det.evidence.push_back({request_text(r) + " — another thread: CUDA's current device "
                                                    "belongs to the thread that set it",
                                  "", std::nullopt});
          break;
        }
      det.evidence.push_back(
          {"environment: LOCAL_RANK=" + p.local_rank.value_or("(unset)") + " RANK=" +
               p.rank.value_or("(unset)") + " WORLD_SIZE=" + p.world_size.value_or("(unset)") +
               " CUDA_VISIBLE_DEVICES=" + p.cuda_visible_devices.value_or("(unset)"),
           "", std::nullopt});
      const std::string lr = local ? std::to_string(*local) : std::string("local_rank");
      det.fix = "bind the rank to its GPU before the process group creates a communicator (" +
                p.process +
                "): local_rank = int(os.environ['LOCAL_RANK']); torch.cuda.set_device(local_rank) "
                "before dist.init_process_group(...), or (torch >= 2.3) "
                "dist.init_process_group('nccl', device_id=torch.device('cuda', local_rank)); "
                "here local_rank is " +
                lr;
      out.push_back(std::move(det));
      break;  // one finding per process: the first init tells it
    }
  }
}
