// incidents.cc — one incident, one root cause first. A failing job reports
// its cause once and its consequences many times: NCCL prints "Duplicate GPU
// detected" as a WARN, torch wraps it in DistBackendError "invalid usage",
// torchrun summarises the dead worker in ChildFailedError. Each is a finding
// of its own rule; which explains which is data in the rule files
// (`replaces`, `envelope`), the one relation the knowledge base has. Here
// each finding is attached to the finding that explains it — preferring one
// from the same launcher rank, then the nearest line, since a log of several
// ranks holds one envelope per rank around one cause — and the roots of
// these trees lead the incidents. Findings of one rule with different
// subjects (two pairs of ranks sharing a GPU) are one incident. An incident
// is as severe as its worst member, but a note that explains a finding
// declares it harmless.
#include <algorithm>
#include <map>

#include "rules/rules.h"

namespace mld::rules {
namespace {

// The first evidence line of a finding (not a context line); 0 when none.
u64 first_line_of(const Finding& f) {
  for (const Evidence& e : f.evidence)
    if (!e.context && e.line) return *e.line;
  return 0;
}

// 0: both name ranks and share one; 1: either names none; 2: disjoint.
int rank_distance(const Finding& a, const Finding& b) {
  if (a.ranks.empty() || b.ranks.empty()) return 1;
  for (u32 r : a.ranks)
    if (std::binary_search(b.ranks.begin(), b.ranks.end(), r)) return 0;
  return 2;
}

u64 line_distance(u64 a, u64 b) { return a > b ? a - b : b - a; }

}  // namespace

std::vector<Incident> group_incidents(const std::vector<const Finding*>& findings,
                                      const RuleSet& rules) {
  const size_t n = findings.size();
  std::vector<const Rule*> rule(n);
  std::vector<u64> line(n);
  for (size_t i = 0; i < n; i++) {
    rule[i] = rules.find(findings[i]->rule);
    line[i] = first_line_of(*findings[i]);
  }

  // Each finding's explainer: the best candidate, or itself.
  std::vector<size_t> parent(n);
  for (size_t i = 0; i < n; i++) {
    parent[i] = i;
    if (!rule[i]) continue;
    std::pair<int, u64> best{3, 0};
    for (size_t j = 0; j < n; j++) {
      if (j == i || !rule[j] || !rule[j]->explains(*rule[i], findings[j]->severity)) continue;
      std::pair<int, u64> score{rank_distance(*findings[i], *findings[j]),
                                line_distance(line[i], line[j])};
      if (score < best || (score == best && j < parent[i])) {
        best = score;
        parent[i] = j;
      }
    }
  }
  // Roots, with cycles of explicit `replaces` cut at their earliest member.
  std::vector<size_t> root(n);
  for (size_t i = 0; i < n; i++) {
    std::vector<size_t> path{i};
    size_t at = i;
    while (parent[at] != at) {
      at = parent[at];
      if (std::find(path.begin(), path.end(), at) != path.end()) {
        at = *std::min_element(path.begin(), path.end(), [&](size_t a, size_t b) {
          return std::pair(line[a], a) < std::pair(line[b], b);
        });
        break;
      }
      path.push_back(at);
    }
    root[i] = at;
  }
  // One incident per root rule: a later root of the same rule joins the first.
  std::map<std::string, size_t> incident_of_rule;
  std::vector<size_t> incident_of_root(n, n);
  std::vector<Incident> incidents;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(line[a], std::string_view(findings[a]->rule)) <
           std::pair(line[b], std::string_view(findings[b]->rule));
  });
  for (size_t i : order) {
    if (root[i] != i) continue;
    auto [it, fresh] = incident_of_rule.try_emplace(findings[i]->rule, incidents.size());
    if (fresh) {
      Incident inc;
      inc.cause = findings[i];
      incidents.push_back(inc);
    } else {
      incidents[it->second].also.push_back(findings[i]);
    }
    incident_of_root[i] = it->second;
  }
  for (size_t i : order)
    if (root[i] != i) incidents[incident_of_root[root[i]]].context.push_back(findings[i]);

  // The incident is as severe as its worst member (a warning that explains a
  // watchdog timeout leads an error), except that a note declares what it
  // explains harmless (NCCL's optional plugin probe is no missing library).
  for (Incident& inc : incidents) {
    inc.severity = inc.cause->severity;
    inc.first_line = first_line_of(*inc.cause);
    for (const auto* members : {&inc.also, &inc.context})
      for (const Finding* f : *members) {
        if (inc.cause->severity != Severity::Info)
          inc.severity = std::max(inc.severity, f->severity);
        u64 l = first_line_of(*f);
        if (l && (!inc.first_line || l < inc.first_line)) inc.first_line = l;
      }
  }
  std::stable_sort(incidents.begin(), incidents.end(), [](const Incident& a, const Incident& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return a.first_line < b.first_line;
  });
  return incidents;
}

}  // namespace mld::rules
