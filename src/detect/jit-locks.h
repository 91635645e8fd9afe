// jit-locks.h — what the three lock rules (JIT001 stale, JIT002 held,
// JIT003 on a network filesystem) say alike about a torch extension build
// lock: its path as the subject, its build directory, age and filesystem;
// and the evidence the toolchain rules escalate on (builds in sight).
#pragma once

#include <string>

#include "detect/detect.h"

namespace mld::detect {

// "3 extension builds in sight, e.g. <path>": why a toolchain rule is an
// error here (the next load() builds); nullopt when the scan found none.
inline std::optional<Evidence> builds_in_sight(const jit::JitReport& r) {
  if (r.extensions.empty()) return std::nullopt;
  const size_t n = r.extensions.size();
  return Evidence{std::to_string(n) + " extension build" + (n == 1 ? "" : "s") +
                      " in sight, e.g. " + r.extensions.front().path,
                  "", std::nullopt};
}

inline std::string lock_age_text(std::optional<i64> s) {
  if (!s) return "of unknown age";
  if (*s < 120) return std::to_string(*s) + " s old";
  if (*s < 7200) return std::to_string(*s / 60) + " min old";
  if (*s < 172800) return std::to_string(*s / 3600) + " h old";
  return std::to_string(*s / 86400) + " days old";
}

// "a → b, c → d": symbolic links as followed.
inline std::string links_text(const std::vector<host::SymlinkStep>& links) {
  std::string out;
  for (const host::SymlinkStep& l : links)
    out += (out.empty() ? "" : ", ") + l.path + " → " + l.target;
  return out;
}

// " (really /scratch/u/x/lock)" when links make the lock's real path differ.
inline std::string real_lock_text(const jit::LockState& l) {
  return l.real_path.empty() || l.real_path == l.path ? "" : " (really " + l.real_path + ")";
}

// A detection about the lock of `e`, with the evidence every lock rule gives:
// where the build directory is, and through which links torch reaches it.
inline Detection lock_detection(const jit::Extension& e) {
  const jit::LockState& l = *e.lock;
  Detection d;
  d.subject = l.path;
  d.evidence.push_back({"build directory " + e.path + " (" + e.root_kind + ")", "", std::nullopt});
  if (!e.links.empty())
    d.evidence.push_back({"reached through the symbolic link" +
                              std::string(e.links.size() == 1 ? " " : "s ") + links_text(e.links) +
                              ": the directory is " + e.real_path,
                          "", std::nullopt});
  d.evidence.push_back({"lock " + lock_age_text(l.age_seconds) +
                            (l.filesystem.empty() ? "" : ", on " + l.filesystem) +
                            (l.symlink ? ", a symbolic link" : ""),
                        "", std::nullopt});
  return d;
}

}  // namespace mld::detect
