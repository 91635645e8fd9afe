// env-detection.h — what the ENV rules' detectors share: a detection about
// one environment variable, with `NAME=value` as its evidence, as every ENV
// finding has carried it since the rules were written (rules/ENV0*.toml).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "findings/findings.h"

namespace mld::detect {

inline Detection env_detection(const char* rule, const std::string& name,
                               const std::string& value) {
  Detection d;
  d.rule = rule;
  d.subject = name;
  d.evidence.push_back({name + "=" + value, "environment", std::nullopt});
  return d;
}

// "a, b, c" (or with another separator).
inline std::string joined(const std::vector<std::string>& items, const char* sep = ", ") {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

}  // namespace mld::detect
