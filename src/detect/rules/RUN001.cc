// RUN001 — the command `run` started ran where its shims (the audit module,
// the preload interposer) could not see: either they never loaded in it (a
// static or setuid program, or one that cleared LD_AUDIT/LD_PRELOAD), or it
// was traced and then exec'd a program they did not load in (a chroot or
// container whose ld.so cannot reach or load them, a cleared environment,
// a static or setuid program). Either way what ran there is unseen, and a
// report with no findings must not read as "nothing went wrong inside".
#include "detect/detect.h"

MLD_DETECTOR(RUN001) {
  using namespace mld;
  if (!facts.trace_coverage) return;
  const detect::TraceCoverage& c = *facts.trace_coverage;
  if (!c.command_pid) return;
  if (!c.command_seen) {
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
        "run the dynamically linked program itself (for a setuid or static wrapper, the program "
        "it starts)";
    out.push_back(std::move(d));
    return;
  }
  if (c.command_chroot) {
    const detect::TraceCoverage::UnseenRoot& r = *c.command_chroot;
    Detection d;
    d.rule = "RUN001";
    d.subject = "pid " + std::to_string(c.command_pid);
    d.message = "the command changed its root directory to " + r.path + " (chroot() from " +
                r.caller +
                ") and left no event after it: what it ran there (loads, dlopen errors, "
                "thread-count calls) was not seen";
    for (const std::string& why : r.reasons) d.evidence.push_back({why, "", std::nullopt});
    d.fix = "run mldoctor inside " + r.path +
            " on the program itself (`mldoctor run -- PROGRAM ...` there; a mldoctor built on a "
            "glibc no newer than that root's), or bind-mount mldoctor's shim directory and a "
            "trace directory at the same paths inside it";
    out.push_back(std::move(d));
    return;
  }
  if (!c.command_exec) return;
  const detect::TraceCoverage::UntracedExec& x = *c.command_exec;
  Detection d;
  d.rule = "RUN001";
  d.subject = "pid " + std::to_string(c.command_pid);
  d.message = "the command ran " + x.path + " (an exec from " + x.from +
              "), and mldoctor's shims did not load in it: loads, dlopen errors and "
              "thread-count calls of " +
              x.path + " were not seen";
  for (const std::string& r : x.reasons) d.evidence.push_back({r, "", std::nullopt});
  d.fix = x.root_changed
              ? "run mldoctor inside the new root or container, on the program itself "
                "(`mldoctor run -- " +
                    x.path +
                    " ...` there; a mldoctor built on a glibc no newer than that root's), or "
                    "bind-mount mldoctor's shim directory and a trace directory at the same "
                    "paths inside it"
              : "run " + x.path +
                    " itself under `mldoctor run`, and keep LD_AUDIT, LD_PRELOAD and "
                    "MLDOCTOR_TRACE_DIR in the environment a launcher passes on";
  out.push_back(std::move(d));
}
