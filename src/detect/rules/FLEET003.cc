// FLEET003 — the nodes of one job differ in hardware or operating system:
// the OS, kernel and glibc, the GPUs, the CPUs and NUMA nodes, memory and
// /dev/shm (rules/FLEET003.toml).
#include "detect/fleet-difference.h"

MLD_DETECTOR(FLEET003) {
  mld::detect::detect_fleet_differences(facts, out, {"os", "gpus", "cpu", "memory"});
}
