// DIST002 — two ranks of one NCCL communicator created it on the same GPU:
// what NCCL refuses with "Duplicate GPU detected" (NCCL010), or, where it
// cannot tell, a job whose ranks share a GPU and wait on each other. The
// facts are run's trace of each process's device calls: ranks belong to one
// communicator when their ncclCommInitRank* calls carry the same unique id
// (its digest), and a rank's device is the one current on its calling
// thread (detect/device-binding.h), as a GPU under its own
// CUDA_VISIBLE_DEVICES (ordinal 0 of "2" and of "3" are two GPUs).
#include <map>
#include <set>

#include "detect/detect.h"
#include "detect/device-binding.h"
#include "detect/env-detection.h"

MLD_DETECTOR(DIST002) {
  using namespace mld;
  using namespace mld::detect;
  struct Member {
    const DeviceProcess* p;
    const NcclInit* init;
    long long ordinal;
  };
  // communicator -> GPU -> its first init in each process
  std::map<std::string, std::map<std::string, std::vector<Member>>> by_gpu;
  for (const DeviceProcess& p : facts.device_bindings) {
    std::set<std::string> seen;  // (communicator, GPU) of this process
    for (const NcclInit& init : p.inits) {
      const InitDevice d = init_device(p, init);
      const std::string gpu = physical_gpu(p, d.ordinal);
      if (gpu.empty() || !seen.insert(init.comm_id + "|" + gpu).second) continue;
      by_gpu[init.comm_id][gpu].push_back({&p, &init, d.ordinal});
    }
  }
  for (const auto& [comm, gpus] : by_gpu) {
    for (const auto& [gpu, members] : gpus) {
      if (members.size() < 2) continue;
      std::vector<std::string> ranks;
      for (const Member& m : members) ranks.push_back(rank_name(*m.p, m.init));
      Detection det;
      det.rule = "DIST002";
      det.subject = "GPU " + gpu;
      det.message = joined(ranks) + " created one NCCL communicator on the same GPU " + gpu;
      if (!comm.empty()) det.message += " (unique id " + comm + ")";
      bool failed = false, unbound = false;
      std::vector<std::string> fixes;
      for (const Member& m : members) {
        det.evidence.push_back(
            {rank_name(*m.p, m.init) + ": " + init_text(*m.p, *m.init) +
                 "; LOCAL_RANK=" + m.p->local_rank.value_or("(unset)") +
                 " CUDA_VISIBLE_DEVICES=" + m.p->cuda_visible_devices.value_or("(unset)"),
             "", std::nullopt});
        const InitDevice d = init_device(*m.p, *m.init);
        if (d.request && d.request->ret && *d.request->ret != 0) failed = true;
        if (d.how == InitDevice::How::Default) unbound = true;
        if (const std::optional<long long> local = env_number(m.p->local_rank))
          fixes.push_back("rank " + m.p->rank.value_or("?") + " → cuda:" + std::to_string(*local));
      }
      if (failed)
        det.message +=
            "; the device was asked for with a call that failed, so this is what the "
            "program meant, not what CUDA did";
      if (unbound) det.message += "; a rank never bound a device and stayed on device 0";
      det.fix =
          "give each rank of the node its own GPU from LOCAL_RANK before init_process_group: "
          "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) (or device_id= in "
          "init_process_group), never a hard-coded cuda:0 or the global RANK";
      if (!fixes.empty()) det.fix += " (" + joined(fixes) + ")";
      det.fix += "; launch at most as many ranks per node as it has visible GPUs";
      out.push_back(std::move(det));
    }
  }
}
