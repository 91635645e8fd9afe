// JIT004 — a stale extension build: a built module of a build directory
// this environment loads needs symbols (or libraries) the installed torch
// no longer provides, so importing it fails with "undefined symbol". The
// facts are jit's loader simulation of the module after torch._C.
#include <cxxabi.h>

#include <cstdlib>

#include "detect/detect.h"

namespace {

std::string demangled(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string out = d;
  std::free(d);
  return out;
}

}  // namespace

MLD_DETECTOR(JIT004) {
  using namespace mld;
  if (!facts.jit) return;
  for (const jit::Extension& e : facts.jit->extensions) {
    if (!e.module || (e.missing_symbols.empty() && e.missing_libraries.empty())) continue;
    Detection d;
    d.rule = "JIT004";
    d.subject = *e.module;
    if (!e.missing_symbols.empty()) {
      d.message =
          "stale build of " + e.name + ": " + *e.module + " needs " +
          std::to_string(e.missing_symbols.size()) + " symbol" +
          (e.missing_symbols.size() == 1 ? "" : "s") +
          " the installed torch does not define; importing it fails with \"undefined symbol: " +
          e.missing_symbols.front() + "\"";
      for (size_t i = 0; i < e.missing_symbols.size() && i < 3; i++)
        d.evidence.push_back(
            {"undefined: " + demangled(e.missing_symbols[i]) + " (" + e.missing_symbols[i] + ")",
             "", std::nullopt});
    } else {
      d.message = "stale build of " + e.name + ": " + *e.module + " needs " +
                  e.missing_libraries.front() + ", which is not found beside the installed torch";
    }
    for (const std::string& lib : e.missing_libraries)
      d.evidence.push_back({"not found: " + lib, "", std::nullopt});
    d.evidence.push_back(
        {"build directory " + e.path + " (" + e.root_kind + ")", "", std::nullopt});
    d.fix =
        "rebuild it for the installed torch: remove " + e.path + " (the next load() builds again)";
    out.push_back(std::move(d));
  }
}
