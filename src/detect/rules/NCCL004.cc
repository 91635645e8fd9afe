// NCCL004 — NCCL_IB_HCA keeps no active InfiniBand port: NCCL falls back to
// TCP sockets or fails to connect. The list is read as NCCL reads it
// (gpu::parse_nccl_if_list, 32 entries, "name:port") against the HCAs and
// port states gpu::collect found. On a host with no InfiniBand device at all
// NCCL just uses its sockets: the detection is escalated to the rule's
// `escalated_severity`, a warning.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(NCCL004) {
  using namespace mld;
  using detect::gpu_text::join;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const std::optional<std::string>& v = f.env.nccl_ib_hca;
  if (!v || v->empty()) return;
  if (f.env.nccl_ib_disable)
    if (auto n = gpu::parse_nccl_int(*f.env.nccl_ib_disable); n && n->value != 0)
      return;  // IB is off anyway
  const std::string var = "NCCL_IB_HCA=" + *v;
  Detection d;
  d.rule = "NCCL004";
  d.subject = "NCCL_IB_HCA";
  if (f.hcas.empty()) {
    d.escalated = true;
    d.message = var +
                " but /sys/class/infiniband lists no device: NCCL finds no IB device and falls "
                "back to TCP sockets (\"NET/IB : No device found\")";
    d.fix =
        "Load the HCA's driver (mlx5_core, mlx5_ib) or, on a node without InfiniBand/RoCE, unset "
        "NCCL_IB_HCA.";
    out.push_back(std::move(d));
    return;
  }
  const gpu::NcclIfList list = gpu::parse_nccl_if_list(*v, 32);
  std::vector<std::string> names, active, inactive, all_ports;
  for (const gpu::Hca& h : f.hcas) {
    names.push_back(h.name);
    std::vector<gpu::IbPort> ports = h.ports;
    if (ports.empty()) ports.push_back({1, "", ""});
    for (const gpu::IbPort& p : ports) {
      std::string name = h.name + ":" + std::to_string(p.number);
      all_ports.push_back(name + (p.state.empty() ? "" : " " + p.state));
      if (!gpu::nccl_if_list_keeps(list, h.name, static_cast<int>(p.number))) continue;
      if (p.state.find("ACTIVE") != std::string::npos)
        active.push_back(name);
      else
        inactive.push_back(name + " (" + (p.state.empty() ? "state unknown" : p.state) + ")");
    }
  }
  if (!active.empty()) return;
  d.message = var + " keeps no active InfiniBand port";
  if (!inactive.empty()) d.message += " (it matches " + join(inactive) + ")";
  d.message +=
      "; this host has " + join(names) + ": NCCL falls back to TCP sockets or fails to connect";
  d.fix =
      "List HCAs that exist and are ACTIVE (`ibv_devinfo`, /sys/class/infiniband/*/ports/*/state), "
      "e.g. NCCL_IB_HCA==" +
      join(names, ",") + "; '=' asks for exact names (mlx5_1 alone also matches mlx5_10).";
  d.evidence.push_back({"ports: " + join(all_ports), "/sys/class/infiniband", std::nullopt});
  out.push_back(std::move(d));
}
