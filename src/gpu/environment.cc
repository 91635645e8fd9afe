// environment.cc — the variables the GPU and NCCL rules judge, read with the
// other GPU facts so that detection never goes back to the machine, and the
// CUDA runtime's reading of CUDA_VISIBLE_DEVICES against the GPUs present:
// entries in order up to the first it cannot use ("If one of the indices is
// invalid, only the devices whose index precedes the invalid index are
// visible"), none at all when an entry repeats.
#include "gpu/gpu-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::gpu {

GpuEnv read_gpu_env(const host::Host& host) {
  GpuEnv e;
  e.cuda_visible_devices = host.getenv("CUDA_VISIBLE_DEVICES");
  e.local_world_size = host.getenv("LOCAL_WORLD_SIZE");
  e.local_rank = host.getenv("LOCAL_RANK");
  e.nccl_socket_ifname = host.getenv("NCCL_SOCKET_IFNAME");
  e.nccl_ib_hca = host.getenv("NCCL_IB_HCA");
  e.nccl_ib_disable = host.getenv("NCCL_IB_DISABLE");
  e.nccl_p2p_disable = host.getenv("NCCL_P2P_DISABLE");
  e.nccl_shm_disable = host.getenv("NCCL_SHM_DISABLE");
  e.nccl_p2p_level = host.getenv("NCCL_P2P_LEVEL");
  e.nccl_debug = host.getenv("NCCL_DEBUG");
  return e;
}

CudaVisibility cuda_visibility(const GpuFacts& facts) {
  CudaVisibility out;
  const size_t n = facts.gpus.size();
  out.visible = n;
  if (!facts.env.cuda_visible_devices || n == 0) return out;
  hostfacts::CudaVisibleDevices d =
      hostfacts::parse_cuda_visible_devices(*facts.env.cuda_visible_devices);
  out.visible = 0;
  if (d.duplicate) {
    out.stop = CudaVisibility::Stop::Duplicate;
    out.entry = *d.duplicate;
    return out;
  }
  bool uuids_known = false;
  for (const Gpu& g : facts.gpus) uuids_known = uuids_known || !g.uuid.empty();
  for (const std::string& e : d.devices) {
    if (e.starts_with("GPU-")) {
      bool match = false;
      for (const Gpu& g : facts.gpus) match = match || (!g.uuid.empty() && g.uuid.starts_with(e));
      if (uuids_known && !match) {
        out.stop = CudaVisibility::Stop::UnknownUuid;
        out.entry = e;
        return out;
      }
    } else if (!e.starts_with("MIG-") && std::stoull(e) >= n) {
      out.stop = CudaVisibility::Stop::IndexBeyond;
      out.entry = e;
      return out;
    }
    out.before.push_back(e);
    out.visible++;
  }
  return out;
}

}  // namespace mld::gpu
