// fleet-report.cc — the comparison of `mldoctor fleet` and `mldoctor diff`
// for people (text and Markdown: the nodes and their members, the
// differences as findings, what is the same everywhere, each node's check
// findings grouped by the members that share them) and as the
// mldoctor.fleet/1 document (docs/json-schema.md).
#include "render/fleet-report.h"

#include <algorithm>
#include <cstdio>

#include "report/report.h"

namespace mld::render {

using nlohmann::json;

std::vector<NodeFinding> node_findings(const fleet::Comparison& c) {
  std::vector<NodeFinding> out;
  const size_t g = *fleet::group_index("findings");
  for (const fleet::Variant& v : c.groups[g].variants) {
    if (!v.group) continue;
    for (const auto& [key, value] : v.group->values) {
      auto it = std::find_if(out.begin(), out.end(),
                             [&k = key](const NodeFinding& f) { return f.key == k; });
      if (it == out.end()) {
        NodeFinding nf;
        nf.key = key;
        size_t colon = value.find(": ");
        nf.severity = parse_severity(value.substr(0, colon)).value_or(Severity::Info);
        nf.message = colon == std::string::npos ? value : value.substr(colon + 2);
        out.push_back(std::move(nf));
        it = out.end() - 1;
      }
      it->members.insert(it->members.end(), v.members.begin(), v.members.end());
    }
  }
  for (NodeFinding& f : out) std::sort(f.members.begin(), f.members.end());
  std::stable_sort(out.begin(), out.end(), [](const NodeFinding& a, const NodeFinding& b) {
    return a.severity > b.severity;
  });
  return out;
}

namespace {

std::string rule_of(const std::string& key) { return key.substr(0, key.find(' ')); }

std::string member_count(const fleet::Observations& obs, size_t n) {
  bool ranks = !obs.members.empty() && obs.members.front().rank;
  return std::to_string(n) +
         (ranks ? (n == 1 ? " rank" : " ranks") : (n == 1 ? " report" : " reports"));
}

std::string clock_text(double seconds) {
  char buf[64];
  if (seconds < 1)
    std::snprintf(buf, sizeof buf, "%.1f ms", seconds * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3f s", seconds);
  return buf;
}

}  // namespace

json comparison_json(const fleet::Comparison& c, const fleet::Observations& obs,
                     const Source& src) {
  const std::vector<fleet::GroupSpec>& specs = fleet::group_specs();
  json members = json::array();
  for (size_t m = 0; m < obs.members.size(); m++) {
    const fleet::Member& mem = obs.members[m];
    json j = {
        {"label", mem.label}, {"node", c.node_of_member[m]}, {"tool_version", mem.tool_version}};
    if (mem.rank) j["rank"] = *mem.rank;
    if (m < obs.clock_offset.size() && obs.clock_offset[m])
      j["clock_offset_s"] = *obs.clock_offset[m];
    members.push_back(std::move(j));
  }
  json nodes = json::array();
  for (const fleet::Node& n : c.nodes)
    nodes.push_back({{"name", n.identity.name}, {"key", n.identity.key}, {"members", n.members}});
  json groups = json::array();
  for (const fleet::GroupComparison& gc : c.groups) {
    const fleet::GroupSpec& spec = specs[gc.group];
    json variants = json::array();
    for (const fleet::Variant& v : gc.variants) {
      json vj = {{"members", v.members}};
      if (v.group) vj["values"] = v.group->values;
      variants.push_back(std::move(vj));
    }
    json keys = json::array();
    for (const fleet::KeyDifference& k : gc.keys) {
      json vals = json::array();
      for (const auto& [value, holders] : k.values)
        vals.push_back({{"value", value ? json(*value) : json(nullptr)}, {"members", holders}});
      keys.push_back({{"key", k.key}, {"values", vals}});
    }
    groups.push_back({{"name", spec.name},
                      {"scope", spec.scope == fleet::Scope::Node ? "node" : "process"},
                      {"title", spec.title},
                      {"differs", gc.differs()},
                      {"variants", variants},
                      {"keys", keys},
                      {"not_recorded", gc.not_recorded}});
  }
  json findings = json::array();
  for (const Finding& f : c.findings) findings.push_back(report::finding_json(f));
  json nf = json::array();
  for (const NodeFinding& f : node_findings(c))
    nf.push_back({{"rule", rule_of(f.key)},
                  {"key", f.key},
                  {"severity", severity_name(f.severity)},
                  {"message", f.message},
                  {"members", f.members}});
  json doc = {
      {"schema", "mldoctor.fleet/1"},
      {"version", MLD_VERSION},
      {"source", src.fleet ? "mpi" : "reports"},
      {"members", members},
      {"nodes", nodes},
      {"groups", groups},
      {"max_clock_offset_s", c.max_clock_offset ? json(*c.max_clock_offset) : json(nullptr)},
      {"node_findings", nf},
      {"findings", findings}};
  if (src.bytes)
    doc["protocol"] = {{"digest_bytes", src.bytes->digests},
                       {"plan_bytes", src.bytes->plan},
                       {"detail_bytes", src.bytes->details},
                       {"full_report_bytes", src.bytes->reports}};
  if (!src.mpi_library.empty()) doc["mpi_library"] = src.mpi_library;
  return doc;
}

void print_comparison(std::FILE* out, const fleet::Comparison& c, const fleet::Observations& obs,
                      const Source& src, bool markdown, bool color) {
  const std::vector<fleet::GroupSpec>& specs = fleet::group_specs();
  std::string head = std::string(src.fleet ? "mldoctor fleet" : "mldoctor diff") + " · " +
                     member_count(obs, obs.members.size()) + " on " +
                     std::to_string(c.nodes.size()) + (c.nodes.size() == 1 ? " node" : " nodes");
  if (markdown)
    std::fprintf(out, "## %s\n\n| node | %s |\n|---|---|\n", head.c_str(),
                 src.fleet ? "ranks" : "reports");
  else
    std::fprintf(out, "%s\n", head.c_str());
  for (const fleet::Node& n : c.nodes) {
    std::string who;
    std::vector<u32> ranks;
    for (size_t m : n.members)
      if (obs.members[m].rank) ranks.push_back(*obs.members[m].rank);
    if (ranks.size() == n.members.size()) {
      who = format_ranges(ranks);
    } else {
      for (size_t m : n.members) who += (who.empty() ? "" : ", ") + obs.members[m].label;
    }
    std::string name = n.identity.name.empty() ? "(no hostname)" : n.identity.name;
    if (markdown)
      std::fprintf(out, "| %s | %s |\n", name.c_str(), who.c_str());
    else
      std::fprintf(out, "  %-16s %s\n", name.c_str(), who.c_str());
  }
  if (c.tool_versions.size() > 1) {
    std::string v;
    for (const std::string& t : c.tool_versions)
      v += (v.empty() ? "" : ", ") + (t.empty() ? "unknown" : t);
    std::fprintf(out, "%sreports written by mldoctor %s\n", markdown ? "\n" : "  ", v.c_str());
  }
  std::fprintf(out, "\n");

  std::vector<const Finding*> all;
  for (const Finding& f : c.findings) all.push_back(&f);
  if (markdown) {
    report::print_findings_markdown(out, all);
  } else {
    if (all.empty()) std::fprintf(out, "%s no differences\n", color ? "\033[32m✓\033[0m" : "✓");
    for (const Finding* f : all) report::print_finding(out, *f, report::Style{color, false});
    std::fprintf(out, "\n");
  }

  std::string same_node, same_process;
  for (const fleet::GroupComparison& gc : c.groups) {
    const fleet::GroupSpec& spec = specs[gc.group];
    if (gc.differs() || gc.variants.empty() || spec.name == "findings") continue;
    if (obs.members.size() - gc.not_recorded.size() < 2) continue;  // nothing to compare with
    std::string& list = spec.scope == fleet::Scope::Node ? same_node : same_process;
    list += (list.empty() ? "" : ", ") + std::string(spec.title);
  }
  const char* bullet = markdown ? "- " : "";
  if (!same_node.empty())
    std::fprintf(out, "%sSame on every node: %s\n", bullet, same_node.c_str());
  if (!same_process.empty())
    std::fprintf(out, "%sSame in every %s: %s\n", bullet, src.fleet ? "rank" : "report",
                 same_process.c_str());
  for (const fleet::GroupComparison& gc : c.groups) {
    if (gc.not_recorded.empty()) continue;
    std::string who;
    for (size_t m : gc.not_recorded) {
      who += (who.empty() ? "" : ", ") + obs.members[m].label;
      if (!obs.members[m].tool_version.empty())
        who += " (mldoctor " + obs.members[m].tool_version + ")";
    }
    std::fprintf(out, "%sNot compared for %s: %s, which its report does not record\n", bullet,
                 who.c_str(), std::string(specs[gc.group].title).c_str());
  }
  if (c.max_clock_offset)
    std::fprintf(out, "%sClocks: nodes at most %s apart\n", bullet,
                 clock_text(*c.max_clock_offset).c_str());
  if (src.bytes && src.bytes->reports)
    std::fprintf(
        out,
        "%sGathered %llu bytes of digests and %llu of details (the full reports: %llu bytes)\n",
        bullet, static_cast<unsigned long long>(src.bytes->digests),
        static_cast<unsigned long long>(src.bytes->details),
        static_cast<unsigned long long>(src.bytes->reports));

  std::vector<NodeFinding> nf = node_findings(c);
  std::fprintf(out, markdown ? "\n### Findings of check on each node\n\n"
                             : "\nFindings of check on each node:\n");
  if (nf.empty()) std::fprintf(out, "%s none\n", markdown ? "-" : " ");
  // Grouped by the members that share them: "every rank" first.
  std::vector<std::vector<size_t>> holder_sets;
  for (const NodeFinding& f : nf)
    if (std::find(holder_sets.begin(), holder_sets.end(), f.members) == holder_sets.end())
      holder_sets.push_back(f.members);
  std::stable_sort(holder_sets.begin(), holder_sets.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  const size_t fg = *fleet::group_index("findings");
  size_t recorded = obs.members.size() - c.groups[fg].not_recorded.size();
  for (const std::vector<size_t>& holders : holder_sets) {
    std::string who = holders.size() == recorded && recorded == obs.members.size()
                          ? std::string(src.fleet ? "every rank" : "every report")
                          : fleet::describe_members(c, obs, holders);
    std::fprintf(out, markdown ? "- on %s:\n" : "  on %s:\n", who.c_str());
    for (const NodeFinding& f : nf)
      if (f.members == holders)
        std::fprintf(out, markdown ? "  - %s `%s` %s\n" : "    %s %s  %s\n",
                     report::severity_mark(f.severity),
                     markdown ? rule_of(f.key).c_str() : f.message.c_str(),
                     markdown ? f.message.c_str() : rule_of(f.key).c_str());
  }
}

}  // namespace mld::render
