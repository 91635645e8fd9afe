// RUN002 — a job that makes no progress (no CPU time, no output, no trace
// events for the watchdog's timeout): what each process's threads wait in,
// with their Python and native stacks, as evidence (ranks grouped by where
// their main threads are, the odd one named with its Python line), and the likely cause from the
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

const mld::detect::ThreadSample* main_thread(const mld::detect::ProcessSample& p) {
  for (const mld::detect::ThreadSample& t : p.threads)
    if (t.tid == p.pid) return &t;
  return p.threads.empty() ? nullptr : &p.threads.front();
}

// Whether a Python frame is torch.distributed's (a collective, a barrier,
// the store or the rendezvous).
bool distributed_frame(const mld::detect::PythonFrame& f) {
  return f.file.find("torch/distributed/") != std::string::npos;
}

// Where a process's main thread is, for grouping ranks: its system call (or
// state) and kernel wait channel, then its Python frames when they were
// read (the innermost, and the user's own line that led there), else its
// innermost native frames.
struct Place {
  std::string text;
  bool collective = false;  // waiting inside torch.distributed
  std::string user_line;    // "train.py:88 (main)": the user's own frame, when known
  std::string call;         // "all_reduce": the library function the user's line called
};

Place main_thread_place(const mld::detect::ProcessSample& p) {
  using namespace mld::detect;
  Place out;
  const ThreadSample* main = main_thread(p);
  if (!main) {
    out.text = "?";
    return out;
  }
  out.text = main->syscall.empty() ? std::string(1, main->state) : main->syscall;
  if (!main->wchan.empty()) out.text += " in " + main->wchan;
  if (!main->python.empty()) {
    const PythonFrame* user = user_python_frame(main->python);
    out.text += ": " + python_frame_text(main->python.front());
    if (user) {
      // The script by its name (train.py:88): the full path is in the evidence.
      const std::string file = user->file.substr(user->file.rfind('/') + 1);
      out.user_line = file + ":" + std::to_string(user->line) + " (" + user->function + ")";
      if (user != &main->python.front()) {
        out.call = (user - 1)->function;
        out.text += " <- ... " + python_frame_text(*user);
      }
    }
    for (const PythonFrame& f : main->python) out.collective |= distributed_frame(f);
  } else {
    for (size_t i = 0; i < main->stack.size() && i < 6; i++)
      out.text += (i ? " <- " : ": ") + main->stack[i];
  }
  // Native frames inside torch.distributed (c10d::Work::wait, gloo, NCCL).
  for (const std::string& frame : main->stack)
    for (const char* lib : {"c10d::", "gloo::", "nccl", "NCCL"})
      out.collective |= frame.find(lib) != std::string::npos;
  return out;
}

// "clock_nanosleep at train.py:41 (load_batch)": a place in a sentence.
std::string place_words(const Place& p) {
  std::string wait = p.text.substr(0, p.text.find(':'));
  if (p.user_line.empty()) return wait;
  return (p.call.empty() ? "" : p.call + " ") + "at " + p.user_line + ", main thread in " + wait;
}

