// command-line.cc — the option table (command-line.h): every command with
// its task group, options, value names and help texts. `--help` shows the
// commands grouped by the task a person arrives with; the man page and the
// shell completions are generated from this same table at build time.
#include "cli/command-line.h"

#include <utility>

namespace mld::cli {

namespace {

constexpr const char* kGroupPreflight = "Preflight: a node or a fleet before a job";
constexpr const char* kGroupDiagnose = "Diagnose: a job that failed, hangs or runs slowly";
constexpr const char* kGroupInspect = "Inspect: native libraries";
constexpr const char* kGroupRules = "Knowledge base";

}  // namespace

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

CommandLine::CommandLine(std::function<std::string()> version) {
  app.require_subcommand(1);
  app.set_version_flag("--version", std::move(version),
                       "print the version, build and optional parts");
  std::string footer = "Run `mldoctor COMMAND --help` for a command's options.\nExit status:";
  for (const ExitStatus& s : kExitStatuses)
    footer += " " + std::to_string(s.code) + " " + s.meaning + ";";
  app.footer(footer + " run exits as the command it ran.");

  auto add_common = [this](CLI::App* sub) {
    sub->add_option("--root", in.common.root,
                    "analyse the tree mounted at DIR instead of this machine")
        ->check(CLI::ExistingDirectory)
        ->type_name(kValueDir);
    sub->add_flag("--json", json, "machine-readable output (schema in docs/json-schema.md)");
    sub->add_flag("--markdown", markdown, "Markdown output, for pasting into a bug report");
    sub->add_option("--rules-dir", in.common.rules_dir,
                    "add the rules (*.toml) in DIR to the builtin ones")
        ->check(CLI::ExistingDirectory)
        ->type_name(kValueDir);
    sub->add_flag("--no-builtin-rules", in.common.no_builtin_rules,
                  "use only the rules of --rules-dir");
    sub->add_flag("--no-color", no_color, "no colour (also NO_COLOR, --color never)");
    sub->add_option("--color", color,
                    "colour: auto (a terminal, not NO_COLOR, and not a rank under mpirun or "
                    "srun, whose pty may end in a file), always, never")
        ->check(CLI::IsMember({"auto", "always", "never"}))
        ->type_name("WHEN");
    sub->add_option("--fail-on", fail_on, "exit 1 when a finding reaches this severity")
        ->check(CLI::IsMember({"info", "warning", "error"}))
        ->type_name("SEVERITY");
  };
  auto add_check_options = [this, add_common](CLI::App* sub) {
    sub->add_option(
           "--python", python,
           "the interpreter to examine (default: $VIRTUAL_ENV, $CONDA_PREFIX, python3 on PATH)")
        ->type_name(kValueProgram);
    sub->add_option(
           "--import", imports,
           "the import order to simulate, comma-separated (default: torch,numpy,cv2,sklearn,numba, "
           "then other installed packages that bring an OpenMP, BLAS, TBB or CUDA runtime)")
        ->type_name("LIST");
    sub->add_option("--ranks-per-node", ranks_per_node,
                    "ranks the launcher starts on this node (default: from LOCAL_WORLD_SIZE, "
                    "SLURM_*, OMPI_*)")
        ->check(CLI::Range(1, 4096))
        ->type_name("N");
    sub->add_option("--glibc", in.check.glibc,
                    "model this glibc release instead of the detected one")
        ->type_name("RELEASE");
    sub->add_option("--python-timeout", python_timeout,
                    "seconds the interpreter may take to answer (default 10); past them it is "
                    "killed and described from its layout")
        ->check(CLI::Range(1, 3600))
        ->type_name("SECONDS");
    add_common(sub);
  };

  // Preflight.
  check_cmd = app.add_subcommand("check",
                                 "preflight of this host and the Python environment: CPUs, limits, "
                                 "variables, native libraries");
  check_cmd->group(kGroupPreflight);
  add_check_options(check_cmd);
  fix_cmd = app.add_subcommand(
      "fix", "the environment settings check's findings call for, for eval \"$(mldoctor fix)\"");
  fix_cmd->group(kGroupPreflight);
  fix_cmd->add_option("--shell", in.shell, "shell syntax")
      ->check(CLI::IsMember({"bash", "fish"}))
      ->type_name("SHELL");
  add_check_options(fix_cmd);
  fleet_cmd = app.add_subcommand(
      "fleet",
      "every rank of an MPI job runs check; rank 0 reports what differs between nodes and ranks "
      "(mpirun -np N mldoctor fleet; under Slurm srun --mpi=pmix mldoctor fleet)");
  fleet_cmd->group(kGroupPreflight);
  add_check_options(fleet_cmd);
  diff_cmd = app.add_subcommand("diff",
                                "compare reports saved by `mldoctor check --json` on several "
                                "machines: what differs, and where");
  diff_cmd->group(kGroupPreflight);
  diff_cmd->add_option("REPORT", in.diff_paths, "two or more check --json reports")
      ->required()
      ->type_name(kValueFile);
  add_common(diff_cmd);

  // Diagnose.
  run_cmd = app.add_subcommand("run",
                               "run a job and report what happened inside it: runtimes loaded and "
                               "by whom, failed dlopen calls, "
                               "thread counts changed, hangs (mldoctor run [options] -- CMD ...)");
  run_cmd->group(kGroupDiagnose);
  run_cmd
      ->add_option("--hang-timeout", in.run.hang_timeout,
                   "report a hang after S seconds without CPU progress, output or events")
      ->check(CLI::NonNegativeNumber)
      ->type_name("S");
  run_cmd->add_flag("--kill-on-hang", in.run.kill_on_hang, "stop the job when a hang is reported");
  run_cmd
      ->add_option("--trace-dir", in.run.trace_dir,
                   "keep the per-process event files in DIR (private, 0700)")
      ->type_name(kValueDir);
  run_cmd->add_option("--report", in.run.report_file, "write the report to FILE instead of stderr")
      ->type_name(kValueFile);
  run_cmd->add_flag(
      "--logs", in.run.logs,
      "pass the job's stdout/stderr through mldoctor and match them against the log rules "
      "(a terminal stays a terminal; a file becomes a pipe)");
  run_cmd->add_option("command", in.run.argv, "the command and its arguments, after --")
      ->type_name(kValueProgram);
  add_common(run_cmd);
  stacks_cmd = app.add_subcommand(
      "stacks",
      "the Python stack of every thread of running processes, read without stopping them "
      "(CPython 3.8-3.14), with what each thread waits in");
  stacks_cmd->group(kGroupDiagnose);
  stacks_cmd->add_option("PID", in.stacks.pids, "process ids")
      ->required()
      ->check(CLI::PositiveNumber);
  stacks_cmd->add_flag("--tree", in.stacks.tree, "each PID and all its descendants");
  stacks_cmd->add_flag("--native", in.stacks.native,
                       "native frames too (libdw: each thread stops while it is unwound)");
  add_common(stacks_cmd);
  logs_cmd = app.add_subcommand(
      "logs", "diagnose log files or a stream against the knowledge base (gzip is read as is)");
  logs_cmd->group(kGroupDiagnose);
  logs_cmd->add_option("FILE", in.logs.paths, "log files; - or none: standard input")
      ->type_name(kValueFile);
  logs_cmd->add_flag("--follow,-f", in.logs.follow,
                     "keep reading as the file grows; report stalls");
  logs_cmd
      ->add_option("--context,-C", in.logs.context, "lines of context around each first occurrence")
      ->check(CLI::Range(0, 1000))
      ->type_name("N");
  logs_cmd
      ->add_option("--stall", in.logs.stall_seconds,
                   "--follow: seconds without output that count as a stall")
      ->check(CLI::Range(1.0, 86400.0))
      ->type_name("S");
  logs_cmd
      ->add_option("--threads,-j", in.logs.threads,
                   "scanning threads (default: usable CPUs, at most 4)")
      ->check(CLI::Range(1, 64))
      ->type_name("N");
  add_common(logs_cmd);
  jit_cmd = app.add_subcommand("jit",
                               "extension build caches (torch cpp_extension, Megatron fused "
                               "kernels): stale locks, toolchain");
  jit_cmd->group(kGroupDiagnose);
  jit_cmd
      ->add_option("--path", in.jit.paths,
                   "also look at this build root or build directory (repeatable)")
      ->type_name(kValueDir);
  jit_cmd->add_flag("--fix", in.jit.fix,
                    "remove stale locks (never one a live process holds) and stale build "
                    "outputs, at once; prints each action");
  jit_cmd->add_flag("--dry-run", in.jit.dry_run,
                    "with --fix: show what would be done, change nothing");
  jit_cmd->add_option("--python", jit_python, "the interpreter whose torch the builds are for")
      ->type_name(kValueProgram);
  add_common(jit_cmd);
  snapshot_cmd = app.add_subcommand("snapshot",
                                    "write what check reads here (the /proc, /sys, /etc files, "
                                    "the Python environment's metadata, the parts of each library "
                                    "the loader model reads) and the environment, secrets "
                                    "masked, to a new .tar.gz");
  snapshot_cmd->group(kGroupDiagnose);
  snapshot_cmd->add_option("OUT", in.snapshot.out, "the archive to create (must not exist)")
      ->required()
      ->type_name(kValueFile);
  snapshot_cmd->add_option("--python", snapshot_python, "the interpreter check examines")
      ->type_name(kValueProgram);
  snapshot_cmd
      ->add_option("--import", snapshot_imports,
                   "the import order check simulates, comma-separated (as check --import)")
      ->type_name("LIST");
  add_common(snapshot_cmd);

  // Inspect.
  libs_cmd = app.add_subcommand(
      "libs", "the loader's view of ELF files: dependency tree with provenance, and hazards");
  libs_cmd->group(kGroupInspect);
  libs_cmd->add_option("PATH", in.libs.paths, "executables or shared objects")
      ->required()
      ->type_name(kValueFile);
  libs_cmd
      ->add_option("--load-order", load_order,
                   "objects dlopen()ed one after another by the first PATH, comma-separated")
      ->type_name("LIST");
  libs_cmd->add_flag("--tree", tree, "print the dependency tree");
  libs_cmd
      ->add_option("--glibc", in.libs.glibc, "model this glibc release instead of the detected one")
      ->type_name("RELEASE");
  add_common(libs_cmd);

  // Knowledge base.
  rules_cmd = app.add_subcommand("rules", "list the knowledge base's rules");
  rules_cmd->group(kGroupRules);
  rules_cmd->add_flag("--check", in.rules_check,
                      "check the rules against their own claims: every example produces its rule, "
                      "every negative none, every cited format string (filled with sample values, "
                      "after the prefixes logs carry) its rule first; exit 1 on any problem");
  add_common(rules_cmd);
  explain_cmd = app.add_subcommand("explain", "print one rule: cause, fix, references");
  explain_cmd->group(kGroupRules);
  explain_cmd->add_option("ID", in.explain_id, "rule id, e.g. OMP010")->required()->type_name("ID");
  add_common(explain_cmd);
}

}  // namespace mld::cli
