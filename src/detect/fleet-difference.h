// fleet-difference.h — the one finding FLEET001–FLEET005 each raise per
// fact category that differs between the members of a job: the first
// differing key and who holds each of its values in the message, every key
// (up to 12) as evidence, and the majority's values as the fix (the majority
// is the likely intended state). The rules differ only in the categories
// they cover, which each detector names.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "detect/detect.h"

namespace mld::detect {

// "a, b, c" of the first `limit` holder parts, then "and N more".
inline std::string fleet_holders(const std::vector<std::string>& parts, size_t limit = 8) {
  std::string out;
  const size_t shown = std::min(parts.size(), limit);
  for (size_t i = 0; i < shown; i++) out += (out.empty() ? "" : ", ") + parts[i];
  if (parts.size() > shown) out += " and " + std::to_string(parts.size() - shown) + " more";
  return out;
}

// One detection per differing category of `categories` (the rule's), with
// the rule id left to the registry.
inline void detect_fleet_differences(const Facts& facts, Detections& out,
                                     std::initializer_list<std::string_view> categories) {
  if (!facts.fleet) return;
  const FleetFacts& fleet = *facts.fleet;
  auto value_text = [](const std::optional<std::string>& v) {
    return v ? *v : std::string("(absent)");
  };
  for (const FleetFacts::Category& c : fleet.differing) {
    if (std::find(categories.begin(), categories.end(), c.name) == categories.end()) continue;
    if (c.weights.size() < 2) continue;
    Detection d;
    d.subject = c.name;
    const char* who = c.node_scope ? "Nodes" : fleet.ranks ? "Ranks" : "Reports";
    d.message = std::string(who) + " differ in " + c.description;
    if (!c.keys.empty()) {
      const FleetFacts::Category::Key& k = c.keys.front();
      std::string parts;
      for (const FleetFacts::Category::Value& v : k.values)
        parts += (parts.empty() ? "" : "; ") + value_text(v.value) + " on " +
                 fleet_holders(v.holders, 4);
      d.message += ": " + k.key + " is " + parts;
      if (c.keys.size() > 1) d.message += " (and " + std::to_string(c.keys.size() - 1) + " more)";
    }
    const size_t evidence_keys = 12;
    for (size_t i = 0; i < c.keys.size() && i < evidence_keys; i++)
      for (const FleetFacts::Category::Value& v : c.keys[i].values)
        d.evidence.push_back(
            {c.keys[i].key + " = " + value_text(v.value) + ": " + fleet_holders(v.holders), "",
             std::nullopt});
    if (c.keys.size() > evidence_keys)
      d.evidence.push_back({std::to_string(c.keys.size() - evidence_keys) +
                                " more keys differ (--json lists them all)",
                            "", std::nullopt});
    size_t total = 0;
    for (size_t w : c.weights) total += w;
    std::string target;
    for (const FleetFacts::Category::Key& k : c.keys) {
      target += (target.empty() ? "" : ", ") + k.key + " " + value_text(k.in_majority);
      if (target.size() > 300) {
        target += ", …";
        break;
      }
    }
    const char* unit = c.node_scope ? "nodes" : fleet.ranks ? "ranks" : "reports";
    if (c.weights[0] > c.weights[1])
      d.fix = "Make " + fleet_holders(c.minority) + " match the other " +
              std::to_string(c.weights[0]) + " of " + std::to_string(total) + " " + unit + ": " +
              target;
    else
      d.fix = "No value is held by a majority of the " + std::to_string(total) + " " + unit +
              ": install or set the same on every one (" + fleet_holders(c.majority) + " has " +
              target + ")";
    out.push_back(std::move(d));
  }
}

}  // namespace mld::detect
