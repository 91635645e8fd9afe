// RUN005 — the command died of SIGILL: the kernel's trap line names the
// object the instruction is in; the CPU's level and the extensions it lacks
// say which builds cannot run here.
#include "detect/detect.h"
#include "detect/rules/death-evidence.h"

MLD_DETECTOR(RUN005) {
  using namespace mld;
  if (!facts.death || facts.death->signal != 4) return;
  const detect::DeathFacts& d = *facts.death;
  Detection det;
  det.rule = "RUN005";
  det.subject = "pid " + std::to_string(d.pid);
  const std::string object = detect::faulting_object(d.kernel_lines);
  std::string cpu = "this CPU";
  if (!d.cpu_model.empty() || !d.cpu_level.empty())
    cpu += " (" + d.cpu_model + (d.cpu_model.empty() || d.cpu_level.empty() ? "" : ", ") +
           d.cpu_level + ")";
  det.message = "pid " + std::to_string(d.pid) + " died of SIGILL" +
                (object.empty() ? std::string() : " in " + object) + ": an instruction " + cpu +
                " does not execute";
  if (!d.cpu_lacks.empty()) {
    std::string lacks;
    for (const std::string& f : d.cpu_lacks) lacks += (lacks.empty() ? "" : " ") + f;
    det.evidence.push_back({"the CPU lacks: " + lacks, "/proc/cpuinfo", std::nullopt});
  }
  if (!object.empty())
    det.fix = "install a build of " + object +
              " made for this CPU (or build it here without foreign -march flags), or run on a "
              "CPU with the instructions it needs";
  detect::add_death_evidence(d, det);
  out.push_back(std::move(det));
}
