// pyenv.h — the Python environment a job would run in, learned without
// importing any user package: which interpreter, its version and sys.path,
// the installed distributions, and for the packages whose native code causes
// trouble (torch, numpy, cv2, numba, ...) their extension modules and vendored
// native libraries. `mldoctor check` feeds these to the loader model.
//
// Facts come from one of two places:
//   - the live interpreter, asked once (`python -S -c <probe>`, one
//     subprocess that imports only sys, os, stat, site and sysconfig and
//     runs site.main() itself), or
//   - the directory layout alone, under `--root` or when running the
//     interpreter is impossible (pyvenv.cfg, lib/python3.X, Debian's
//     dist-packages, `.pth` files).
// Everything else is read through host::Host, so every path is inside the
// analysed root and a fixture tree answers like the live machine.
//
// Errors: a missing or broken interpreter throws PyenvError (the environment
// cannot be described at all). Anything narrower — an unreadable METADATA, a
// corrupt `.so`, a directory cycle — becomes a ScanProblem naming its path,
// and the scan goes on.
//
// Sections, by implementation file:
//   interpreter.cc    choosing the interpreter, probing it, layout inference,
//                     pyenv's shims resolved without running them
//   distributions.cc  *.dist-info / *.egg-info metadata and duplicates
//   packages.cc       import resolution, extension modules, vendored libraries
//   python-imports.cc the import statements a package's Python code runs
//   import-set.cc     the usual import set (what `import torch, ...` dlopens)
//   other-interpreters.cc  the machine's other interpreters and their known
//                     packages, found without running any of them
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "host/host.h"

