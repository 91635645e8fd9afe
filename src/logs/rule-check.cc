// rule-check.cc — a rule set checked against its own claims, through the
// real matcher (`mldoctor rules --check`, and the generic rules test for the
// builtin rules). A log rule claims three things: its positive examples
// produce it, its negative examples produce nothing, and the messages its
// [[source]] tables cite — the emitters' own format strings — produce it
// whatever the arguments and whatever a log puts before the line. The last
// is the one that generalises: a signature tuned on the lines someone once
// pasted matches those lines; one checked against the format string matches
// what the program prints. So each cited format is filled with typed sample
// values and printed under the prefixes real logs carry (launcher rank tags,
// logging timestamps, NCCL's host:pid:tid, glog and c10 prefixes, exception
// class names, Windows warning paths, colour codes), and the rule must be the
// cause of the first incident: found, and not outranked by another rule.
#include <algorithm>

#include "logs/logs.h"

namespace mld::logs {
namespace {

struct Prefix {
  const char* name;
  const char* text;
  bool every_line;  // launchers tag every line; the others only the first
};

// What logs put before an emitter's line, as seen in real logs.
constexpr Prefix kPrefixes[] = {
    {"none", "", false},
    {"torchrun rank", "[rank3]:", true},
    {"srun --label", "3: ", true},
    {"python logging", "2026-11-28 12:00:01,123 - train - ERROR - ", false},
    {"NCCL host:pid:tid", "gpu-node-17:4242:4299 [3] ", false},
    {"glog", "E1128 12:00:01.123456 4242 worker.cc:88] ", false},
    {"c10 warning", "[W1128 12:00:01.123456242 ProcessGroupNCCL.cpp:1234] ", false},
    {"exception class", "RuntimeError: ", false},
    {"Windows warning",
     "C:\\Users\\me\\miniconda3\\Lib\\site-packages\\torch\\utils\\cpp_extension.py:1893: "
     "UserWarning: ",
     false},
    {"colour", "\x1b[1;31m", false},
};

std::string with_prefix(const std::string& text, const Prefix& p) {
  if (!*p.text) return text;
  std::string out = p.text;
  for (size_t i = 0; i < text.size(); i++) {
    out += text[i];
    if (p.every_line && text[i] == '\n' && i + 1 < text.size()) out += p.text;
  }
  return out;
}

struct Scanned {
  std::vector<Finding> findings;
  std::string top;  // the rule of the first incident's cause
};

Scanned scan_text(const std::shared_ptr<const Matcher>& matcher, const rules::RuleSet& rules,
                  const std::string& text) {
  Scanner s(matcher, {});
  s.feed(ByteView(reinterpret_cast<const u8*>(text.data()), text.size()));
  s.finish();
  Scanned out;
  for (const LogFinding* f : s.findings()) out.findings.push_back(f->finding);
  std::vector<const Finding*> ptrs;
  for (const Finding& f : out.findings) ptrs.push_back(&f);
  std::vector<rules::Incident> incidents = rules::group_incidents(ptrs, rules);
  if (!incidents.empty() && incidents[0].cause) out.top = incidents[0].cause->rule;
  return out;
}

std::string rule_list(const std::vector<Finding>& findings) {
  std::string out;
  for (const Finding& f : findings) out += (out.empty() ? "" : ", ") + f.rule;
  return out.empty() ? "nothing" : out;
}

std::string where(const rules::Source& s) {
  if (!s.package.empty()) return s.path + " in Debian's " + s.package + " " + s.tag;
  return s.repository + " " + s.path + ":" + std::to_string(s.line) + " (" + s.tag + ")";
}

}  // namespace

RuleCheckResult check_rules(const rules::RuleSet& rules,
                            const std::shared_ptr<const Matcher>& matcher) {
  RuleCheckResult out;
  for (const rules::Rule& r : rules.all()) {
    if (r.withdrawn || !r.is_log_rule()) continue;
    out.rules++;
    if (r.sources.empty() && !r.signatures.empty()) out.unsourced.push_back(r.id);
    for (const rules::Example& ex : r.examples) {
      out.examples++;
      Scanned got = scan_text(matcher, rules, ex.log);
      if (std::none_of(got.findings.begin(), got.findings.end(),
                       [&](const Finding& f) { return f.rule == r.id; }))
        out.problems.push_back({r.id, "example (" + ex.source + ") produces " +
                                          rule_list(got.findings) + ", not the rule:\n" + ex.log});
    }
    for (const rules::Example& ex : r.negatives) {
      out.negatives++;
      Scanned got = scan_text(matcher, rules, ex.log);
      if (!got.findings.empty())
        out.problems.push_back(
            {r.id, "negative example produces " + rule_list(got.findings) + ":\n" + ex.log});
    }
    for (const rules::Source& src : r.sources) {
      out.sources++;
      std::string error;
      std::optional<std::string> line = rules::instantiate_format(src, &error);
      if (!line) {
        out.problems.push_back({r.id, "source " + where(src) + ": " + error});
        continue;
      }
      // One problem per source: the prefixes it fails under, and the first
      // failing line with what the scan gave instead.
      std::string failed, first;
      for (const Prefix& p : kPrefixes) {
        out.source_lines++;
        Scanned got = scan_text(matcher, rules, with_prefix(*line, p));
        if (got.top == r.id) continue;
        failed += (failed.empty() ? "" : ", ") + std::string(p.name);
        if (!first.empty()) continue;
        const bool found = std::any_of(got.findings.begin(), got.findings.end(),
                                       [&](const Finding& f) { return f.rule == r.id; });
        first = (found ? "outranked by " + got.top
                       : "not matched (got " + rule_list(got.findings) + ")") +
                ":\n" + with_prefix(*line, p);
      }
      if (!failed.empty())
        out.problems.push_back({r.id, "source " + where(src) + " fails after the prefix(es) " +
                                          failed + "; " + first});
    }
  }
  return out;
}

}  // namespace mld::logs
