// FLEET004 — the nodes of one job differ in their fabric: the network
// interfaces NCCL may bootstrap over, or the InfiniBand/RDMA devices and the
// state of their ports (rules/FLEET004.toml).
#include "detect/fleet-difference.h"

MLD_DETECTOR(FLEET004) {
  mld::detect::detect_fleet_differences(facts, out, {"network", "infiniband"});
}
