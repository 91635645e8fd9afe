// findings.h — the one model of a diagnosis shared by every command: a rule
// id (stable API, e.g. "LD001"), a severity, the subject it is about, a
// one-line message, the evidence that supports it and the fix. Analysis code
// produces Findings into a FindingSink and never prints; reporters (text,
// JSON, Markdown) turn them into output.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"

namespace mld {

enum class Severity { Info, Warning, Error };
std::string_view severity_name(Severity s);  // "info", "warning", "error"
std::optional<Severity> parse_severity(std::string_view s);

// One piece of evidence: a fact and where it was seen.
struct Evidence {
  std::string text;         // "libgomp.so.1 => /usr/lib/.../libgomp.so.1"
  std::string file;         // optional: file the fact comes from
  std::optional<u64> line;  // optional: line in that file
  bool context = false;     // a line shown around the evidence, not evidence itself
};

struct Finding {
  std::string rule;  // "LD001"
  Severity severity = Severity::Warning;
  std::string subject;  // what it is about (a path, a variable)
  std::string message;  // one line, specific: names the objects
  std::vector<Evidence> evidence;
  std::string fix;                   // the exact action, or empty
  std::vector<std::string> env_fix;  // "NAME=value" settings that fix it
  // Logs: what to collect next to see the cause this evidence only wraps
  // (the rule's `collect`), or empty.
  std::string collect;
  u64 count = 1;                 // occurrences merged into this finding
  std::optional<u64> last_line;  // logs: line of the last occurrence
  std::vector<u32> ranks;        // logs: launcher ranks that reported it, sorted
};

// What a fact detector reports about one instance of its rule: the objects
// it names and the evidence, never what its rule file owns (severity, title,
// explanation, the generic fix). rules::finding_from turns it into a Finding.
struct Detection {
  std::string rule;  // the id the detector is registered under
  std::string subject;
  std::string message;  // one line naming the objects; empty: the rule's title
  std::vector<Evidence> evidence;
  // The exact action computed from the facts ("export GLIBC_TUNABLES=...");
  // empty: the rule's own fix. env_fix likewise.
  std::string fix;
  std::vector<std::string> env_fix;
  // The condition the rule's `escalated_severity` is stated for holds (two
  // LLVM/Intel OpenMP runtimes: the second aborts).
  bool escalated = false;
};

class FindingSink {
 public:
  virtual ~FindingSink() = default;
  virtual void add(Finding f) = 0;
};

// Collects findings in memory (tests, reporters that sort before printing).
class FindingList : public FindingSink {
 public:
  void add(Finding f) override { findings.push_back(std::move(f)); }
  std::vector<Finding> findings;
};

}  // namespace mld