namespace mld::pyenv {

// The environment cannot be described: no interpreter, the interpreter
// crashed, hung or answered nonsense, or the layout names no Python.
class PyenvError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The probe ran past its timeout and was killed: the interpreter's start-up
// waits on something (a .pth file, sitecustomize, usercustomize).
class ProbeTimeout : public PyenvError {
 public:
  using PyenvError::PyenvError;
};

// A problem with one item (a distribution, a file, a directory); the rest of
// the environment is still described.
struct ScanProblem {
  std::string path;  // inside the root
  std::string what;  // "METADATA has no Name", "directory cycle", ...
};

// ─── interpreter.cc ─────────────────────────────────────────────────────────

enum class InterpreterSource {
  Flag,         // --python PATH
  VirtualEnv,   // $VIRTUAL_ENV/bin/python
  CondaPrefix,  // $CONDA_PREFIX/bin/python
  PathSearch,   // `python3` on $PATH
  Fallback,     // /usr/bin/python3 (layout inference with nothing else set)
};
std::string_view interpreter_source_name(InterpreterSource s);

struct InterpreterChoice {
  std::string path;  // inside the root, as found (not symlink-resolved)
  InterpreterSource source = InterpreterSource::PathSearch;
  std::string reason;  // "--python", "$VIRTUAL_ENV/bin/python", "python3 on PATH"
  // What `python3` on $PATH resolves to, whether or not it was chosen, so the
  // report can say "python3 on PATH is X; --python to choose".
  std::optional<std::string> python3_on_path;
};

// Picks the interpreter in the order of DESIGN §3.3: `flag_python`, then
// $VIRTUAL_ENV/bin/python, $CONDA_PREFIX/bin/python, then `python3` on $PATH
// (all from host.getenv, checked with host.stat). Nothing is executed.
// Throws PyenvError when --python names no file or nothing is found.
InterpreterChoice choose_interpreter(const host::Host& host,
                                     const std::optional<std::string>& flag_python);

enum class FactsOrigin { Interpreter, Layout };

struct PythonFacts {
  FactsOrigin origin = FactsOrigin::Interpreter;
  int major = 0, minor = 0, micro = 0;
  std::string release_level;  // "final", "candidate", ...; empty from a layout
  std::string version;        // "3.11.2" ("3.11" from a layout)
  std::string executable;     // sys.executable
  std::string prefix;         // sys.prefix
  std::string base_prefix;    // sys.base_prefix
  // sys.path in order, exactly as reported (from `-c` its first entry is "",
  // the current directory; the scan skips it — the job's script directory is
  // not known here).
  std::vector<std::string> sys_path;
  std::string ext_suffix;  // ".cpython-311-x86_64-linux-gnu.so"
  std::string soabi;       // "cpython-311-x86_64-linux-gnu"
  std::string machine;     // "x86_64", "aarch64"
  // Layout inference only: `.pth` lines starting with "import" that the real
  // interpreter would execute at startup (they may add paths we cannot see).
  std::vector<ScanProblem> unexecuted_pth_imports;
  // `.pth` files of the site directories that are not regular files (a FIFO,
  // a device): site.py opens each at every start-up of this interpreter, and
  // a FIFO stops it there until something writes. Neither the probe (which
  // runs site.py with them skipped) nor layout inference reads them.
  std::vector<ScanProblem> unread_pth;
  // Why the interpreter gave no facts when it was asked (it ran past the
  // probe's timeout), so these come from the layout; empty otherwise.
  std::string probe_error;
  bool in_venv() const { return prefix != base_prefix; }
};

struct ProbeOptions {
  std::chrono::milliseconds timeout{10000};
};

// The problem of a `.pth` file that is not a regular file (st_mode `mode`):
// "not a regular file (a FIFO): not read; ..." with what site.py does to it.
ScanProblem unread_pth_problem(const std::string& path, u32 mode);

// Runs `python -S -c <probe script>` once and parses its JSON answer. The
// child gets host.environment() unchanged (PYTHONPATH, PYTHONHOME,
// PYTHONNOUSERSITE and the user site all shape sys.path, so a "clean"
// environment would describe a different interpreter than the job's), stdin
// from /dev/null (so PYTHONINSPECT cannot make it wait for input). The probe
// runs site.main() itself, as the start-up would without -S, with one
// difference: a `.pth` file that is not a regular file is skipped and
// reported (PythonFacts::unread_pth) instead of waited on; the others run as
// at any start-up. Requires: host.is_live_root(). Throws PyenvError naming
// the interpreter when it cannot start, exits non-zero (stderr tail quoted),
// is killed by a signal, or prints something other than the probe's JSON,
// and ProbeTimeout when it runs past the timeout (then it is killed). A
// recording host (`snapshot`) keeps the answer as the fact
// probe_fact_name(python).
PythonFacts probe_interpreter(const host::Host& host, const std::string& python,
                              const ProbeOptions& options = {});

// Where a snapshot keeps the probe's answer for the interpreter at
// `python` (host::Host::record_fact): "python-probe/usr/bin/python3".
// scan_environment under a root reads it back instead of inferring the
// facts from the layout.
std::string probe_fact_name(std::string_view python);

// The probe's answer in `out` (its stdout; text that sitecustomize or a .pth
// file printed first is skipped: the answer is the last JSON object). Throws
// PyenvError, prefixed with `who`, when there is none or a field is missing
// or malformed.
PythonFacts parse_probe_answer(std::string_view out, const std::string& who);

// The same facts from the layout around `python` (a path inside the root),
// without running anything: pyvenv.cfg (home, include-system-site-packages,
// version), lib/python3.X, Debian's dist-packages scheme, the user site,
// PYTHONPATH from host.getenv, and `.pth` path lines. Throws PyenvError when
// no lib/python3.X can be found for it.
PythonFacts infer_from_layout(const host::Host& host, const std::string& python);

// pyenv's shims ($PYENV_ROOT/shims/python3) are shell scripts that run
// `pyenv exec python3`, and pyenv picks the interpreter at each run. Under
// --root nothing runs, so the choice is made here as pyenv-version-name and
// pyenv-which make it: $PYENV_VERSION, else the first words of
// $PYENV_ROOT/version (a project's .python-version depends on the job's
// directory, which is not known here); each entry of that colon list in
// turn ("python-" prefix dropped; a bare "3.11" is the newest installed
// 3.11.x), the first whose versions/<entry>/bin/<program> exists, then
// "system": the first <program> on $PATH outside $PYENV_ROOT/shims.
struct PyenvShim {
  std::string pyenv_root;             // from the shim's `export PYENV_ROOT=`, else the environment
  std::string program;                // the shim's name: "python3"
  std::string version;                // the entry that gave the interpreter: "3.11.7", "system"
  std::string version_origin;         // "$PYENV_VERSION", "/root/.pyenv/version"; empty: none set
  std::optional<std::string> target;  // what pyenv would exec; nullopt: `error` says why
  std::string error;
};

// The shim's choice when `path` (inside the root) is a pyenv shim (a small
// script that runs `pyenv exec`); nullopt when it is anything else.
std::optional<PyenvShim> read_pyenv_shim(const host::Host& host, const std::string& path);

// ─── distributions.cc ───────────────────────────────────────────────────────

enum class MetadataFormat {
  DistInfo,     // name-1.0.dist-info/METADATA (wheels, pip)
  EggInfoDir,   // name-1.0.egg-info/PKG-INFO (setuptools, Debian)
  EggInfoFile,  // name-1.0.egg-info as a plain file holding PKG-INFO (Debian)
  Egg,          // name-1.0.egg/EGG-INFO/PKG-INFO (a sys.path entry itself)
};

struct Distribution {
  std::string name;             // Name: as written in the metadata
  std::string normalized_name;  // PEP 503: "scikit-learn", "opencv-python"
  std::string version;          // Version: as written
  MetadataFormat format = MetadataFormat::DistInfo;
  std::string metadata_path;  // the .dist-info / .egg-info, inside the root
  std::string site_dir;       // the sys.path entry it was found in
  size_t sys_path_index = 0;  // position of site_dir in PythonFacts::sys_path
  // Top-level import names: top_level.txt, else derived from RECORD.
  std::vector<std::string> top_level;
  std::optional<std::string> installer;  // INSTALLER: "pip", "conda", "uv", ...
  // Metadata problem; name and version then come from the directory name
  // (importlib.metadata would report Name None).
  std::optional<std::string> error;
  // RECORD entries that are an OpenMP, BLAS, TBB or CUDA runtime library
  // (by file name: "scikit_learn.libs/libgomp-a34b3233.so.1.0.0"), resolved.
  std::vector<std::string> runtime_files;
  // Another copy of this distribution earlier on sys.path (or, in the same
  // directory, a .dist-info before this .egg-info) is the one import sees.
  // Index into Environment::distributions.
  std::optional<size_t> shadowed_by;
};

// PEP 503 name normalisation: lower case, runs of "-_." become "-".
std::string normalize_distribution_name(std::string_view name);

// Every distribution on `sys_path`, in sys.path order (within one directory:
// .dist-info before .egg-info, then by name), duplicates marked.
std::vector<Distribution> find_distributions(const host::Host& host,
                                             const std::vector<std::string>& sys_path,
                                             std::vector<ScanProblem>& problems);

// Paths of files a distribution's RECORD lists, resolved against its site
// directory and normalised (may lie outside it: "../../libiomp5.so").
std::vector<std::string> record_paths(const host::Host& host, const Distribution& dist,
                                      std::vector<ScanProblem>& problems);

// RECORD's entries as written (relative to the site directory, not
// normalised), for checking what they name; empty without a RECORD.
std::vector<std::string> record_entries(const host::Host& host, const Distribution& dist);

// ─── packages.cc ────────────────────────────────────────────────────────────

enum class NativeKind {
  ExtensionModule,  // importable: <name><EXT_SUFFIX>, .abi3.so, or .so with PyInit_<name>
  Library,          // vendored shared library (torch/lib, *.libs, nvidia/*/lib)
};

struct NativeFile {
  std::string path;  // inside the root, as found under the package
  // When `path` is a symlink: its target, joined and normalised (Debian's
  // torch/lib/libtorch.so -> /usr/lib/x86_64-linux-gnu/libtorch.so.1.13).
  std::optional<std::string> link_target;
  NativeKind kind = NativeKind::Library;
  std::string import_name;   // top-level package it belongs to: "torch", "nvidia"
  std::string module;        // extension modules: dotted name, "torch._C"
  std::string distribution;  // owning distribution's name, when known
  // From the ELF header (not the file name).
  bool is_64 = true;
  u16 e_machine = 0;
  // Extension modules: the tag matches the interpreter (EXT_SUFFIX, .abi3.so
  // or plain .so). False for e.g. ".cpython-310-..." under Python 3.11, which
  // import skips.
  bool loadable_by_interpreter = true;
};

// What `import <pkg>` runs, in order, as far as its Python source says.
struct ImportEvent {
  enum class Kind {
    Package,     // a top-level package is first imported here ("torch")
    Extension,   // an extension module is loaded ("pkg._C")
    Module,      // a Python module's body starts running ("pkg.ops")
    ModuleDone,  // ... and has run to its end
  };
  Kind kind = Kind::Package;
  std::string name;
  std::string via;  // the statement: "pkg/ops/__init__.py:12"
};

enum class ImportKind { Package, Module, Namespace };

// Where `import <name>` finds a top-level package, modelled on
// importlib's FileFinder: per sys.path entry, <name>/__init__.* first, then
// <name><suffix> modules, and a directory without __init__ only as a
// namespace portion when no entry has a regular package or module.
struct ImportedPackage {
  std::string import_name;  // "torch", "cv2", "nvidia"
  ImportKind kind = ImportKind::Package;
  std::string path;  // package directory or module file; first namespace portion
  std::string site_dir;
  std::vector<std::string> namespace_portions;  // Namespace: every portion
  // Copies later on sys.path that this import never reaches.
  std::vector<std::string> shadowed_paths;
  std::optional<std::string> distribution;  // "opencv-python"
  std::optional<std::string> version;
  std::vector<NativeFile> extension_modules;  // sorted by path
  std::vector<NativeFile> libraries;          // sorted by path
  // Not asked for: examined because an asked package's imports reach it
  // (scipy under sklearn). Reports list those only when they hold native code.
  bool reached_by_imports = false;
  // Native files are found as the import system finds them (the package
  // tree, the interpreter's suffixes), never from RECORD alone; RECORD's
  // entries that name nothing there, or climb out with "..", are problems.
};

// The import names whose native code mldoctor looks at, and the
// distributions that provide each.
struct KnownPackage {
  std::string_view import_name;
  std::vector<std::string_view> distributions;  // normalised names
};
const std::vector<KnownPackage>& known_packages();

// A known package on an interpreter's sys.path, found as scan_with_facts
// finds it (the same import resolution and owning distribution) without
// walking its native files.
struct FoundPackage {
  std::string import_name;                  // "torch"
  std::optional<std::string> distribution;  // "torch"; nullopt: no metadata (Debian's cv2)
  std::optional<std::string> version;       // the distribution's Version
};

// The known_packages() that `python`'s sys.path holds, in that table's order.
std::vector<FoundPackage> find_known_packages(const host::Host& host, const PythonFacts& python,
                                              std::vector<ScanProblem>& problems);

// ─── the whole environment ──────────────────────────────────────────────────

struct ScanOptions {
  std::optional<std::string> python;  // --python
  // false, or a host whose root is not "/": infer from the layout instead of
  // running the interpreter.
  bool run_interpreter = true;
  ProbeOptions probe;
  // Import names to examine; empty: every known_packages() entry.
  std::vector<std::string> packages;
};

struct Environment {
  InterpreterChoice interpreter;
  PythonFacts python;
  std::vector<Distribution> distributions;  // sys.path order
  std::vector<ImportedPackage> packages;    // the known packages present
  // Native libraries not inside an examined package: auditwheel `*.libs`
  // directories of other distributions, and files that RECORD places outside
  // site-packages (mkl, intel-openmp, tbb put theirs in <prefix>/lib).
  std::vector<NativeFile> other_libraries;
  std::vector<ScanProblem> problems;

