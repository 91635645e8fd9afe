// JIT003 — a torch extension build lock on a network filesystem that no
// process of this node holds: the builder may be on another node sharing
// the directory, so this node cannot tell a build from a stale lock.
#include "detect/jit-locks.h"

MLD_DETECTOR(JIT003) {
  using namespace mld;
  if (!facts.jit) return;
  for (const jit::Extension& e : facts.jit->extensions) {
    if (!e.lock || jit::lock_status(*e.lock) != jit::LockStatus::Network) continue;
    const jit::LockState& l = *e.lock;
    Detection d = detect::lock_detection(e);
    d.rule = "JIT003";
    d.message = "lock " + l.path + " is on " + l.filesystem +
                ": no process on this node holds it, but a builder on another node may";
    d.evidence.push_back({"no local process has it open (" +
                              std::to_string(facts.jit->processes_scanned) + " checked)",
                          "", std::nullopt});
    d.fix =
        "check the other nodes sharing " + e.root + " for a running build; if none, rm " + l.path;
    out.push_back(std::move(d));
  }
}
