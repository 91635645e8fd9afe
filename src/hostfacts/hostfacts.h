// hostfacts.h — the facts `mldoctor check` needs about the machine and the
// environment before a training job starts: how many CPUs a process may really
// use (online CPUs, affinity mask, cgroup v1/v2 CPU quota), NUMA layout,
// memory, /dev/shm, resource limits, kernel, container markers, the launcher's
// ranks per node, and the environment variables that steer the native layer
// (OpenMP, MKL, OpenBLAS, numba, torch, CUDA, the dynamic loader, glibc, NCCL).
//
// Everything is read through host::Host, so `--root DIR` analyses a fixture
// tree exactly as the live machine. A fact that cannot be read is "unknown"
// (an empty optional), never an error. These are facts only: the rules that
// judge them (ENV001–ENV015, HOST001–HOST003) are detectors of src/detect
// reading what is exposed here, so whatever they need from the machine (an
// LD_LIBRARY_PATH directory that is missing) is looked up here; the thread
// budget (THR001) is computed from the numbers exposed here too.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "host/host.h"

namespace mld::hostfacts {

// A resource limit or size with no bound.
inline constexpr u64 kUnlimited = ~u64{0};

// cpu-facts.cc ///////////////////////////////////////////////////////////////

// Parses the kernel's CPU list format ("0-3,8,10-11", also "0-7:2" strides as
// in cpuset); sorted, duplicates removed. nullopt when malformed. An empty or
// all-blank string is an empty list.
std::optional<std::vector<u32>> parse_cpu_list(std::string_view text);
// The inverse: "0-3,8,10-11".
std::string format_cpu_list(const std::vector<u32>& cpus);

// A CFS bandwidth limit: the process may use quota_us of CPU time every
// period_us, i.e. quota_us / period_us CPUs.
struct CpuQuota {
  int cgroup_version = 0;  // 1 or 2
  i64 quota_us = 0;
  i64 period_us = 0;
  std::string file;  // the file that set it, as a path inside the root
  double cpus() const { return period_us > 0 ? double(quota_us) / double(period_us) : 0.0; }
  u32 ceil_cpus() const;  // at least 1
};

struct CpuFacts {
  std::optional<std::vector<u32>> online;    // /sys/devices/system/cpu/online
  std::optional<std::vector<u32>> possible;  // /sys/devices/system/cpu/possible
  // Cpus_allowed_list of /proc/self/status within the online CPUs: what
  // sched_getaffinity(2) returns (the kernel drops inactive CPUs).
  std::optional<std::vector<u32>> affinity;
  std::string affinity_source;    // the file it came from
  int cgroup_version = 0;         // of the cpu controller: 1, 2, or 0 when unknown
  std::string cgroup_path;        // the process's cgroup in that hierarchy ("/docker/abc")
  std::string cgroup_dir;         // the directory it maps to ("/sys/fs/cgroup/docker/abc")
  bool quota_readable = false;    // some quota file was read: "no quota" is then a fact
  std::optional<CpuQuota> quota;  // the tightest quota from the leaf up, nullopt = none/unknown
  // min(affinity count, ceil(quota)); the affinity count falls back to the
  // online count. nullopt when neither is known.
  std::optional<u32> usable;
  std::string usable_basis;  // "affinity", "online CPUs", "cgroup v2 quota", ...
};

CpuFacts collect_cpu_facts(const host::Host& host);

struct NumaNode {
  u32 id = 0;
  std::optional<std::vector<u32>> cpus;  // node<N>/cpulist
  std::optional<u64> mem_total_bytes;    // node<N>/meminfo
  std::optional<u64> mem_free_bytes;
};

// /sys/devices/system/node/node*; empty when the directory is missing.
std::vector<NumaNode> collect_numa_nodes(const host::Host& host);

// cpuinfo-count.cc ///////////////////////////////////////////////////////////

// What PyTorch's cpuinfo library (pytorch/cpuinfo, linked into torch >= 2.0)
// reports on the analysed machine, computed as its Linux code computes it
// from /sys/devices/system/cpu, /proc/cpuinfo and CPUID.
struct CpuinfoCounts {
  // Non-empty: the counts cannot be known here (no CPUID data for an x86
  // machine, an architecture the model does not cover); nothing else is set.
  std::string unknown;
  // cpuinfo_initialize()'s result; false also when unknown. When it fails,
  // torch falls back to std::thread::hardware_concurrency().
  bool initialised = false;
  std::optional<u32> processors;  // cpuinfo_get_processors_count()
  std::optional<u32> cores;       // cpuinfo_get_cores_count()
  // ARM64 only: cpuinfo before commit 20bd32c (torch <= 2.4, Debian 12's
  // libcpuinfo0) counts present and possible processors whether or not
  // /proc/cpuinfo lists them (offline ones too); later ones only listed ones
  // (`processors` and `cores`).
  std::optional<u32> arm_unlisted_processors;
  std::vector<std::string> steps;  // how the counts were reached, for the report
};

// "x86_64" or "aarch64" for the analysed machine (the build's architecture
// live; under a root what its /proc/cpuinfo describes), "" when unknown.
std::string analysed_architecture(const host::Host& host);

// Everything cpuinfo reads on Linux, as text (nullopt: unreadable), so the
// model is a pure function of it (and fuzzable).
struct CpuinfoInputs {
  std::string arch;                         // analysed_architecture()
  std::optional<host::CpuidDump> cpuid;     // x86: the leaves of the CPU cpuinfo runs on
  std::string cpuid_missing;                // why there is none
  std::optional<std::string> kernel_max;    // /sys/devices/system/cpu/kernel_max
  std::optional<std::string> possible;      // .../possible
  std::optional<std::string> present;       // .../present
  std::optional<std::string> proc_cpuinfo;  // /proc/cpuinfo
};
CpuinfoInputs read_cpuinfo_inputs(const host::Host& host, const std::string& arch);
CpuinfoCounts count_cpuinfo(const CpuinfoInputs& inputs);
CpuinfoCounts count_cpuinfo(const host::Host& host, const std::string& arch);

// openmp-topology.cc /////////////////////////////////////////////////////////

// The hardware an OpenMP runtime numbers when it builds its places, for the
// CPUs of this process's affinity mask. GNU libgomp reads the kernel's
// topology files; LLVM's libomp (and Intel's libiomp5, its sibling) decodes
// the APIC IDs CPUID gives on each CPU, and so can see other cores than the
// kernel (a CPU without CPUID leaf 0xB: one core per package).
struct LlvmOmpCpu {
  u32 cpu = 0;
  u64 package = 0, core = 0, thread = 0;  // core is unique within its package
};
struct LlvmOmpTopology {
  // Non-empty: not modelled here, and why (nothing else is then set).
  std::string unknown;
  // How the runtime numbered the CPUs: "x2APIC IDs (CPUID leaf 0xB)",
  // "x2APIC IDs (CPUID leaf 0x1F)", "legacy APIC IDs (CPUID leaves 1 and
  // 4)", "/proc/cpuinfo", "sysfs (physical_package_id, core_id)", "flat".
  std::string method;
  bool legacy_apic = false;  // method is the legacy APIC IDs
  // Why each method tried before it failed, in order ("CPUID leaf 0xB not
  // supported: sub-leaf 0 reports no logical processors (EBX=0)").
  std::vector<std::string> skipped;
  std::vector<LlvmOmpCpu> cpus;  // by CPU number
  u32 packages = 0, cores = 0;   // distinct among `cpus`
  // Where the per-CPU IDs came from: every CPU's own CPUID answers, or one
  // CPU's with the others' APIC IDs from /proc/cpuinfo (a tree recorded
  // without per-CPU leaves).
  std::string ids_from;
  std::vector<std::string> steps;  // the arithmetic, for the report
};
struct GompTopology {
  std::string unknown;
  // Per CPU of the mask: the CPUs of its core and of its package, as
  // libgomp reads them (topology/core_cpus_list, else thread_siblings_list;
  // package_cpus_list, else core_siblings_list).
  std::map<u32, std::vector<u32>> core_cpus, package_cpus;
};
struct OpenMpTopology {
  std::vector<u32> mask;  // the affinity mask both describe (empty: unknown)
  LlvmOmpTopology llvm;
  GompTopology gomp;
};

// Everything the topology models read, as data (pure function below).
struct OpenMpTopologyInputs {
  std::string arch;                          // analysed_architecture()
  std::vector<u32> mask;                     // the affinity mask, else the online CPUs
  std::map<u32, host::CpuidDump> cpuid;      // x86: the topology leaves of each CPU, where known
  std::optional<host::CpuidDump> any_cpuid;  // x86: one CPU's full dump (Host::cpuid)
  std::string cpuid_missing;                 // why there is none
  std::optional<std::string> proc_cpuinfo;   // /proc/cpuinfo
  struct SysfsCpu {                          // /sys/devices/system/cpu/cpuN/topology/...
    std::optional<std::string> core_cpus, thread_siblings, package_cpus, core_siblings,
        physical_package_id, core_id;
  };
  std::map<u32, SysfsCpu> sysfs;
};
OpenMpTopologyInputs read_openmp_topology_inputs(const host::Host& host, const std::string& arch,
                                                 const std::vector<u32>& mask);
OpenMpTopology model_openmp_topology(const OpenMpTopologyInputs& inputs);

// openmp-places.cc ///////////////////////////////////////////////////////////

// The places an OpenMP runtime would bind the threads of this process to,
// from the binding variables and the topology it sees.
struct EnvFacts;
enum class OmpRuntime { Gnu, Llvm };
std::string_view omp_runtime_name(OmpRuntime r);  // "GNU libgomp", "LLVM libomp"
struct OmpPlaces {
  bool binds = false;      // threads are bound at all
  std::string decided_by;  // the setting that decides: "OMP_PROC_BIND=spread"
  std::string kind;        // "threads", "cores", "sockets", "numa_domains", "explicit"
  // The places within the mask, in order; nullopt: not modelled (`unknown`
  // says why), the threads are bound somewhere.
  std::optional<std::vector<std::vector<u32>>> places;
  std::string unknown;
  // libgomp's GOMP_CPU_AFFINITY: absolute CPUs, whatever the mask.
  bool absolute = false;
  std::vector<std::string> notes;  // settings the runtime ignores, and why
  // Some thread is bound to less than the whole mask (or, unmodelled, may be).
  bool pins(const std::vector<u32>& mask) const;
};
OmpPlaces omp_places(OmpRuntime runtime, const EnvFacts& env, const OpenMpTopology& topology,
                     const std::vector<NumaNode>& numa_nodes);
// OMP_PROC_BIND as both runtimes read it: true (binding on: "true" or a
// list of primary/master/close/spread), false ("false"), nullopt (a value
// both ignore).
std::optional<bool> omp_proc_bind_on(std::string_view value);
// "{0},{1}", "{0-47},{48-95}", up to `max` places then "… (N places)".
std::string format_places(const std::vector<std::vector<u32>>& places, size_t max = 6);

// host-facts.cc //////////////////////////////////////////////////////////////

struct MemoryFacts {
  std::optional<u64> total_bytes;      // MemTotal of /proc/meminfo
  std::optional<u64> available_bytes;  // MemAvailable
};

struct ShmFacts {
  bool present = false;           // /dev/shm exists or is mounted
  std::optional<u64> size_bytes;  // kUnlimited for a tmpfs without a size limit
  std::optional<u64> free_bytes;  // only where statvfs applies
  std::string source;             // "statvfs", "/proc/self/mountinfo size=65536k", ...
  // The filesystem /dev/shm is on ("tmpfs"; "ext4" or "overlay" for a plain
  // directory of a chroot or an image) and where that filesystem is mounted
  // ("/dev/shm", "/dev", "/"; "" when this root's mount table does not list
  // it: a chroot's root is no mount of its own). Empty when unknown.
  std::string fstype;
  std::string mount_point;
  // /dev/shm is a directory of a filesystem that is not in memory: what
  // programs put there as shared memory (shm_open, DataLoader workers'
  // batches) is a file of that disk, bounded by its free space. size_bytes
  // is then unknown: that filesystem's size is not a shared-memory size.
  bool disk_backed = false;
};

struct ResourceLimit {
  bool known = false;
  u64 soft = 0;  // kUnlimited for "unlimited"
  u64 hard = 0;
  std::string source;  // "getrlimit" or "/proc/self/limits"
};

struct Limits {
  ResourceLimit memlock;  // bytes
  ResourceLimit nofile;
  ResourceLimit nproc;
};

struct ContainerFacts {
  bool detected = false;
  std::string kind;                  // "docker", "podman", "kubernetes", "lxc", "container", ""
  std::vector<std::string> markers;  // each piece of evidence, e.g. "/.dockerenv exists"
};

// How many ranks the launcher starts on this node, and which variable says so.
struct RanksPerNode {
  std::optional<u32> count;
  std::string source;  // "--ranks-per-node", "LOCAL_WORLD_SIZE", "SLURM_TASKS_PER_NODE", ...
  std::string raw;     // the value as written
  std::vector<std::string> ignored;  // "NAME=value" candidates that did not parse
};

// Parses SLURM_TASKS_PER_NODE ("4(x2),3") into one count per node.
std::optional<std::vector<u32>> parse_slurm_tasks_per_node(std::string_view text);

// rank-binding.cc ////////////////////////////////////////////////////////////

// Which CPUs the ranks of this node run on, as far as anything says. One
// rank sees only its own affinity mask; whether the other ranks hold the
// same CPUs or CPUs of their own decides the node's thread budget (THR001).
struct RankBinding {
  // Every rank of this node, this one included, when known: `fleet` gathers
  // each rank's mask; srun lists each local task's CPUs in
  // SLURM_CPU_BIND_LIST (used only when this rank's entry is its mask).
  std::optional<std::vector<std::vector<u32>>> masks;
  // Each rank has CPUs of its own: the masks are disjoint, or the launcher
  // bound every rank to its own core or hardware thread (mpirun --bind-to
  // core, its default for up to 2 ranks).
  bool bound = false;
  std::string source;  // "fleet: every rank's affinity mask", "SLURM_CPU_BIND_LIST=0,1", ...
  std::vector<std::string> ignored;  // launcher variables that said nothing usable, and why
};

// The launcher's word (SLURM_CPU_BIND_TYPE/LIST, Open MPI's
// OMPI_MCA_orte_bound_at_launch and binding policy) checked against this
// rank's own mask; `masks` (fleet) wins over every variable.
RankBinding collect_rank_binding(const host::Host& host, const std::optional<std::vector<u32>>& own,
                                 const std::optional<std::vector<std::vector<u32>>>& masks);
// SLURM_CPU_BIND_LIST under SLURM_CPU_BIND_TYPE "map_cpu:" (a CPU per task)
// or "mask_cpu:" (a hex mask per task): one CPU list per local task.
std::optional<std::vector<std::vector<u32>>> parse_slurm_cpu_bind_list(std::string_view type,
                                                                       std::string_view list);

struct HostFacts {
  CpuFacts cpu;
  std::vector<NumaNode> numa_nodes;
  MemoryFacts memory;
  ShmFacts shm;
  Limits limits;
  std::optional<std::string> kernel_release;  // /proc/sys/kernel/osrelease
  // The node's identity for `fleet` and `diff`: the UTS hostname and the
  // kernel's boot id (one per boot of one machine: ranks in containers on
  // one host share it, two machines never do).
  std::optional<std::string> hostname;  // /proc/sys/kernel/hostname
  std::optional<std::string> boot_id;   // /proc/sys/kernel/random/boot_id
  // Not read here (hostfacts does not link the loader): the caller fills it
  // from loader::detect_glibc_version so the JSON carries it.
  std::optional<std::string> glibc_version;
  ContainerFacts container;
  RanksPerNode ranks_per_node;
  RankBinding rank_binding;
  std::vector<std::string> rdma_devices;  // /sys/class/infiniband entries
  std::optional<std::string> os_name;     // PRETTY_NAME of /etc/os-release
  std::optional<std::string> cpu_model;   // the first "model name" of /proc/cpuinfo
  std::string architecture;               // analysed_architecture()
  CpuinfoCounts cpuinfo;                  // PyTorch's cpuinfo counts on this machine
  OpenMpTopology openmp_topology;         // what GNU and LLVM OpenMP see of the mask (THR004)
  // The NVIDIA kernel module's version and each GPU's model, from
  // /proc/driver/nvidia (no driver library is loaded); empty without one.
  std::optional<std::string> nvidia_driver;
  std::vector<std::string> gpus;
};

struct CollectOptions {
  std::optional<u32> ranks_per_node;  // `--ranks-per-node`: wins over every variable
  // `fleet`: the affinity mask of every rank on this node (this one's
  // included), gathered over MPI; also gives the ranks per node.
  std::optional<std::vector<std::vector<u32>>> node_masks;
};

HostFacts collect_host_facts(const host::Host& host, const CollectOptions& options = {});

// env-facts.cc ///////////////////////////////////////////////////////////////

struct EnvVar {
  std::string name;
  std::string value;
};

struct GlibcTunable {
  std::string key;
  std::string value;
  bool known = false;  // a tunable some glibc release defines
};

// GLIBC_TUNABLES "a.b.c=1:d.e.f=2"; malformed items (no '=', empty key) are
// returned in `malformed`.
struct ParsedTunables {
  std::vector<GlibcTunable> tunables;
  std::vector<std::string> malformed;
};
ParsedTunables parse_glibc_tunables(std::string_view text);

// OMP_NUM_THREADS and friends as the runtimes read them: "4" or the nested
// list "4,2" (one count per nesting level). nullopt when a runtime would
// reject the value (GNU libgomp: "Invalid value for environment variable").
std::optional<std::vector<u32>> parse_thread_count_list(std::string_view text);

// The per-process thread settings a thread budget needs. Each is nullopt when
// the variable is unset or invalid (the runtime then picks its own default,
// usually one thread per CPU of the affinity mask).
struct ThreadSettings {
  std::optional<std::vector<u32>> omp_num_threads;  // per nesting level
  std::optional<u32> mkl_num_threads;
  std::optional<u32> openblas_num_threads;  // OPENBLAS_NUM_THREADS, else GOTO_NUM_THREADS
  std::optional<u32> numba_num_threads;
  std::optional<std::string> mkl_threading_layer;    // upper-case when valid
  std::optional<std::string> numba_threading_layer;  // lower-case when valid
};

// CUDA_VISIBLE_DEVICES as the CUDA runtime (and torch._parse_visible_devices)
// reads it: entries up to the first invalid one; a repeated entry hides every
// device.
struct CudaVisibleDevices {
  std::string raw;
  std::vector<std::string> devices;       // what stays visible, in order
  std::optional<std::string> stopped_at;  // the entry parsing stopped at
  std::optional<std::string> duplicate;   // a repeated entry (then devices is empty)
  // Stopped at the first entry, spelled as one of the usual ways to hide
  // every GPU on purpose: an empty value, "-1" (any negative index), or
  // Slurm's "NoDevFiles".
  bool hides_all = false;
};
CudaVisibleDevices parse_cuda_visible_devices(std::string_view text);

// An element of LD_LIBRARY_PATH or LD_PRELOAD as written ("" = the current
// directory), and whether it is an absolute path that names nothing under the
// analysed root. Elements that are not absolute ("$ORIGIN/..", relative ones,
// LD_PRELOAD's bare sonames, which ld.so searches) are not looked up.
struct LoaderPathEntry {
  std::string path;
  bool missing = false;
};

struct EnvFacts {
  std::vector<EnvVar> variables;  // every variable that steers the native layer, sorted by name
  ThreadSettings threads;
  // Variables set to a value their consumer does not accept as written (it
  // warns and ignores it, or fails), in the order they are read: the thread
  // counts, the OpenMP settings, MKL_THREADING_LAYER, NUMBA_THREADING_LAYER,
  // OPENBLAS_CORETYPE, TORCH_CUDA_ARCH_LIST, NCCL_DEBUG. An empty
  // MKL_THREADING_LAYER or TORCH_CUDA_ARCH_LIST counts as unset.
  std::vector<std::string> rejected;
  // KMP_AFFINITY rejected: the item that is neither a type nor a modifier
  // (the whole value when its brackets do not match).
  std::string kmp_affinity_bad_item;
  // TORCH_CUDA_ARCH_LIST rejected: the elements torch cannot read, in order
  // ("" = an empty element).
  std::vector<std::string> torch_cuda_arch_bad;
  // KMP_DUPLICATE_LIB_OK reads as true to LLVM/Intel OpenMP.
  bool kmp_duplicate_lib_ok = false;
  std::optional<CudaVisibleDevices> cuda_visible_devices;
  std::vector<LoaderPathEntry> ld_library_path;  // empty when unset or empty
  std::vector<LoaderPathEntry> ld_preload;
  std::vector<GlibcTunable> glibc_tunables;
  std::vector<std::string> glibc_tunables_malformed;  // items that are not name=value

