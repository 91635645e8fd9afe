// main.cc — entry point: declares the subcommands and their options in one
// place (CLI11), validates them into the option structs of cli.h, and maps
// failures to exit status 2 with a one-line "mldoctor: error:" message.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>

#include "cli/cli.h"

namespace mld::cli {

void print_error(const std::string& what) { std::fprintf(stderr, "mldoctor: error: %s\n", what.c_str()); }

}  // namespace mld::cli

int main(int argc, char** argv) {
  using namespace mld;
  using namespace mld::cli;
  CLI::App app{"mldoctor: finds, explains and fixes the native-layer failures of Python ML jobs"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("mldoctor ") + MLD_VERSION);

  CommonOptions common;
  bool json = false, no_color = false;
  std::string fail_on = "error";
  auto add_common = [&](CLI::App* sub) {
    sub->add_option("--root", common.root, "analyse the tree mounted at DIR instead of this machine")
        ->check(CLI::ExistingDirectory);
    sub->add_flag("--json", json, "machine-readable output (schema in docs/json-schema.md)");
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  common.fail_on = *parse_severity(fail_on);
  common.format = json ? OutputFormat::Json : tree ? OutputFormat::Tree : OutputFormat::Text;
  common.color = !no_color && !std::getenv("NO_COLOR") && isatty(STDOUT_FILENO);
  if (!load_order.empty()) {
    size_t i = 0;
    while (i <= load_order.size()) {
      size_t j = load_order.find(',', i);
      if (j == std::string::npos) j = load_order.size();
      if (j > i) libs.load_order.push_back(load_order.substr(i, j - i));
      i = j + 1;
    }
  }
  try {
    if (*libs_cmd) return run_libs(common, libs);
  } catch (const std::exception& e) {
    print_error(e.what());
    return 2;
  }
  return 2;
}
