// ENV015 — NCCL_DEBUG is not a level NCCL knows (VERSION, WARN, INFO, ABORT,
// TRACE, any case): NCCL prints nothing, so the log meant to explain a hang
// or a failed init is empty (rules/ENV015.toml).
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV015) {
  using namespace mld;
  if (!facts.host || !facts.host->env.rejects("NCCL_DEBUG")) return;
  const std::string* value = facts.host->env.value_of("NCCL_DEBUG");
  if (!value) return;
  Detection d = detect::env_detection("ENV015", "NCCL_DEBUG", *value);
  d.message = "NCCL_DEBUG=\"" + *value + "\" is not an NCCL debug level: NCCL prints nothing";
  d.fix =
      "Set NCCL_DEBUG to VERSION, WARN, INFO, ABORT or TRACE (INFO for a hang or a failed init).";
  d.env_fix.push_back("NCCL_DEBUG=INFO");
  out.push_back(std::move(d));
}
