// ENV007 — OPENBLAS_CORETYPE names no core of OpenBLAS's DYNAMIC_ARCH build:
// OpenBLAS prints "Core not found" and picks the kernels from CPU detection,
// so the override does nothing (rules/ENV007.toml). hostfacts compares it,
// case-insensitively, with the cores of driver/others/dynamic*.c.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV007) {
  using namespace mld;
  if (!facts.host || !facts.host->env.rejects("OPENBLAS_CORETYPE")) return;
  const std::string* value = facts.host->env.value_of("OPENBLAS_CORETYPE");
  if (!value) return;
  Detection d = detect::env_detection("ENV007", "OPENBLAS_CORETYPE", *value);
  d.message = "OPENBLAS_CORETYPE=\"" + *value +
              "\" names no OpenBLAS core: OpenBLAS prints \"Core not found\" and picks the "
              "kernels from CPU detection";
  d.fix =
      "Set OPENBLAS_CORETYPE to a core name OpenBLAS knows (Haswell, SkylakeX, Zen, NeoverseN1, "
      "...), or unset it to let OpenBLAS detect the CPU.";
  out.push_back(std::move(d));
}
