// NCCL002 — NCCL_SOCKET_IFNAME keeps only loopback interfaces: a single-node
// job works, ranks on other nodes cannot connect. Same reading of the list
// as NCCL001 (gpu::nccl_socket_choice).
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(NCCL002) {
  using namespace mld;
  using detect::gpu_text::join;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const std::optional<std::string>& v = f.env.nccl_socket_ifname;
  if (!v || v->size() < 2 || f.interfaces.empty()) return;
  const gpu::NcclSocketChoice c =
      gpu::nccl_socket_choice(f.interfaces, gpu::parse_nccl_if_list(*v, 16));
  if (c.kept_up.empty() || !c.only_loopback) return;
  Detection d;
  d.rule = "NCCL002";
  d.subject = "NCCL_SOCKET_IFNAME";
  d.message = "NCCL_SOCKET_IFNAME=" + *v + " keeps only the loopback interface " + join(c.kept_up) +
              ": ranks on other nodes cannot connect (a single-node job still works)";
  d.fix = "Name the interface that carries the nodes' network" +
          (c.candidates.empty() ? std::string() : " (here: " + join(c.candidates) + ")") + ".";
  d.evidence.push_back({"interfaces up: " + (c.up.empty() ? std::string("none") : join(c.up)),
                        "/sys/class/net", std::nullopt});
  if (!c.candidates.empty()) d.env_fix.push_back("NCCL_SOCKET_IFNAME=" + c.candidates.front());
  out.push_back(std::move(d));
}
