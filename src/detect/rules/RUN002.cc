// RUN002 — a job that makes no progress (no CPU time, no output, no trace
// events for the watchdog's timeout): what each process's threads wait in,
// with their Python and native stacks, as evidence (ranks, or the workers of
// torch.multiprocessing.spawn, grouped by where their main threads are, the
// odd one named with its Python line: detect/hang.cc), and the likely cause
// from the facts `run` read while it hung: a torch extension build lock no
// process holds (seed 002) or one another process holds (facts.jit, locks
// only), or a TCP connection nothing answers (a rendezvous address). The
// rule is an envelope: a finding that names the cause (the lock, a
// collective wait, a deadlock) leads the report with this one as context.
#include <algorithm>
#include <map>

#include "detect/detect.h"

namespace {

// "clock_nanosleep at train.py:41 (load_batch)": a place in a sentence.
std::string place_words(const mld::detect::HangPlace& p) {
  if (p.user_line.empty()) return p.wait;
  return (p.call.empty() ? "" : p.call + " ") + "at " + p.user_line + ", main thread in " + p.wait;
}

// A thread's Python stack on one line, innermost first (12 frames at most).
std::string python_line(const std::vector<mld::detect::PythonFrame>& frames) {
  std::string out;
  for (size_t i = 0; i < frames.size() && i < 12; i++)
    out += (i ? " <- " : "") + mld::detect::python_frame_text(frames[i]);
  if (frames.size() > 12) out += " <- ... (" + std::to_string(frames.size()) + " frames)";
  return out;
}

// What shows why a collective never completes, for the job's backend.
std::string debug_words(const std::string& backend) {
  if (backend == "gloo")
    return "TORCH_DISTRIBUTED_DEBUG=DETAIL makes torch check that every rank calls the same "
           "collectives";
  if (backend == "nccl") return "run with NCCL_DEBUG=INFO for a collective that never completes";
  return "TORCH_DISTRIBUTED_DEBUG=DETAIL checks that every rank calls the same collectives "
         "(NCCL_DEBUG=INFO too for an NCCL job)";
}

}  // namespace

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
  // The ranks of a distributed job (or spawn()'s workers), grouped by where
  // their main threads are: ranks waiting in one collective look alike, and
  // a rank that is somewhere else (it never reached the collective) is named
  // first.
  const detect::HangPeers peers = detect::hang_peers(sample);
  std::string odd_names;
  long odd_pid = 0;
  const detect::HangPlace* odd_place = nullptr;
  const detect::HangPlace* waiting_place = nullptr;
  const std::string peers_word = peers.by_rank ? "ranks" : "processes";
  if (peers.groups.size() == 1) {
    hang.message += "; " + peers.names(peers.groups[0].members) + " all wait in one place";
    if (!peers.groups[0].place.user_line.empty())
      hang.message += " (" + place_words(peers.groups[0].place) + ")";
  } else if (peers.odd > 0) {
    const std::vector<const detect::ProcessSample*> odd = peers.odd_members(),
                                                    waiting = peers.waiting_members();
    odd_names = peers.names(odd);
    odd_pid = peers.groups[0].members.front()->pid;
    odd_place = &peers.groups[0].place;
    waiting_place = &peers.groups[peers.odd].place;
    const std::string waiting_names = peers.names(waiting);
    hang.message +=
        "; " + odd_names + (odd.size() == 1 ? " is" : " are") + " not where " + waiting_names +
        (peers.collective_split
             ? (waiting.size() == 1 ? " waits in a collective" : " wait in a collective")
             : (waiting.size() == 1 ? " is" : " are"));
    if (!odd_place->user_line.empty() || !waiting_place->user_line.empty())
      hang.message += " (" + odd_names + ": " + place_words(*odd_place) +
                      (peers.odd > 1 ? ", ..." : "") + "; " + waiting_names + ": " +
                      place_words(*waiting_place) + ")";
    else
      hang.message +=
          " (main thread in " + place_words(*odd_place) + (peers.odd > 1 ? ", ..." : "") + ")";
  } else if (!peers.groups.empty()) {
    hang.message += "; the " + peers_word + "' main threads are in " +
                    std::to_string(peers.groups.size()) + " different places";
  }
  for (const detect::HangPeers::Group& g : peers.groups) {
    std::string pids;
    for (const detect::ProcessSample* p : g.members)
      pids += (pids.empty() ? "" : ", ") + std::to_string(p->pid);
    hang.evidence.push_back({peers.names(g.members) +
                                 (peers.by_rank ? " (pid " + pids + ")" : std::string()) +
                                 ", main thread: " + g.place.text,
                             "", std::nullopt});
  }
  // No ranks to compare: where a Python process's main thread is, a worker
  // before the launcher that waits for it (spawn()'s join says nothing).
  if (peers.groups.empty()) {
    const detect::ProcessSample* shown = nullptr;
    detect::HangPlace shown_place;
    for (int pass = 0; pass < 2 && !shown; pass++)
      for (const detect::ProcessSample& p : sample.processes) {
        const bool parent =
            std::any_of(sample.processes.begin(), sample.processes.end(),
                        [&](const detect::ProcessSample& c) { return c.ppid == p.pid; });
        if (pass == 0 && parent) continue;
        detect::HangPlace place = detect::main_thread_place(p);
        if (place.user_line.empty()) continue;
        shown = &p;
        shown_place = std::move(place);
        break;
      }
    if (shown)
      hang.message += "; pid " + std::to_string(shown->pid) + "'s main thread: " +
                      (shown_place.call.empty() ? "" : shown_place.call + "() called ") + "at " +
                      shown_place.user_line + ", in " + shown_place.wait;
  }
  for (const detect::ProcessSample& p : sample.processes) {
    hang.evidence.push_back({"pid " + std::to_string(p.pid) +
                                 (p.rank ? " (rank " + std::to_string(*p.rank) + ")" : "") + ": " +
                                 p.command,
                             "", std::nullopt});
    // Threads grouped by what they wait in and their stack (innermost 8
    // frames): 40 idle pool workers are one line.
    // Python threads first (the main thread first of all), then the rest.
    struct Group {
      int count = 0;
      bool main = false, python = false;
      std::string where, python_stack, native_stack;
    };
    std::map<std::string, Group> per;
    for (const detect::ThreadSample& t : p.threads) {
      Group g;
      g.where = (t.syscall.empty() ? std::string(1, t.state) : t.syscall) +
                (t.wchan.empty() ? "" : " in " + t.wchan);
      g.python_stack = python_line(t.python);
      if (!t.python_note.empty()) g.python_stack += " (" + t.python_note + ")";
      for (size_t i = 0; i < t.stack.size() && i < 8; i++)
        g.native_stack += (i ? " <- " : "") + t.stack[i];
      g.main = t.tid == p.pid;
      g.python = !t.python.empty();
      const std::string key = std::string(g.main     ? "0"
                                          : g.python ? "1"
                                                     : "2") +
                              g.where + "\n" + g.python_stack + "\n" + g.native_stack;
      Group& slot = per[key];
      if (slot.count == 0) slot = g;
      slot.count++;
    }
    for (const auto& [key, g] : per) {
      hang.evidence.push_back(
          {"  " + std::string(g.main ? "main thread " : "") +
               (g.main ? "" : std::to_string(g.count) + (g.count == 1 ? " thread " : " threads ")) +
               g.where,
           "", std::nullopt});
      if (!g.python_stack.empty())
        hang.evidence.push_back({"    Python: " + g.python_stack, "", std::nullopt});
      if (!g.native_stack.empty())
        hang.evidence.push_back(
            {std::string(g.python ? "    native: " : "    ") + g.native_stack, "", std::nullopt});
    }
    if (!p.without_stacks.empty())
      hang.evidence.push_back({"  " + p.without_stacks, "", std::nullopt});
    if (p.cpython && !p.python_error.empty())
      hang.evidence.push_back({"  no Python stacks: " + p.python_error, "", std::nullopt});
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
  } else if (!odd_names.empty()) {
    const bool lines = odd_place && !odd_place->user_line.empty();
    hang.fix =
        "look at what " + odd_names + " is doing" +
        (lines ? " at " + odd_place->user_line : std::string()) + " instead of joining the others" +
        (waiting_place && !waiting_place->call.empty()
             ? " in " + waiting_place->call +
                   (waiting_place->user_line.empty() ? "" : " at " + waiting_place->user_line)
             : std::string()) +
        (lines ? " (pid " + std::to_string(odd_pid) + "; its whole stack: mldoctor stacks " +
                     std::to_string(odd_pid) + ")"
               : " (its Python stack: mldoctor stacks " + std::to_string(odd_pid) + ")") +
        ": a rank that skips a collective, runs a different number of them, or is slow "
        "before it keeps every other rank waiting; " +
        debug_words(peers.backend);
  } else if (!peers.groups.empty()) {
    hang.fix = "look at where the " + peers_word + " wait (above); " + debug_words(peers.backend);
  } else {
    hang.fix =
        "look at where the threads wait (above; mldoctor stacks PID for a whole stack); "
        "mldoctor jit for build locks";
  }
  out.push_back(std::move(hang));
}
