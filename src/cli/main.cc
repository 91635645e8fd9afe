// main.cc — entry point: parses with the option table (command-line.h),
// validates the values into the option structs of cli.h, dispatches to the
// command, and maps failures to exit status 2 with a one-line
// "mldoctor: error:" message.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "cli/command-line.h"

int main(int argc, char** argv) {
  using namespace mld;
  using namespace mld::cli;
  CommandLine cl(version_text);
  CLI::App& app = cl.app;

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  cl.common.fail_on = *parse_severity(cl.fail_on);
  if (cl.logs.threads == 0) {
    cpu_set_t set;
    unsigned usable =
        sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<unsigned>(CPU_COUNT(&set)) : 1;
    cl.logs.threads = std::clamp(usable, 1u, 4u);
  }
  if (cl.json && cl.markdown) {
    print_error("--json and --markdown exclude each other");
    return 2;
  }
  cl.common.format = cl.json       ? OutputFormat::Json
                     : cl.markdown ? OutputFormat::Markdown
                     : cl.tree     ? OutputFormat::Tree
                                   : OutputFormat::Text;
  cl.common.color = !cl.no_color && !std::getenv("NO_COLOR") && isatty(STDOUT_FILENO);
  if (!cl.python.empty()) cl.check.python = cl.python;
  if (cl.ranks_per_node) cl.check.ranks_per_node = cl.ranks_per_node;
  cl.check.imports = split_commas(cl.imports);
  cl.libs.load_order = split_commas(cl.load_order);
  try {
    if (*cl.jit_cmd) {
      if (cl.jit.dry_run && !cl.jit.fix) {
        print_error("--dry-run goes with --fix");
        return 2;
      }
      if (!cl.jit_python.empty()) cl.jit.python = cl.jit_python;
      return run_jit(cl.common, cl.jit);
    }
    if (*cl.snapshot_cmd) {
      if (!cl.snapshot_python.empty()) cl.snapshot.python = cl.snapshot_python;
      return run_snapshot(cl.common, cl.snapshot);
    }
    if (*cl.run_cmd) {
      if (!cl.run.report_file.empty() || !isatty(STDERR_FILENO))
        cl.common.color = false;
      else
        cl.common.color = !cl.no_color && !std::getenv("NO_COLOR");
      return run_run(cl.common, cl.run);
    }
    if (*cl.check_cmd) return run_check(cl.common, cl.check);
    if (*cl.fix_cmd) return run_fix(cl.common, cl.check, cl.shell);
    if (*cl.fleet_cmd) return run_fleet(cl.common, cl.check, &argc, &argv);
    if (*cl.diff_cmd) return run_diff(cl.common, cl.diff_paths);
    if (*cl.libs_cmd) return run_libs(cl.common, cl.libs);
    if (*cl.logs_cmd) return run_logs(cl.common, cl.logs);
    if (*cl.rules_cmd) return run_rules(cl.common);
    if (*cl.explain_cmd) return run_explain(cl.common, cl.explain_id);
  } catch (const std::exception& e) {
    print_error(e.what());
    return 2;
  }
  return 2;
}
