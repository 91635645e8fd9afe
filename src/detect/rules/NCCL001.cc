// NCCL001 — NCCL_SOCKET_IFNAME keeps no interface that is up (seed 004):
// NCCL stops with "Bootstrap : no socket interface found" or the ranks hang
// at the first collective. The list is read as NCCL reads it
// (gpu::parse_nccl_if_list, 16 entries) against the interfaces gpu::collect
// found; the fix names what NCCL would pick by itself.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(NCCL001) {
  using namespace mld;
  using detect::gpu_text::join;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const std::optional<std::string>& v = f.env.nccl_socket_ifname;
  // One character: NCCL ignores it (NCCL003). No interfaces: /sys/class/net
  // was unreadable, nothing to compare with.
  if (!v || v->size() < 2 || f.interfaces.empty()) return;
  const gpu::NcclSocketChoice c =
      gpu::nccl_socket_choice(f.interfaces, gpu::parse_nccl_if_list(*v, 16));
  if (!c.kept_up.empty()) return;
  Detection d;
  d.rule = "NCCL001";
  d.subject = "NCCL_SOCKET_IFNAME";
  d.message = "NCCL_SOCKET_IFNAME=" + *v + " matches no interface that is up";
  if (!c.kept_down.empty()) d.message += " (it matches " + join(c.kept_down) + ")";
  d.message +=
      ": NCCL stops with \"Bootstrap : no socket interface found\" or the ranks hang at the first "
      "collective";
  d.fix = "Name an interface that is up and reaches the other nodes";
  if (!c.candidates.empty()) d.fix += " (here: " + join(c.candidates) + ")";
  d.fix +=
      ", or unset NCCL_SOCKET_IFNAME and let NCCL choose (ib* first, then any but docker*, lo, "
      "virbr*). Run with NCCL_DEBUG=INFO to see \"NET/Socket : Using ...\".";
  d.evidence.push_back({"interfaces up: " + (c.up.empty() ? std::string("none") : join(c.up)),
                        "/sys/class/net", std::nullopt});
  d.env_fix.push_back(c.candidates.empty() ? "-NCCL_SOCKET_IFNAME"
                                           : "NCCL_SOCKET_IFNAME=" + c.candidates.front());
  out.push_back(std::move(d));
}
