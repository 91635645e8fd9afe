// detect.h — detection as a pure function of facts. Every command gathers
// its facts first (the host, the environment, the loader's simulation of a
// process, the trace of a real one) into a detect::Facts; each fact rule is
// one detector, registered under its rule id in src/detect/rules/<ID>.cc,
// that reads those facts and returns Detections (subject, message naming the
// objects, evidence) — never severity or prose its rule file owns.
// findings() turns them into Findings with their rules, the one place that
// does so for every command.
//
// The fact types here are source-neutral: an OpenMP runtime found by the
// static simulation of `import torch, ...` and one seen loaded by `run`'s
// trace are the same fact, so one detector serves both.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "findings/findings.h"
#include "gpu/gpu.h"
#include "hostfacts/hostfacts.h"
#include "jit/jit.h"
#include "loader/loader.h"
#include "rules/rules.h"

namespace mld::detect {

// One OpenMP runtime a process holds, or would hold.
// Who put a file where it is: what decides which fix a user can apply.
enum class Installer {
  Unknown,
  System,  // the distribution's packages (/usr/lib, /lib)
  Wheel,   // a pip/uv-installed wheel (site-packages, auditwheel's vendored copies)
  Conda,   // a conda environment (<prefix>/lib of a prefix with conda-meta/)
};

struct OpenMpRuntime {
  loader::OpenMpKind kind = loader::OpenMpKind::None;
  std::string soname;  // as the process knows it (a vendored copy keeps its hash)
  std::string path;
  std::string interface;  // the highest OMP_x.y version it defines, when read
  std::string how;        // "loaded by import torch (torch._C)", "needed by libtorch_cpu.so"
  size_t position = 0;    // in the process's load order
  std::string announces;  // LLVM/Intel: the name it prints in OMP: Error #15 ("libomp.so.5")
  Installer installer = Installer::Unknown;  // check only
  std::string owner;  // the distribution that installed it: "torch 2.1.0" (check only)
};

// libmkl_rt in a process beside GNU OpenMP: the threading layer MKL would
// pick (MKL001; check's import set only).
struct MklLoad {
  std::string path;
  std::string how;           // "loaded by import numpy (numpy.core._multiarray_umath)"
  size_t position = 0;       // in the process's load order
  bool mkl_service = false;  // mkl-service is installed: `import mkl` runs its check
  std::optional<std::string> threading_layer;  // MKL_THREADING_LAYER of the process
  bool force_intel = false;  // MKL_SERVICE_FORCE_INTEL is set: mkl-service prints and goes on
};

// The OpenMP runtimes of one process: predicted (check, libs) or seen (run).
struct OpenMpProcess {
  bool observed = false;
  // What the process is: "import torch, numpy" (check), a program or a
  // load order (libs, empty: none named), "pid 12 (python x.py)" (run).
  std::string process;
  bool aborted = false;                 // it died of SIGABRT (observed only)
  bool has_mkl = false;                 // libmkl_rt is loaded too: MKL can use the GNU runtime
  std::vector<OpenMpRuntime> runtimes;  // in load order, one per file
  std::optional<MklLoad> mkl;           // where check knows it
};

// A process as the loader model builds it: libs' program, or check's import
// set. The version needs are checked when the facts are gathered (that reads
// the objects' version sections); the detectors read the rest.
struct SimulatedProcess {
  std::string subject;  // the program, or "import torch, numpy"
  const loader::Process* process = nullptr;
  std::vector<loader::VersionProblem> version_problems;  // loader::check_versions()
  // check: per object of `process`, the import that loaded it ("import torch
  // (torch._C)"); null for a program.
  const std::vector<std::string>* loaded_by = nullptr;
  // check: the distribution that installed a file, by normalised path
  // ("opencv-python-headless 4.8.1.78", from its RECORD or package); null
  // for a program.
  const std::map<std::string, std::string>* owners = nullptr;
  // check: the conda environment the interpreter belongs to (its prefix,
  // which holds conda-meta/); empty otherwise.
  std::string conda_prefix;
  // check and libs: the operating system's packages, for files no Python
  // distribution owns (/usr/lib/x86_64-linux-gnu/libgomp.so.1 -> libgomp1).
  std::shared_ptr<const hostfacts::SystemPackages> system_packages = {};
  // check's import replay and libs --load-order: the dlopen() calls that
  // failed to load an object that is there but unusable (StepFailure::Load
  // not explained by a missing library, which LD001 reports): a truncated
  // or corrupt extension module. Each with who made the call and the
  // dlerror() text.
  struct FailedLoad {
    std::string object;  // the name passed to dlopen()
    std::string caller;  // "import numpy (numpy.core._multiarray_umath)"; "" for libs
    std::string error;
  };
  std::vector<FailedLoad> failed_loads = {};
};

// The failed Load steps of `seq` that are no missing library (LD001 names
// those), with the caller of step i from `caller` (may be null).
std::vector<SimulatedProcess::FailedLoad> failed_loads(
    const loader::DlopenSequence& seq, const std::function<std::string(size_t)>& caller);

// The distribution that installed `path` (any spelling: normalised first),
// else the system package that lists it.
std::optional<std::string> owner_of(const SimulatedProcess& p, std::string_view path);

// The evidence "<file> is loaded by <import>, from <distribution>" for every
// object of `p` that a detection names in its subject or message (nothing for
// a program).
void add_loaded_by(const SimulatedProcess& p, Detection& d);

// torch's default intra-op thread count on this machine (check/torch-threads.cc
// reads it from the installed build).
struct TorchThreads {
  bool torch = false;        // torch is installed
  std::optional<u32> count;  // nullopt: cannot be known here (`unknown` says why)
  std::string rule;          // the code that decides, in words
  std::string basis;         // its inputs and arithmetic on this machine
  std::string unknown;
  std::vector<std::string> evidence;  // how the build was recognised
};

// torch's c10d TCPStore as installed (check): torch 2.4 and later ask for its
// libuv backend by default, which a torch built without libuv refuses.
struct TorchStore {
  std::string version;               // torch.__version__ ("2.14.1+debian")
  std::string libtorch_cpu;          // the library whose strings say how it was built
  bool libuv_by_default = false;     // torch >= 2.4
  bool built_without_libuv = false;  // "LibUV TCPStore implementation missing" is in it
};

// The thread pools of check's Python process (THR001, THR002).
struct ThreadPools {
  bool numba = false;  // numba is installed: its pool counts too
  // numba's OpenMP layer would win and its omppool and torch resolve
  // libgomp.so.1 to one object: that object and the omppool; empty: not so.
  std::string shared_gomp, omppool;
  TorchThreads torch;
};

// The static TLS model's account of one failing dlopen().
struct StaticTlsAccount {
  std::string error;       // the dlerror() text of the model
  std::string tls_module;  // the module whose TLS block did not fit
  u64 bytes_needed = 0;
  u64 bytes_left = 0;
  u64 static_size = 0;   // the static TLS area
  u64 startup_used = 0;  // used by the startup modules
  u64 surplus = 0;
};

// The OpenMP runtimes of a simulated process, each with the objects that
// need it; `process` names it (may be empty).
OpenMpProcess openmp_process(const loader::Process& process, std::string name);

// The account of `step` of a simulated sequence.
StaticTlsAccount static_tls_account(const loader::DlopenSequence& seq,
                                    const loader::DlopenStep& step);

// A dlopen() that fails, or failed, because the static TLS area had no room.
struct StaticTlsFailure {
  enum class Source { Import, LoadOrder, Trace };
  Source source = Source::LoadOrder;
  std::string object;  // the name dlopen() was given
  std::string error;   // the dlerror() text (real or modelled)
  // Import: the import that would fail, the module it loads, the order.
  std::string import_name, module, import_order;
  // Trace: the process, the object that called dlopen(), and the module the
  // real error names.
  std::string process, requester, failing_module;
  // The model's account: of the real failure replayed (Trace), or the
  // predicted failure itself. nullopt: the model loads it (Trace), or could
  // not replay the process (replay_error).
  std::optional<StaticTlsAccount> model;
  std::string replay_error;
  size_t replayed_calls = 0;                // Trace: dlopen calls replayed
  std::optional<bool> loads_without_audit;  // Trace: without run's audit module
  // The complete GLIBC_TUNABLES value that lets it load (the user's other
  // tunables kept), and for a Trace the exact need it was rounded up from.
  std::optional<std::string> tunables;
  struct Rounding {
    std::string tunable;  // "glibc.rtld.optional_static_tls"
    u64 exact = 0, rounded = 0;
  };
  std::optional<Rounding> rounding;
};

// The thread-count calls one process made into its threading runtimes
// (OpenMP, MKL, OpenBLAS, numba), in time order, as run's trace saw them.
struct ThreadCountCall {
  std::string fn;                          // "omp_set_num_threads"
  long long value = 0;                     // the argument
  std::optional<long long> before, after;  // the runtime's count around the call
  std::string caller;                      // the object the call came from
  std::string runtime;                     // the object it landed in
};
struct ThreadCountCalls {
  std::string process;  // "pid 12 (python x.py)"
  std::vector<ThreadCountCall> calls;
};

// How each process of a job bound itself to a GPU and on which device its
// NCCL communicators were created, as run's trace saw the calls
// (src/trace/device-calls.c). Read by DIST001–DIST003 through
// detect/device-binding.h.
struct DeviceRequest {  // cudaSetDevice(n), or cuCtxSetCurrent of n's primary context
  std::string fn;
  long long device = 0;          // the ordinal asked for, within CUDA_VISIBLE_DEVICES
  std::optional<long long> ret;  // 0: it succeeded
  std::string caller;            // the object that called
  long tid = 0;
  u64 t = 0;
};
struct NcclInit {  // ncclCommInitRank, ncclCommInitRankConfig
  std::string fn;
  std::optional<long long> ret;  // empty: it never returned (hung, or died in it)
  std::optional<long long> nccl_rank, nranks;
  std::string comm_id;  // digest of its ncclUniqueId: equal for the ranks of one communicator
  // The CUDA device current on the calling thread when it started, asked
  // from the process's own CUDA runtime where that was safe; else why not.
  std::optional<long long> current_device;
  std::string current_device_unknown;
  std::string caller;
  long tid = 0;
  u64 t = 0;
};
struct DeviceProcess {
  long pid = 0;
  std::string process;  // "pid 12 (python train.py)"
  // The rank's environment (as of its last recorded call; nullopt: unset).
  std::optional<std::string> cuda_visible_devices, local_rank, rank, world_size;
  std::vector<DeviceRequest> requests;  // in time order
  std::vector<NcclInit> inits;          // in time order
};

// Whether `run` saw inside the command it started: its shims left events
// of that process, else the reasons the launch knew.
struct TraceCoverage {
  long command_pid = 0;
  bool command_seen = false;
  std::vector<std::string> not_traced_reasons;
  // The command was traced, then exec'd a program the shims did not load
  // in: what it ran, from which traced program, and what the exec call
  // recorded of why (each a sentence of evidence).
  struct UntracedExec {
    std::string path;
    std::string from;  // the traced program that made the call
    std::vector<std::string> reasons;
    bool root_changed = false;
  };
  std::optional<UntracedExec> command_exec;
  // The command called chroot() and left no event after it: the new root
  // (path) lacks the trace directory, and what ran there was not seen.
  struct UnseenRoot {
    std::string path;
    std::string caller;
    std::vector<std::string> reasons;
  };
  std::optional<UnseenRoot> command_chroot;
};

// How the command `run` started died of a signal, and what the machine
// recorded about it (run/death.cc): the memory cgroup's OOM kills, the
// kernel log's lines about the job's processes, /dev/shm, the CPU's
// instruction-set features. Each optional is unknown when it could not be
// read, and the note says why.
struct DeathFacts {
  long pid = 0;
  int signal = 0;  // SIGKILL, SIGBUS, SIGILL...
  bool core_dumped = false;
  std::vector<long> job_pids;             // the processes of the job that were seen
  std::optional<u64> peak_rss_bytes;      // the largest RSS of the job's processes
  std::string memory_cgroup;              // the cgroup the job ran in ("/slurm/job_12")
  std::optional<u64> oom_kills_before;    // its oom_kill count when the job started
  std::optional<u64> oom_kills_after;     // and when it ended
  std::optional<u64> memory_limit;        // bytes; nullopt: no limit or unknown
  std::optional<u64> memory_peak;         // the cgroup's peak usage, bytes
  std::string cgroup_note;                // why the cgroup's counters are missing
  std::vector<std::string> kernel_lines;  // the kernel log about the job since it started
  std::string kernel_note;                // why the kernel log was not read
  std::optional<u64> shm_size, shm_free;  // /dev/shm when the job ended, bytes
  std::string cpu_model;                  // "Intel(R) Xeon(R) Gold 6348"
  std::string cpu_level;                  // "x86-64-v4"
  std::vector<std::string> cpu_lacks;     // ISA extensions wheels use that the CPU lacks
};

// A job that stopped making progress, as `run`'s watchdog read it from /proc
// while it hung: each process's threads (where they wait, their native
// stacks), open files, sockets and file locks.
// A Python frame of a thread (src/pystack read it from the interpreter).
struct PythonFrame {
  std::string function;  // co_name ("<module>" for a script's top level)
  std::string file;      // co_filename as the interpreter holds it
  int line = 0;          // 0: unknown
};

// A file as people read it in a stack: after site-packages/ or
// dist-packages/ ("torch/utils/file_baton.py"), after lib/pythonX.Y/ for the
// standard library ("threading.py"), else as given.
std::string short_python_file(std::string_view file);
// "wait (torch/utils/file_baton.py:42)", as py-spy writes a frame.
std::string python_frame_text(const PythonFrame& f);
// The innermost frame of the user's own code (not the standard library,
// not an installed package, not frozen import machinery); nullptr if none.
const PythonFrame* user_python_frame(const std::vector<PythonFrame>& frames);

struct ThreadSample {
  long tid = 0;
  std::string comm;
  char state = '?';
  std::string wchan;
  std::string syscall;              // "futex", "clock_nanosleep", "running", ...
  std::vector<std::string> stack;   // native frames, innermost first: "futex_wait (libc.so.6)"
  std::vector<PythonFrame> python;  // Python frames, innermost first (a CPython thread)
  u64 python_thread_id = 0;         // its threading.get_ident() (a pthread_t), 0 if none
  std::string python_note;          // why its Python stack is incomplete
};

struct ProcessSample {
  long pid = 0;
  long ppid = 0;        // its parent (0: unknown)
  std::string command;  // argv joined
  // The rank a launcher gave the process (RANK, OMPI_COMM_WORLD_RANK,
  // PMI_RANK or SLURM_PROCID in its environment), and the variable.
  std::optional<u32> rank;
  std::string rank_variable;
  std::vector<ThreadSample> threads;
  std::vector<std::string> open_files;  // paths (regular files, not /dev, /proc)
  std::vector<std::string> sockets;     // "tcp 127.0.0.1:29500 -> 127.0.0.1:41234 ESTABLISHED"
  std::vector<std::string> locks;       // /proc/locks entries held or awaited by this pid
  std::string stacks_error;             // why there are no native stacks
  // Why the process has no stacks at all: "pid N is a zombie: ..." or "pid N
  // is a kernel thread: ..." (pystack::without_stacks); "" otherwise.
  std::string without_stacks;
  bool cpython = false;            // the process runs a CPython interpreter
  std::string python_version;      // "3.11.2"
  std::string python_interpreter;  // the file that defines _PyRuntime
  // Why the Python stacks were not read: for a CPython process (permission,
  // an unsupported release), or why the process is not taken for one.
  std::string python_error;
};

struct HangSample {
  double idle_seconds = 0;
  std::vector<ProcessSample> processes;
};

// Who waits for whom in a hang (detect/hang.cc), for RUN002's message and
// for `run`'s text of a collective wait (DIST019): where each process's
// main thread is, and which processes of a distributed job are not where
// the others wait.
//
// Where a main thread is: its system call (or state) and wait channel, then
// its Python frames when they were read (the innermost, and the user's own
// line that led there), else its innermost native frames.
struct HangPlace {
  std::string text;         // "clock_nanosleep in hrtimer_nanosleep: <module> (rank.py:9)"
  std::string wait;         // "clock_nanosleep in hrtimer_nanosleep"
  std::string syscall;      // "clock_nanosleep", or the state ("R")
  bool collective = false;  // waiting inside torch.distributed
  std::string user_line;    // "rank.py:9 (<module>)": the user's own frame, when known
  std::string call;         // "all_reduce": the library function the user's line called
};
HangPlace main_thread_place(const ProcessSample& p);

// The processes of a distributed job that a hang sample holds, grouped by
// their main threads' places. They are its ranks (the launcher's variables)
// when two or more have one; otherwise the children of one parent that run
// the same program (their outermost user frame) with one of them waiting
// inside torch.distributed: torch.multiprocessing.spawn's workers, whose
// rank no variable tells. The parent (a launcher waiting for them) is never
// one of them. Ranks waiting in a collective while others are not are
// waiting for those: the others are "odd", however many wait; otherwise the
// place most share is the norm and the rest are odd.
struct HangPeers {
  bool by_rank = false;  // named by rank, else by pid
  struct Group {
    std::vector<const ProcessSample*> members;  // by rank, else by pid
    HangPlace place;
  };
  std::vector<Group> groups;      // the odd ones first, then the others, larger first
  size_t odd = 0;                 // groups [0, odd) are odd; 0: none is
  bool collective_split = false;  // the others wait in a collective
  // The collective backend the waiting processes' native frames show:
  // "gloo", "nccl", or "" when none does (no native stacks).
  std::string backend;
  // "rank 1", "ranks 0, 2–3", "pid 5001", "pids 5000, 5002".
  std::string names(const std::vector<const ProcessSample*>& members) const;
  std::vector<const ProcessSample*> odd_members() const;
  std::vector<const ProcessSample*> waiting_members() const;
};
// Empty groups: fewer than two processes of a distributed job.
HangPeers hang_peers(const HangSample& sample);

// What the odd process does, in words: "asleep (clock_nanosleep) at
// rank.py:9", "in load at data.py:41", "in read".
std::string doing_words(const HangPlace& p);

// A collective wait as the hang shows it, when it shows who is not in it:
// "rank 1 is asleep (clock_nanosleep) at rank.py:9 (<module>) while rank 0
// waits in all_reduce at rank.py:11 (<module>)", the fix naming that rank's
// line and pid, and the debug settings of the job's backend (NCCL_DEBUG only
// for NCCL).
struct CollectiveWait {
  std::string message, fix;
  std::vector<std::string> env;
  std::vector<std::string> evidence;  // the odd and the waiting processes' places
};
std::optional<CollectiveWait> collective_wait(const HangSample& sample);

// The settings that show why a collective does not complete, for the
// backend hang_peers found ("" unknown: both).
std::vector<std::string> collective_debug_env(const std::string& backend);

// What `fleet` (the ranks of an MPI job) and `diff` (saved check reports)
// found different between the members of one job. Members are named as the
// reports name them: a holder list is the parts of "node[01-04], node07
// (rank 9)", whole nodes compressed into host lists first.
struct FleetFacts {
  // A fact category that differs ("gpu-driver", "environment"...).
  struct Category {
    std::string name;
    bool node_scope = false;  // facts of the machine (a node's ranks count once), else of a process
    std::string description;  // "NVIDIA driver"
    struct Value {
      std::optional<std::string> value;  // nullopt: the key is absent
      std::vector<std::string> holders;
    };
    struct Key {
      std::string key;                         // "driver"
      std::vector<Value> values;               // most holders first
      std::optional<std::string> in_majority;  // the value of the most-held variant
    };
    std::vector<Key> keys;  // the keys whose values differ, by name
    // The variants (distinct values of the whole category), most held first:
    // the weight of each (its nodes for node facts, its members else), who
    // holds the first, and who holds any other.
    std::vector<size_t> weights;
    std::vector<std::string> majority, minority;
  };
  bool ranks = false;  // the members are ranks (fleet), else reports (diff)
  std::vector<Category> differing;
  // Each node's measured clock offset from the first member's node, in node
  // order (nodes without a measurement left out).
  struct ClockOffset {
    std::string node;
    double seconds = 0;
  };
  std::vector<ClockOffset> clock_offsets;
  std::string clock_reference;  // the first member's node
};

// Everything detection reads. A command fills what it gathered; a detector
// whose facts are absent reports nothing.
struct Facts {
  const hostfacts::Facts* host = nullptr;
  const gpu::GpuFacts* gpu = nullptr;  // GPUs, HCAs, interfaces, PCI topology, NCCL's variables
  std::vector<SimulatedProcess> simulated;
  const FleetFacts* fleet = nullptr;
  std::vector<OpenMpProcess> openmp;
  std::vector<StaticTlsFailure> static_tls;
  std::optional<ThreadPools> threads;
  std::optional<TorchStore> torch_store;  // check: torch is installed and its library was read
  std::vector<ThreadCountCalls> thread_counts;
  std::vector<DeviceProcess> device_bindings;  // run: the processes that used CUDA or NCCL
  std::optional<TraceCoverage> trace_coverage;
  // Extension build caches and the toolchain (`jit`, `check`), or only the
  // locks a hung job may wait on (`run`); jit_error: why they could not be
  // read (jit is then absent).
  const jit::JitReport* jit = nullptr;
  std::optional<std::string> jit_error;
  const HangSample* hang = nullptr;   // a job that stopped making progress
  const DeathFacts* death = nullptr;  // the command died of a signal
};

using Detections = std::vector<Detection>;
using DetectorFn = void (*)(const Facts&, Detections&);

struct Detector {
  const char* rule;  // its rule id, e.g. OMP001
  DetectorFn detect;
};

// Every registered detector, sorted by rule id (the list is generated from
// the file names of src/detect/rules/ at build time).
const std::vector<Detector>& detectors();

// Runs every detector over `facts`, in rule-id order.
Detections run_detectors(const Facts& facts);

// The Findings of `detections` with their rules: from `rules` where it has
// the id, else from the builtin rules. A detection whose id has no rule is a
// bug of this program (std::logic_error).
std::vector<Finding> findings(Detections detections, const rules::RuleSet& rules);

}  // namespace mld::detect

// Defines the detector of rule ID (src/detect/rules/ID.cc):
//   MLD_DETECTOR(OMP001) { ... out.push_back(...); }
// with `facts` and `out` in scope.
#define MLD_DETECTOR(ID)                                                                   \
  void mld_detect_##ID(const ::mld::detect::Facts& facts, ::mld::detect::Detections& out); \
  extern const ::mld::detect::Detector mld_detector_##ID{#ID, &mld_detect_##ID};           \
  void mld_detect_##ID(const ::mld::detect::Facts& facts, ::mld::detect::Detections& out)
