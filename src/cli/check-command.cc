// check-command.cc — `mldoctor check` and `mldoctor fix`. check prints the
// report people paste into bug trackers: a header with what collect_env shows
// (Python, key package versions, torch's CUDA build, GPUs, glibc) plus what it
// lacks (usable CPUs under affinity and cgroup quota, NUMA, /dev/shm, limits,
// ranks per node, the native-layer variables, the OpenMP runtimes of the
// import set), then the findings. fix prints the environment settings of the
// findings as shell code for `eval "$(mldoctor fix)"`.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

#include "check/check.h"
#include "cli/cli.h"
#include "fleet/fleet.h"
#include "render/check-report.h"
#include "report/report.h"
#include "snapshot/snapshot.h"

namespace mld::cli {

namespace {

using nlohmann::json;

// A detector's finding carries its own message and fix; what it left empty
// comes from its rule (title, fix text, env settings).
void complete(std::vector<Finding>& findings, const rules::RuleSet& rules) {
  for (Finding& f : findings) rules::complete_from_rule(f, rules);
}

}  // namespace

// The check with its findings completed from the rules; nullopt when the
// user's rules are unusable (already reported).
std::optional<check::CheckReport> checked_report(const CommonOptions& common, const CheckOptions& opts,
                                                 const host::Host& host) {
  // The builtin rules of the findings only, unless the user adds rules.
  rules::RuleSet rule_set;
  if (!common.rules_dir.empty() || common.no_builtin_rules)
    if (!load_rules(common, rule_set)) return std::nullopt;
  check::CheckOptions co;
  co.python = opts.python;
  co.imports = opts.imports;
  co.ranks_per_node = opts.ranks_per_node;
  co.glibc = opts.glibc;
  if (co.glibc.empty()) co.glibc = snapshot::snapshot_fact(host, "glibc").value_or("");
  if (host.is_live_root()) {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) co.cwd = buf;
  }
  check::CheckReport r = check::run_check(host, co);
  if (common.rules_dir.empty()) {
    std::vector<std::string> ids;
    for (const Finding& f : r.findings) ids.push_back(f.rule);
    rule_set = rules::RuleSet::builtin_subset(ids);
  }
  complete(r.findings, rule_set);
  return r;
}


int run_check(const CommonOptions& common, const CheckOptions& opts) {
  host::Host host = analysed_host(common);
  std::optional<check::CheckReport> checked = checked_report(common, opts, host);
  if (!checked) return 2;
  check::CheckReport& r = *checked;
  const std::vector<render::HeaderRow> header = render::check_header(r);
  std::vector<const Finding*> all;
  for (const Finding& f : r.findings) all.push_back(&f);
  std::FILE* out = stdout;

  if (common.format == OutputFormat::Json) {
    std::fprintf(out, "%s\n", fleet::check_document(r, MLD_VERSION).dump(2).c_str());
  } else if (common.format == OutputFormat::Markdown) {
    std::fprintf(out, "## mldoctor check\n\n| | |\n|---|---|\n");
    for (const auto& [k, v] : header) std::fprintf(out, "| %s | %s |\n", k.c_str(), v.c_str());
    std::fprintf(out, "\n");
    if (r.gpu.gpus.size() >= 2) std::fprintf(out, "```\n%s```\n\n", gpu::topology_matrix_text(r.gpu).c_str());
    report::print_findings_markdown(out, all);
  } else {
    report::Style style{common.color, true};
    for (const auto& [k, v] : header) std::fprintf(out, "%-9s %s\n", k.c_str(), v.c_str());
    if (r.gpu.gpus.size() >= 2) std::fprintf(out, "\n%s", gpu::topology_matrix_text(r.gpu).c_str());
    std::fprintf(out, "\n");
    if (all.empty()) std::fprintf(out, "%s no findings\n", common.color ? "\033[32m✓\033[0m" : "✓");
    for (const Finding* f : all) report::print_finding(out, *f, style);
    std::string summary = report::summary_line(all);
    if (!summary.empty()) {
      std::fprintf(out, "\n%s · mldoctor explain %s", summary.c_str(), all.front()->rule.c_str());
      if (!check::fix_settings(r.findings).empty()) std::fprintf(out, " · eval \"$(mldoctor fix)\"");
      std::fprintf(out, "\n");
    }
  }
  // An interpreter the user named and that cannot be examined is a failed
  // request, not an empty environment.
  if (opts.python && !r.python) {
    print_error(r.python_error);
    return 2;
  }
  return report::count_at_or_above(all, common.fail_on) > 0 ? 1 : 0;
}

int run_fix(const CommonOptions& common, const CheckOptions& opts, const std::string& shell) {
  host::Host host = analysed_host(common);
  std::optional<check::CheckReport> checked = checked_report(common, opts, host);
  if (!checked) return 2;
  const check::CheckReport& r = *checked;
  if (opts.python && !r.python) {
    print_error(r.python_error);
    return 2;
  }
  std::vector<check::FixSetting> settings = check::fix_settings(r.findings);
  std::FILE* out = stdout;
  if (common.format == OutputFormat::Json) {
    json a = json::array();
    for (const check::FixSetting& s : settings)
      a.push_back({{"name", s.name}, {"value", s.value ? json(*s.value) : json(nullptr)}, {"rules", s.rules}});
    std::fprintf(out, "%s\n", json({{"schema", "mldoctor.fix/1"}, {"version", MLD_VERSION}, {"settings", a}}).dump(2).c_str());
    return 0;
  }
  // Single quotes keep every byte literal: in bash a ' inside is closed,
  // escaped and reopened; fish escapes ' and \\ inside single quotes.
  auto quote = [&](const std::string& v) {
    std::string q = "'";
    for (char c : v) {
      if (c == '\'')
        q += shell == "fish" ? "\\'" : "'\\''";
      else if (c == '\\' && shell == "fish")
        q += "\\\\";
      else
        q += c;
    }
    return q + "'";
  };
  if (settings.empty()) std::fprintf(out, "# mldoctor fix: no configuration findings; nothing to set\n");
  std::vector<std::string> last_rules;
  for (const check::FixSetting& s : settings) {
    if (s.rules != last_rules) {
      std::string why;
      for (const std::string& rule : s.rules) why += (why.empty() ? "" : ", ") + rule;
      std::fprintf(out, "# %s (mldoctor explain %s)\n", why.c_str(), s.rules.front().c_str());
      last_rules = s.rules;
    }
    if (!s.value)
      std::fprintf(out, shell == "fish" ? "set -e %s\n" : "unset %s\n", s.name.c_str());
    else if (shell == "fish")
      std::fprintf(out, "set -gx %s %s\n", s.name.c_str(), quote(*s.value).c_str());
    else
      std::fprintf(out, "export %s=%s\n", s.name.c_str(), quote(*s.value).c_str());
  }
  return 0;
}

}  // namespace mld::cli
