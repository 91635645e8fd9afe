// ENV008 — TORCH_CUDA_ARCH_LIST has elements torch cannot read: building a
// CUDA extension raises "Unknown CUDA arch" (rules/ENV008.toml). A trailing
// or doubled separator makes an empty element. hostfacts splits the list as
// torch.utils.cpp_extension._get_cuda_arch_flags does and keeps the bad ones.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV008) {
  using namespace mld;
  if (!facts.host || !facts.host->env.rejects("TORCH_CUDA_ARCH_LIST")) return;
  const hostfacts::EnvFacts& e = facts.host->env;
  const std::string* value = e.value_of("TORCH_CUDA_ARCH_LIST");
  if (!value) return;
  std::vector<std::string> bad;
  for (const std::string& element : e.torch_cuda_arch_bad)
    bad.push_back(element.empty() ? "(empty element)" : "\"" + element + "\"");
  Detection d = detect::env_detection("ENV008", "TORCH_CUDA_ARCH_LIST", *value);
  d.message = "TORCH_CUDA_ARCH_LIST=\"" + *value +
              "\" has elements torch cannot read: " + detect::joined(bad) +
              "; building a CUDA extension raises \"Unknown CUDA arch\"";
  d.fix =
      "Write TORCH_CUDA_ARCH_LIST as capabilities separated by one ';' or one blank, each \"X.Y\" "
      "optionally followed by \"+PTX\" (\"8.0;9.0+PTX\"), with no leading, trailing or doubled "
      "separators.";
  out.push_back(std::move(d));
}
