// compare.cc — from every member's group digests (and the values behind the
// digests that differ) to what a person needs: which groups differ, which
// keys inside them, which nodes or ranks hold each value, and the facts the
// FLEET detectors read (src/detect/rules/FLEET00*.cc). Node-level
// groups are described by node (a node's ranks count once); process-level
// groups name ranks where only some of a node's ranks differ.
#include <algorithm>
#include <set>
#include <stdexcept>

#include "fleet/fleet.h"
#include "rules/rules.h"

namespace mld::fleet {

namespace {

// The parts of a host list: "gpu[001-003]", "login1".
std::vector<std::string> host_list_parts(const std::vector<std::string>& names) {
  // name = prefix + digits: "gpu007" → ("gpu", 7, width 3).
  struct Numbered {
    std::string prefix;
    size_t width;
    u64 number;
  };
  std::map<std::pair<std::string, size_t>, std::vector<u64>> numbered;
  std::vector<std::string> plain;
  std::vector<std::pair<std::string, size_t>> order;
  for (const std::string& n : names) {
    size_t d = n.size();
    while (d > 0 && n[d - 1] >= '0' && n[d - 1] <= '9') d--;
    size_t digits = n.size() - d;
    if (digits == 0 || digits > 18) {
      if (std::find(plain.begin(), plain.end(), n) == plain.end()) plain.push_back(n);
      continue;
    }
    std::pair<std::string, size_t> key{n.substr(0, d), digits};
    if (!numbered.count(key)) order.push_back(key);
    numbered[key].push_back(std::stoull(n.substr(d)));
  }
  std::vector<std::string> parts;
  for (const auto& key : order) {
    std::vector<u64>& nums = numbered[key];
    std::sort(nums.begin(), nums.end());
    nums.erase(std::unique(nums.begin(), nums.end()), nums.end());
    auto pad = [&](u64 v) {
      std::string s = std::to_string(v);
      return std::string(s.size() < key.second ? key.second - s.size() : 0, '0') + s;
    };
    if (nums.size() == 1) {
      parts.push_back(key.first + pad(nums[0]));
      continue;
    }
    std::string ranges;
    for (size_t i = 0; i < nums.size();) {
      size_t j = i;
      while (j + 1 < nums.size() && nums[j + 1] == nums[j] + 1) j++;
      ranges += (ranges.empty() ? "" : ",") + pad(nums[i]);
      if (j > i) ranges += "-" + pad(nums[j]);
      i = j + 1;
    }
    parts.push_back(key.first + "[" + ranges + "]");
  }
  parts.insert(parts.end(), plain.begin(), plain.end());
  return parts;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

std::string compress_host_list(std::vector<std::string> names) {
  return join(host_list_parts(names));
}

namespace {

std::string node_display(const Node& n, const Observations& obs) {
  if (!n.identity.name.empty()) return n.identity.name;
  return obs.members[n.members.front()].label;
}

// How much a set of members weighs for a majority: node facts count in
// nodes (a node's ranks count once), process facts in members.
size_t weight(const Comparison& c, Scope scope, const std::vector<size_t>& members) {
  if (scope != Scope::Node) return members.size();
  std::set<size_t> nodes;
  for (size_t m : members) nodes.insert(c.node_of_member[m]);
  return nodes.size();
}

}  // namespace

std::vector<std::string> member_parts(const Comparison& c, const Observations& obs,
                                      const std::vector<size_t>& members) {
  std::set<size_t> wanted(members.begin(), members.end());
  std::vector<std::string> whole;    // nodes all of whose members are meant
  std::vector<std::string> partial;  // "node-a (ranks 1,3)"
  for (const Node& n : c.nodes) {
    std::vector<size_t> in;
    for (size_t m : n.members)
      if (wanted.count(m)) in.push_back(m);
    if (in.empty()) continue;
    std::string name = node_display(n, obs);
    if (in.size() == n.members.size()) {
      whole.push_back(name);
      continue;
    }
    std::vector<u32> ranks;
    std::string labels;
    for (size_t m : in) {
      if (obs.members[m].rank) ranks.push_back(*obs.members[m].rank);
      labels += (labels.empty() ? "" : ", ") + obs.members[m].label;
    }
    if (ranks.size() == in.size())
      partial.push_back(name + " (rank" + (ranks.size() == 1 ? " " : "s ") + format_ranges(ranks) +
                        ")");
    else
      partial.push_back(name + " (" + labels + ")");
  }
  // Whole nodes compress into host lists.
  std::vector<std::string> parts = host_list_parts(whole);
  parts.insert(parts.end(), partial.begin(), partial.end());
  return parts;
}

std::string describe_members(const Comparison& c, const Observations& obs,
                             const std::vector<size_t>& members, size_t limit) {
  // The limit counts the host lists' parts.
  std::vector<std::string> parts = member_parts(c, obs, members);
  std::string out;
  size_t shown = std::min(parts.size(), limit);
  for (size_t i = 0; i < shown; i++) out += (out.empty() ? "" : ", ") + parts[i];
  if (parts.size() > shown) out += " and " + std::to_string(parts.size() - shown) + " more";
  return out;
}

detect::FleetFacts comparison_facts(const Comparison& c, const Observations& obs) {
  detect::FleetFacts out;
  if (obs.members.empty()) return out;
  const std::vector<GroupSpec>& specs = group_specs();
  out.ranks = obs.members.front().rank.has_value();
  for (const GroupComparison& gc : c.groups) {
    const GroupSpec& spec = specs[gc.group];
    // Check's findings on each member are other rules' results, not facts.
    if (!gc.differs() || spec.name == "findings") continue;
    detect::FleetFacts::Category cat;
    cat.name = std::string(spec.name);
    cat.node_scope = spec.scope == Scope::Node;
    cat.description = std::string(spec.title);
    const Variant& major = gc.variants.front();
    for (const KeyDifference& k : gc.keys) {
      detect::FleetFacts::Category::Key key;
      key.key = k.key;
      for (const auto& [value, members] : k.values)
        key.values.push_back({value, member_parts(c, obs, members)});
      if (auto it = major.group->values.find(k.key); it != major.group->values.end())
        key.in_majority = it->second;
      cat.keys.push_back(std::move(key));
    }
    std::vector<size_t> minority;
    for (const Variant& v : gc.variants) {
      cat.weights.push_back(weight(c, spec.scope, v.members));
      if (&v != &major) minority.insert(minority.end(), v.members.begin(), v.members.end());
    }
    std::sort(minority.begin(), minority.end());
    cat.majority = member_parts(c, obs, major.members);
    cat.minority = member_parts(c, obs, minority);
    out.differing.push_back(std::move(cat));
  }
  // Clock offsets, per node (the offset of a node's first measured member).
  for (const Node& n : c.nodes)
    for (size_t m : n.members)
      if (m < obs.clock_offset.size() && obs.clock_offset[m]) {
        out.clock_offsets.push_back({node_display(n, obs), *obs.clock_offset[m]});
        break;
      }
  out.clock_reference = node_display(c.nodes[c.node_of_member[0]], obs);
  return out;
}

Comparison compare(const Observations& obs) {
  Comparison c;
  const std::vector<GroupSpec>& specs = group_specs();
  const size_t n = obs.members.size();

  // Nodes, in order of first member; a member without any identity is a
  // node of its own.
  std::map<std::string, size_t> node_by_key;
  c.node_of_member.resize(n);
  for (size_t m = 0; m < n; m++) {
    const Member& mem = obs.members[m];
    std::string key = mem.node.key.empty() ? "\x01member " + std::to_string(m) : mem.node.key;
    auto [it, fresh] = node_by_key.emplace(key, c.nodes.size());
    if (fresh) c.nodes.push_back(Node{mem.node, {}});
    c.nodes[it->second].members.push_back(m);
    c.node_of_member[m] = it->second;
    if (std::find(c.tool_versions.begin(), c.tool_versions.end(), mem.tool_version) ==
        c.tool_versions.end())
      c.tool_versions.push_back(mem.tool_version);
  }

  FactGroup absent_group;
  absent_group.recorded = false;
  const u64 absent_digest = digest(absent_group);

  for (size_t g = 0; g < specs.size(); g++) {
    GroupComparison gc;
    gc.group = g;
    std::map<u64, size_t> variant_of;
    for (size_t m = 0; m < n; m++) {
      u64 d =
          m < obs.digests.size() && g < obs.digests[m].size() ? obs.digests[m][g] : absent_digest;
      if (d == absent_digest) {
        gc.not_recorded.push_back(m);
        continue;
      }
      auto [it, fresh] = variant_of.emplace(d, gc.variants.size());
      if (fresh) {
        Variant v;
        v.digest = d;
        auto det = obs.details.find({g, d});
        if (det != obs.details.end()) v.group = &det->second;
        gc.variants.push_back(std::move(v));
      }
      gc.variants[it->second].members.push_back(m);
    }
    const Scope scope = specs[g].scope;
    std::stable_sort(gc.variants.begin(), gc.variants.end(),
                     [&](const Variant& a, const Variant& b) {
                       return weight(c, scope, a.members) > weight(c, scope, b.members);
                     });
    if (gc.differs()) {
      std::set<std::string> keys;
      for (const Variant& v : gc.variants) {
        if (!v.group)
          throw std::logic_error("fleet: the values of group " + std::string(specs[g].name) +
                                 " were not fetched");
        for (const auto& kv : v.group->values) keys.insert(kv.first);
      }
      for (const std::string& key : keys) {
        KeyDifference kd;
        kd.key = key;
        for (const Variant& v : gc.variants) {
          auto it = v.group->values.find(key);
          std::optional<std::string> value;
          if (it != v.group->values.end()) value = it->second;
          auto slot = std::find_if(kd.values.begin(), kd.values.end(),
                                   [&](const auto& p) { return p.first == value; });
          if (slot == kd.values.end()) {
            kd.values.push_back({value, v.members});
          } else {
            slot->second.insert(slot->second.end(), v.members.begin(), v.members.end());
            std::sort(slot->second.begin(), slot->second.end());
          }
        }
        if (kd.values.size() > 1) {
          std::stable_sort(kd.values.begin(), kd.values.end(), [](const auto& a, const auto& b) {
            return a.second.size() > b.second.size();
          });
          gc.keys.push_back(std::move(kd));
        }
      }
    }
    c.groups.push_back(std::move(gc));
  }

  // The findings: the FLEET detectors read what differs and the clocks.
  const detect::FleetFacts fleet_facts = comparison_facts(c, obs);
  if (fleet_facts.clock_offsets.size() > 1) {
    auto by_offset = [](const auto& a, const auto& b) { return a.seconds < b.seconds; };
    const auto [lo, hi] = std::minmax_element(fleet_facts.clock_offsets.begin(),
                                              fleet_facts.clock_offsets.end(), by_offset);
    c.max_clock_offset = hi->seconds - lo->seconds;
  }
  detect::Facts facts;
  facts.fleet = &fleet_facts;
  c.findings = detect::findings(detect::run_detectors(facts), rules::RuleSet());
  std::stable_sort(c.findings.begin(), c.findings.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return a.rule < b.rule;
  });
  return c;
}

}  // namespace mld::fleet
