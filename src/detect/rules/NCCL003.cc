// NCCL003 — NCCL_SOCKET_IFNAME of one character: NCCL's socket code reads the
// variable only when it is longer than that (src/misc/socket.cc), and then
// picks an interface itself.
#include "detect/detect.h"

MLD_DETECTOR(NCCL003) {
  using namespace mld;
  if (!facts.gpu) return;
  const std::optional<std::string>& v = facts.gpu->env.nccl_socket_ifname;
  if (!v || v->size() != 1) return;
  Detection d;
  d.rule = "NCCL003";
  d.subject = "NCCL_SOCKET_IFNAME";
  d.message = "NCCL_SOCKET_IFNAME=" + *v +
              " is ignored: NCCL reads the variable only when it is longer than one character, "
              "and then picks an interface itself (ib* first, then any but docker*, lo, virbr*)";
  d.fix = "Write the full interface name or a longer prefix, e.g. NCCL_SOCKET_IFNAME=eth0.";
  d.evidence.push_back({"src/misc/socket.cc: if (env && strlen(env) > 1)", "", std::nullopt});
  out.push_back(std::move(d));
}
