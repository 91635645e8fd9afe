// gpu-text.h — how the GPU and NCCL detectors (src/detect/rules/GPU00*.cc,
// NCCL00*.cc) write devices and lists, the same way in every finding.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/gpu.h"

namespace mld::detect::gpu_text {

// "a, b, c".
inline std::string join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); i++) out += (i ? std::string(sep) : "") + v[i];
  return out;
}

// "0x148" with `digits` hex digits.
inline std::string hex(unsigned v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return buf;
}

// "GPU0 0000:1a:00.0".
inline std::string gpu_name(const gpu::Gpu& g) {
  return "GPU" + std::to_string(g.index) + " " + g.pci.address;
}

// "4 GPUs here (0-3)".
inline std::string gpus_present(const gpu::GpuFacts& facts) {
  const size_t n = facts.gpus.size();
  return std::to_string(n) + " GPU" + (n == 1 ? "" : "s") + " here (0-" + std::to_string(n - 1) +
         ")";
}

// The evidence of the CUDA_VISIBLE_DEVICES rules: "GPUs: 0=0000:03:00.0 ...".
inline Evidence gpus_evidence(const gpu::GpuFacts& facts) {
  std::vector<std::string> s;
  for (const gpu::Gpu& g : facts.gpus) s.push_back(std::to_string(g.index) + "=" + g.pci.address);
  return {"GPUs: " + join(s, " "), "/sys/bus/pci/devices", std::nullopt};
}

// "CUDA stops at it and shows no GPU" / "... shows only 0,1".
inline std::string stays_visible(const gpu::CudaVisibility& v) {
  return v.before.empty() ? "no GPU" : "only " + join(v.before, ",");
}

}  // namespace mld::detect::gpu_text
