// JIT002 — a torch extension build lock held open by a live process: a
// build in progress, which every other process loading the extension waits
// for (jit's scan of /proc/*/fd found the holders). Under torch's OS
// advisory lock (filelock, pytorch#190543) the waiters have the file open
// too, so the message does not call every opener the builder.
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
    d.message = "extension " + e.name + " is being built: " + who +
                (l.advisory ? (l.holders.size() > 1 ? " have " : " has ") + l.path +
                                  " open (torch's OS advisory lock: one builds, any other waits "
                                  "for it; the kernel frees it if the builder dies)"
                            : " holds " + l.path);
    d.evidence.push_back({"held open by " + who, "", std::nullopt});
    d.fix = "wait for the build to finish; other processes loading " + e.name +
            " wait on the lock until then";
    out.push_back(std::move(d));
  }
}
