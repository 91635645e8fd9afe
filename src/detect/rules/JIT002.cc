// JIT002 — a torch extension build lock held open by a live process: a
// build in progress, which every other process loading the extension waits
// for (jit's scan of /proc/*/fd found the holders).
#include "detect/jit-locks.h"

MLD_DETECTOR(JIT002) {
  using namespace mld;
  if (!facts.jit) return;
  for (const jit::Extension& e : facts.jit->extensions) {
    if (!e.lock || jit::lock_status(*e.lock) != jit::LockStatus::Held) continue;
    const jit::LockState& l = *e.lock;
    Detection d = detect::lock_detection(e);
    d.rule = "JIT002";
    std::string who;
    for (const jit::LockHolder& h : l.holders)
      who += (who.empty() ? "" : ", ") + std::string("pid ") + std::to_string(h.pid) + " (" +
             h.command + ")";
    d.message = "extension " + e.name + " is being built: " + who + " holds " + l.path;
    d.evidence.push_back({"held open by " + who, "", std::nullopt});
    d.fix = "wait for the build to finish; other processes loading " + e.name +
            " wait on the lock until then";
    out.push_back(std::move(d));
  }
}
