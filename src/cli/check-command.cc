// check-command.cc — `mldoctor check` and `mldoctor fix`. check prints the
// report people paste into bug trackers: a header with what collect_env shows
// (Python, key package versions, torch's CUDA build, GPUs, glibc) plus what it
// lacks (usable CPUs under affinity and cgroup quota, NUMA, /dev/shm, limits,
// ranks per node, the native-layer variables, the OpenMP runtimes of the
// import set), then the findings. fix prints the environment settings of the
// findings as shell code for `eval "$(mldoctor fix)"`.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "check/check.h"
#include "cli/cli.h"
#include "fleet/fleet.h"
#include "render/check-report.h"
#include "render/fix-report.h"
#include "report/report.h"

namespace mld::cli {

using nlohmann::json;

namespace {

// A word as a POSIX shell reads it back: as is when it holds only safe
// characters, else in single quotes.
std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                        "0123456789/._-,=:+@%") == std::string::npos)
    return w;
  std::string out = "'";
  for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// `mldoctor <verb>` repeating this check: the same root, interpreter (or
// `python` instead), import set and model options. `fix` with it sets what
// this report found; `check --python OTHER` checks another interpreter the
// way this one was checked.
std::string repeat_command(std::string_view verb, const CommonOptions& common,
                           const CheckOptions& opts, const std::optional<std::string>& python) {
  std::string cmd = "mldoctor " + std::string(verb);
  if (common.root != "/") cmd += " --root " + shell_word(common.root);
  if (python) cmd += " --python " + shell_word(*python);
  if (!opts.imports.empty()) {
    std::string list;
    for (const std::string& i : opts.imports) list += (list.empty() ? "" : ",") + i;
    cmd += " --import " + shell_word(list);
  }
  if (opts.ranks_per_node) cmd += " --ranks-per-node " + std::to_string(*opts.ranks_per_node);
  if (!opts.glibc.empty()) cmd += " --glibc " + shell_word(opts.glibc);
  if (!common.rules_dir.empty()) cmd += " --rules-dir " + shell_word(common.rules_dir);
  if (common.no_builtin_rules) cmd += " --no-builtin-rules";
  return cmd;
}

std::string fix_command(const CommonOptions& common, const CheckOptions& opts) {
  return repeat_command("fix", common, opts, opts.python);
}

}  // namespace

// The check, its findings made with the user's rules when there are any;
// nullopt when those rules are unusable (already reported).
std::optional<check::CheckReport> checked_report(const CommonOptions& common,
                                                 const CheckOptions& opts, const host::Host& host) {
  rules::RuleSet rule_set;
  check::CheckOptions co;
  if (!common.rules_dir.empty() || common.no_builtin_rules) {
    if (!load_rules(common, rule_set)) return std::nullopt;
    co.rules = &rule_set;
  }
  co.python = opts.python;
  co.python_timeout = opts.python_timeout;
  co.imports = opts.imports;
  co.ranks_per_node = opts.ranks_per_node;
  co.node_masks = opts.node_masks;
  co.glibc = opts.glibc;
  if (host.is_live_root()) {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) co.cwd = buf;
  }
  check::CheckReport r = check::run_check(host, co);
  if (r.other_interpreters)
    for (const pyenv::FoundInterpreter& f : r.other_interpreters->survey.found)
      r.other_interpreters->commands.push_back(repeat_command("check", common, opts, f.path));
  return r;
}

int run_check(const CommonOptions& common, const CheckOptions& opts) {
  host::Host host = analysed_host(common);
  std::optional<check::CheckReport> checked = checked_report(common, opts, host);
  if (!checked) return 2;
  check::CheckReport& r = *checked;
  // An interpreter the user named and that cannot be examined is a failed
  // request, not an empty environment: the error, and no report that could
  // be read as "✓ no findings" for it. One that started but never answered
  // is a fact about this node (its start-up hangs): the report says so.
  if (opts.python && !r.python && !r.python_timed_out) {
    print_error(r.python_error);
    return 2;
  }
  std::vector<const Finding*> all;
  for (const Finding& f : r.findings) all.push_back(&f);
  if (common.format == OutputFormat::Json)
    std::fprintf(stdout, "%s\n", fleet::check_document(r, MLD_VERSION).dump(2).c_str());
  else if (common.format == OutputFormat::Markdown)
    render::print_check_markdown(stdout, r);
  else
    render::print_check_text(stdout, r, common.color, fix_command(common, opts));
  return report::count_at_or_above(all, common.fail_on) > 0 ? 1 : 0;
}

int run_fix(const CommonOptions& common, const CheckOptions& opts, const std::string& shell) {
  host::Host host = analysed_host(common);
  std::optional<check::CheckReport> checked = checked_report(common, opts, host);
  if (!checked) return 2;
  const check::CheckReport& r = *checked;
  if (opts.python && !r.python && !r.python_timed_out) {
    print_error(r.python_error);
    return 2;
  }
  std::vector<check::FixSetting> settings = check::fix_settings(r.findings);
  if (common.format == OutputFormat::Json)
    std::fprintf(stdout, "%s\n", render::fix_document(settings).dump(2).c_str());
  else
    render::print_fix_shell(stdout, settings, shell);
  return 0;
}

}  // namespace mld::cli
