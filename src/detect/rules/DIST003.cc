// DIST003 — a rank's GPU, taken from LOCAL_RANK, is not among the devices
// its CUDA_VISIBLE_DEVICES makes visible: cudaSetDevice(LOCAL_RANK) with
// LOCAL_RANK at or past the number of devices listed (a launcher that gives
// each rank one GPU through CUDA_VISIBLE_DEVICES while the script still
// binds cuda:LOCAL_RANK, or more ranks on a node than visible GPUs). CUDA
// answers cudaErrorInvalidDevice, and torch "CUDA error: invalid device
// ordinal". The facts are run's trace of the rank's cudaSetDevice calls and
// its environment at the time (detect/device-binding.h).
#include "detect/detect.h"
#include "detect/device-binding.h"

MLD_DETECTOR(DIST003) {
  using namespace mld;
  using namespace mld::detect;
  for (const DeviceProcess& p : facts.device_bindings) {
    const std::optional<std::vector<std::string>> visible = visible_devices(p);
    if (!visible) continue;
    const long long n = static_cast<long long>(visible->size());
    const std::optional<long long> local = env_number(p.local_rank);
    const DeviceRequest* bad = nullptr;
    for (const DeviceRequest& r : p.requests)
      if (r.device >= n) {
        bad = &r;
        break;
      }
    const bool local_out = local && *local >= n && !p.inits.empty();
    if (!bad && !local_out) continue;
    const NcclInit* init = p.inits.empty() ? nullptr : &p.inits.front();
    Detection det;
    det.rule = "DIST003";
    det.subject = rank_name(p, init);
    const std::string shown =
        "CUDA_VISIBLE_DEVICES=" + *p.cuda_visible_devices + " makes " +
        (n == 0   ? std::string("no device")
         : n == 1 ? std::string("1 device (0)")
                  : std::to_string(n) + " devices (0–" + std::to_string(n - 1) + ")") +
        " visible";
    if (bad) {
      det.message = rank_name(p, init) + " asked for device " + std::to_string(bad->device) +
                    (local && *local == bad->device ? " (its LOCAL_RANK)" : "") + ", but " + shown;
      det.evidence.push_back({request_text(*bad), "", std::nullopt});
    } else {
      det.message = rank_name(p, init) + " has LOCAL_RANK=" + std::to_string(*local) + ", but " +
                    shown + ": the rank has no GPU of its own";
    }
    if (init) det.evidence.push_back({init_text(p, *init), "", std::nullopt});
    det.evidence.push_back({"environment: LOCAL_RANK=" + p.local_rank.value_or("(unset)") +
                                " RANK=" + p.rank.value_or("(unset)") +
                                " CUDA_VISIBLE_DEVICES=" + *p.cuda_visible_devices,
                            "", std::nullopt});
    if (n == 1)
      det.fix = "the launcher already gives " + p.process +
                " one GPU through CUDA_VISIBLE_DEVICES: bind device 0 "
                "(torch.cuda.set_device(0)), not LOCAL_RANK — or stop narrowing "
                "CUDA_VISIBLE_DEVICES per rank";
    else
      det.fix = "start at most " + std::to_string(n) +
                " ranks on this node (torchrun --nproc_per_node=" + std::to_string(n) +
                "), or list as many GPUs in CUDA_VISIBLE_DEVICES as ranks on the node; bind "
                "torch.cuda.set_device(local_rank) only with local_rank < "
                "torch.cuda.device_count()";
    out.push_back(std::move(det));
  }
}
