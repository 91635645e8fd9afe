// command-line.h — the one option table of mldoctor, internal to src/cli: the
// CLI11 application with every command, option and help text, and the
// fields the parsed values land in. main.cc parses with it; the build walks
// the same table (tools/gen-cli-docs.cc) to write the man page and the bash,
// zsh and fish completions, so none of them is written twice.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace mld::cli {

// Value names of options (type_name), which the generated completions also
// read as what to complete: a directory, a file, an executable.
inline constexpr const char* kValueDir = "DIR";
inline constexpr const char* kValueFile = "FILE";
inline constexpr const char* kValueProgram = "PROGRAM";

struct CommandLine {
  // `version` is the text of --version (version_text() in the binary).
  explicit CommandLine(std::function<std::string()> version);
  CommandLine(const CommandLine&) = delete;
  CommandLine& operator=(const CommandLine&) = delete;

  CLI::App app{"mldoctor: finds, explains and fixes the native-layer failures of Python ML jobs"};

  // The options write into `in` where a value is final as given, else
  // into the raw values below, which main.cc validates into `in`.
  Invocation in;
  bool json = false, no_color = false, markdown = false, tree = false;
  std::string color = "auto";  // --color WHEN
  std::string fail_on = "error";
  std::string load_order;
  std::string imports, python;
  u32 ranks_per_node = 0;
  u32 python_timeout = 10;
  std::string jit_python;
  std::string snapshot_python;
  std::string snapshot_imports;

  CLI::App *libs_cmd = nullptr, *logs_cmd = nullptr, *check_cmd = nullptr, *fix_cmd = nullptr,
           *jit_cmd = nullptr, *snapshot_cmd = nullptr, *run_cmd = nullptr, *fleet_cmd = nullptr,
           *diff_cmd = nullptr, *rules_cmd = nullptr, *explain_cmd = nullptr, *stacks_cmd = nullptr;
};

// The exit statuses every command but `run` shares (help footer, man page);
// `run` exits as the command it ran.
struct ExitStatus {
  int code;
  const char* meaning;
};
inline constexpr ExitStatus kExitStatuses[] = {
    {0, "nothing at or above --fail-on"},
    {1, "findings at or above --fail-on"},
    {2, "mldoctor itself failed (bad arguments, unreadable input)"},
};

// "a,b,,c" -> {"a", "b", "c"}: the comma lists of --import and --load-order,
// and the choice lists of the table's value names.
std::vector<std::string> split_commas(const std::string& list);

// `mldoctor --version`: version, git revision, build type, compiler, the
// glibc built against and the oldest it runs on (read from this binary's
// own version needs), the optional parts, and the companion objects found.
std::string version_text();

}  // namespace mld::cli
