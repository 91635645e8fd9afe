// hang.cc — who waits for whom in a hung job, from a hang sample: where
// each process's main thread is, and in a distributed job which processes
// are not where the others wait. RUN002 words the hang with it, and `run`
// words a collective wait (DIST019, found by the stack rules) with it, so
// both name the same process with the same line.
//
// The processes that take part are the ranks when the launcher's variables
// say so. torch.multiprocessing.spawn sets none: its workers are then the
// children of one parent that run the same program, told apart from the
// parent (waiting for them in spawn()'s join) and from helpers such as
// multiprocessing's resource tracker by their outermost frame of user
// code. Ranks that wait inside torch.distributed while others do not are
// waiting for those others: that decides which is odd before any count does
// (in a 2-rank job one sleeps and one waits, and the sleeper is the cause).
#include <algorithm>
#include <map>

#include "detect/detect.h"

namespace mld::detect {

namespace {

// "0, 2–4, 7"
std::string rank_list(std::vector<u32> ranks) {
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

const ThreadSample* main_thread(const ProcessSample& p) {
  for (const ThreadSample& t : p.threads)
    if (t.tid == p.pid) return &t;
  return p.threads.empty() ? nullptr : &p.threads.front();
}

// Whether a Python frame is torch.distributed's (a collective, a barrier,
// the store or the rendezvous).
bool distributed_frame(const PythonFrame& f) {
  return f.file.find("torch/distributed/") != std::string::npos;
}

// The frame where the process enters the user's code, seen from outside:
// the outermost frame of the user's own files that is not a `-c` string or
// stdin. Two workers of one program share it (torch.multiprocessing.spawn's
// `_wrap` calls the user's function in both); the spawning parent and a
// resource tracker do not.
std::string program_entry(const ProcessSample& p) {
  const ThreadSample* t = main_thread(p);
  if (!t || t->python.empty()) return "";
  for (auto f = t->python.rbegin(); f != t->python.rend(); ++f) {
    if (f->file.empty() || f->file[0] == '<') continue;
    if (short_python_file(f->file) != f->file) continue;  // an installed package or the stdlib
    return f->file + ":" + f->function;
  }
  return "";
}

// "gloo" or "nccl" from a thread's native frames; "" when they say neither.
std::string backend_of(const ThreadSample& t) {
  for (const std::string& frame : t.stack) {
    if (frame.find("ProcessGroupNCCL") != std::string::npos || frame.find("nccl") == 0 ||
        frame.find("(libnccl") != std::string::npos)
      return "nccl";
    if (frame.find("ProcessGroupGloo") != std::string::npos ||
        frame.find("gloo::") != std::string::npos)
      return "gloo";
  }
  return "";
}

// Groups processes by place; the odd ones first (see HangPeers).
void group_by_place(const std::vector<const ProcessSample*>& members, HangPeers& out) {
  std::map<std::string, HangPeers::Group> at;
  for (const ProcessSample* p : members) {
    HangPlace place = main_thread_place(*p);
    HangPeers::Group& g = at[place.text];
    g.place = std::move(place);
    g.members.push_back(p);
  }
  std::vector<HangPeers::Group> groups;
  for (auto& [text, g] : at) groups.push_back(std::move(g));
  auto larger = [](const HangPeers::Group& a, const HangPeers::Group& b) {
    return a.members.size() > b.members.size();
  };
  std::stable_sort(groups.begin(), groups.end(), larger);
  // Ranks waiting in a collective while others are not: those are odd,
  // however many wait. Otherwise the place most share, and the rest.
  std::stable_partition(groups.begin(), groups.end(),
                        [](const HangPeers::Group& g) { return g.place.collective; });
  out.collective_split =
      groups.size() >= 2 && groups[0].place.collective && !groups.back().place.collective;
  if (!out.collective_split) std::stable_sort(groups.begin(), groups.end(), larger);
  const bool majority = groups.size() >= 2 && (out.collective_split ||
                                               groups[0].members.size() > groups[1].members.size());
  if (majority) {
    size_t first_odd = 1;
    if (out.collective_split)
      while (first_odd < groups.size() && groups[first_odd].place.collective) first_odd++;
    out.odd = groups.size() - first_odd;
    std::rotate(groups.begin(), groups.begin() + static_cast<long>(first_odd), groups.end());
  }
  out.groups = std::move(groups);
  // The backend the waiting ones are in (the odd ones' frames say nothing
  // of it), else any member's.
  for (size_t pass = 0; pass < 2 && out.backend.empty(); pass++)
    for (size_t g = pass == 0 ? out.odd : 0; g < out.groups.size() && out.backend.empty(); g++)
      for (const ProcessSample* p : out.groups[g].members)
        for (const ThreadSample& t : p->threads)
          if (out.backend.empty()) out.backend = backend_of(t);
}

}  // namespace

HangPlace main_thread_place(const ProcessSample& p) {
  HangPlace out;
  const ThreadSample* main = main_thread(p);
  if (!main) {
    out.text = out.wait = "?";
    return out;
  }
  out.syscall = main->syscall.empty() ? std::string(1, main->state) : main->syscall;
  out.wait = out.syscall;
  if (!main->wchan.empty()) out.wait += " in " + main->wchan;
  out.text = out.wait;
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

std::string HangPeers::names(const std::vector<const ProcessSample*>& members) const {
  if (by_rank) {
    std::vector<u32> ranks;
    for (const ProcessSample* p : members) ranks.push_back(p->rank.value_or(0));
    return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
  }
  std::vector<long> pids;
  for (const ProcessSample* p : members) pids.push_back(p->pid);
  std::sort(pids.begin(), pids.end());
  std::string out = pids.size() == 1 ? "pid " : "pids ";
  for (size_t i = 0; i < pids.size(); i++) out += (i ? ", " : "") + std::to_string(pids[i]);
  return out;
}

std::vector<const ProcessSample*> HangPeers::odd_members() const {
  std::vector<const ProcessSample*> out;
  for (size_t g = 0; g < odd && g < groups.size(); g++)
    out.insert(out.end(), groups[g].members.begin(), groups[g].members.end());
  return out;
}

std::vector<const ProcessSample*> HangPeers::waiting_members() const {
  std::vector<const ProcessSample*> out;
  for (size_t g = odd; g < groups.size(); g++)
    out.insert(out.end(), groups[g].members.begin(), groups[g].members.end());
  auto key = [&](const ProcessSample* p) { return by_rank ? long(p->rank.value_or(0)) : p->pid; };
  std::sort(out.begin(), out.end(),
            [&](const ProcessSample* a, const ProcessSample* b) { return key(a) < key(b); });
  return out;
}

HangPeers hang_peers(const HangSample& sample) {
  HangPeers out;
  std::vector<const ProcessSample*> ranked;
  for (const ProcessSample& p : sample.processes)
    if (p.rank) ranked.push_back(&p);
  if (ranked.size() >= 2) {
    out.by_rank = true;
    std::stable_sort(
        ranked.begin(), ranked.end(),
        [](const ProcessSample* a, const ProcessSample* b) { return *a->rank < *b->rank; });
    group_by_place(ranked, out);
    return out;
  }
  // No ranks: workers of one parent running one program, one of them in
  // torch.distributed. A process that is the parent of another sampled one
  // is a launcher, not a worker.
  std::map<std::pair<long, std::string>, std::vector<const ProcessSample*>> families;
  for (const ProcessSample& p : sample.processes) {
    const bool parent = std::any_of(sample.processes.begin(), sample.processes.end(),
                                    [&](const ProcessSample& c) { return c.ppid == p.pid; });
    const std::string entry = program_entry(p);
    if (parent || p.ppid == 0 || entry.empty()) continue;
    families[{p.ppid, entry}].push_back(&p);
  }
  const std::vector<const ProcessSample*>* best = nullptr;
  for (const auto& [key, members] : families) {
    if (members.size() < 2) continue;
    const bool distributed =
        std::any_of(members.begin(), members.end(),
                    [](const ProcessSample* p) { return main_thread_place(*p).collective; });
    if (distributed && (!best || members.size() > best->size())) best = &members;
  }
  if (best) group_by_place(*best, out);
  return out;
}

std::string doing_words(const HangPlace& p) {
  std::string what;
  if (!p.call.empty())
    what = "in " + p.call;
  else if (p.syscall == "clock_nanosleep" || p.syscall == "nanosleep" || p.syscall == "select" ||
           p.syscall == "pselect6")
    what = "asleep (" + p.syscall + ")";
  else if (p.syscall == "running" || p.syscall == "R")
    what = "running";
  else
    what = "in " + p.syscall;
  return p.user_line.empty() ? what : what + " at " + p.user_line;
}

std::vector<std::string> collective_debug_env(const std::string& backend) {
  // TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective's arguments
  // across ranks (gloo and NCCL alike); NCCL_DEBUG only speaks for NCCL.
  if (backend == "gloo") return {"TORCH_DISTRIBUTED_DEBUG=DETAIL"};
  return {"NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL"};
}

std::optional<CollectiveWait> collective_wait(const HangSample& sample) {
  const HangPeers peers = hang_peers(sample);
  if (peers.odd == 0 || !peers.collective_split) return std::nullopt;
  const std::vector<const ProcessSample*> odd = peers.odd_members(),
                                          waiting = peers.waiting_members();
  const HangPlace& odd_place = peers.groups.front().place;
  const HangPlace& waiting_place = peers.groups[peers.odd].place;
  const std::string odd_names = peers.names(odd);
  CollectiveWait out;
  const bool one = odd.size() == 1;
  std::string where = doing_words(odd_place);
  if (peers.odd > 1) {
    where = "elsewhere (";
    for (size_t g = 0; g < peers.odd; g++)
      where += (g ? "; " : "") + peers.names(peers.groups[g].members) + " " +
               doing_words(peers.groups[g].place);
    where += ")";
  }
  out.message = odd_names + (one ? " is " : " are ") + where + " while " + peers.names(waiting) +
                (waiting.size() == 1 ? " waits in " : " wait in ") +
                (waiting_place.call.empty() ? std::string("a collective") : waiting_place.call) +
                (waiting_place.user_line.empty() ? "" : " at " + waiting_place.user_line);
  const long pid = odd.front()->pid;
  out.fix = "look at what " + odd_names + (one ? " does" : " do") +
            (odd_place.user_line.empty() ? std::string() : " at " + odd_place.user_line) +
            " (pid " + std::to_string(pid) + "; its whole stack: mldoctor stacks " +
            std::to_string(pid) +
            "): a rank that skips a collective, runs a different number of them, or is slow "
            "before one keeps every other rank waiting in it";
  out.env = collective_debug_env(peers.backend);
  for (const HangPeers::Group& g : peers.groups) {
    std::string pids;
    for (const ProcessSample* p : g.members)
      pids += (pids.empty() ? "" : ", ") + std::to_string(p->pid);
    out.evidence.push_back(peers.names(g.members) +
                           (peers.by_rank ? " (pid " + pids + ")" : std::string()) +
                           ", main thread: " + g.place.text);
  }
  return out;
}

}  // namespace mld::detect
