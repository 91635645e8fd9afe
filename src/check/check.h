// check.h — `mldoctor check`: the preflight of a training node. It gathers
// the facts (host, environment variables, the Python environment), replays
// the usual import set of the job through the loader model — the same
// dlopen() sequence `import torch, numpy, cv2, sklearn, numba` performs — and
// turns what that process would hold into findings:
//   OMP001  several OpenMP runtimes in the import set, and which import brings each
//   MKL001  mkl-service's threading-layer check (libmkl_rt beside GNU OpenMP)
//   TLS001  the first import that would fail on static TLS, and the tunable that fixes it
//   LD001/LD002  missing libraries and unmet GLIBC/GLIBCXX/CXXABI needs of extension modules
//   CUDA001 two major versions of one CUDA library in one process
//   THR001  threads per process × ranks per node beyond the usable CPUs
//   THR002  numba's OpenMP layer resetting torch's thread count (shared libgomp)
// plus the host and environment rules on hostfacts' facts (HOST*, ENV*), the
// extension build caches' of jit (JIT*) and GPU/NCCL readiness of gpu
// (GPU*, NCCL*).
//
// Analysis only: nothing here prints; the CLI renders a CheckReport.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "detect/detect.h"
#include "findings/findings.h"
#include "gpu/gpu.h"
#include "host/host.h"
#include "hostfacts/hostfacts.h"
#include "jit/jit.h"
#include "loader/loader.h"
#include "pyenv/pyenv.h"

