// main.cc — entry point: declares the subcommands and their options in one
// place (CLI11), validates them into the option structs of cli.h, and maps
// failures to exit status 2 with a one-line "mldoctor: error:" message.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <CLI/CLI.hpp>
#include <cstdlib>

#include "cli/cli.h"

namespace mld::cli {

void print_error(const std::string& what) { std::fprintf(stderr, "mldoctor: error: %s\n", what.c_str()); }

namespace {

// "a,b,,c" -> {"a", "b", "c"}.
std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < list.size()) {
    size_t j = list.find(',', i);
    if (j == std::string::npos) j = list.size();
    if (j > i) out.push_back(list.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

}  // namespace mld::cli

int main(int argc, char** argv) {
  using namespace mld;
  using namespace mld::cli;
  CLI::App app{"mldoctor: finds, explains and fixes the native-layer failures of Python ML jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mldoctor ") + MLD_VERSION);

  CommonOptions common;
  bool json = false, no_color = false, markdown = false;
  std::string fail_on = "error";
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--root", common.root, "analyse the tree mounted at DIR instead of this machine")
        ->check(CLI::ExistingDirectory);
    sub->add_flag("--json", json, "machine-readable output (schema in docs/json-schema.md)");
    sub->add_flag("--markdown", markdown, "Markdown output, for pasting into a bug report");
    sub->add_option("--rules-dir", common.rules_dir, "add the rules (*.toml) in DIR to the builtin ones")
        ->check(CLI::ExistingDirectory);
    sub->add_flag("--no-builtin-rules", common.no_builtin_rules, "use only the rules of --rules-dir");
    sub->add_flag("--no-color", no_color, "no colour (also NO_COLOR)");
    sub->add_option("--fail-on", fail_on, "exit 1 when a finding reaches this severity")
        ->check(CLI::IsMember({"info", "warning", "error"}));
  };

  LibsOptions libs;
  bool tree = false;
  std::string load_order;
  CLI::App* libs_cmd = app.add_subcommand(
      "libs", "the loader's view of ELF files: dependency tree with provenance, and hazards");
  libs_cmd->add_option("PATH", libs.paths, "executables or shared objects")->required();
  libs_cmd->add_option("--load-order", load_order,
                       "objects dlopen()ed one after another by the first PATH, comma-separated");
  libs_cmd->add_flag("--tree", tree, "print the dependency tree");
  libs_cmd->add_option("--glibc", libs.glibc, "model this glibc release instead of the detected one");
  add_common(libs_cmd);

  LogsOptions logs;
  CLI::App* logs_cmd = app.add_subcommand(
      "logs", "diagnose log files or a stream against the knowledge base (gzip is read as is)");
  logs_cmd->add_option("FILE", logs.paths, "log files; - or none: standard input");
  logs_cmd->add_flag("--follow,-f", logs.follow, "keep reading as the file grows; report stalls");
  logs_cmd->add_option("--context,-C", logs.context, "lines of context around each first occurrence")
      ->check(CLI::Range(0, 1000));
  logs_cmd->add_option("--stall", logs.stall_seconds, "--follow: seconds without output that count as a stall")
      ->check(CLI::Range(1.0, 86400.0));
  logs_cmd->add_option("--threads,-j", logs.threads, "scanning threads (default: usable CPUs, at most 4)")
      ->check(CLI::Range(1, 64));
  add_common(logs_cmd);

  CheckOptions check;
  std::string imports, python, shell = "bash";
  u32 ranks_per_node = 0;
  auto add_check_options = [&](CLI::App* sub) {
    sub->add_option("--python", python, "the interpreter to examine (default: $VIRTUAL_ENV, $CONDA_PREFIX, python3 on PATH)");
    sub->add_option("--import", imports, "the import order to simulate, comma-separated (default: torch,numpy,cv2,sklearn,numba)");
    sub->add_option("--ranks-per-node", ranks_per_node, "ranks the launcher starts on this node (default: from LOCAL_WORLD_SIZE, SLURM_*, OMPI_*)")
        ->check(CLI::Range(1, 4096));
    sub->add_option("--glibc", check.glibc, "model this glibc release instead of the detected one");
    add_common(sub);
  };
  CLI::App* check_cmd = app.add_subcommand(
      "check", "preflight of this host and the Python environment: CPUs, limits, variables, native libraries");
  add_check_options(check_cmd);
  CLI::App* fix_cmd = app.add_subcommand(
      "fix", "the environment settings that resolve check's findings, for eval \"$(mldoctor fix)\"");
  fix_cmd->add_option("--shell", shell, "shell syntax")->check(CLI::IsMember({"bash", "fish"}));
  add_check_options(fix_cmd);

