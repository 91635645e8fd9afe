// main.cc — entry point, in two steps as ripgrep's main: the command line is
// parsed with the option table (command-line.h) and validated once into one
// Invocation (the values normalised: output format, colour, comma lists, the
// log scanner's threads), then dispatched once on its command. A bad command
// line and any failure of the tool end with exit status 2 and a one-line
// "mldoctor: error:" message.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <variant>

#include "cli/command-line.h"
#include "fleet/fleet.h"

namespace mld::cli {
namespace {

// The Invocation of argv, or the exit status when there is nothing to run
// (--help, --version: 0) or the command line is wrong (2, reported).
std::variant<Invocation, int> parse_invocation(int argc, char** argv) {
  CommandLine cl(version_text);
  try {
    cl.app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = cl.app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (cl.json && cl.markdown) {
    print_error("--json and --markdown exclude each other");
    return 2;
  }
  if (*cl.jit_cmd && cl.in.jit.dry_run && !cl.in.jit.fix) {
    print_error("--dry-run goes with --fix");
    return 2;
  }

  rules::use_builtin_rule_image(builtin_rule_image());
  Invocation& in = cl.in;
  const std::pair<CLI::App*, Command> commands[] = {
      {cl.check_cmd, Command::Check}, {cl.fix_cmd, Command::Fix},
      {cl.fleet_cmd, Command::Fleet}, {cl.diff_cmd, Command::Diff},
      {cl.libs_cmd, Command::Libs},   {cl.logs_cmd, Command::Logs},
      {cl.rules_cmd, Command::Rules}, {cl.explain_cmd, Command::Explain},
      {cl.jit_cmd, Command::Jit},     {cl.snapshot_cmd, Command::Snapshot},
      {cl.run_cmd, Command::Run},     {cl.stacks_cmd, Command::Stacks}};
  const auto chosen = std::find_if(std::begin(commands), std::end(commands),
                                   [](const auto& c) { return c.first->parsed(); });
  if (chosen == std::end(commands)) return 2;  // require_subcommand(1) rules this out
  in.command = chosen->second;

  // --markdown where a command has a Markdown form; elsewhere said, not
  // ignored (a pasted "report" that is plain text would look broken).
  if (cl.markdown) {
    static const std::pair<Command, const char*> without[] = {{Command::Libs, "libs"},
                                                              {Command::Run, "run"},
                                                              {Command::Fix, "fix"},
                                                              {Command::Stacks, "stacks"},
                                                              {Command::Snapshot, "snapshot"}};
    for (const auto& [command, name] : without)
      if (in.command == command) {
        print_error(std::string("--markdown: `") + name +
                    "` writes text or --json (Markdown: check, fleet, diff, logs, jit, rules, "
                    "explain)");
        return 2;
      }
  }
  if (cl.json && in.command == Command::Snapshot) {
    print_error("--json: `snapshot` writes an archive and one line about it");
    return 2;
  }
  in.common.fail_on = *parse_severity(cl.fail_on);
  in.common.format = cl.json       ? OutputFormat::Json
                     : cl.markdown ? OutputFormat::Markdown
                     : cl.tree     ? OutputFormat::Tree
                                   : OutputFormat::Text;
  // Colour only for a person: auto is a terminal, without NO_COLOR, and not
  // a rank under mpirun or srun (mpirun gives each rank a pty even when its
  // own output goes to a file, so isatty() says nothing about the reader).
  const host::Host live = host::Host::live();
  const bool color_wanted =
      cl.color == "always" || (cl.color == "auto" && !cl.no_color && !live.getenv("NO_COLOR") &&
                               !fleet::under_launcher(live));
  const bool forced = cl.color == "always" && !cl.no_color;
  // `run` reports on stderr (or --report FILE): colour follows that stream.
  if (cl.no_color || cl.color == "never")
    in.common.color = false;
  else if (in.command == Command::Run)
    in.common.color =
        in.run.report_file.empty() && (forced || (color_wanted && isatty(STDERR_FILENO)));
  else
    in.common.color = forced || (color_wanted && isatty(STDOUT_FILENO));

  if (!cl.python.empty()) in.check.python = cl.python;
  if (cl.ranks_per_node) in.check.ranks_per_node = cl.ranks_per_node;
  in.check.python_timeout = std::chrono::seconds(cl.python_timeout);
  in.check.imports = split_commas(cl.imports);
  in.libs.load_order = split_commas(cl.load_order);
  if (in.logs.threads == 0) {
    cpu_set_t set;
    const unsigned usable =
        sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : 1;
    in.logs.threads = std::clamp(usable, 1u, 4u);
  }
  if (!cl.jit_python.empty()) in.jit.python = cl.jit_python;
  if (!cl.snapshot_python.empty()) in.snapshot.python = cl.snapshot_python;
  in.snapshot.imports = split_commas(cl.snapshot_imports);
  return std::move(in);
}

// Runs the command of `in`; argc/argv go to MPI_Init in `fleet`.
int dispatch(const Invocation& in, int* argc, char*** argv) {
  switch (in.command) {
    case Command::Check: return run_check(in.common, in.check);
    case Command::Fix: return run_fix(in.common, in.check, in.shell);
    case Command::Fleet: return run_fleet(in.common, in.check, argc, argv);
    case Command::Diff: return run_diff(in.common, in.diff_paths);
    case Command::Libs: return run_libs(in.common, in.libs);
    case Command::Logs: return run_logs(in.common, in.logs);
    case Command::Rules: return run_rules(in.common, in.rules_check);
    case Command::Explain: return run_explain(in.common, in.explain_id);
    case Command::Jit: return run_jit(in.common, in.jit);
    case Command::Snapshot: return run_snapshot(in.common, in.snapshot);
    case Command::Run: return run_run(in.common, in.run);
    case Command::Stacks: return run_stacks(in.common, in.stacks);
  }
  return 2;
}

}  // namespace
}  // namespace mld::cli

int main(int argc, char** argv) {
  using namespace mld::cli;
  std::variant<Invocation, int> parsed = parse_invocation(argc, argv);
  if (const int* status = std::get_if<int>(&parsed)) return *status;
  try {
    return dispatch(std::get<Invocation>(parsed), &argc, &argv);
  } catch (const std::exception& e) {
    print_error(e.what());
    return 2;
  }
}
