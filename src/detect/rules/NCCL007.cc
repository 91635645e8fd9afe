// NCCL007 — NCCL_P2P_DISABLE or NCCL_SHM_DISABLE set on a node with several
// GPUs: their data goes through host memory or the network transport instead
// of PCIe/NVLink peer-to-peer. Usually a workaround (for ACS: the message
// names the port GPU001 found) left set after the cause is fixed. Both set is
// escalated (the rule's `escalated_severity`, a warning): every byte between
// the node's GPUs then crosses the network transport.
#include "detect/detect.h"

namespace {

// A transport switch as ncclParam reads it: set to a number other than 0.
bool disabled(const std::optional<std::string>& v) {
  if (!v || v->empty()) return false;
  std::optional<mld::gpu::NcclInt> n = mld::gpu::parse_nccl_int(*v);
  return n && n->value != 0;
}

}  // namespace

MLD_DETECTOR(NCCL007) {
  using namespace mld;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const bool p2p_off = disabled(f.env.nccl_p2p_disable);
  const bool shm_off = disabled(f.env.nccl_shm_disable);
  const size_t gpus = f.gpus.size();
  if ((!p2p_off && !shm_off) || gpus < 2) return;
  const std::string what = p2p_off && shm_off ? "NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are both set"
                           : p2p_off          ? "NCCL_P2P_DISABLE=" + *f.env.nccl_p2p_disable
                                              : "NCCL_SHM_DISABLE=" + *f.env.nccl_shm_disable;
  std::string effect =
      p2p_off && shm_off ? ": the " + std::to_string(gpus) +
                               " GPUs of this node exchange data through the network transport"
      : p2p_off
          ? ": the " + std::to_string(gpus) +
                " GPUs of this node exchange data through host shared memory, not PCIe/NVLink "
                "peer-to-peer"
          : ": GPUs without peer-to-peer access exchange data through the network transport";
  if (p2p_off && !f.acs_blocks.empty())
    effect +=
        " (the usual workaround for the ACS redirection at " + f.acs_blocks.front().bridge + ")";
  Detection d;
  d.rule = "NCCL007";
  d.escalated = p2p_off && shm_off;
  d.subject = p2p_off ? "NCCL_P2P_DISABLE" : "NCCL_SHM_DISABLE";
  d.message = what + effect;
  d.fix = "Unset the variable once the cause it works around (ACS, IOMMU, a driver bug) is fixed.";
  out.push_back(std::move(d));
}
