// other-interpreters.cc — the machine's other Python interpreters and the
// known packages each one holds. `check` checks one interpreter (--python,
// $VIRTUAL_ENV, $CONDA_PREFIX, python3 on PATH); on a machine where that is
// a pyenv shim or a bare venv, "none of the known native packages" is true
// and useless: the job's torch is in /usr/bin/python3 or a conda env that
// was not activated. So when the chosen interpreter has none of them, these
// places are searched, in this order:
//   system      /usr/bin/python3*, /usr/local/bin/python3* (interpreter names
//               only: python3, python3.11, python3.13t; not python3.11-config)
//   conda       the base of $CONDA_EXE (<base>/bin/conda), /opt/conda, and
//               ~/*conda*, ~/miniforge*, ~/mambaforge*, ~/micromamba: each
//               base's bin/python and envs/*/bin/python
//   pyenv       ${PYENV_ROOT:-~/.pyenv}/versions/*/bin/python
//   virtualenv  ${WORKON_HOME:-~/.virtualenvs}/*/bin/python
// Nothing is executed: this runs on production nodes and, under --root, on
// fixture trees and snapshots, where nothing can be. Each candidate's
// sys.path is rebuilt by infer_from_layout and its packages found by
// find_known_packages, the same resolution the check itself uses, without
// walking native files. Everything unusual (an unlistable directory, a
// symlink loop, a dangling `python`) is noted and passed over; the number
// of environments read is capped.
#include <algorithm>
#include <cerrno>
#include <set>

#include "pyenv/pyenv.h"

namespace mld::pyenv {

std::string_view interpreter_kind_name(InterpreterKind k) {
  switch (k) {
    case InterpreterKind::System: return "system";
    case InterpreterKind::Conda: return "conda";
    case InterpreterKind::Pyenv: return "pyenv";
    case InterpreterKind::Virtualenv: return "virtualenv";
  }
  return "?";
}

namespace {

// "python3", "python3.11", "python3.13t" (free-threaded).
bool interpreter_name(std::string_view n) {
  if (!n.starts_with("python3")) return false;
  n.remove_prefix(7);
  if (n.empty()) return true;
  if (n.front() != '.') return false;
  n.remove_prefix(1);
  if (n.ends_with("t")) n.remove_suffix(1);
  return !n.empty() && n.find_first_not_of("0123456789") == std::string_view::npos;
}

// Home directories of conda distributions: Anaconda, Miniconda, Miniforge,
// Mambaforge, micromamba (and ~/.conda, where `conda create` puts a user's
// envs when the base is not writable).
bool conda_home_name(std::string_view n) {
  return n.find("conda") != std::string_view::npos || n.starts_with("miniforge") ||
         n.starts_with("mambaforge") || n == "micromamba";
}

// One environment: the prefix its layout gives (symlinks resolved) and X.Y.
struct EnvKey {
  std::string prefix;
  int major = 0, minor = 0;
  auto operator<=>(const EnvKey&) const = default;
};

class Survey {
 public:
  Survey(const host::Host& host, const SurveyOptions& options) : host_(host), options_(options) {}

  void exclude(const PythonFacts& facts) { seen_.insert(key_of(facts)); }

  // The names of a directory; nullopt, with a note where it matters, when
  // it is missing (silently: most places are) or cannot be listed.
  std::optional<std::vector<std::string>> list(const std::string& dir) {
    host::FileStat st = host_.stat(dir);
    if (st.kind == host::FileKind::Missing) return std::nullopt;
    if (st.kind == host::FileKind::Error) {
      note(dir, failure(st.error));
      return std::nullopt;
    }
    if (st.kind != host::FileKind::Directory) return std::nullopt;
    std::optional<std::vector<std::string>> names = host_.list_dir(dir);
    if (!names) note(dir, "directory cannot be listed");
    return names;
  }

  // <env>/bin/python, else <env>/bin/python3 (some venvs have only that).
  void add_env(const std::string& env, InterpreterKind kind) {
    std::string bin = host::join_path(env, "bin");
    std::string python = host::join_path(bin, "python");
    if (host_.lstat(python).kind == host::FileKind::Missing &&
        host_.lstat(host::join_path(bin, "python3")).kind != host::FileKind::Missing)
      python = host::join_path(bin, "python3");
    add(python, kind);
  }