  // The distribution import metadata would report for a (any-form) name:
  // the first on sys.path. nullptr when not installed.
  const Distribution* find_distribution(std::string_view name) const;
  const ImportedPackage* find_package(std::string_view import_name) const;
};

// Chooses the interpreter, learns its facts (probe or layout), then reads
// distributions and the known packages' native files. An interpreter that
// runs past the probe's timeout is described from its layout instead
// (PythonFacts::probe_error says so). Throws PyenvError only when no
// interpreter facts can be had (ProbeTimeout when the probe timed out and
// the layout names no Python either).
Environment scan_environment(const host::Host& host, const ScanOptions& options);

// Lower-level step of scan_environment, for fixed facts: distributions and
// packages of `python`'s sys.path.
Environment scan_with_facts(const host::Host& host, InterpreterChoice interpreter,
                            PythonFacts python, const std::vector<std::string>& packages = {});

// What an installed torch was built as, from its files (never imported):
// torch/version.py (`__version__`, `cuda`) and torch/include/ATen/Config.h
// (the parallel backend and MKL switches; pip wheels ship it, Debian's
// libtorch-dev provides it through torch/include links).
struct TorchBuild {
  bool known = false;               // torch is installed and version.py was read
  std::optional<std::string> cuda;  // "12.1"; nullopt: a CPU-only build
  // __version__: "2.4.1+cu121", Debian's "1.13.0a0"; else the distribution's.
  std::string version;
  std::optional<int> major, minor;  // of `version`
  // ATen/Config.h, when present: AT_PARALLEL_OPENMP, AT_PARALLEL_NATIVE,
  // AT_MKL_ENABLED(), AT_MKL_SEQUENTIAL() (nullopt: not stated there).
  std::optional<std::string> config_h;  // its path
  std::optional<bool> parallel_openmp, parallel_native, mkl_enabled, mkl_sequential;
};
TorchBuild torch_build(const host::Host& host, const Environment& env);

// ─── other-interpreters.cc ──────────────────────────────────────────────────

// When the interpreter a check chose has none of the known packages, the
// job's torch is usually in another one on the machine (Debian's
// /usr/bin/python3 behind a pyenv shim on PATH, a conda env that was not
// activated). These find them statically: no interpreter is run (a
// production node, a fixture tree or a snapshot under --root answer alike),
// each candidate's sys.path comes from infer_from_layout and its packages
// from find_known_packages.

enum class InterpreterKind {
  System,      // /usr/bin/python3*, /usr/local/bin/python3*
  Conda,       // $CONDA_EXE's base, /opt/conda, ~/*conda*: bin/python and envs/*/bin/python
  Pyenv,       // ${PYENV_ROOT:-~/.pyenv}/versions/*/bin/python
  Virtualenv,  // ~/.virtualenvs/*/bin/python
};
std::string_view interpreter_kind_name(InterpreterKind k);  // "system", "conda", ...

struct FoundInterpreter {
  std::string path;  // as found: "/usr/bin/python3", "/opt/conda/envs/train/bin/python"
  InterpreterKind kind = InterpreterKind::System;
  std::string version;                 // "3.11", from the layout
  std::string prefix;                  // sys.prefix, from the layout
  std::vector<FoundPackage> packages;  // at least one; known_packages() order
};

struct SurveyOptions {
  size_t max_listed = 10;    // FoundInterpreter entries kept; the rest are counted
  size_t max_examined = 64;  // distinct environments read; the rest are skipped, with a note
};

struct InterpreterSurvey {
  // The interpreters with at least one known package, best first: those
  // with torch, then by how many known packages they have, then in the
  // order above (system, conda, pyenv, virtualenv). At most max_listed.
  std::vector<FoundInterpreter> found;
  size_t more = 0;      // further interpreters with packages beyond max_listed
  size_t examined = 0;  // distinct environments read (the excluded one not counted)
  // What was passed over and why: a directory that cannot be listed, a
  // symlink loop, a dangling `python`, a layout with no lib/python3.X,
  // HOME unset, the cap reached.
  std::vector<ScanProblem> skipped;
};

// The interpreters of the places above, one per environment: two paths
// whose layouts give the same sys.prefix (symlinks resolved) and the same
// X.Y are one (/usr/bin/python3 and /usr/bin/python3.11), while a venv whose
// python links to /usr/bin/python3.11 is its own. `exclude` (the checked
// interpreter's facts, probed or inferred) removes the environment with its
// prefix and version. HOME, CONDA_EXE and PYENV_ROOT come from host.getenv.
// Never throws for what it finds; every read is bounded by the options.
InterpreterSurvey survey_interpreters(const host::Host& host, const PythonFacts* exclude,
                                      const SurveyOptions& options = {});

// ─── python-imports.cc ──────────────────────────────────────────────────────

// One import statement that a module runs when it is imported: not inside a
// `def`, not under `if TYPE_CHECKING:`. `import a.b as c, d` is two.
struct ImportStatement {
  int level = 0;                   // leading dots of a relative import; 0: absolute
  std::string module;              // "torch.nn"; "" for `from . import x`
  std::vector<std::string> names;  // `from m import a, b`: a, b ("*" kept); empty for `import`
  size_t line = 0;                 // 1-based, where the statement starts
};

// The module-level import statements of Python source, in source order.
// Never throws; text that is not Python yields what it happens to hold.
std::vector<ImportStatement> module_level_imports(std::string_view source);

// Runs `import` statements the way Python's import system runs them,
// without running Python: each module's body once, depth first, in source
// order, across every top-level package `resolve` can find (sys.path order,
// packages before modules, the interpreter's extension suffixes, namespace
// portions), relative imports from the right package, and `from m import x`
// importing m.x when it is a submodule. Events reach the listener as they
// happen; a listener may call import() itself (an extension module's PyInit
// importing numpy), as Python nests imports. Unreadable sources and a walk
// cut short (kMaxModules modules, kMaxBytes of source) are added to
// `problems`.
class ImportWalker {
 public:
  // The top-level package `import <top>` finds; nullptr: not followed (the
  // standard library, or nothing there).
  using Resolve = std::function<const ImportedPackage*(const std::string& top)>;
  using Listener = std::function<void(const ImportEvent&)>;
  static constexpr size_t kMaxModules = 20000;
  static constexpr u64 kMaxBytes = 256u << 20;