namespace mld::check {

struct CheckOptions {
  std::optional<std::string> python;  // --python
  // How long the interpreter may take to answer the probe (--python-timeout).
  std::chrono::milliseconds python_timeout{10000};
  // The import order to simulate; empty: pyenv::default_imports (the usual
  // training prologue torch, numpy, cv2, sklearn, numba, then the table's
  // other packages and every package that vendors a runtime). A package the
  // table does not know loads its extension modules (pyenv::plan_imports).
  std::vector<std::string> imports;
  std::optional<u32> ranks_per_node;  // --ranks-per-node
  // fleet: the affinity mask of every rank on this node (hostfacts).
  std::optional<std::vector<std::vector<u32>>> node_masks;
  std::string glibc;  // override of the detected release ("2.31")
  std::string cwd;    // the job's directory (Megatron's fused_kernels/build)
  // The rules findings take their severity and text from (--rules-dir);
  // null: the builtin rules.
  const rules::RuleSet* rules = nullptr;
};

// One OpenMP runtime the simulated process would hold.
struct OpenMpRuntime {
  std::string path;
  std::string soname;
  loader::OpenMpKind kind = loader::OpenMpKind::None;
  std::string brought_by;  // "import torch (torch._C)", "python3 itself"
  size_t load_index = 0;   // position in the process's load order
};

// Who performs an import step, for messages: "import torch (torch._C)",
// "numba's first parallel call (numba.np.ufunc.omppool)".
std::string describe_step(const pyenv::ImportStep& s);

// The import set replayed through the loader.
struct ImportSimulation {
  std::string program;                   // the interpreter loaded as the program
  std::vector<pyenv::ImportStep> steps;  // the dlopen() calls, in order
  loader::DlopenSequence sequence;       // their outcome, one per step
  loader::Process process;               // the objects the process ends with
  std::vector<std::string> loaded_by;    // per process object: the import that brought it
  std::vector<OpenMpRuntime> openmp;     // in load order
  // numba's threading layer: the candidate that would win, if numba is in the set.
  std::optional<std::string> numba_layer;  // "tbb", "omp", "workqueue"
  // The distribution that installed each native file of the examined
  // packages, by normalised path: "opencv-python-headless 4.8.1.78".
  std::map<std::string, std::string> owners;
  // Names asked for with --import that load no native code, and why.
  std::vector<pyenv::UnresolvedImport> unresolved;
  // MKL's threading layer at libmkl_rt's first call, if libmkl_rt is loaded.
  std::optional<std::string> mkl_layer;  // "INTEL", "GNU", "SEQUENTIAL", ...
};

// mkl-layer.cc: the threading layer libmkl_rt would run (MKL_THREADING_LAYER,
// or mkl-service's choice at `import mkl`); *exits is set when mkl-service
// would stop the process instead. And the loads of libmkl_rt's first call,
// appended to `sim` (steps with LoadTime::MklFirstCall) and simulated.
std::string mkl_threading_layer(const ImportSimulation& sim, const host::Host& host, bool* exits);
void append_mkl_first_call(loader::Loader& loader, ImportSimulation& sim,
                           const loader::StaticTlsParams& params);

// One library of the GPU job's native stack as dlopen(soname) would find it
// on this node (LD_LIBRARY_PATH, ld.so.cache, the system directories):
// `fleet` and `diff` compare the real file names, which carry the versions
// (libcuda.so.535.104.05, libnccl.so.2.18.3).
struct StackLibrary {
  std::string soname;
  std::optional<std::string> path;  // as the search found it; nullopt: not found
  std::optional<std::string> file;  // the file it resolves to after symlinks
  // Its size: what tells two builds apart when the name carries no version
  // (pip's and conda's libnccl.so.2).
  std::optional<u64> size;
};

// The sonames StackLibrary reports, in report order.
const std::vector<std::string>& stack_library_sonames();

// What the installed torch was built as, read from its files (torch-threads.cc).
struct TorchBuildFacts {
  bool installed = false;
  pyenv::TorchBuild build;           // version.py and ATen/Config.h
  std::string libc10, libtorch_cpu;  // as the simulated import loaded them
  std::optional<u16> e_machine;      // of libtorch_cpu (else libc10)
  // libc10 exports c10::TaskThreadPoolBase::defaultNumThreads() (torch >=
  // 2.2; before, it was inline in a header); nullopt without libc10.
  std::optional<bool> exports_default_num_threads;
  bool libc10_needs_cpuinfo = false;  // DT_NEEDED libcpuinfo (Debian-style builds)
  bool rodata_read = false;           // libtorch_cpu's .rodata was searched
  bool no_mkl_string = false;         // ... and holds "MKL not found": no MKL
  // ... holds "LibUV TCPStore implementation missing": built without libuv
  // (searched for torch >= 2.4 or an unknown version; nullopt: not searched).
  std::optional<bool> no_libuv_string;
};

// torch.get_num_threads() right after `import torch`, before anyone changes
// it, and the rule of the installed build that gives it.
using TorchThreads = detect::TorchThreads;

TorchBuildFacts describe_torch_build(const host::Host& host, const pyenv::Environment& env,
                                     const struct ImportSimulation* sim);

struct CheckReport;
TorchThreads torch_default_threads(const TorchBuildFacts& build, const CheckReport& report);

// The machine's other interpreters that have known packages, looked for
// only when the checked one has none of them or none could be examined
// (pyenv::survey_interpreters): "this machine's torch is in another Python".
struct OtherInterpreters {
  pyenv::InterpreterSurvey survey;
  // commands[i] checks survey.found[i]: `mldoctor check --python PATH` with
  // this check's other options. Filled by the CLI, which knows them; empty
  // here.
  std::vector<std::string> commands;
};

struct CheckReport {
  hostfacts::Facts facts;
  std::optional<loader::GlibcVersion> glibc;
  std::optional<pyenv::Environment> python;  // nullopt: python_error says why
  std::string python_error;
  // The interpreter ran past the probe's timeout: its facts come from the
  // layout (python->python.probe_error), or, when python is nullopt, not
  // even that. Either way the report is printed: the host facts stand.
  bool python_timed_out = false;
  // Files of the analysed tree not read because they are not regular files
  // (a FIFO, a socket, a device), each with what it is: the host's refusals
  // and the `.pth` files the probe skipped, by path.
  std::vector<pyenv::ScanProblem> not_read;
  std::optional<ImportSimulation> imports;  // nullopt without a Python environment
  std::string imports_error;                // why the simulation could not run
  TorchBuildFacts torch_build;              // the installed torch, from its files
  TorchThreads torch_threads;               // its default intra-op thread count here
  jit::JitReport jit;                       // extension build caches and toolchain
  gpu::GpuFacts gpu;                        // GPUs, HCAs, interfaces, PCI topology
  std::vector<StackLibrary> libraries;      // empty when the C library's release is unknown
  std::vector<Finding> findings;            // sorted: errors first, then by rule

  // Set when the checked interpreter has none of the known packages (or
  // there is none): see OtherInterpreters.
  std::optional<OtherInterpreters> other_interpreters;
};

// Runs every check against `host` (the live machine, or a tree under --root).
// Throws only on errors of the tool itself; an environment that cannot be
// described becomes CheckReport::python_error.
CheckReport run_check(const host::Host& host, const CheckOptions& options);

// threads.cc: the thread pools of the Python process (THR001, THR002).
detect::ThreadPools thread_pools(const CheckReport& report);
// native.cc: the facts of the simulated import set (the process, its OpenMP
// runtimes and MKL, the first static TLS failure) and thread_pools().
void gather_native_facts(const CheckReport& report, const host::Host& host, detect::Facts& facts);

// The environment settings of `findings` for `mldoctor fix`: one value per
// variable (the first finding that sets it wins), in first-seen order.
struct FixSetting {
  std::string name;
  std::optional<std::string> value;  // nullopt: unset the variable
  std::vector<std::string> rules;    // the findings that asked for it
};
std::vector<FixSetting> fix_settings(const std::vector<Finding>& findings);

}  // namespace mld::check
