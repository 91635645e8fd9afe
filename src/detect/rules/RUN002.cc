// RUN002 — a job that makes no progress (no CPU time, no output, no trace
// events for the watchdog's timeout): what each process's threads wait in,
// with their native stacks, as evidence, and the likely cause from the
// facts `run` read while it hung: a torch extension build lock no process
// holds (seed 002) or one another process holds (facts.jit, locks only), or
// a TCP connection nothing answers (a rendezvous address).
#include <algorithm>
#include <map>

#include "detect/detect.h"

namespace {

// "0, 2–4, 7"
std::string rank_list(std::vector<mld::u32> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) j++;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]) +
           (j > i ? "–" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

// Where a process's main thread is: its system call (or state), kernel wait
// channel and innermost frames.
std::string main_thread_place(const mld::detect::ProcessSample& p) {
  const mld::detect::ThreadSample* main = nullptr;
  for (const mld::detect::ThreadSample& t : p.threads)
    if (t.tid == p.pid) main = &t;
  if (!main && !p.threads.empty()) main = &p.threads.front();
  if (!main) return "?";
  std::string place = main->syscall.empty() ? std::string(1, main->state) : main->syscall;
  if (!main->wchan.empty()) place += " in " + main->wchan;
  for (size_t i = 0; i < main->stack.size() && i < 6; i++)
    place += (i ? " <- " : ": ") + main->stack[i];
  return place;
}

// Whether a main thread's place is a wait inside torch.distributed: a
// collective's or the store's wait (c10d::Work::wait, gloo, NCCL).
bool in_collective(const std::string& place) {
  for (const char* frame : {"c10d::", "gloo::", "nccl", "NCCL"})
    if (place.find(frame) != std::string::npos) return true;
  return false;
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
  // The ranks of a distributed job, grouped by where their main threads
  // are: ranks waiting in one collective look alike, and a rank that is
  // somewhere else (it never reached the collective) is named first.
  std::map<std::string, std::vector<u32>> ranks_at;
  std::map<u32, long> pid_of_rank;
  for (const detect::ProcessSample& p : sample.processes)
    if (p.rank) {
      ranks_at[main_thread_place(p)].push_back(*p.rank);
      pid_of_rank[*p.rank] = p.pid;
    }
  std::string odd_rank;
  long odd_pid = 0;
  if (pid_of_rank.size() >= 2) {
    std::vector<std::pair<std::string, std::vector<u32>>> groups(ranks_at.begin(), ranks_at.end());
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    // Ranks waiting in a collective while others are not: those are the odd
    // ones, however many wait (rank 1 of 2 asleep before all_reduce).
    // Otherwise a place most ranks share, and the rest. Odd ones go first.
    std::stable_partition(groups.begin(), groups.end(),
                          [](const auto& g) { return in_collective(g.first); });
    const bool collective_split =
        groups.size() >= 2 && in_collective(groups[0].first) && !in_collective(groups.back().first);
    if (!collective_split)
      std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.second.size() > b.second.size();
      });
    const bool majority = groups.size() >= 2 &&
                          (collective_split || groups[0].second.size() > groups[1].second.size());
    if (groups.size() == 1) {
      hang.message += "; ranks " + rank_list(groups[0].second) + " all wait in one place";
    } else if (majority) {
      // With a collective split, every group not in a collective is odd;
      // otherwise every group but the largest.
      size_t first_odd = 1;
      if (collective_split)
        while (first_odd < groups.size() && in_collective(groups[first_odd].first)) first_odd++;
      std::vector<u32> odd, waiting;
      for (size_t g = 0; g < groups.size(); g++) {
        std::vector<u32>& into = g < first_odd ? waiting : odd;
        into.insert(into.end(), groups[g].second.begin(), groups[g].second.end());
      }
      odd_rank = (odd.size() == 1 ? "rank " : "ranks ") + rank_list(odd);
      odd_pid = pid_of_rank[*std::min_element(odd.begin(), odd.end())];
      const std::string& place = groups[first_odd].first;
      hang.message += "; " + odd_rank + (odd.size() == 1 ? " is" : " are") + " not where " +
                      (waiting.size() == 1 ? "rank " : "ranks ") + rank_list(waiting) +
                      (collective_split ? (waiting.size() == 1 ? " waits in a collective"
                                                               : " wait in a collective")
                                        : (waiting.size() == 1 ? " is" : " are")) +
                      " (main thread in " + place.substr(0, place.find(':')) +
                      (groups.size() - first_odd > 1 ? ", ..." : "") + ")";
      std::rotate(groups.begin(), groups.begin() + static_cast<long>(first_odd), groups.end());
    } else {
      hang.message +=
          "; the ranks' main threads are in " + std::to_string(groups.size()) + " different places";
    }
    for (const auto& [place, ranks] : groups) {
      std::string pids;
      for (u32 r : ranks) pids += (pids.empty() ? "" : ", ") + std::to_string(pid_of_rank[r]);
      hang.evidence.push_back({(ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks) +
                                   " (pid " + pids + "), main thread: " + place,
                               "", std::nullopt});
    }
  }
  for (const detect::ProcessSample& p : sample.processes) {
    hang.evidence.push_back({"pid " + std::to_string(p.pid) +
                                 (p.rank ? " (rank " + std::to_string(*p.rank) + ")" : "") + ": " +
                                 p.command,
                             "", std::nullopt});
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
  } else if (!odd_rank.empty()) {
    hang.fix =
        "look at what " + odd_rank +
        " is doing instead of joining the others (its Python stack: py-spy dump --pid " +
        std::to_string(odd_pid) +
        "): a rank that skips a collective, runs a different number of them, or is slow "
        "before it keeps every other rank waiting; run with NCCL_DEBUG=INFO for a collective "
        "that never completes";
  } else {
    hang.fix =
        "look at where the threads wait (above); run with NCCL_DEBUG=INFO for a collective that "
        "never completes; mldoctor jit for build locks";
  }
  out.push_back(std::move(hang));
}
