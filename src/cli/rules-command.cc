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

int run_rules(const CommonOptions& common) {
  rules::RuleSet rule_set;
  if (!load_rules(common, rule_set)) return 2;
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
