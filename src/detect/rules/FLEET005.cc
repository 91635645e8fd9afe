// FLEET005 — the ranks of one job run with different settings: native-layer
// environment variables, resource limits (memlock, nofile, nproc), or the
// CPUs each process may use (rules/FLEET005.toml).
#include "detect/fleet-difference.h"

MLD_DETECTOR(FLEET005) {
  mld::detect::detect_fleet_differences(facts, out, {"environment", "limits", "cpu-binding"});
}
