// JIT008 — TORCH_CUDA_ARCH_LIST builds extensions for none of the GPUs'
// architectures (a cubin runs only on its own major release, PTX on later
// ones), so their kernels fail with "no kernel image is available". The
// facts: the list as torch parses it, and each GPU model's compute
// capability, from jit's scan.
#include <algorithm>
#include <cstdlib>
#include <map>

#include "detect/detect.h"

MLD_DETECTOR(JIT008) {
  using namespace mld;
  if (!facts.jit) return;
  const jit::JitReport& r = *facts.jit;
  if (!r.cuda_arch_list || r.cuda_arch_list->empty() || r.gpus.empty() || !r.torch_cuda) return;
  if (!r.cuda_archs) return;  // malformed: ENV008 says so
  const std::string& list = *r.cuda_arch_list;
  std::map<std::string, std::string> missing;  // model -> cc
  for (const jit::GpuArch& g : r.gpus) {
    if (!g.compute_capability) continue;
    const std::string& cc = *g.compute_capability;
    const int major = std::atoi(cc.c_str()), minor = std::atoi(cc.c_str() + cc.find('.') + 1);
    if (std::none_of(r.cuda_archs->begin(), r.cuda_archs->end(),
                     [&](const jit::CudaArch& a) { return jit::arch_runs_on(a, major, minor); }))
      missing[g.model] = cc;
  }
  if (missing.empty()) return;
  Detection d;
  d.rule = "JIT008";
  d.subject = "TORCH_CUDA_ARCH_LIST";
  std::string gpus;
  for (const auto& [m, cc] : missing) gpus += (gpus.empty() ? "" : ", ") + m + " (" + cc + ")";
  d.message =
      "TORCH_CUDA_ARCH_LIST=\"" + list + "\" builds extensions for none of the architectures of " +
      gpus +
      ": their kernels fail with \"no kernel image is available for execution on the device\"";
  d.evidence.push_back({"GPU models from /proc/driver/nvidia/gpus", "", std::nullopt});
  std::string want;
  for (const auto& [m, cc] : missing)
    if (want.find(cc) == std::string::npos) want += (want.empty() ? "" : ";") + cc;
  d.fix = "add the GPUs' architecture: TORCH_CUDA_ARCH_LIST=\"" + list + ";" + want +
          "\" (or unset it: torch then builds for the GPUs it sees), and rebuild the extensions";
  d.env_fix.push_back("TORCH_CUDA_ARCH_LIST=" + list + ";" + want);
  out.push_back(std::move(d));
}
