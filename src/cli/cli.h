// cli.h — the command-line layer: option parsing, the subcommands and their
// output. The only layer that prints. Each subcommand is a function taking
// validated options and returning the process exit status:
//   0  nothing at or above --fail-on
//   1  findings at or above --fail-on
//   2  mldoctor itself failed (bad arguments, unreadable input)
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "findings/findings.h"

namespace mld::cli {

enum class OutputFormat { Text, Tree, Json };

struct CommonOptions {
  std::string root = "/";
  OutputFormat format = OutputFormat::Text;
  Severity fail_on = Severity::Error;
  bool color = false;
};

struct LibsOptions {
  std::vector<std::string> paths;
  std::vector<std::string> load_order;
  std::string glibc;  // override of the detected glibc release, "2.31"
};

int run_libs(const CommonOptions& common, const LibsOptions& opts);

// Text rendering of findings shared by commands: "✗ message  RULE" lines with
// evidence and fix below. Returns the number at or above `fail_on`.
size_t print_findings(std::FILE* out, const std::vector<Finding>& findings, const CommonOptions& common);

// "mldoctor: error: <what>" on stderr.
void print_error(const std::string& what);

}  // namespace mld::cli
