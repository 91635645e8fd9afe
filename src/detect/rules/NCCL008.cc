// NCCL008 — an NCCL transport switch that is not a whole number: ncclParam
// reads it with strtoll, which stops at the first character that is not a
// digit, so NCCL_P2P_DISABLE=true reads as 0 and leaves P2P on. One detection
// per variable, in the order NCCL_P2P_DISABLE, NCCL_SHM_DISABLE,
// NCCL_IB_DISABLE.
#include "detect/detect.h"

MLD_DETECTOR(NCCL008) {
  using namespace mld;
  if (!facts.gpu) return;
  const gpu::GpuEnv& e = facts.gpu->env;
  const std::pair<const char*, const std::optional<std::string>*> switches[] = {
      {"NCCL_P2P_DISABLE", &e.nccl_p2p_disable},
      {"NCCL_SHM_DISABLE", &e.nccl_shm_disable},
      {"NCCL_IB_DISABLE", &e.nccl_ib_disable}};
  for (const auto& [name, value] : switches) {
    const std::optional<std::string>& v = *value;
    if (!v || v->empty()) continue;
    const std::optional<gpu::NcclInt> n = gpu::parse_nccl_int(*v);
    if (!n || n->whole) continue;
    const std::string lower = ascii_lower(*v);
    const bool truthy = lower == "true" || lower == "yes" || lower == "on" || lower == "y";
    Detection d;
    d.rule = "NCCL008";
    d.subject = name;
    d.message = std::string(name) + "=" + *v + " is read by NCCL as " + std::to_string(n->value) +
                " (strtoll stops at the first character that is not a digit)" +
                (n->value == 0 ? ": the transport stays enabled" : "");
    d.fix = "Write 1 to disable, 0 (or nothing) to keep it.";
    d.env_fix.push_back(std::string(name) + "=" + (truthy ? "1" : std::to_string(n->value)));
    out.push_back(std::move(d));
  }
}
