// jit.h — extension build caches (`mldoctor jit`): torch.utils.cpp_extension
// builds under $TORCH_EXTENSIONS_DIR or ~/.cache/torch_extensions/py*_*/,
// Megatron/GPT-NeoX `megatron/fused_kernels/build`, and any --path, with the
// toolchain the next build would use.
//
// The failure this exists for (seed 002): cpp_extension's FileBaton creates
// `<build dir>/lock` with O_CREAT|O_EXCL, builds, removes it; every other
// process polls `os.path.exists(lock)` forever, silently. A builder killed
// mid-build leaves the file and every later load() hangs. The builder keeps
// the lock's descriptor open while it builds, so on a local filesystem "some
// process has it open" (a scan of /proc/*/fd) separates a build in progress
// from a stale lock; on NFS/Lustre the builder may be on another node.
//
// The scan gathers facts only (the locks with their holders and filesystem,
// each module's missing symbols, the toolchain, TORCH_CUDA_ARCH_LIST and
// the GPUs); the JIT rules' detectors (src/detect/rules/JIT00*.cc) decide
// from them. fix() is the only code that changes anything, through
// host::Host::remove_file.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "host/host.h"
#include "pyenv/pyenv.h"

namespace mld::jit {

struct LockHolder {
  u32 pid = 0;
  std::string command;  // /proc/<pid>/comm
};

struct LockState {
  std::string path;       // as found: <build dir>/lock, links and all
  std::string real_path;  // the entry torch's os.path.exists(lock) tests, links resolved
  bool symlink = false;   // the lock entry is itself a symbolic link
  host::FileId id;        // the entry's identity and owner when scanned (lstat)
  u32 uid = 0;
  std::optional<i64> age_seconds;
  std::vector<LockHolder> holders;
  // Every live process's descriptors could be read (false when running
  // unprivileged beside other users' processes): only then is "no holder"
  // a fact.
  bool holders_complete = true;
  std::string filesystem;  // fstype of the mount holding it, "" if unknown
  bool network_filesystem = false;
  // The torch that uses this build directory takes an OS advisory lock
  // (flock) on the file instead of FileBaton's O_EXCL create: since
  // pytorch#190543 (Debian's 2.14) the file stays after every build, its
  // presence blocks nothing, and the kernel frees the lock when its holder
  // dies, so it is never stale.
  bool advisory = false;
};

// What a lock means, from the facts above: a live process has it open (a
// build in progress); an advisory lock no process holds (normal: blocks
// nothing); no local process has a FileBaton lock but it is on a network
// filesystem (a builder on another node may); or no process does (stale).
enum class LockStatus { Held, Unlocked, Network, Stale };
LockStatus lock_status(const LockState& lock);

struct Extension {
  std::string name;
  std::string path;       // the build directory
  std::string real_path;  // the same, every symbolic link on the way resolved
  // The links followed from "/" to the build directory (a linked build
  // directory, tag level or root, or any directory above): torch follows
  // them all, and so does the scan; empty when path is real_path.
  std::vector<host::SymlinkStep> links;
  std::string root;                // the build root it was found under
  std::string root_kind;           // "TORCH_EXTENSIONS_DIR", "torch_extensions cache", ...
  std::optional<std::string> tag;  // "py311_cpu" for the tagged cache layout
  std::optional<LockState> lock;
  std::optional<std::string> module;  // the built <name>.so, if any
  bool has_build_ninja = false;
  // The build this environment would load (untagged roots, or the tag of
  // this Python and torch), and what its module lacks there.
  bool for_this_environment = false;
  std::vector<std::string> missing_symbols;    // undefined, non-weak, defined nowhere
  std::vector<std::string> missing_libraries;  // DT_NEEDED not found
};

struct Toolchain {
  std::optional<std::string> ninja;         // on PATH
  std::optional<std::string> cuda_home;     // as torch finds it
  std::string cuda_home_source;             // "CUDA_HOME", "nvcc on PATH", "/usr/local/cuda"
  std::optional<std::string> nvcc;          // <cuda_home>/bin/nvcc
  std::optional<std::string> cuda_version;  // "13.0", from the toolkit's cuda.h
  std::optional<int> nvcc_max_gcc;          // crt/host_config.h: "gcc versions later than N"
  std::optional<std::string> gcc;           // gcc on PATH, resolved
  std::optional<int> gcc_major;
};

// A module that torch/utils/cpp_extension.py imports when it loads (at
// module level, not indented: no try/except, not under TYPE_CHECKING) and
// that no entry of the interpreter's sys.path holds: `import
// torch.utils.cpp_extension` raises ModuleNotFoundError, so load(),
// load_inline(), BuildExtension and torch.compile's C++ code on CPU
// (inductor's cpp_builder imports it) fail before anything is built. Only
// the third-party modules torch releases import there are looked for:
// setuptools (Python 3.12+ venvs and uv's venvs no longer seed it; torch's
// wheels require it only on 3.12+; Debian 11's, 12's and 13's python3-torch do
// not depend on it), pkg_resources (torch 1.13's `from pkg_resources
// import packaging`; setuptools 82 no longer ships it), packaging,
// typing_extensions, filelock.
struct MissingImport {
  std::string module;     // top-level name: "setuptools"
  std::string statement;  // the line as written: "import setuptools"
  std::string file;       // torch/utils/cpp_extension.py
  size_t line = 0;        // 1-based
  size_t searched = 0;    // sys.path entries looked in
};

// How packages get into the examined environment, for the fix of a missing
// module: Debian's system Python (torch under /usr/lib/python3/dist-packages,
// apt-get), else the interpreter's pip, else neither (a uv venv seeds no pip).
struct PackageInstaller {
  bool debian_system = false;  // torch is Debian's python3-torch
  bool pip = false;            // pip is importable by the interpreter
  std::string python;          // the interpreter, for `<python> -m pip`
};

struct JitOptions {
  std::vector<std::string> paths;         // --path
  std::string cwd;                        // for megatron/fused_kernels/build
  std::optional<std::string> python_tag;  // "py311" of the examined interpreter
  bool torch_installed = false;
  std::optional<std::string> torch_cuda;  // torch.version.cuda; nullopt: CPU build
  // The installed torch's _jit_compile locks with filelock's FileLock, an OS
  // advisory lock (read from torch/utils/cpp_extension.py), not FileBaton.
  bool torch_advisory_lock = false;
  // For the stale-build check: the interpreter (loaded as the program) and
  // the modules the job has imported before loading an extension (torch._C).
  std::optional<std::string> program;
  std::vector<std::string> preload;
  // The GPUs' model names (/proc/driver/nvidia), for TORCH_CUDA_ARCH_LIST.
  std::vector<std::string> gpu_models;
  // What importing torch.utils.cpp_extension needs and the environment lacks.
  std::vector<MissingImport> cpp_extension_missing;
  PackageInstaller installer;
};

// Compute capability ("9.0") of an NVIDIA GPU from its model name, for the
// data-center and workstation generations since Pascal; nullopt when unknown.
std::optional<std::string> compute_capability(std::string_view model);

// The architectures TORCH_CUDA_ARCH_LIST asks for, as torch's
// _get_cuda_arch_flags reads it: ';' or ' ' separated "8.0", "8.6+PTX",
// "9.0a", or named ones ("Ampere" = 8.0;8.6+PTX). nullopt when an entry is
// neither (torch raises "Unknown CUDA arch").
struct CudaArch {
  int major = 0, minor = 0;
  bool ptx = false;
};
std::optional<std::vector<CudaArch>> parse_cuda_arch_list(std::string_view text);

// Whether code built for `arch` runs on a GPU of compute capability
// major.minor: a cubin on the same major with an equal or lower minor, PTX
// (compiled by the driver) on any later GPU.
bool arch_runs_on(const CudaArch& arch, int major, int minor);

// A GPU of this machine and the compute capability of its model.
struct GpuArch {
  std::string model;                              // from /proc/driver/nvidia/gpus
  std::optional<std::string> compute_capability;  // nullopt: a model not known here
};

struct BuildRoot {
  std::string path;
  std::string kind;
  std::string real_path;  // path with its links resolved
};

// A build directory, tag level or root that is a symbolic link leading
// nowhere: its target (or a directory on the way) missing, or a loop. torch
// does not wait on it: its os.makedirs fails at once (FileExistsError on a
// linked build directory; FileNotFoundError, or ELOOP for a loop, under a
// linked root or tag level). The scan reports it and goes no further.
struct BrokenLink {
  std::string path;                      // the link, as the layout names it
  std::string what;                      // "build directory", "tag directory", "root"
  std::string name;                      // the extension (build directory) or the tag
  std::string root_kind;                 // "TORCH_EXTENSIONS_DIR", "torch_extensions cache", ...
  bool loop = false;                     // a loop; else `missing` does not exist
  std::string target;                    // not a loop: where the last link leads, absolute
  std::string missing;                   // the first directory of `target` that does not exist
  std::vector<host::SymlinkStep> links;  // the links followed, in order
};

// What scan() found: plain facts, no judgement.
struct JitReport {
  std::vector<BuildRoot> roots;  // the roots that exist
  std::vector<Extension> extensions;
  std::vector<BrokenLink> broken_links;
  Toolchain toolchain;
  u32 processes_scanned = 0;
  // The torch the next build is for (from JitOptions): absent, nothing is
  // known of it and the toolchain is not compared with it.
  bool torch_installed = false;
  std::optional<std::string> torch_cuda;  // torch.version.cuda; nullopt: CPU build
  // The installed torch's _jit_compile locks with filelock's FileLock, an OS
  // advisory lock (read from torch/utils/cpp_extension.py), not FileBaton.
  bool torch_advisory_lock = false;
  // TORCH_CUDA_ARCH_LIST as set (nullopt: unset), the architectures torch
  // reads from it (nullopt: malformed, ENV008's case), and the GPUs.
  std::optional<std::string> cuda_arch_list;
  std::optional<std::vector<CudaArch>> cuda_archs;
  std::vector<GpuArch> gpus;
  // From JitOptions: what `import torch.utils.cpp_extension` lacks here.
  std::vector<MissingImport> cpp_extension_missing;
  PackageInstaller installer;
};

// Where the lock at `path` is among report.extensions (the order the scan
// found the build directories in); nullopt when no extension has it. The
// reports list lock findings in this order.
std::optional<size_t> lock_index(const JitReport& report, std::string_view path);

// Fills the options that come from the Python environment: its tag, its
// torch and CUDA build, the interpreter and torch._C to load first.
void describe_environment(JitOptions& options, const host::Host& host,
                          const pyenv::Environment& env);

// Finds the build roots and extensions, their locks and holders, and the
// toolchain, TORCH_CUDA_ARCH_LIST and the GPUs. Reads only.
JitReport scan(const host::Host& host, const JitOptions& options);

// The build roots and extensions with their locks and holders only (what a
// hung job may wait on): no toolchain, no module checks, nothing of torch.
JitReport scan_locks(const host::Host& host, const JitOptions& options);

struct FixAction {
  std::string action;  // "remove" or "keep"
  std::string path;    // as the scan found it
  // What was (or would be) removed: `path` with its links resolved, the
  // only path handed to host::Host::remove_file. Empty for "keep".
  std::string real_path;
  bool done = false;
  std::string reason;
};

// Removes each stale lock (LockStatus::Stale) after checking once more that
// no process holds it; keeps held locks, locks on network filesystems and
// locks whose holders could not all be checked, saying why. A lock reached
// through symbolic links is removed at its real path, and only when that is
// the entry torch waits on and everything on the way belongs to the build
// directory's owner (see lock_removal_check in jit.cc); the links stay.
// Removes the outputs of each stale build (a module with missing symbols or
// libraries: its .so, .o, .ninja_deps, .ninja_log; never a directory, never
// through a symlink) unless a build holds its lock.
// `dry_run`: decide only.
std::vector<FixAction> fix(const host::Host& host, const JitReport& report, bool dry_run);

}  // namespace mld::jit
