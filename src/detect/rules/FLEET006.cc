// FLEET006 — the clocks of the job's nodes disagree by more than a second.
// `mldoctor fleet` measures each node's offset from the first rank's node
// over MPI (Cristian's algorithm); beyond a second log lines of different
// ranks no longer order and cross-node timeouts expire early or late
// (rules/FLEET006.toml).
#include <algorithm>
#include <cstdio>

#include "detect/detect.h"

namespace {
// Offsets further apart than this are a finding.
constexpr double kClockOffsetLimit = 1.0;
}  // namespace

MLD_DETECTOR(FLEET006) {
  using namespace mld;
  if (!facts.fleet) return;
  const std::vector<detect::FleetFacts::ClockOffset>& offsets = facts.fleet->clock_offsets;
  if (offsets.size() < 2) return;
  double lo = offsets.front().seconds, hi = lo;
  for (const detect::FleetFacts::ClockOffset& o : offsets) {
    lo = std::min(lo, o.seconds);
    hi = std::max(hi, o.seconds);
  }
  const double spread = hi - lo;
  if (spread <= kClockOffsetLimit) return;
  Detection d;
  d.rule = "FLEET006";
  d.subject = "clocks";
  char buf[160];
  std::snprintf(buf, sizeof buf, "The nodes' clocks are %.3f s apart", spread);
  d.message = buf;
  for (const detect::FleetFacts::ClockOffset& o : offsets) {
    std::snprintf(buf, sizeof buf, "%+.3f s", o.seconds);
    d.evidence.push_back(
        {o.node + ": " + buf + " from " + facts.fleet->clock_reference, "", std::nullopt});
  }
  out.push_back(std::move(d));
}
