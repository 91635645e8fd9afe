// RUN001 — the command `run` started left no events: its shims (the audit
// module, the preload interposer) did not load in it (a static or setuid
// program, or one that cleared LD_AUDIT/LD_PRELOAD), so nothing inside it
// could be seen.
#include "detect/detect.h"

MLD_DETECTOR(RUN001) {
  using namespace mld;
  if (!facts.trace_coverage) return;
  const detect::TraceCoverage& c = *facts.trace_coverage;
  if (!c.command_pid || c.command_seen) return;
  Detection d;
  d.rule = "RUN001";
  d.subject = "pid " + std::to_string(c.command_pid);
  d.message =
      "the command ran, but mldoctor's shims did not load in it: loads, dlopen errors and "
      "thread-count calls inside it were not seen";
  for (const std::string& r : c.not_traced_reasons) d.evidence.push_back({r, "", std::nullopt});
  if (c.not_traced_reasons.empty())
    d.evidence.push_back(
        {"no events from pid " + std::to_string(c.command_pid) +
             " (a static or setuid program, or one that cleared LD_AUDIT/LD_PRELOAD)",
         "", std::nullopt});
  d.fix =
      "run the dynamically linked program itself (for a setuid or static wrapper, the program it "
      "starts)";
  out.push_back(std::move(d));
}
