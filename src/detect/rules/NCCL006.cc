// NCCL006 — NCCL_P2P_LEVEL is not a level NCCL knows (names are
// case-sensitive; nvidia-smi's NODE is not one): NCCL ignores it. The fix
// suggests the level meant (gpu::valid_p2p_level).
#include <cctype>

#include "detect/detect.h"

MLD_DETECTOR(NCCL006) {
  using namespace mld;
  if (!facts.gpu) return;
  const std::optional<std::string>& level = facts.gpu->env.nccl_p2p_level;
  if (!level || gpu::valid_p2p_level(*level)) return;
  std::string upper;
  for (char c : *level) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string suggestion = upper == "NODE" ? "PHB" : gpu::valid_p2p_level(upper) ? upper : "";
  Detection d;
  d.rule = "NCCL006";
  d.subject = "NCCL_P2P_LEVEL";
  d.message = "NCCL_P2P_LEVEL=" + *level +
              " is not a level NCCL knows (LOC, NVL, PIX, PXB, PHB, SYS or a number; names are "
              "case-sensitive): NCCL ignores it and uses its default" +
              (upper == "NODE" ? "; nvidia-smi's NODE is NCCL's PHB" : "");
  d.fix = suggestion.empty() ? "Use one of LOC, NVL, PIX, PXB, PHB, SYS, or unset it."
                             : "Write NCCL_P2P_LEVEL=" + suggestion + ".";
  d.env_fix.push_back(suggestion.empty() ? "-NCCL_P2P_LEVEL" : "NCCL_P2P_LEVEL=" + suggestion);
  out.push_back(std::move(d));
}
