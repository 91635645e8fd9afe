// compare.cc — from every member's group digests (and the values behind the
// digests that differ) to what a person needs: which groups differ, which
// keys inside them, which nodes or ranks hold each value, and one FLEET
// finding per differing group with the majority as the fix. Node-level
// groups are described by node (a node's ranks count once); process-level
// groups name ranks where only some of a node's ranks differ.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <stdexcept>

#include "fleet/fleet.h"

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

Severity rule_severity(std::string_view rule) {
  return rule == "FLEET001" ? Severity::Error : Severity::Warning;
}

}  // namespace

std::string describe_members(const Comparison& c, const Observations& obs,
                             const std::vector<size_t>& members, size_t limit) {
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
  // Whole nodes compress into host lists; the limit counts the list's parts.
  std::vector<std::string> parts = host_list_parts(whole);
  parts.insert(parts.end(), partial.begin(), partial.end());
  std::string out;
  size_t shown = std::min(parts.size(), limit);
  for (size_t i = 0; i < shown; i++) out += (out.empty() ? "" : ", ") + parts[i];
  if (parts.size() > shown) out += " and " + std::to_string(parts.size() - shown) + " more";
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

  // The findings: one per differing group that has a rule.
  auto value_text = [](const std::optional<std::string>& v) {
    return v ? *v : std::string("(absent)");
  };
  for (const GroupComparison& gc : c.groups) {
    const GroupSpec& spec = specs[gc.group];
    if (!gc.differs() || spec.rule.empty()) continue;
    Finding f;
    f.rule = std::string(spec.rule);
    f.severity = rule_severity(spec.rule);
    f.subject = std::string(spec.name);
    const bool ranks = obs.members.front().rank.has_value();
    const char* who = spec.scope == Scope::Node ? "Nodes" : ranks ? "Ranks" : "Reports";
    f.message = std::string(who) + " differ in " + std::string(spec.title);
    if (!gc.keys.empty()) {
      const KeyDifference& k = gc.keys.front();
      std::string parts;
      for (const auto& [value, members] : k.values)
        parts += (parts.empty() ? "" : "; ") + value_text(value) + " on " +
                 describe_members(c, obs, members, 4);
      f.message += ": " + k.key + " is " + parts;
      if (gc.keys.size() > 1) f.message += " (and " + std::to_string(gc.keys.size() - 1) + " more)";
    }
    const size_t evidence_keys = 12;
    for (size_t i = 0; i < gc.keys.size() && i < evidence_keys; i++)
      for (const auto& [value, members] : gc.keys[i].values)
        f.evidence.push_back({gc.keys[i].key + " = " + value_text(value) + ": " +
                              describe_members(c, obs, members)});
    if (gc.keys.size() > evidence_keys)
      f.evidence.push_back({std::to_string(gc.keys.size() - evidence_keys) +
                            " more keys differ (--json lists them all)"});
    // The majority is the likely intended state; the fix names it.
    auto weight_of = [&](const Variant& v) { return weight(c, spec.scope, v.members); };
    const Variant& major = gc.variants.front();
    size_t total = 0;
    for (const Variant& v : gc.variants) total += weight_of(v);
    std::string target;
    for (const KeyDifference& k : gc.keys) {
      auto it = major.group->values.find(k.key);
      target += (target.empty() ? "" : ", ") + k.key + " " +
                (it == major.group->values.end() ? std::string("(absent)") : it->second);
      if (target.size() > 300) {
        target += ", …";
        break;
      }
    }
    std::vector<size_t> minority;
    for (size_t i = 1; i < gc.variants.size(); i++)
      minority.insert(minority.end(), gc.variants[i].members.begin(), gc.variants[i].members.end());
    std::sort(minority.begin(), minority.end());
    const char* unit = spec.scope == Scope::Node ? "nodes" : ranks ? "ranks" : "reports";
    if (weight_of(major) > weight_of(gc.variants[1]))
      f.fix = "Make " + describe_members(c, obs, minority) + " match the other " +
              std::to_string(weight_of(major)) + " of " + std::to_string(total) + " " + unit +
              ": " + target;
    else
      f.fix = "No value is held by a majority of the " + std::to_string(total) + " " + unit +
              ": install or set the same on every one (" + describe_members(c, obs, major.members) +
              " has " + target + ")";
    c.findings.push_back(std::move(f));
  }

  // Clock offsets, per node (the offset of a node's first measured member).
  std::vector<std::pair<size_t, double>> offsets;
  for (size_t i = 0; i < c.nodes.size(); i++)
    for (size_t m : c.nodes[i].members)
      if (m < obs.clock_offset.size() && obs.clock_offset[m]) {
        offsets.push_back({i, *obs.clock_offset[m]});
        break;
      }
  if (offsets.size() > 1) {
    double lo = offsets.front().second, hi = lo;
    for (const auto& o : offsets) {
      lo = std::min(lo, o.second);
      hi = std::max(hi, o.second);
    }
    c.max_clock_offset = hi - lo;
    if (*c.max_clock_offset > kClockOffsetLimit) {
      Finding f;
      f.rule = "FLEET006";
      f.severity = Severity::Warning;
      f.subject = "clocks";
      char buf[160];
      std::snprintf(buf, sizeof buf, "The nodes' clocks are %.3f s apart", *c.max_clock_offset);
      f.message = buf;
      for (const auto& [node, off] : offsets) {
        std::snprintf(buf, sizeof buf, "%+.3f s", off);
        f.evidence.push_back({node_display(c.nodes[node], obs) + ": " + buf + " from " +
                              node_display(c.nodes[c.node_of_member[0]], obs)});
      }
      c.findings.push_back(std::move(f));
    }
  }
  std::stable_sort(c.findings.begin(), c.findings.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return a.rule < b.rule;
  });
  return c;
}

}  // namespace mld::fleet
