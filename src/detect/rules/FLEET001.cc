// FLEET001 — the nodes or ranks of one job run different GPU/communication
// stacks: the NVIDIA driver, the native libraries (CUDA, NCCL, cuDNN, verbs,
// OpenMP) each node resolves, or the key Python packages and torch's CUDA
// build of each process. Ranks that disagree here fail or hang at the first
// collective (rules/FLEET001.toml).
#include "detect/fleet-difference.h"

MLD_DETECTOR(FLEET001) {
  mld::detect::detect_fleet_differences(facts, out, {"gpu-driver", "libraries", "packages"});
}