// A thread's Python stack on one line, innermost first (12 frames at most).
std::string python_line(const std::vector<mld::detect::PythonFrame>& frames) {
  std::string out;
  for (size_t i = 0; i < frames.size() && i < 12; i++)
    out += (i ? " <- " : "") + mld::detect::python_frame_text(frames[i]);
  if (frames.size() > 12) out += " <- ... (" + std::to_string(frames.size()) + " frames)";
  return out;
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
  std::map<std::string, Place> places;
  std::map<u32, long> pid_of_rank;
  for (const detect::ProcessSample& p : sample.processes)
    if (p.rank) {
      Place place = main_thread_place(p);
      ranks_at[place.text].push_back(*p.rank);
      places[place.text] = place;
      pid_of_rank[*p.rank] = p.pid;
    }
  std::string odd_rank;
  long odd_pid = 0;
  const Place* odd_place = nullptr;
  const Place* waiting_place = nullptr;
  if (pid_of_rank.size() >= 2) {
    std::vector<std::pair<std::string, std::vector<u32>>> groups(ranks_at.begin(), ranks_at.end());
    auto collective = [&](const std::string& text) { return places[text].collective; };
    std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    // Ranks waiting in a collective while others are not: those are the odd
    // ones, however many wait (rank 1 of 2 asleep before all_reduce).
    // Otherwise a place most ranks share, and the rest. Odd ones go first.
    std::stable_partition(groups.begin(), groups.end(),
                          [&](const auto& g) { return collective(g.first); });
    const bool collective_split =
        groups.size() >= 2 && collective(groups[0].first) && !collective(groups.back().first);
    if (!collective_split)
      std::stable_sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
        return a.second.size() > b.second.size();
      });
    const bool majority = groups.size() >= 2 &&
                          (collective_split || groups[0].second.size() > groups[1].second.size());
    if (groups.size() == 1) {
      hang.message += "; ranks " + rank_list(groups[0].second) + " all wait in one place";
      if (!places[groups[0].first].user_line.empty())
        hang.message += " (" + place_words(places[groups[0].first]) + ")";
    } else if (majority) {
      // With a collective split, every group not in a collective is odd;
      // otherwise every group but the largest.
      size_t first_odd = 1;
      if (collective_split)
        while (first_odd < groups.size() && collective(groups[first_odd].first)) first_odd++;
      std::vector<u32> odd, waiting;
      for (size_t g = 0; g < groups.size(); g++) {
        std::vector<u32>& into = g < first_odd ? waiting : odd;
        into.insert(into.end(), groups[g].second.begin(), groups[g].second.end());
      }
      odd_rank = (odd.size() == 1 ? "rank " : "ranks ") + rank_list(odd);
      odd_pid = pid_of_rank[*std::min_element(odd.begin(), odd.end())];
      odd_place = &places[groups[first_odd].first];
      waiting_place = &places[groups[0].first];
      hang.message += "; " + odd_rank + (odd.size() == 1 ? " is" : " are") + " not where " +
                      (waiting.size() == 1 ? "rank " : "ranks ") + rank_list(waiting) +
                      (collective_split ? (waiting.size() == 1 ? " waits in a collective"
                                                               : " wait in a collective")
                                        : (waiting.size() == 1 ? " is" : " are"));
      if (!odd_place->user_line.empty() || !waiting_place->user_line.empty())
        hang.message += " (" + odd_rank + ": " + place_words(*odd_place) +
                        (groups.size() - first_odd > 1 ? ", ..." : "") + "; " +
                        (waiting.size() == 1 ? "rank " : "ranks ") + rank_list(waiting) + ": " +
                        place_words(*waiting_place) + ")";
      else
        hang.message += " (main thread in " + place_words(*odd_place) +
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
  // No ranks to compare: where the first Python process's main thread is.
  if (pid_of_rank.size() < 2) {
    for (const detect::ProcessSample& p : sample.processes) {
      const Place place = main_thread_place(p);
      if (place.user_line.empty()) continue;
      hang.message += "; pid " + std::to_string(p.pid) +
                      "'s main thread: " + (place.call.empty() ? "" : place.call + "() called ") +
                      "at " + place.user_line + ", in " +
                      place.text.substr(0, place.text.find(':'));
      break;
    }
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
  } else if (!odd_rank.empty()) {
    const bool lines = odd_place && !odd_place->user_line.empty();
    hang.fix =
        "look at what " + odd_rank + " is doing" +
        (lines ? " at " + odd_place->user_line : std::string()) + " instead of joining the others" +
        (waiting_place && !waiting_place->call.empty()
             ? " in " + waiting_place->call +
                   (waiting_place->user_line.empty() ? "" : " at " + waiting_place->user_line)
             : std::string()) +
        (lines ? " (pid " + std::to_string(odd_pid) + "; its whole stack: mldoctor stacks " +
                     std::to_string(odd_pid) + ")"
               : " (its Python stack: mldoctor stacks " + std::to_string(odd_pid) + ")") +
        ": a rank that skips a collective, runs a different number of them, or is slow "
        "before it keeps every other rank waiting; run with NCCL_DEBUG=INFO for a collective "
        "that never completes";
  } else {
    hang.fix =
        "look at where the threads wait (above); run with NCCL_DEBUG=INFO for a collective that "
        "never completes; mldoctor jit for build locks";
  }
  out.push_back(std::move(hang));
}
