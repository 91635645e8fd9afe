// FLEET002 — the ranks of one job run different Python environments: the
// interpreter, the installed distributions, or the OpenMP runtimes and numba
// layer their import set loads (rules/FLEET002.toml).
#include "detect/fleet-difference.h"

MLD_DETECTOR(FLEET002) {
  mld::detect::detect_fleet_differences(facts, out, {"python", "distributions", "imports"});
}