  // The value of a variable of `variables`; nullptr when unset.
  const std::string* value_of(std::string_view name) const;
  bool rejects(std::string_view name) const;
};

// Reads the environment of `host` (and looks up LD_* paths under its root).
EnvFacts collect_env_facts(const host::Host& host);

// The type word of a KMP_AFFINITY value ("compact", "none", "explicit"...),
// lower-case; "" when it names none.
std::string kmp_affinity_type(std::string_view value);

// facts.cc ///////////////////////////////////////////////////////////////////

struct Facts {
  HostFacts host;
  EnvFacts env;
};

Facts collect(const host::Host& host, const CollectOptions& options = {});

// The filesystem type ("ext4", "nfs4", "lustre") of the mount that holds
// `path`: the longest mount point of /proc/self/mountinfo that is a prefix
// of it. nullopt when the mount table cannot be read.
std::optional<std::string> filesystem_of(const host::Host& host, std::string_view path);

// "64 MiB", "1.5 GiB", "512 bytes"; kUnlimited is "unlimited".
std::string human_bytes(u64 bytes);

// JSON for `check --json` (the "host" and "environment" objects). Byte sizes
// are integers; unknown facts are null; kUnlimited is the string "unlimited".
void to_json(nlohmann::json& j, const HostFacts& f);
void to_json(nlohmann::json& j, const EnvFacts& f);
void to_json(nlohmann::json& j, const Facts& f);

// system-packages.cc /////////////////////////////////////////////////////////

// Which package of the operating system installed a file, from dpkg's
// database (/var/lib/dpkg/info/<package>[:<arch>].list for the files,
// /var/lib/dpkg/status for the versions), read on the first question only:
// most checks never name a system file. A path is matched as given, as
// usrmerge spells it the other way (/lib/... and /usr/lib/...), and resolved
// inside the root. Machines without dpkg (RPM-based, containers with the
// database removed) answer nothing. Not thread-safe.
class SystemPackages {
 public:
  // Keeps a reference: `host` must outlive it.
  explicit SystemPackages(const host::Host& host) : host_(host) {}
  explicit SystemPackages(host::Host&&) = delete;
  // "libgomp1 12.2.0-14+deb12u1 (dpkg)"; nullopt when no package lists it.
  std::optional<std::string> owner(std::string_view path) const;
  // Whether a dpkg database was found (after the first owner() call).
  bool has_database() const { return loaded_ && !files_.empty(); }

 private:
  void load() const;
  const host::Host& host_;
  mutable bool loaded_ = false;
  mutable std::map<std::string, std::string, std::less<>> files_;     // path -> "pkg[:arch]"
  mutable std::map<std::string, std::string, std::less<>> versions_;  // "pkg[:arch]" -> version
};

}  // namespace mld::hostfacts
