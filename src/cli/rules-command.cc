// rules-command.cc — `mldoctor rules` and `mldoctor explain`: the knowledge
// base as a listing, as JSON, as the Markdown of docs/rules.md, and one rule
// in full. Also where every command gets its rule set (builtin + --rules-dir).
#include <cctype>

#include "cli/cli.h"
#include "report/report.h"

namespace mld::cli {

// The rule set a command uses: builtin plus --rules-dir. Problems are printed;
// returns false when the user's rules are unusable.
bool load_rules(const CommonOptions& common, rules::RuleSet& out) {
  if (common.rules_dir.empty()) {
    if (common.no_builtin_rules) {
      print_error("--no-builtin-rules needs --rules-dir");
      return false;
    }
    out = rules::RuleSet::builtin();
    return true;
  }
  std::vector<rules::RuleError> errors;
  out = rules::RuleSet::with_user_dir(common.rules_dir, errors, !common.no_builtin_rules);
  for (const rules::RuleError& e : errors) print_error(e.origin + ": " + e.message);
  return errors.empty();
}

// The rules checked against their own claims, with the counts and every
// problem; log rules citing no [[source]] are named but are not a problem.
int check_rules(const rules::RuleSet& rule_set, const CommonOptions& common) {
  std::vector<rules::RuleError> errors;
  std::shared_ptr<const logs::Matcher> matcher = logs::Matcher::compile(rule_set, errors);
  for (const rules::RuleError& e : errors) print_error(e.origin + ": " + e.message);
  logs::RuleCheckResult res = logs::check_rules(rule_set, matcher);
  const bool ok = errors.empty() && res.problems.empty();
  if (common.format == OutputFormat::Json) {
    nlohmann::json problems = nlohmann::json::array();
    for (const logs::RuleCheckProblem& p : res.problems)
      problems.push_back({{"rule", p.rule}, {"problem", p.what}});
    nlohmann::json doc = {{"schema", "mldoctor.rules-check/1"},
                          {"version", MLD_VERSION},
                          {"ok", ok},
                          {"log_rules", res.rules},
                          {"examples", res.examples},
                          {"negatives", res.negatives},
                          {"sources", res.sources},
                          {"source_lines", res.source_lines},
                          {"unsourced", res.unsourced},
                          {"problems", problems}};
    std::fprintf(stdout, "%s\n", doc.dump(2).c_str());
    return ok ? 0 : 1;
  }
  for (const logs::RuleCheckProblem& p : res.problems)
    std::fprintf(stdout, "%s: %s\n\n", p.rule.c_str(), p.what.c_str());
  std::fprintf(stdout,
               "checked %zu log rules: %zu examples, %zu negatives, %zu cited format strings "
               "(%zu lines with their prefixes): %zu problem%s\n",
               res.rules, res.examples, res.negatives, res.sources, res.source_lines,
               res.problems.size(), res.problems.size() == 1 ? "" : "s");
  if (!res.unsourced.empty()) {
    std::string ids;
    for (const std::string& id : res.unsourced) ids += " " + id;
    const bool one = res.unsourced.size() == 1;
    std::fprintf(stdout, "%zu log rule%s no [[source]] of %s message:%s\n", res.unsourced.size(),
                 one ? " cites" : "s cite", one ? "its" : "their", ids.c_str());
  }
  return ok ? 0 : 1;
}

int run_rules(const CommonOptions& common, bool check) {
  rules::RuleSet rule_set;
  if (!load_rules(common, rule_set)) return 2;
  if (check) return check_rules(rule_set, common);
  std::FILE* out = stdout;
  if (common.format == OutputFormat::Json) {
    nlohmann::json a = nlohmann::json::array();
    for (const rules::Rule& r : rule_set.all()) a.push_back(report::rule_json(r));
    nlohmann::json doc = {{"schema", "mldoctor.rules/1"}, {"version", MLD_VERSION}, {"rules", a}};
    std::fprintf(out, "%s\n", doc.dump(2).c_str());
  } else if (common.format == OutputFormat::Markdown) {
    std::fputs(report::rules_markdown(rule_set).c_str(), out);
  } else {
    for (const rules::Rule& r : rule_set.all())
      if (!r.withdrawn) report::print_rule_line(out, r, {.color = common.color});
  }
  return 0;
}

int run_explain(const CommonOptions& common, const std::string& id) {
  rules::RuleSet rule_set;
  if (!load_rules(common, rule_set)) return 2;
  std::string upper = id;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const rules::Rule* r = rule_set.find(upper);
  if (!r) {
    print_error("no rule " + id + " (mldoctor rules lists them)");
    return 2;
  }
  if (common.format == OutputFormat::Json) {
    std::fprintf(stdout, "%s\n", report::rule_json(*r).dump(2).c_str());
  } else if (common.format == OutputFormat::Markdown) {
    const std::string md = report::rule_markdown(*r);
    std::fputs(md.c_str() + (md.starts_with("\n") ? 1 : 0), stdout);
  } else {
    report::print_rule_text(stdout, *r, {.color = common.color});
  }
  return 0;
}

}  // namespace mld::cli
