// RUN006 — the command died of SIGSEGV: the kernel's segfault line names the
// object the fault happened in.
#include "detect/detect.h"
#include "detect/rules/death-evidence.h"

MLD_DETECTOR(RUN006) {
  using namespace mld;
  if (!facts.death || facts.death->signal != 11) return;
  const detect::DeathFacts& d = *facts.death;
  Detection det;
  det.rule = "RUN006";
  det.subject = "pid " + std::to_string(d.pid);
  const std::string object = detect::faulting_object(d.kernel_lines);
  const bool runtime = !object.empty() && detect::runtime_object(object);
  det.message =
      "pid " + std::to_string(d.pid) + " died of a segmentation fault" +
      (object.empty() ? std::string(" in native code")
       : runtime      ? " in " + object + " (the C runtime: the bad pointer came from its caller)"
                      : " in " + object);
  if (runtime)
    det.fix =
        "find the caller that passed the bad pointer: `python -X faulthandler` shows the Python "
        "stack at the crash, `gdb -batch -ex run -ex bt --args python ...` the native one";
  else if (!object.empty())
    det.fix = "rebuild or reinstall " + object +
              " for the torch/CUDA/compiler in use (or update the driver when it is libcuda.so); "
              "`python -X faulthandler` shows the Python stack at the crash";
  detect::add_death_evidence(d, det);
  out.push_back(std::move(det));
}
