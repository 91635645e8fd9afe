// RUN002 — a job that makes no progress (no CPU time, no output, no trace
// events for the watchdog's timeout): what each process's threads wait in,
// with their native stacks, as evidence, and the likely cause from the
// facts `run` read while it hung: a torch extension build lock no process
// holds (seed 002) or one another process holds (facts.jit, locks only), or
// a TCP connection nothing answers (a rendezvous address).
#include <map>

#include "detect/detect.h"

MLD_DETECTOR(RUN002) {
  using namespace mld;
  if (!facts.hang) return;
  const detect::HangSample& sample = *facts.hang;
  // What the threads are doing.
  std::map<std::string, int> waits;
  for (const detect::ProcessSample& p : sample.processes)
    for (const detect::ThreadSample& t : p.threads)
      waits[t.syscall.empty() ? std::string(1, t.state) : t.syscall]++;
  Detection hang;
  hang.rule = "RUN002";
  hang.subject =
      sample.processes.empty() ? "job" : "pid " + std::to_string(sample.processes.front().pid);
  std::string what;
  for (const auto& [w, n] : waits)
    what += (what.empty() ? "" : ", ") + std::to_string(n) + " in " + w;
  hang.message = "no CPU progress, no output and no events for " +
                 std::to_string(static_cast<long>(sample.idle_seconds)) + " s (" +
                 std::to_string(sample.processes.size()) +
                 (sample.processes.size() == 1 ? " process" : " processes") + "; threads: " + what +
                 ")";
  for (const detect::ProcessSample& p : sample.processes) {
    hang.evidence.push_back({"pid " + std::to_string(p.pid) + ": " + p.command, "", std::nullopt});
    // Threads grouped by what they wait in and their stack (innermost 8
    // frames): 40 idle pool workers are one line.
    std::map<std::string, std::pair<int, std::string>> per;
    for (const detect::ThreadSample& t : p.threads) {
      std::string where = (t.syscall.empty() ? std::string(1, t.state) : t.syscall) +
                          (t.wchan.empty() ? "" : " in " + t.wchan);
      std::string stack;
      for (size_t i = 0; i < t.stack.size() && i < 8; i++) stack += (i ? " <- " : "") + t.stack[i];
      auto& slot = per[where + "\n" + stack];
      slot.first++;
      slot.second = where;
    }
    for (const auto& [key, v] : per) {
      hang.evidence.push_back(
          {"  " + std::to_string(v.first) + (v.first == 1 ? " thread " : " threads ") + v.second,
           "", std::nullopt});
      const std::string stack = key.substr(key.find('\n') + 1);
      if (!stack.empty()) hang.evidence.push_back({"    " + stack, "", std::nullopt});
    }
    if (!p.stacks_error.empty())
      hang.evidence.push_back({"  no native stacks: " + p.stacks_error, "", std::nullopt});
    for (const std::string& l : p.locks)
      hang.evidence.push_back({"  lock: " + l, "", std::nullopt});
    for (const std::string& so : p.sockets)
      hang.evidence.push_back({"  socket: " + so, "", std::nullopt});
  }

  // Known lock files: a torch extension build lock (seed 002).
  if (facts.jit_error)
    hang.evidence.push_back(
        {"the extension build caches could not be scanned: " + *facts.jit_error, "", std::nullopt});
  bool stale = false, locked = false;
  if (facts.jit)
    for (const jit::Extension& e : facts.jit->extensions)
      if (e.lock) {
        locked = true;
        stale |= jit::lock_status(*e.lock) == jit::LockStatus::Stale;
      }
  // A TCP connection that never completes: the rendezvous (MASTER_ADDR /
  // MASTER_PORT, a TCPStore) or a peer that is not there. SYN_SENT for the
  // whole idle time means nothing answers at that address.
  std::string connecting;
  for (const detect::ProcessSample& p : sample.processes)
    for (const std::string& so : p.sockets)
      if (connecting.empty() && so.ends_with(" SYN_SENT")) {
        const size_t arrow = so.find(" -> ");
        const std::string to =
            arrow == std::string::npos ? so : so.substr(arrow + 4, so.size() - arrow - 4 - 9);
        connecting = "pid " + std::to_string(p.pid) + " connecting to " + to;
      }
  if (stale) {
    hang.message += ": the job is waiting for a torch extension build lock that no process holds";
    hang.fix =
        "remove the stale lock: mldoctor jit --fix (it re-checks that no process holds it); the "
        "job then builds and continues";
  } else if (locked) {
    hang.message += ": an extension build lock is held by another process";
    hang.fix = "wait for that build, or stop it and run mldoctor jit --fix";
  } else if (!connecting.empty()) {
    hang.message += ": a TCP connection gets no answer (" + connecting + ")";
    hang.fix =
        "nothing answers at that address: check MASTER_ADDR and MASTER_PORT (rank 0 must be up and "
        "listening there), the interface the name resolves to, and any firewall between the nodes";
  } else {
    hang.fix =
        "look at where the threads wait (above); run with NCCL_DEBUG=INFO for a collective that "
        "never completes; mldoctor jit for build locks";
  }
  out.push_back(std::move(hang));
}