  JitCliOptions jit;
  std::string jit_python;
  CLI::App* jit_cmd = app.add_subcommand(
      "jit", "extension build caches (torch cpp_extension, Megatron fused kernels): stale locks, toolchain");
  jit_cmd->add_option("--path", jit.paths, "also look at this build root or build directory (repeatable)");
  jit_cmd->add_flag("--fix", jit.fix, "remove stale locks (never one a live process holds); prints each action");
  jit_cmd->add_flag("--dry-run", jit.dry_run, "with --fix: show what would be done, change nothing");
  jit_cmd->add_option("--python", jit_python, "the interpreter whose torch the builds are for");
  add_common(jit_cmd);

  SnapshotOptions snap;
  std::string snap_python;
  CLI::App* snap_cmd = app.add_subcommand(
      "snapshot", "write the /proc, /sys, /etc files the checks read and the environment (secrets masked) to a new .tar.gz");
  snap_cmd->add_option("OUT", snap.out, "the archive to create (must not exist)")->required();
  snap_cmd->add_option("--python", snap_python, "the interpreter check examines");
  add_common(snap_cmd);

  RunOptions run_opts;
  CLI::App* run_cmd = app.add_subcommand(
      "run", "run a job and report what happened inside it: runtimes loaded and by whom, failed dlopen calls, "
             "thread counts changed, hangs (mldoctor run [options] -- CMD ...)");
  run_cmd->add_option("--hang-timeout", run_opts.hang_timeout,
                      "report a hang after S seconds without CPU progress, output or events")
      ->check(CLI::NonNegativeNumber);
  run_cmd->add_flag("--kill-on-hang", run_opts.kill_on_hang, "stop the job when a hang is reported");
  run_cmd->add_option("--trace-dir", run_opts.trace_dir, "keep the per-process event files in DIR (private, 0700)");
  run_cmd->add_option("--report", run_opts.report_file, "write the report to FILE instead of stderr");
  run_cmd->add_flag("--logs", run_opts.logs,
                    "pass the job's stdout/stderr through mldoctor and match them against the log rules "
                    "(a terminal stays a terminal; a file becomes a pipe)");
  run_cmd->add_option("command", run_opts.argv, "the command and its arguments, after --");
  add_common(run_cmd);

  CLI::App* fleet_cmd = app.add_subcommand(
      "fleet", "every rank of an MPI job runs check; rank 0 reports what differs between nodes and ranks "
               "(mpirun -np N mldoctor fleet, srun mldoctor fleet)");
  add_check_options(fleet_cmd);
  std::vector<std::string> diff_paths;
  CLI::App* diff_cmd = app.add_subcommand(
      "diff", "compare reports saved by `mldoctor check --json` on several machines: what differs, and where");
  diff_cmd->add_option("REPORT", diff_paths, "two or more check --json reports")->required();
  add_common(diff_cmd);

  CLI::App* rules_cmd = app.add_subcommand("rules", "list the knowledge base's rules");
  add_common(rules_cmd);
  std::string explain_id;
  CLI::App* explain_cmd = app.add_subcommand("explain", "print one rule: cause, fix, references");
  explain_cmd->add_option("ID", explain_id, "rule id, e.g. OMP010")->required();
  add_common(explain_cmd);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  common.fail_on = *parse_severity(fail_on);
  if (logs.threads == 0) {
    cpu_set_t set;
    unsigned usable = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : 1;
    logs.threads = std::clamp(usable, 1u, 4u);
  }
  if (json && markdown) {
    print_error("--json and --markdown exclude each other");
    return 2;
  }
  common.format = json       ? OutputFormat::Json
                  : markdown ? OutputFormat::Markdown
                  : tree     ? OutputFormat::Tree
                             : OutputFormat::Text;
  common.color = !no_color && !std::getenv("NO_COLOR") && isatty(STDOUT_FILENO);
  if (!python.empty()) check.python = python;
  if (ranks_per_node) check.ranks_per_node = ranks_per_node;
  check.imports = split_commas(imports);
  libs.load_order = split_commas(load_order);
  try {
    if (*jit_cmd) {
      if (jit.dry_run && !jit.fix) {
        print_error("--dry-run goes with --fix");
        return 2;
      }
      if (!jit_python.empty()) jit.python = jit_python;
      return run_jit(common, jit);
    }
    if (*snap_cmd) {
      if (!snap_python.empty()) snap.python = snap_python;
      return run_snapshot(common, snap);
    }
    if (*run_cmd) {
      if (!run_opts.report_file.empty() || !isatty(STDERR_FILENO)) common.color = false;
      else common.color = !no_color && !std::getenv("NO_COLOR");
      return run_run(common, run_opts);
    }
    if (*check_cmd) return run_check(common, check);
    if (*fix_cmd) return run_fix(common, check, shell);
    if (*fleet_cmd) return run_fleet(common, check, &argc, &argv);
    if (*diff_cmd) return run_diff(common, diff_paths);
    if (*libs_cmd) return run_libs(common, libs);
    if (*logs_cmd) return run_logs(common, logs);
    if (*rules_cmd) return run_rules(common);
    if (*explain_cmd) return run_explain(common, explain_id);
  } catch (const std::exception& e) {
    print_error(e.what());
    return 2;
  }
  return 2;
}
