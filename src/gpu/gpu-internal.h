// gpu-internal.h — what the gpu sources share beyond the public API.
#pragma once

#include "gpu/gpu.h"

namespace mld::gpu {

// "a, b, c".
inline std::string join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); i++) out += (i ? std::string(sep) : "") + v[i];
  return out;
}

// A finding with its message and fix; evidence and env_fix added by the caller.
inline Finding make(std::string rule, Severity sev, std::string subject, std::string message,
                    std::string fix) {
  Finding f;
  f.rule = std::move(rule);
  f.severity = sev;
  f.subject = std::move(subject);
  f.message = std::move(message);
  f.fix = std::move(fix);
  return f;
}

// nccl.cc: NCCL001–NCCL009 from the NCCL_* variables against the host.
void emit_nccl_findings(const GpuFacts& facts, const host::Host& host, FindingSink& sink);

}  // namespace mld::gpu
