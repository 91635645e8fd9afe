// RUN004 — the command died of SIGBUS: with /dev/shm (nearly) full, a page of
// a shared-memory segment could not be allocated; otherwise a mapped file
// was truncated under the process, which this says too.
#include "detect/detect.h"
#include "detect/rules/death-evidence.h"

MLD_DETECTOR(RUN004) {
  using namespace mld;
  if (!facts.death || facts.death->signal != 7) return;
  const detect::DeathFacts& d = *facts.death;
  Detection det;
  det.rule = "RUN004";
  det.subject = "pid " + std::to_string(d.pid);
  const bool full =
      d.shm_size && d.shm_free && (*d.shm_free < (u64{1} << 20) || *d.shm_free * 100 < *d.shm_size);
  if (full) {
    det.message = "pid " + std::to_string(d.pid) + " died of SIGBUS with /dev/shm full (" +
                  hostfacts::human_bytes(*d.shm_free) + " free of " +
                  hostfacts::human_bytes(*d.shm_size) + ")";
    det.escalated = true;
  } else {
    det.message =
        "pid " + std::to_string(d.pid) + " died of SIGBUS" +
        (d.shm_free ? " while /dev/shm had " + hostfacts::human_bytes(*d.shm_free) + " free"
                    : std::string()) +
        ": a memory-mapped file truncated under it, or shared memory that filled and "
        "emptied again";
    det.fix =
        "check what the process maps: a file another process truncated or rewrote while mapped "
        "(a dataset or checkpoint file), or /dev/shm filling up during the run (`df -h /dev/shm` "
        "while it runs)";
  }
  if (d.shm_size)
    det.evidence.push_back({"/dev/shm: " + hostfacts::human_bytes(*d.shm_size) + ", " +
                                (d.shm_free ? hostfacts::human_bytes(*d.shm_free) : "?") +
                                " free when the job ended",
                            "", std::nullopt});
  detect::add_death_evidence(d, det);
  out.push_back(std::move(det));
}