  ImportWalker(const host::Host& host, Resolve resolve, std::vector<ScanProblem>& problems);
  ~ImportWalker();
  void set_listener(Listener listener);
  // `import module` (module's parents first), then, for `from module import
  // names`, each name that is a submodule. `via` names the statement.
  void import(const std::string& module, const std::vector<std::string>& names,
              const std::string& via);
  bool started(const std::string& module) const;
  size_t modules_read() const;
  // Whether a limit stopped the walk (a problem was added once).
  bool cut() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What `import <pkg>` runs, in order, when nothing was imported before:
// an ImportWalker over `pkg` alone (other top-level packages appear as
// Package events and are not entered).
std::vector<ImportEvent> import_events(const host::Host& host, const ImportedPackage& pkg,
                                       std::vector<ScanProblem>& problems);

// ─── import-set.cc ──────────────────────────────────────────────────────────

enum class LoadTime {
  AtImport,          // dlopen'ed while `import <name>` runs
  FirstParallelUse,  // numba's threading layer: loaded by the first parallel call
  MklFirstCall       // MKL's threading layer: loaded by libmkl_rt's first call (check/mkl-layer.cc)
};

// Where a step of the plan comes from.
enum class StepSource {
  Table,     // a row of the table of known packages' loads (checked against real
             // imports): ctypes loads, C-level imports, numba's threading layer
  Inferred,  // found by following the import statements (ImportWalker), or an
             // extension module of an imported package that no import reaches
};

// One dlopen that an import performs, in predicted order.
struct ImportStep {
  std::string import_name;   // the import statement's package: "torch"
  std::string triggered_by;  // the package whose code performs it ("numpy" inside torch)
  std::string path;          // inside the root
  std::string module;        // dotted extension module name; empty for ctypes loads
  NativeKind kind = NativeKind::ExtensionModule;
  LoadTime when = LoadTime::AtImport;
  StepSource source = StepSource::Table;
  std::string note;  // why it is here, e.g. "ctypes.CDLL(..., RTLD_GLOBAL)"
};

// An import name of the plan that loads no native code, and why.
struct UnresolvedImport {
  std::string import_name;
  std::string reason;  // "not found on sys.path", "no native module found"
};

struct ImportPlan {
  std::vector<ImportStep> steps;
  std::vector<UnresolvedImport> unresolved;  // in the order asked
};

// The extension modules (and ctypes-loaded libraries) that
// `import <imports[0]>, <imports[1]>, ...` would dlopen first, in order, each
// file once. The order is the import system's (ImportWalker over every
// package the environment holds, transitively: sklearn → scipy → numpy);
// the table of known packages adds what no import statement shows (ctypes
// loads, an extension module's PyInit importing numpy, numba's threading
// layer at first use, faiss's CPU-dependent pick) and the loads its rows
// name that the walk does not reach. A package named in `imports` also
// replays its extension modules that no module-level import reaches, after
// (lazy imports may load them; StepSource::Inferred with a note). Every name
// that loads nothing is listed in `unresolved` with the reason.
ImportPlan plan_imports(const Environment& env, const host::Host& host,
                        const std::vector<std::string>& imports);

// Whether the table has a row for this top-level package ("llvmlite" for
// "llvmlite.binding"); the others are replayed by inference.
bool in_import_table(std::string_view import_name);

// The import set `check` replays when none is given: the usual training-job
// prologue (torch, numpy, cv2, sklearn, numba), then the other installed
// packages of the table and of known_packages(), then every installed
// package whose distribution vendors an OpenMP, BLAS, TBB or CUDA runtime
// (Distribution::runtime_files).
std::vector<std::string> default_imports(const Environment& env);
const std::vector<std::string>& usual_imports();  // the five

}  // namespace mld::pyenv
