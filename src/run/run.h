// run.h — `mldoctor run`: a real job watched from inside and outside.
//
// Inside, C shims (src/trace: an rtld-audit module, and before glibc 2.35
// an LD_PRELOAD interposer beside it) write each process's events to
// <trace dir>/<pid>.jsonl. This
// module reads them back into one model of the job (trace.cc), turns that
// model into findings (analysis.cc), launches the command so that it behaves
// as without us (launch.cc), and watches it for hangs (watchdog.cc).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "detect/detect.h"
#include "findings/findings.h"
#include "host/host.h"
#include "loader/loader.h"

namespace mld::run {

// ─── trace.cc ───────────────────────────────────────────────────────────────

// How an object came into the process.
enum class LoadKind {
  Startup,  // mapped before main (the program's DT_NEEDED closure, LD_PRELOAD)
  Dlopen,   // the object a dlopen() call named
  Needed,   // a dependency of a dlopen()ed object
};
std::string_view load_kind_name(LoadKind k);

struct LoadedObject {
  std::string path;       // l_name as mapped
  std::string requested;  // the name that was searched for ("" for the program, ld.so)
  std::string requester;  // the object that asked: dlopen caller or the DT_NEEDED owner
  LoadKind kind = LoadKind::Startup;
  long lmid = 0;
  u64 t = 0;            // CLOCK_MONOTONIC ns
  std::string runtime;  // from the audit module: gnu-openmp, kmp-openmp, mkl, openblas, other, ""
  bool closed = false;  // dlclose'd (or removed by a failed dlopen) before exit
  bool removed_by_failure = false;
};

// A dlopen (or a dependency of one) that did not end with a loaded object.
struct FailedLoad {
  std::string name;  // as requested
  std::string requester;
  LoadKind kind = LoadKind::Dlopen;
  std::vector<std::string> candidates;  // paths ld.so tried (not-found case)
  std::vector<std::string> removed;     // objects mapped and then removed again
  std::string message;                  // the program's dlerror() text, if it asked
  u64 t = 0;
  long tid = 0;
};

struct ThreadCall {
  std::string fn;       // "omp_set_num_threads"
  long long value = 0;  // the argument
  std::optional<long long> before, after, result;
  std::string caller;   // the object the call came from
  std::string runtime;  // the object it landed in
  u64 t = 0;
  long tid = 0;
};

// A call that binds the process to a GPU or creates an NCCL communicator
// (src/trace/device-calls.c). An NCCL init is one record from its start
// and its return; `ret` stays empty for one that never returned (it hung,
// or the process died in it).
struct DeviceCall {
  std::string fn;      // "cudaSetDevice", "ncclCommInitRank", ...
  std::string caller;  // the object the call came from
  std::string lib;     // the object it landed in (libcudart.so.12, libnccl.so.2)
  std::optional<long long> ret;
  // cudaSetDevice's argument, cudaGetDevice's answer, cuDevicePrimaryCtxRetain's device
  std::optional<long long> device;
  u64 ctx = 0;  // cuCtxSetCurrent's context, cuDevicePrimaryCtxRetain's answer
  // NCCL: the rank in the communicator, its size, the unique id's digest
  // (ranks with the same join one communicator), the communicator made.
  std::optional<long long> nccl_rank, nranks;
  std::string comm_id;
  u64 comm = 0, parent = 0;              // ncclCommSplit: parent
  std::optional<long long> color, key;   // ncclCommSplit
  std::vector<long long> devices;        // ncclCommInitAll's list
  std::optional<long long> cuda_device;  // NCCL init: current on the thread
  std::string cuda_device_unknown;       // why it is not known
  // The rank's environment when it made the call (null: unset).
  std::optional<std::string> cuda_visible_devices, local_rank, rank, world_size;
  u64 t = 0;
  long tid = 0;
};

struct EnvChange {
  std::string op;  // setenv, setenv-if-unset, putenv, unsetenv
  std::string name;
  std::optional<std::string> value;
  std::string caller;
  u64 t = 0;
};

struct ForkEvent {
  long child = 0;
  long threads = 0;                 // threads of the parent when it forked
  std::vector<std::string> openmp;  // OpenMP runtimes loaded in the parent
  std::string caller;
  u64 t = 0;
};

struct DlError {
  std::string message;
  std::string caller;
  u64 t = 0;
  long tid = 0;
};

struct RuntimeState {  // at exit
  std::string path;
  std::string kind;  // gnu-openmp, llvm-openmp, intel-openmp, mkl, openblas
  std::optional<long long> threads;
  std::string config;  // openblas_get_config()
};

// An exec call a traced process made (libc-calls.c records it before the
// call). For each of the shims and the trace directory: 1 named in the
// environment passed on and reachable from the process's root, 0 named but
// not reachable, -1 not named; env_known false: the environment was not
// known (the calls were recorded before the program's main).
struct ExecCall {
  std::string call;    // execve, execv, execvp, execvpe
  std::string path;    // as given (execvp: searched on PATH)
  std::string caller;  // empty: the shims name none (an exec may run in a vfork child)
  bool env_known = false;
  int audit = -1, preload = -1, trace_dir = -1;
  int root_changed = -1;  // the process's root is no longer the one it started with
  u64 t = 0;
};

// A chroot() a traced process made (recorded before the call): where the
// new root lacks the trace directory it is the last event the process
// leaves, and nothing after it was seen.
struct RootChange {
  std::string path;  // as given
  std::string cwd;   // the directory it was called in (for a relative path)
  std::string caller;
  u64 t = 0;
};

// One program image a process ran (a process that execs has several).
struct Image {
  std::string exe;
  std::vector<std::string> argv;
  long ppid = 0;
  std::string glibc;
  u64 t = 0;
};

struct TracedProcess {
  long pid = 0;
  std::optional<long> forked_from;  // a fork() child of a traced process
  std::vector<Image> images;
  std::vector<LoadedObject> objects;  // in load order, all images
  std::vector<FailedLoad> failed;
  std::vector<DlError> dlerrors;
  std::vector<ThreadCall> thread_calls;
  std::vector<DeviceCall> device_calls;  // in time order; see DeviceCall
  std::vector<EnvChange> env_changes;
  std::vector<ForkEvent> forks;
  std::vector<RuntimeState> runtimes;
  bool exited = false;  // reached exit() (atexit ran)
  // The last exec that did not fail and after which no traced image
  // started: the program the process became is one the shims did not load
  // in (or that ended before ld.so ran them).
  std::optional<ExecCall> untraced_exec;
  // A chroot() that did not fail and was the process's last event.
  std::optional<RootChange> unseen_after_chroot;
  u64 first_t = 0, last_t = 0;
  u64 bad_lines = 0;  // lines that were not events (a crash mid-write)
};

struct Trace {
  std::map<long, TracedProcess> processes;
  std::vector<std::string> errors;  // unreadable files
};

// Parses one process's event lines (tolerant: a cut last line, invalid
// UTF-8 and unknown events are skipped and counted).
TracedProcess parse_process_events(std::string_view jsonl, long pid);
// Reads every <pid>.jsonl of a trace directory.
Trace read_trace(const std::string& dir);

// ─── analysis.cc ────────────────────────────────────────────────────────────

struct ExitStatus {
  bool known = true;  // false: the status could not be collected
  bool signaled = false;
  int code = 0;  // exit code, or the signal number
  bool core_dumped = false;
};

struct AnalysisContext {
  const host::Host* host = nullptr;             // the machine, with the user's environment
  long child_pid = 0;                           // the command mldoctor started
  std::optional<ExitStatus> status;             // how it ended
  std::vector<std::string> not_traced_reasons;  // from the launch
  std::string shims_glibc_needed;               // shims_glibc_needed(), "" unknown
  std::string shim_dir, trace_dir;              // where the shims and the events were
  // The rules findings take their severity and text from (--rules-dir);
  // null: the builtin rules.
  const rules::RuleSet* rules = nullptr;
  // The command died of a signal: what the machine recorded (gather_death).
  const detect::DeathFacts* death = nullptr;
  // The static TLS reserve the job's processes were started with (tls-room.cc).
  u64 tls_reserved = 0;
};

// Why the shims cannot load in `program` (a path, or a name looked up on
// PATH), if that can be told from the file: setuid/setgid (ld.so's secure
// mode ignores LD_AUDIT/LD_PRELOAD paths), static or static-pie (no ld.so).
std::vector<std::string> untraceable_reasons(const host::Host& host, const std::string& program);

// The newest GLIBC_ symbol version the shims in `shim_dir` need ("GLIBC_2.34"):
// an older glibc's ld.so refuses them. "" when unreadable.
std::string shims_glibc_needed(const host::Host& host, const std::string& shim_dir);

// Findings of a finished (or hung) job, from the facts of its trace through
// the detectors: a thread count changed by another library (THR003) first,
// then several OpenMP runtimes (OMP001), static TLS failures with the
// tunable (TLS001), and last a command that could not be observed (RUN001).
void analyse(const Trace& trace, const AnalysisContext& ctx, FindingSink& sink);

// Which OpenMP runtime an object is: by the entry points the audit module
// saw it define (so renamed copies count), else by its name.
loader::OpenMpKind openmp_runtime_kind(const LoadedObject& o);

// The newest OpenMP interface version an OpenMP runtime defines ("OMP_5.1",
// from its ELF version definitions); "" when none or unreadable.
std::string openmp_interface(const host::Host* host, const std::string& path);

// argv as one printable line: arguments joined by spaces, control
// characters (a `python -c` script's newlines) shown as spaces, cut to
// `max_bytes` with "...".
std::string command_line(const std::vector<std::string>& argv, size_t max_bytes);

// "libgomp.so.1 needed by libtorch_cpu.so.1.13 <- dlopen by python3.11":
// how an object came in, following requesters to the dlopen or startup.
std::string load_chain(const TracedProcess& p, const std::string& path);

// ─── watchdog.cc ────────────────────────────────────────────────────────────

// What one look at a process tree found, for the hang report (the facts
// the hang's detector reads).
using detect::HangSample;
using detect::ProcessSample;
using detect::ThreadSample;

// ─── stacks.cc ──────────────────────────────────────────────────────────────

// Native stacks of every thread of `pid` (libdw; threads stop while they
// are unwound). Empty with *error set when they cannot be taken.
std::map<long, std::vector<std::string>> native_stacks(long pid, std::string* error);
// Whether this build has libdw (else native_stacks always says why not).
bool native_stacks_available();

// The pids of `root` and its descendants (via /proc/<pid>/task/*/children,
// else the ppid of every process).
std::vector<long> process_tree(const host::Host& host, long root);
// What a sample reads besides /proc: native stacks (libdw; each thread
// stops while it is unwound) and Python stacks (read from outside, nothing
// stops). Both only on the live machine.
struct SampleOptions {
  bool native_stacks = true;
  bool python_stacks = true;
};
HangSample sample_processes(const host::Host& host, const std::vector<long>& pids,
                            double idle_seconds, const SampleOptions& options = {});

// A process's command line as one printable line (/proc/<pid>/cmdline);
// "" when it cannot be read.
std::string process_command(const host::Host& host, long pid);
// The processes, other than `except`, with a descriptor open on one of
// `targets` (as /proc/<pid>/fd links read: "pipe:[1234]", "/dev/pts/5"),
// in pid order; processes whose descriptors cannot be read are not seen.
std::vector<long> processes_holding(const host::Host& host, const std::vector<std::string>& targets,
                                    long except);

// Progress of a process tree: CPU time, bytes written, trace events.
struct Progress {
  u64 cpu_ticks = 0;
  u64 bytes_written = 0;
  u64 trace_bytes = 0;
};
Progress measure_progress(const host::Host& host, const std::vector<long>& pids,
                          const std::string& trace_dir);

// Findings for a hang: the sample and the extension build locks it may wait
// on (read only when a thread waits in torch's FileBaton, or no Python stack
// says where the threads are), as facts for the detectors: RUN002 with the
// sample as evidence and the likely cause (a JIT lock no process holds, a
// lock held by another process, a rendezvous), the locks' own findings after
// it, and RUN007 for a deadlock between the GIL and the loader's lock.
// `rules` as AnalysisContext::rules.
void analyse_hang(const HangSample& sample, const host::Host& host, const std::string& cwd,
                  const rules::RuleSet* rules, FindingSink& sink);

// ─── death.cc ───────────────────────────────────────────────────────────────

// What is read before the job starts, to compare with after it died.
struct DeathBaseline {
  std::string cgroup_path;  // the memory cgroup ("/process_api/abc"), "" when none
  std::string cgroup_dir;   // its directory under /sys/fs/cgroup
  std::optional<u64> oom_kills;
  u64 started_usec = 0;  // CLOCK_MONOTONIC, for the kernel log's timestamps
};
DeathBaseline death_baseline(const host::Host& host);

// The kernel log's messages since `since_usec` that name one of `pids`
// (/dev/kmsg; empty with *note set when it cannot be read).
std::vector<std::string> kernel_log_since(const host::Host& host, u64 since_usec,
                                          const std::vector<long>& pids, std::string* note);

// The facts of a command that died of a signal (`status.signaled`): its
// memory cgroup's OOM kills since `baseline`, the kernel log about the job's
// processes, /dev/shm, the CPU's instruction-set extensions.
detect::DeathFacts gather_death(const host::Host& host, const DeathBaseline& baseline,
                                const ExitStatus& status, long pid, std::vector<long> job_pids,
                                std::optional<u64> peak_rss_bytes);

// ─── tls-room.cc ────────────────────────────────────────────────────────────

// What the shims change in the static TLS room of a process (seed 001's
// resource), measured by tls-probe in the job's environment with and without
// them, and the reserve that takes an excess back.
struct TlsRoomChange {
  std::optional<i64> bytes;         // room with the shims minus room without, for `program`
  std::optional<i64> probe_bytes;   // the same, measured with the probe (libc's TLS only)
  std::string program;              // the program the change was computed for ("": the probe's)
  std::optional<i64> room_without;  // the probe's area minus what it used, TCB included
  u64 reserved = 0;                 // preloaded reserve, a multiple of 16
  std::vector<std::string> reserve_objects;
  std::string note;  // why it was not measured, or why the reserve falls short
};
// `program`'s start-up, then `roots` dlopen()ed in order, through the loader
// model under `glibc`: plainly, and as under `run` (one more audit module and
// `reserve` bytes of preloaded static TLS). Throws when the program cannot be
// modelled (unreadable, an architecture whose static TLS is not modelled).
struct ShimComparison {
  loader::DlopenSequence plain, under_run;
};
ShimComparison model_with_and_without_shims(const host::Host& host, const std::string& program,
                                            loader::GlibcVersion glibc,
                                            const std::vector<std::string>& roots, u64 reserve);

// `program`: the command's argv[0]. `trace_dir` gets a subdirectory for the
// probe's own events, removed after.
TlsRoomChange measure_tls_room_change(const host::Host& host, const std::string& program,
                                      const std::string& shim_dir, const std::string& trace_dir,
                                      const std::vector<std::string>& plain_env,
                                      const std::vector<std::string>& shim_env);

// ─── launch.cc ──────────────────────────────────────────────────────────────

struct LaunchOptions {
  std::vector<std::string> argv;
  std::string trace_dir;    // must exist, private
  std::string shim_dir;     // holds libmldoctor-audit.so, libmldoctor-preload.so
  double hang_timeout = 0;  // 0: no watchdog
  bool kill_on_hang = false;
  std::function<void(const HangSample&)> on_hang;  // called while the job still runs
  // --logs: the child's stdout (1) and stderr (2) pass through mldoctor,
  // which copies every byte to where they went and hands it to on_output.
  // A terminal stays a terminal for the child (a pseudo-terminal with the
  // real one's modes and size); a file or pipe becomes a pipe. Copying ends
  // at end of file, or a grace period after the child exited: a process the
  // job left running that still holds a stream (a daemon) is named in the
  // result, and a copier that outlives mldoctor passes its later bytes on,
  // unscanned, so that mldoctor returns when the job does.
  bool capture_output = false;
  std::function<void(int stream, ByteView data)> on_output;
};

struct LaunchResult {
  ExitStatus status;
  bool started = false;  // exec succeeded
  long pid = 0;          // the child
  std::string error;     // why it did not start
  double seconds = 0;    // from the start to the child's exit
  // The largest resident set of the job's processes (getrusage of the
  // children mldoctor waited for, and theirs), when known.
  std::optional<u64> peak_rss_bytes;
  std::vector<HangSample> hangs;
  bool killed_on_hang = false;
  // --logs: the output was still open `output_grace` seconds after the
  // child exited; the processes that held it (pid, command line), when they
  // could be seen.
  bool output_left_open = false;
  double output_grace = 0;
  struct OutputHolder {
    long pid = 0;
    std::string command;
  };
  std::vector<OutputHolder> output_holders;
  std::vector<std::string> not_traced_reasons;  // static binary, setuid, ...
  TlsRoomChange tls_room;                       // measured before the start
};

// Where the shims are: $MLDOCTOR_SHIM_DIR, else next to the binary (a build
// tree), else <prefix>/lib/mldoctor relative to it (an install, relocatable).
std::optional<std::string> find_shim_dir(const host::Host& host);

// trace-dir.cc: the events' directory: `wanted` (--trace-dir, created 0700;
// must be a private, event-free directory of this user) or, when empty, a
// fresh one under $TMPDIR (`temporary`). false with `error` when unusable.
bool prepare_trace_dir(const std::string& wanted, std::string& dir, bool& temporary,
                       std::string& error);
// Removes the event files of a temporary directory, then the directory.
void remove_trace_dir(const std::string& dir);

// Runs argv with the shims, forwarding signals sent to mldoctor, and returns
// when the child has exited. The child inherits stdin/stdout/stderr, the
// process group and the terminal untouched.
LaunchResult launch(const host::Host& host, const LaunchOptions& options);

// Ends this process the way the child ended: the same exit code, or the same
// signal raised again (with core dumps off, so no core of ours replaces it).
[[noreturn]] void exit_like(const ExitStatus& status);

}  // namespace mld::run
