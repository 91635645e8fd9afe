// JIT024 — torch/utils/cpp_extension.py imports, when it loads, a module the
// examined environment does not have (setuptools, which Python 3.12+ venvs
// and uv's venvs no longer seed; pkg_resources, gone from setuptools 82):
// load(), load_inline(), BuildExtension and torch.compile's C++ code on CPU
// fail with ModuleNotFoundError before anything is built. The facts are
// jit's reading of the file's import statements and of sys.path. An error
// where an extension build is in sight, a warning elsewhere.
#include "detect/jit-locks.h"

namespace {

// Debian's package and pip's requirement that provide each module.
struct Provider {
  const char* module;
  const char* debian;
  const char* pip;
};
constexpr Provider kProviders[] = {
    {"setuptools", "python3-setuptools", "setuptools"},
    // setuptools 82 removed pkg_resources (pytorch#187262).
    {"pkg_resources", "python3-pkg-resources", "'setuptools<82'"},
    {"packaging", "python3-packaging", "packaging"},
    {"typing_extensions", "python3-typing-extensions", "typing-extensions"},
    {"filelock", "python3-filelock", "filelock"},
};

std::string install_fix(const mld::jit::PackageInstaller& in, const std::string& module) {
  const Provider* p = nullptr;
  for (const Provider& q : kProviders)
    if (module == q.module) p = &q;
  const std::string debian = p ? p->debian : "python3-" + module;
  const std::string pip = p ? p->pip : module;
  if (in.debian_system)
    return "apt-get install " + debian +
           (module == "setuptools"
                ? " (Debian 11's, 12's and 13's python3-torch depend on python3-pkg-resources, "
                  "not on it)"
                : "");
  if (in.pip) return in.python + " -m pip install " + pip;
  return "uv pip install --python " + in.python + " " + pip +
         " (this environment has no pip: a uv venv; or " + in.python +
         " -m ensurepip first, then " + in.python + " -m pip install " + pip + ")";
}

}  // namespace

MLD_DETECTOR(JIT024) {
  using namespace mld;
  if (!facts.jit || !facts.jit->torch_installed) return;
  const jit::JitReport& r = *facts.jit;
  for (const jit::MissingImport& m : r.cpp_extension_missing) {
    Detection d;
    d.rule = "JIT024";
    d.subject = m.module;
    d.message = "torch.utils.cpp_extension cannot be imported here: its `" + m.statement +
                "` finds no " + m.module +
                " in this environment, so load(), load_inline() and torch.compile on CPU fail "
                "with \"ModuleNotFoundError: No module named '" +
                m.module + "'\"";
    d.evidence.push_back({m.statement, m.file, static_cast<u64>(m.line)});
    d.evidence.push_back({"no " + m.module + "/ or " + m.module + ".py in the interpreter's " +
                              std::to_string(m.searched) + " sys.path entries",
                          "", std::nullopt});
    if (std::optional<Evidence> e = detect::builds_in_sight(r)) {
      d.escalated = true;
      d.evidence.push_back(std::move(*e));
    }
    d.fix = install_fix(r.installer, m.module);
    out.push_back(std::move(d));
  }
}