  void add(const std::string& path, InterpreterKind kind) {
    if (stopped_) return;
    host::FileStat link = host_.lstat(path);
    if (link.kind == host::FileKind::Missing) return;  // no such interpreter here
    host::FileStat st = host_.stat(path);
    if (st.kind == host::FileKind::Missing) {
      std::optional<std::string> target = host_.read_link(path);
      note(path, target ? "dangling symlink to " + *target : failure(st.error));
      return;
    }
    if (st.kind == host::FileKind::Error) {
      note(path, failure(st.error));
      return;
    }
    if (st.kind != host::FileKind::Regular) {
      note(path, "not a regular file");
      return;
    }
    PythonFacts facts;
    try {
      facts = infer_from_layout(host_, path);
    } catch (const PyenvError& e) {
      std::string what = e.what();
      if (what.starts_with(path + ": ")) what.erase(0, path.size() + 2);
      note(path, what);
      return;
    }
    if (!seen_.insert(key_of(facts)).second) return;  // the checked one, or seen already
    if (survey_.examined == options_.max_examined) {
      note(path, "not read: the survey stops after " + std::to_string(options_.max_examined) +
                     " environments");
      stopped_ = true;
      return;
    }
    survey_.examined++;
    std::vector<ScanProblem> ignored;  // another environment's damage is not this check's
    FoundInterpreter f;
    f.path = path;
    f.kind = kind;
    f.version = facts.version;
    f.prefix = facts.prefix;
    f.packages = find_known_packages(host_, facts, ignored);
    if (!f.packages.empty()) survey_.found.push_back(std::move(f));
  }

  InterpreterSurvey finish() {
    // Best first: torch, then the most known packages; ties keep the order
    // of discovery (system, conda, pyenv, virtualenv).
    auto has_torch = [](const FoundInterpreter& f) {
      return std::any_of(f.packages.begin(), f.packages.end(),
                         [](const FoundPackage& p) { return p.import_name == "torch"; });
    };
    std::stable_sort(survey_.found.begin(), survey_.found.end(),
                     [&](const FoundInterpreter& a, const FoundInterpreter& b) {
                       if (has_torch(a) != has_torch(b)) return has_torch(a);
                       return a.packages.size() > b.packages.size();
                     });
    if (survey_.found.size() > options_.max_listed) {
      survey_.more = survey_.found.size() - options_.max_listed;
      survey_.found.resize(options_.max_listed);
    }
    return std::move(survey_);
  }

  void note(const std::string& path, std::string what) {
    survey_.skipped.push_back({path, std::move(what)});
  }

 private:
  EnvKey key_of(const PythonFacts& facts) const {
    return {host_.real_path(facts.prefix).value_or(host::normalize_path(facts.prefix)), facts.major,
            facts.minor};
  }
  static std::string failure(int err) {
    return err == ELOOP ? "symlink loop (" + errno_text(err) + ")" : errno_text(err);
  }

  const host::Host& host_;
  const SurveyOptions& options_;
  InterpreterSurvey survey_;
  std::set<EnvKey> seen_;
  bool stopped_ = false;
};

}  // namespace

InterpreterSurvey survey_interpreters(const host::Host& host, const PythonFacts* exclude,
                                      const SurveyOptions& options) {
  Survey s(host, options);
  if (exclude) s.exclude(*exclude);
  std::optional<std::string> home = host.getenv("HOME");
  if (home && (home->empty() || home->front() != '/')) home.reset();
  if (!home)
    s.note("$HOME",
           "unset (or not an absolute path): ~/.pyenv, ~/*conda* and ~/.virtualenvs "
           "not searched");

  for (const char* dir : {"/usr/bin", "/usr/local/bin"})
    if (std::optional<std::vector<std::string>> names = s.list(dir))
      for (const std::string& n : *names)
        if (interpreter_name(n)) s.add(host::join_path(dir, n), InterpreterKind::System);

  std::vector<std::string> conda_bases;
  if (std::optional<std::string> exe = host.getenv("CONDA_EXE"); exe && exe->starts_with("/"))
    conda_bases.push_back(host::dir_name(host::dir_name(host::normalize_path(*exe))));
  conda_bases.push_back("/opt/conda");
  if (home)
    if (std::optional<std::vector<std::string>> names = s.list(*home))
      for (const std::string& n : *names)
        if (conda_home_name(n)) conda_bases.push_back(host::join_path(*home, n));
  std::set<std::string> bases_seen;
  for (const std::string& base : conda_bases) {
    if (!bases_seen.insert(host.real_path(base).value_or(base)).second) continue;
    s.add_env(base, InterpreterKind::Conda);
    std::string envs = host::join_path(base, "envs");
    if (std::optional<std::vector<std::string>> names = s.list(envs))
      for (const std::string& n : *names)
        s.add_env(host::join_path(envs, n), InterpreterKind::Conda);
  }

  std::optional<std::string> pyenv_root = host.getenv("PYENV_ROOT");
  if ((!pyenv_root || pyenv_root->empty()) && home) pyenv_root = host::join_path(*home, ".pyenv");
  if (pyenv_root && !pyenv_root->empty()) {
    std::string versions = host::join_path(*pyenv_root, "versions");
    if (std::optional<std::vector<std::string>> names = s.list(versions))
      for (const std::string& n : *names)
        s.add_env(host::join_path(versions, n), InterpreterKind::Pyenv);
  }

  std::optional<std::string> workon = host.getenv("WORKON_HOME");
  if ((!workon || workon->empty()) && home) workon = host::join_path(*home, ".virtualenvs");
  if (workon && !workon->empty())
    if (std::optional<std::vector<std::string>> names = s.list(*workon))
      for (const std::string& n : *names)
        s.add_env(host::join_path(*workon, n), InterpreterKind::Virtualenv);
  return s.finish();
}

}  // namespace mld::pyenv
