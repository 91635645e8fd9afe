// cli.h — the command-line layer: option parsing, the subcommands and their
// output. The only layer that prints. Each subcommand is a function taking
// validated options and returning the process exit status:
//   0  nothing at or above --fail-on
//   1  findings at or above --fail-on
//   2  mldoctor itself failed (bad arguments, unreadable input)
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "check/check.h"
#include "findings/findings.h"
#include "host/host.h"
#include "logs/logs.h"
#include "report/report.h"
#include "rules/rules.h"

namespace mld::cli {

enum class OutputFormat { Text, Tree, Json, Markdown };

struct CommonOptions {
  std::string root = "/";
  OutputFormat format = OutputFormat::Text;
  Severity fail_on = Severity::Error;
  bool color = false;
  std::string rules_dir;          // a user's rules, added to the builtin ones
  bool no_builtin_rules = false;  // only the rules of rules_dir
};

struct LibsOptions {
  std::vector<std::string> paths;
  std::vector<std::string> load_order;
  std::string glibc;  // override of the detected glibc release, "2.31"
};

int run_libs(const CommonOptions& common, const LibsOptions& opts);

struct LogsOptions {
  std::vector<std::string> paths;  // "-" is standard input
  u32 context = 0;
  bool follow = false;
  double stall_seconds = 60;
  unsigned threads = 0;  // 0: the usable CPUs, at most 4
};

int run_logs(const CommonOptions& common, const LogsOptions& opts);
// `rules --check`: the rules' examples, negatives and cited format strings
// scanned through the real matcher; exit 1 on any problem.
int run_rules(const CommonOptions& common, bool check = false);

struct CheckOptions {
  std::optional<std::string> python;                // --python
  std::vector<std::string> imports;                 // --import a,b,c (empty: the usual set)
  std::optional<u32> ranks_per_node;                // --ranks-per-node
  std::string glibc;                                // --glibc override
  std::chrono::milliseconds python_timeout{10000};  // --python-timeout
  // fleet: every rank's affinity mask on this rank's node, gathered over MPI.
  std::optional<std::vector<std::vector<u32>>> node_masks;
};

int run_check(const CommonOptions& common, const CheckOptions& opts);
// The check of `host` with its findings completed from the rules; nullopt
// when the user's rules are unusable (already reported). `fleet` runs it in
// every rank.
std::optional<check::CheckReport> checked_report(const CommonOptions& common,
                                                 const CheckOptions& opts, const host::Host& host);

// `mldoctor fleet` in one rank of an MPI job (argc/argv go to MPI_Init);
// rank 0 prints the comparison.
int run_fleet(const CommonOptions& common, const CheckOptions& opts, int* argc, char*** argv);
// The MPI plugin fleet loads, where the shims of `run` are
// (host::companion_dirs); empty when absent, with the paths tried appended
// to *tried.
std::string find_mpi_plugin(std::string* tried);
// Whether this build made the MPI plugin (it may still be missing where the
// binary runs: the mldoctor-mpi package is separate). version.cc.
bool mpi_plugin_built();
// " (built against Open MPI 4.1.4)" when this build made the plugin, else "".
std::string mpi_built_against();
// `mldoctor diff REPORT...`.
int run_diff(const CommonOptions& common, const std::vector<std::string>& paths);

struct JitCliOptions {
  std::vector<std::string> paths;  // --path
  bool fix = false;
  bool dry_run = false;
  std::optional<std::string> python;  // --python
};
int run_jit(const CommonOptions& common, const JitCliOptions& opts);

struct SnapshotOptions {
  std::string out;                    // the archive to create (must not exist)
  std::optional<std::string> python;  // --python
  std::vector<std::string> imports;   // --import
};
int run_snapshot(const CommonOptions& common, const SnapshotOptions& opts);

struct RunOptions {
  std::vector<std::string> argv;  // the command
  double hang_timeout = 0;        // --hang-timeout S (0: no watchdog)
  bool kill_on_hang = false;
  std::string trace_dir;    // --trace-dir: keep the events there
  std::string report_file;  // --report FILE instead of stderr
  bool logs = false;        // --logs: match the job's output against the log rules
};
// Runs the command and ends the way it ended (does not return after a
// started command, except on a tool error before it).
int run_run(const CommonOptions& common, const RunOptions& opts);

struct StacksOptions {
  std::vector<long> pids;
  bool tree = false;    // --tree: each pid and its descendants
  bool native = false;  // --native: native frames too (threads stop while unwound)
};
// `mldoctor stacks PID...`: the Python stacks of running processes.
int run_stacks(const CommonOptions& common, const StacksOptions& opts);

// What one command line asks for, parsed and validated once (main.cc):
// the command and the options of that command, each in its struct; main
// dispatches on `command` once.
enum class Command {
  Check,
  Fix,
  Fleet,
  Diff,
  Libs,
  Logs,
  Rules,
  Explain,
  Jit,
  Snapshot,
  Run,
  Stacks
};
struct Invocation {
  Command command = Command::Check;
  CommonOptions common;
  CheckOptions check;          // check, fix, fleet
  std::string shell = "bash";  // fix: "bash" or "fish"
  LibsOptions libs;
  LogsOptions logs;
  JitCliOptions jit;
  SnapshotOptions snapshot;
  RunOptions run;
  StacksOptions stacks;
  std::vector<std::string> diff_paths;
  std::string explain_id;
  bool rules_check = false;  // rules --check
};

// The machine a command analyses: this one, or the tree of --root with its
// own recorded environment when it is an unpacked snapshot.
host::Host analysed_host(const CommonOptions& common);
// `shell` is "bash" or "fish".
int run_fix(const CommonOptions& common, const CheckOptions& opts, const std::string& shell);

// The builtin rules' Vectorscan databases, compiled at build time
// (generated by tools/compile-rules.cc).
const logs::Precompiled& builtin_precompiled();
// The builtin rules as the build parsed them (rules::use_builtin_rule_image).
std::string_view builtin_rule_image();

// The rule set of a command: builtin plus --rules-dir. Problems are printed;
// false when the user's rules are unusable.
bool load_rules(const CommonOptions& common, rules::RuleSet& out);
int run_explain(const CommonOptions& common, const std::string& id);

// "mldoctor: error: <what>" on stderr (report.h).
using report::print_error;

}  // namespace mld::cli
