// death-evidence.h — the evidence RUN003-RUN006 share about a command that
// died of a signal: the kernel's lines about the job, why they could not be
// read, the largest resident set, and the object a trap or segfault names.
#pragma once

#include "detect/detect.h"

namespace mld::detect {

// "libfoo.so" from "... error 4 in libfoo.so[7f..+1000]" (the kernel's
// traps and segfault lines); "" when no line names one.
inline std::string faulting_object(const std::vector<std::string>& kernel_lines) {
  for (const std::string& l : kernel_lines) {
    if (l.find("segfault at") == std::string::npos && l.find("trap ") == std::string::npos)
      continue;
    size_t in = l.rfind(" in ");
    if (in == std::string::npos) continue;
    size_t bracket = l.find('[', in);
    std::string object =
        l.substr(in + 4, bracket == std::string::npos ? std::string::npos : bracket - in - 4);
    if (!object.empty() && object.find(' ') == std::string::npos) return object;
  }
  return {};
}

// The C and C++ runtime and the loader: a fault there comes from a bad
// pointer or size its caller passed, so the object is not the culprit.
inline bool runtime_object(const std::string& object) {
  for (const char* base : {"libc.so", "libc-", "libstdc++.so", "libpthread", "ld-linux", "libm.so"})
    if (object.rfind(base, 0) == 0) return true;
  return false;
}

inline void add_death_evidence(const DeathFacts& d, Detection& det) {
  for (const std::string& l : d.kernel_lines)
    det.evidence.push_back({l, "kernel log", std::nullopt});
  if (!d.kernel_note.empty()) det.evidence.push_back({d.kernel_note, "", std::nullopt});
  if (d.signal != 9) return;  // memory matters to a SIGKILL only
  if (d.peak_rss_bytes)
    det.evidence.push_back({"largest resident set of the job's processes: " +
                                hostfacts::human_bytes(*d.peak_rss_bytes),
                            "", std::nullopt});
  if (!d.cgroup_note.empty()) det.evidence.push_back({d.cgroup_note, "", std::nullopt});
}

}  // namespace mld::detect
