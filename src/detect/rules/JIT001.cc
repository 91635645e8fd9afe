// JIT001 — a stale torch extension build lock: no process has it open, so
// every load() of the extension polls it forever (torch's FileBaton has no
// timeout; seed 002). The facts are jit's scan of the build caches, from
// `jit`, `check`, or `run` when a job hangs; "no holder" is certain only
// when every process's open files could be read, else the rule's escalated
// (lower) severity applies (rules/JIT001.toml).
#include "detect/jit-locks.h"

MLD_DETECTOR(JIT001) {
  using namespace mld;
  if (!facts.jit) return;
  for (const jit::Extension& e : facts.jit->extensions) {
    if (!e.lock || jit::lock_status(*e.lock) != jit::LockStatus::Stale) continue;
    const jit::LockState& l = *e.lock;
    Detection d = detect::lock_detection(e);
    d.rule = "JIT001";
    d.escalated = !l.holders_complete;
    d.message = "stale lock " + l.path + detect::real_lock_text(l) +
                ": no process holds it, so every load() of " + e.name +
                " waits on it forever (torch's FileBaton has no timeout)";
    d.evidence.push_back(
        {l.holders_complete
             ? "no process has it open (" + std::to_string(facts.jit->processes_scanned) +
                   " checked)"
             : "no process visible to this user has it open; others' could not be read",
         "", std::nullopt});
    // rm of the real path: the file itself, whatever the links become.
    d.fix = "rm " + (l.real_path.empty() ? l.path : l.real_path) + "   (or: mldoctor jit --fix)";
    out.push_back(std::move(d));
  }
}
