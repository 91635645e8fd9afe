// RUN003 — the command died of SIGKILL. Who sent it is in the machine's
// records: the memory cgroup's oom_kill count moved while the job ran, or the
// kernel logged the OOM killer choosing one of the job's processes; when
// neither did (and both could be read), another process sent it.
#include "detect/detect.h"
#include "detect/rules/death-evidence.h"

MLD_DETECTOR(RUN003) {
  using namespace mld;
  if (!facts.death || facts.death->signal != 9) return;
  const detect::DeathFacts& d = *facts.death;
  Detection det;
  det.rule = "RUN003";
  det.subject = "pid " + std::to_string(d.pid);
  const bool counted =
      d.oom_kills_before && d.oom_kills_after && *d.oom_kills_after > *d.oom_kills_before;
  std::vector<std::string> oom_lines;
  for (const std::string& l : d.kernel_lines)
    if (l.find("Killed process") != std::string::npos || l.find("oom-kill:") != std::string::npos ||
        l.find("out of memory") != std::string::npos ||
        l.find("Out of memory") != std::string::npos)
      oom_lines.push_back(l);
  const std::string where = d.memory_cgroup.empty() ? "" : " in memory cgroup " + d.memory_cgroup;
  if (counted || !oom_lines.empty()) {
    det.message =
        "pid " + std::to_string(d.pid) + " was killed by the kernel's OOM killer" + where +
        (d.memory_limit ? " (limit " + hostfacts::human_bytes(*d.memory_limit) + ")" : "");
    det.escalated = true;
  } else if (d.oom_kills_after && d.kernel_note.empty()) {
    det.message =
        "pid " + std::to_string(d.pid) +
        " was killed by SIGKILL, not by the OOM killer (no OOM kill recorded" + where +
        "): a process sent it — a scheduler's limit, a watchdog, a user, or the command itself";
    det.fix =
        "ask what sent SIGKILL: the scheduler's record of the job (`sacct -j <job> -o "
        "State,ExitCode,MaxRSS`, `kubectl describe pod`), a watchdog's log, the shell history";
  } else {
    det.message = "pid " + std::to_string(d.pid) +
                  " was killed by SIGKILL; whether the OOM killer sent it could not be read";
  }
  detect::add_death_evidence(d, det);
  // The cgroup's peak is since the cgroup was made: telling when it reached the limit.
  if (det.escalated && d.memory_peak && d.memory_limit)
    det.evidence.push_back({"memory cgroup peak: " + hostfacts::human_bytes(*d.memory_peak) +
                                " of " + hostfacts::human_bytes(*d.memory_limit),
                            "", std::nullopt});
  if (counted)
    det.evidence.insert(
        det.evidence.begin(),
        {"oom_kill of the job's memory cgroup: " + std::to_string(*d.oom_kills_before) +
             " before the job, " + std::to_string(*d.oom_kills_after) + " after",
         "", std::nullopt});
  out.push_back(std::move(det));
}
