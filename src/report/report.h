// report.h — the reporters every command shares: findings and rules as
// doctor-style text (✓/✗/!, colour only when asked), as JSON with a
// versioned schema (docs/json-schema.md), and as Markdown for bug reports.
// Reporters only format; they never decide what is a finding.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "findings/findings.h"
#include "rules/rules.h"

namespace mld::report {

struct Style {
  bool color = false;
  bool show_files = true;  // prefix evidence lines with "file:line"
  // Incidents: each context finding with its own evidence, after the cause's
  // fix (`run`'s hang report, where RUN002's evidence is every thread's
  // stacks); else one "reported as:" line each, before the fix (`logs`).
  bool context_evidence = false;
};

// One finding as text: mark, message, rule id, evidence, occurrences, fix.
void print_finding(std::FILE* out, const Finding& f, const Style& style);

// One incident: its cause as a finding, marked with the incident's
// severity, with "also:" and "reported as:" lines for its other members.
void print_incident(std::FILE* out, const rules::Incident& inc, const Style& style);

// The summary line counted by incident ("1 error" for a cause and its
// envelopes).
std::string incidents_summary(const std::vector<rules::Incident>& incidents);

// "2 errors, 1 warning, 3 notes" (empty when there are none).
std::string summary_line(const std::vector<const Finding*>& findings);

// Number of findings at or above `fail_on`.
size_t count_at_or_above(const std::vector<const Finding*>& findings, Severity fail_on);

nlohmann::json finding_json(const Finding& f);

// Incidents as JSON ("rule", "severity", "cause", "also", "context"), each
// finding named by its index in `findings` (the document's "findings").
nlohmann::json incidents_json(const std::vector<rules::Incident>& incidents,
                              const std::vector<const Finding*>& findings);

// A finding's env_fix as one shell line: "export A=1 B=2; unset C" (an
// entry "-C" means unset C).
std::string env_fix_shell(const std::vector<std::string>& env_fix);

// A Markdown section for a log's incidents.
void print_incidents_markdown(std::FILE* out, const std::vector<rules::Incident>& incidents);

// A Markdown section for findings (for pasting into an issue).
void print_findings_markdown(std::FILE* out, const std::vector<const Finding*>& findings);

// Rules: one-line listing, full text for `explain`, JSON, and the Markdown
// of docs/rules.md.
void print_rule_line(std::FILE* out, const rules::Rule& r, const Style& style);
void print_rule_text(std::FILE* out, const rules::Rule& r, const Style& style);
nlohmann::json rule_json(const rules::Rule& r);
std::string rules_markdown(const rules::RuleSet& rules);
// One rule's section of that reference ("## ID", explanation, fix, signatures,
// references): what `explain --markdown` prints.
std::string rule_markdown(const rules::Rule& rule);

// "mldoctor: error: <what>" on stderr: how every command reports a failure
// of the tool itself (exit status 2).
void print_error(const std::string& what);

// Severity mark: "✗", "!", "·".
const char* severity_mark(Severity s);

}  // namespace mld::report
