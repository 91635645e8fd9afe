// hostfacts-test.cc — host and environment facts: the text parsers (CPU
// lists, Slurm task counts, GLIBC_TUNABLES, thread counts, CUDA device lists),
// collect_host_facts on the fixture trees of test/fixtures/hosts (every
// expected number is the one written in the tree's files), the launcher's
// ranks per node, the ENV and HOST rules' detectors on these facts, and one
// comparison with the live machine.
#include "hostfacts/hostfacts.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "detect/detect.h"
#include "run-command.h"

using namespace mld;
using namespace mld::hostfacts;
namespace fs = std::filesystem;

namespace {

using Env = std::map<std::string, std::string>;
using Cpus = std::vector<u32>;

std::string fixture_root(const std::string& name) {
  if (const char* src = std::getenv("MLD_SOURCE_DIR"))
    return std::string(src) + "/test/fixtures/hosts/" + name;
  return (fs::path(__FILE__).parent_path().parent_path() / "fixtures" / "hosts" / name).string();
}

host::Host fixture(const std::string& name, Env env = {}) {
  std::string root = fixture_root(name);
  EXPECT_TRUE(fs::is_directory(root)) << root;
  return host::Host(root, std::move(env));
}

Cpus range(u32 first, u32 last) {
  Cpus out;
  for (u32 c = first; c <= last; c++) out.push_back(c);
  return out;
}

std::vector<std::string> rules_of(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const Finding& f : findings) out.push_back(f.rule);
  return out;
}

// The findings of the rules whose ids start with one of `families`, as the
// detectors report them on `facts`.
std::vector<Finding> findings_of(const Facts& facts, std::vector<std::string> families) {
  detect::Facts df;
  df.host = &facts;
  std::vector<Finding> out;
  for (Finding& f : detect::findings(detect::run_detectors(df), rules::RuleSet()))
    for (const std::string& family : families)
      if (f.rule.starts_with(family)) out.push_back(std::move(f));
  return out;
}

// The HOST findings of host facts alone.
std::vector<Finding> host_findings(const HostFacts& host) {
  Facts facts;
  facts.host = host;
  return findings_of(facts, {"HOST"});
}

std::vector<std::string> paths_of(const std::vector<LoaderPathEntry>& entries) {
  std::vector<std::string> out;
  for (const LoaderPathEntry& e : entries) out.push_back(e.path);
  return out;
}

// A scratch root directory, removed at the end of the test.
class TempRoot {
 public:
  TempRoot() {
    char tmpl[] = "/tmp/mld-hostfacts-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~TempRoot() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const std::string& path() const { return root_; }
  void write(const std::string& rel, const std::string& text) const {
    fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  void mkdir(const std::string& rel) const { fs::create_directories(fs::path(root_) / rel); }

 private:
  std::string root_;
};

constexpr u64 KiB = 1024;
constexpr u64 MiB = 1024 * KiB;
constexpr u64 GiB = 1024 * MiB;

}  // namespace

// parse_cpu_list / format_cpu_list ///////////////////////////////////////////

TEST(CpuList, RangesAndSingles) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (Cpus{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("5"), (Cpus{5}));
  EXPECT_EQ(parse_cpu_list("0-7,32-39"),
            (Cpus{0, 1, 2, 3, 4, 5, 6, 7, 32, 33, 34, 35, 36, 37, 38, 39}));
  // Sorted, duplicates removed.
  EXPECT_EQ(parse_cpu_list("8,0-2,1,2"), (Cpus{0, 1, 2, 8}));
}

TEST(CpuList, Strides) {
  EXPECT_EQ(parse_cpu_list("0-7:2"), (Cpus{0, 2, 4, 6}));
  EXPECT_EQ(parse_cpu_list("1-9:4"), (Cpus{1, 5, 9}));
  EXPECT_EQ(parse_cpu_list("0-3:1,16-20:3"), (Cpus{0, 1, 2, 3, 16, 19}));
  // A stride beyond the range keeps only its first CPU, also when adding it
  // would wrap around 2^64.
  EXPECT_EQ(parse_cpu_list("4-6:100"), (Cpus{4}));
  EXPECT_EQ(parse_cpu_list("5-10:18446744073709551615"), (Cpus{5}));
}

TEST(CpuList, BlanksAndEmpty) {
  EXPECT_EQ(parse_cpu_list(""), Cpus{});
  EXPECT_EQ(parse_cpu_list("   \n"), Cpus{});
  EXPECT_EQ(parse_cpu_list("0-3\n"), (Cpus{0, 1, 2, 3}));  // as read from /sys
  EXPECT_EQ(parse_cpu_list(" 0-1, 4 "), (Cpus{0, 1, 4}));
}

TEST(CpuList, Malformed) {
  for (const char* bad : {"a", "1,,2", "1,", ",1", "3-1", "1-", "-1", "0-7:0", "0-7:x",
                          "0-7:", "1048576", "0-1048576", "0x1", "1 2", "1-2-3", "+1"})
    EXPECT_FALSE(parse_cpu_list(bad).has_value()) << '"' << bad << '"';
}

TEST(CpuList, Format) {
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({7}), "7");
  EXPECT_EQ(format_cpu_list({0, 1}), "0-1");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(format_cpu_list({0, 2, 4, 6}), "0,2,4,6");
  EXPECT_EQ(format_cpu_list(*parse_cpu_list("0-7,32-39")), "0-7,32-39");
}

// parse_slurm_tasks_per_node ////////////////////////////////////////////////

TEST(SlurmTasksPerNode, Parses) {
  EXPECT_EQ(parse_slurm_tasks_per_node("4(x2),3"), (Cpus{4, 4, 3}));
  EXPECT_EQ(parse_slurm_tasks_per_node("2"), (Cpus{2}));
  EXPECT_EQ(parse_slurm_tasks_per_node("1(x3)"), (Cpus{1, 1, 1}));
  EXPECT_EQ(parse_slurm_tasks_per_node("8,8(x2),16"), (Cpus{8, 8, 8, 16}));
  for (const char* bad :
       {"", "4(x0)", "4(2)", "(x2)", "4,,3", "0", "x", "4(x2", "4(x2)x", "4(x)", "-1"})
    EXPECT_FALSE(parse_slurm_tasks_per_node(bad).has_value()) << '"' << bad << '"';
}

// parse_glibc_tunables ////////////////////////////////////////////////////////

TEST(GlibcTunables, KnownAndUnknown) {
  ParsedTunables p = parse_glibc_tunables("glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0");
  ASSERT_EQ(p.tunables.size(), 2u);
  EXPECT_TRUE(p.malformed.empty());
  EXPECT_EQ(p.tunables[0].key, "glibc.malloc.arena_max");
  EXPECT_EQ(p.tunables[0].value, "2");
  EXPECT_TRUE(p.tunables[0].known);
  EXPECT_EQ(p.tunables[1].key, "glibc.malloc.tcache_count");
  EXPECT_EQ(p.tunables[1].value, "0");
  EXPECT_TRUE(p.tunables[1].known);

  p = parse_glibc_tunables("glibc.malloc.arenamax=4");
  ASSERT_EQ(p.tunables.size(), 1u);
  EXPECT_EQ(p.tunables[0].key, "glibc.malloc.arenamax");
  EXPECT_FALSE(p.tunables[0].known);

  p = parse_glibc_tunables("glibc.cpu.hwcaps=-AVX512F,-AVX2");
  ASSERT_EQ(p.tunables.size(), 1u);
  EXPECT_EQ(p.tunables[0].value, "-AVX512F,-AVX2");
  EXPECT_TRUE(p.tunables[0].known);
}

TEST(GlibcTunables, Malformed) {
  ParsedTunables p = parse_glibc_tunables("glibc.malloc.check:=3:glibc.rtld.nns=8");
  EXPECT_EQ(p.malformed, (std::vector<std::string>{"glibc.malloc.check", "=3"}));
  ASSERT_EQ(p.tunables.size(), 1u);
  EXPECT_EQ(p.tunables[0].key, "glibc.rtld.nns");
  EXPECT_EQ(p.tunables[0].value, "8");

  p = parse_glibc_tunables("a=b=c");
  ASSERT_EQ(p.tunables.size(), 1u);
  EXPECT_EQ(p.tunables[0].key, "a");
  EXPECT_EQ(p.tunables[0].value, "b=c");

  for (const char* empty : {"", ":", "::"}) {
    p = parse_glibc_tunables(empty);
    EXPECT_TRUE(p.tunables.empty()) << empty;
    EXPECT_TRUE(p.malformed.empty()) << empty;
  }
}

// parse_thread_count_list (libgomp's parse_unsigned_long_list) /////////////////

TEST(ThreadCountList, AsLibgompReadsIt) {
  EXPECT_EQ(parse_thread_count_list("4"), (Cpus{4}));
  EXPECT_EQ(parse_thread_count_list("4,2"), (Cpus{4, 2}));
  EXPECT_EQ(parse_thread_count_list(" 8 "), (Cpus{8}));
  EXPECT_EQ(parse_thread_count_list("+3"), (Cpus{3}));
  EXPECT_EQ(parse_thread_count_list("4 , 2"), (Cpus{4, 2}));
  for (const char* bad :
       {"", "0", "four", "4,,2", "2,", ",2", "-1", "4 2", "4,0", "2.5", "99999999999999999999"})
    EXPECT_FALSE(parse_thread_count_list(bad).has_value()) << '"' << bad << '"';
}

// parse_cuda_visible_devices ///////////////////////////////////////////////////

TEST(CudaVisibleDevices, Indices) {
  CudaVisibleDevices d = parse_cuda_visible_devices("0,1");
  EXPECT_EQ(d.raw, "0,1");
  EXPECT_EQ(d.devices, (std::vector<std::string>{"0", "1"}));
  EXPECT_FALSE(d.stopped_at);
  EXPECT_FALSE(d.duplicate);

  d = parse_cuda_visible_devices(" 2, 3");
  EXPECT_EQ(d.devices, (std::vector<std::string>{"2", "3"}));

  // strtoul-like: "1gpu2,2ampere" is "1,2".
  d = parse_cuda_visible_devices("1gpu2,2ampere");
  EXPECT_EQ(d.devices, (std::vector<std::string>{"1", "2"}));
  EXPECT_FALSE(d.stopped_at);
}

TEST(CudaVisibleDevices, DuplicateHidesAll) {
  CudaVisibleDevices d = parse_cuda_visible_devices("0,0");
  EXPECT_TRUE(d.devices.empty());
  EXPECT_EQ(d.duplicate, "0");

  d = parse_cuda_visible_devices("1,2,01");  // "01" is ordinal 1 again
  EXPECT_TRUE(d.devices.empty());
  EXPECT_EQ(d.duplicate, "1");

  d = parse_cuda_visible_devices("GPU-8a1c,GPU-8a1c");
  EXPECT_TRUE(d.devices.empty());
  EXPECT_EQ(d.duplicate, "GPU-8a1c");
}

TEST(CudaVisibleDevices, StopsAtInvalidEntry) {
  CudaVisibleDevices d = parse_cuda_visible_devices("0,x,1");
  EXPECT_EQ(d.devices, (std::vector<std::string>{"0"}));
  EXPECT_EQ(d.stopped_at, "x");
  EXPECT_FALSE(d.duplicate);

  d = parse_cuda_visible_devices("3,,1");
  EXPECT_EQ(d.devices, (std::vector<std::string>{"3"}));
  EXPECT_EQ(d.stopped_at, "");

  d = parse_cuda_visible_devices("-1");
  EXPECT_TRUE(d.devices.empty());
  EXPECT_EQ(d.stopped_at, "-1");

  d = parse_cuda_visible_devices("");
  EXPECT_TRUE(d.devices.empty());
  EXPECT_EQ(d.stopped_at, "");
}

TEST(CudaVisibleDevices, Uuids) {
  const std::string a = "GPU-5e4b1c7a-0f3d-4b9e-8c2a-1d6f0e9b7a35";
  const std::string b = "GPU-a0c3e5f7-1b2d-4e6f-9a8b-7c6d5e4f3a21";
  CudaVisibleDevices d = parse_cuda_visible_devices(b + "," + a);
  EXPECT_EQ(d.devices, (std::vector<std::string>{b, a}));
  EXPECT_FALSE(d.stopped_at);

  // Indices and UUIDs do not mix: the list stops at the first other kind.
  d = parse_cuda_visible_devices(a + ",0");
  EXPECT_EQ(d.devices, (std::vector<std::string>{a}));
  EXPECT_EQ(d.stopped_at, "0");
  d = parse_cuda_visible_devices("0," + a);
  EXPECT_EQ(d.devices, (std::vector<std::string>{"0"}));
  EXPECT_EQ(d.stopped_at, a);

  const std::string mig = "MIG-4f1e2d3c-5b6a-7980-a1b2-c3d4e5f60718";
  d = parse_cuda_visible_devices(mig);
  EXPECT_EQ(d.devices, (std::vector<std::string>{mig}));
}

// collect_host_facts on the fixture trees ////////////////////////////////////

TEST(FixtureHost, CgroupV1Quota) {
  HostFacts f = collect_host_facts(fixture("cgroup-v1-quota"));
  const std::string cid = "8e4f1c3a9b2d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f";
  EXPECT_EQ(f.cpu.online, range(0, 15));
  EXPECT_EQ(f.cpu.possible, range(0, 15));
  EXPECT_EQ(f.cpu.affinity, range(0, 15));
  EXPECT_EQ(f.cpu.affinity_source, "/proc/self/status");
  EXPECT_EQ(f.cpu.cgroup_version, 1);
  EXPECT_EQ(f.cpu.cgroup_path, "/docker/" + cid);
  // The mount's root is the container's cgroup: the files are at the mount point.
  EXPECT_EQ(f.cpu.cgroup_dir, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_TRUE(f.cpu.quota_readable);
  ASSERT_TRUE(f.cpu.quota);
  EXPECT_EQ(f.cpu.quota->cgroup_version, 1);
  EXPECT_EQ(f.cpu.quota->quota_us, 200000);
  EXPECT_EQ(f.cpu.quota->period_us, 100000);
  EXPECT_DOUBLE_EQ(f.cpu.quota->cpus(), 2.0);
  EXPECT_EQ(f.cpu.quota->file, "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us");
  EXPECT_EQ(f.cpu.usable, 2u);
  EXPECT_EQ(f.cpu.usable_basis, "cgroup v1 quota");

  ASSERT_EQ(f.numa_nodes.size(), 1u);
  EXPECT_EQ(f.numa_nodes[0].cpus, range(0, 15));
  EXPECT_EQ(f.memory.total_bytes, 65842516 * KiB);
  EXPECT_EQ(f.memory.available_bytes, 60123512 * KiB);

  EXPECT_TRUE(f.shm.present);
  EXPECT_EQ(f.shm.size_bytes,
            8 * GiB);  // --shm-size=8g; the /dev mount's size=65536k is not /dev/shm
  EXPECT_EQ(f.shm.source, "/proc/self/mountinfo size=8388608k");
  EXPECT_FALSE(f.shm.free_bytes);

  EXPECT_TRUE(f.limits.memlock.known);
  EXPECT_EQ(f.limits.memlock.soft, 8388608u);
  EXPECT_EQ(f.limits.memlock.hard, 8388608u);
  EXPECT_EQ(f.limits.memlock.source, "/proc/self/limits");
  EXPECT_EQ(f.limits.nofile.soft, 1048576u);
  EXPECT_EQ(f.limits.nofile.hard, 1048576u);
  EXPECT_EQ(f.limits.nproc.soft, kUnlimited);
  EXPECT_EQ(f.limits.nproc.hard, kUnlimited);
  EXPECT_EQ(f.kernel_release, "5.4.0-150-generic");

  EXPECT_TRUE(f.container.detected);
  EXPECT_EQ(f.container.kind, "docker");
  EXPECT_EQ(
      f.container.markers,
      (std::vector<std::string>{"/.dockerenv exists", "/proc/1/cgroup: 12:cpuset:/docker/" + cid,
                                "/proc/self/mountinfo: root filesystem is overlay"}));
  EXPECT_TRUE(f.rdma_devices.empty());
  EXPECT_FALSE(f.ranks_per_node.count);
  EXPECT_TRUE(host_findings(f).empty());
}

TEST(FixtureHost, CgroupV2NestedQuota) {
  HostFacts f = collect_host_facts(fixture("cgroup-v2-quota"));
  EXPECT_EQ(f.cpu.online, range(0, 7));
  EXPECT_EQ(f.cpu.affinity, range(0, 7));
  EXPECT_EQ(f.cpu.cgroup_version, 2);
  EXPECT_EQ(f.cpu.cgroup_path, "/training.slice/job-42.slice/run-r3f9c.scope");
  EXPECT_EQ(f.cpu.cgroup_dir, "/sys/fs/cgroup/training.slice/job-42.slice/run-r3f9c.scope");
  EXPECT_TRUE(f.cpu.quota_readable);
  // The leaf says "max", job-42.slice 1.5 CPUs, training.slice 4: the tightest wins.
  ASSERT_TRUE(f.cpu.quota);
  EXPECT_EQ(f.cpu.quota->cgroup_version, 2);
  EXPECT_EQ(f.cpu.quota->quota_us, 150000);
  EXPECT_EQ(f.cpu.quota->period_us, 100000);
  EXPECT_DOUBLE_EQ(f.cpu.quota->cpus(), 1.5);
  EXPECT_EQ(f.cpu.quota->ceil_cpus(), 2u);
  EXPECT_EQ(f.cpu.quota->file, "/sys/fs/cgroup/training.slice/job-42.slice/cpu.max");
  EXPECT_EQ(f.cpu.usable, 2u);
  EXPECT_EQ(f.cpu.usable_basis, "cgroup v2 quota");

  EXPECT_EQ(f.memory.total_bytes, 32612344 * KiB);
  // A tmpfs mounted without size= has the kernel's default size, half of RAM.
  EXPECT_TRUE(f.shm.present);
  EXPECT_EQ(f.shm.size_bytes, 32612344 * KiB / 2);

  EXPECT_EQ(f.limits.nofile.soft, 65536u);
  EXPECT_EQ(f.limits.nofile.hard, 1048576u);
  EXPECT_EQ(f.limits.nproc.soft, 127157u);
  EXPECT_EQ(f.kernel_release, "6.5.0-35-generic");
  EXPECT_FALSE(f.container.detected);
  EXPECT_EQ(f.container.kind, "");
  EXPECT_TRUE(f.container.markers.empty());
  EXPECT_TRUE(host_findings(f).empty());
}

TEST(FixtureHost, AffinitySubset) {
  HostFacts f = collect_host_facts(fixture("affinity-subset"));
  EXPECT_EQ(f.cpu.online, range(0, 63));
  EXPECT_EQ(f.cpu.possible, range(0, 127));
  Cpus allowed = range(0, 7);
  for (u32 c = 32; c <= 39; c++) allowed.push_back(c);
  EXPECT_EQ(f.cpu.affinity, allowed);
  EXPECT_EQ(f.cpu.cgroup_version, 2);
  EXPECT_EQ(f.cpu.cgroup_path, "/system.slice/slurmstepd.scope/job_81234/step_0/user/task_0");
  // No mountinfo in this tree: the conventional cgroup2 mount point.
  EXPECT_EQ(f.cpu.cgroup_dir,
            "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_81234/step_0/user/task_0");
  EXPECT_TRUE(f.cpu.quota_readable);  // "max 100000" everywhere: no quota is a fact
  EXPECT_FALSE(f.cpu.quota);
  EXPECT_EQ(f.cpu.usable, 16u);
  EXPECT_EQ(f.cpu.usable_basis, "affinity");

  // /dev/shm from /proc/mounts.
  EXPECT_TRUE(f.shm.present);
  EXPECT_EQ(f.shm.size_bytes, 32 * GiB);
  EXPECT_EQ(f.shm.source, "/proc/mounts size=33554432k");
  EXPECT_EQ(f.memory.total_bytes, 527939584 * KiB);
  EXPECT_EQ(f.limits.memlock.soft, kUnlimited);
  EXPECT_EQ(f.limits.memlock.hard, kUnlimited);
  EXPECT_EQ(f.limits.nofile.soft, 131072u);
  EXPECT_EQ(f.kernel_release, "5.14.0-427.13.1.el9_4.x86_64");
  EXPECT_FALSE(f.container.detected);
  EXPECT_TRUE(host_findings(f).empty());

  nlohmann::json j = f;
  EXPECT_EQ(j["cpus"]["affinity"], "0-7,32-39");
  EXPECT_EQ(j["cpus"]["affinity_count"], 16);
  EXPECT_EQ(j["cpus"]["online_count"], 64);
  EXPECT_EQ(j["cpus"]["possible_count"], 128);
  EXPECT_EQ(j["cpus"]["usable"], 16);
  EXPECT_EQ(j["cpus"]["cgroup"]["quota"], nullptr);
  EXPECT_EQ(j["limits"]["memlock"]["soft"], "unlimited");
  EXPECT_EQ(j["shm"]["size_bytes"], 34359738368ull);
}

TEST(FixtureHost, TwoNumaNodes) {
  HostFacts f = collect_host_facts(fixture("two-numa"));
  ASSERT_EQ(f.numa_nodes.size(), 2u);  // "online", "has_cpu", ... are not nodes
  EXPECT_EQ(f.numa_nodes[0].id, 0u);
  EXPECT_EQ(f.numa_nodes[0].cpus, range(0, 15));
  EXPECT_EQ(f.numa_nodes[0].mem_total_bytes, 65775616 * KiB);
  EXPECT_EQ(f.numa_nodes[0].mem_free_bytes, 60123424 * KiB);
  EXPECT_EQ(f.numa_nodes[1].id, 1u);
  EXPECT_EQ(f.numa_nodes[1].cpus, range(16, 31));
  EXPECT_EQ(f.numa_nodes[1].mem_total_bytes, 66058240 * KiB);
  EXPECT_EQ(f.numa_nodes[1].mem_free_bytes, 61234560 * KiB);

  EXPECT_EQ(f.cpu.online, range(0, 31));
  EXPECT_EQ(f.cpu.cgroup_version, 2);
  EXPECT_EQ(f.cpu.cgroup_dir, "/sys/fs/cgroup/user.slice/user-1000.slice/session-4.scope");
  EXPECT_FALSE(f.cpu.quota_readable);  // no cpu.max anywhere on the way up
  EXPECT_FALSE(f.cpu.quota);
  EXPECT_EQ(f.cpu.usable, 32u);
  EXPECT_EQ(f.cpu.usable_basis, "affinity");
  EXPECT_EQ(f.shm.size_bytes, 65916928 * KiB);
  EXPECT_EQ(f.memory.total_bytes, 131833856 * KiB);
  EXPECT_EQ(f.kernel_release, "6.8.0-45-generic");
  EXPECT_TRUE(host_findings(f).empty());

  nlohmann::json j = f;
  ASSERT_EQ(j["numa_nodes"].size(), 2u);
  EXPECT_EQ(j["numa_nodes"][1]["cpus"], "16-31");
  EXPECT_EQ(j["numa_nodes"][1]["cpu_count"], 16);
  EXPECT_EQ(j["numa_nodes"][1]["mem_total_bytes"], 66058240ull * 1024);
}

TEST(FixtureHost, NvidiaKernelModuleAndOsRelease) {
  HostFacts f = collect_host_facts(fixture("two-numa"));
  EXPECT_EQ(f.nvidia_driver, "535.104.05");
  EXPECT_EQ(f.gpus, (std::vector<std::string>{"NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"}));
  EXPECT_EQ(f.os_name, "Ubuntu 22.04.4 LTS");
  // Hosts without the module: nothing, not an error.
  HostFacts none = collect_host_facts(fixture("small-shm"));
  EXPECT_FALSE(none.nvidia_driver);
  EXPECT_TRUE(none.gpus.empty());
}

TEST(FixtureHost, SmallShmInDocker) {
  HostFacts f = collect_host_facts(fixture("small-shm"));
  EXPECT_TRUE(f.shm.present);
  EXPECT_EQ(f.shm.size_bytes, 64 * MiB);
  EXPECT_EQ(f.shm.source, "/proc/self/mountinfo size=65536k");
  EXPECT_TRUE(f.container.detected);
  EXPECT_EQ(f.container.kind, "docker");
  EXPECT_EQ(f.container.markers,
            (std::vector<std::string>{"/.dockerenv exists",
                                      "/proc/self/mountinfo: root filesystem is overlay"}));
  EXPECT_EQ(f.cpu.cgroup_version, 2);
  EXPECT_EQ(f.cpu.cgroup_path, "/");
  EXPECT_EQ(f.cpu.cgroup_dir, "/sys/fs/cgroup");
  EXPECT_TRUE(f.cpu.quota_readable);
  EXPECT_FALSE(f.cpu.quota);
  EXPECT_EQ(f.cpu.usable, 12u);
  EXPECT_EQ(f.cpu.usable_basis, "affinity");
  EXPECT_EQ(f.kernel_release, "6.1.0-21-amd64");

  std::vector<Finding> findings = host_findings(f);
  ASSERT_EQ(rules_of(findings), (std::vector<std::string>{"HOST001"}));
  EXPECT_EQ(findings[0].subject, "/dev/shm");
  EXPECT_NE(findings[0].message.find("64 MiB"), std::string::npos) << findings[0].message;
}

// A chroot into a mounted disk: /dev/shm is a plain directory of its ext4
// root. The disk's size is no shared-memory size: none is kept, and HOST004
// (not HOST001) says what the directory is.
TEST(FixtureHost, ChrootShmIsADirectoryOnDisk) {
  HostFacts f = collect_host_facts(fixture("chroot-shm-dir"));
  EXPECT_TRUE(f.shm.present);
  EXPECT_TRUE(f.shm.disk_backed);
  EXPECT_EQ(f.shm.fstype, "ext4");
  EXPECT_EQ(f.shm.mount_point, "/");
  EXPECT_FALSE(f.shm.size_bytes);
  EXPECT_FALSE(f.shm.free_bytes);
  EXPECT_EQ(f.shm.source, "/proc/self/mountinfo (ext4 at /)");
  std::vector<Finding> findings = host_findings(f);
  ASSERT_EQ(rules_of(findings), (std::vector<std::string>{"HOST004"}));
  EXPECT_EQ(findings[0].message,
            "/dev/shm is not a tmpfs but a directory on ext4 at /: PyTorch DataLoader workers' "
            "batches, torch.multiprocessing queues and NCCL's shared-memory buffers become files "
            "of that disk, bounded by its free space");
  // A tmpfs mounted at /dev/shm stays shared memory.
  HostFacts docker = collect_host_facts(fixture("small-shm"));
  EXPECT_FALSE(docker.shm.disk_backed);
  EXPECT_EQ(docker.shm.fstype, "tmpfs");
  EXPECT_EQ(docker.shm.mount_point, "/dev/shm");
}

TEST(FixtureHost, LowMemlockWithRdma) {
  HostFacts f = collect_host_facts(fixture("low-memlock"));
  EXPECT_EQ(f.rdma_devices, (std::vector<std::string>{"mlx5_0"}));
  EXPECT_TRUE(f.limits.memlock.known);
  EXPECT_EQ(f.limits.memlock.soft, 65536u);
  EXPECT_EQ(f.limits.memlock.hard, 65536u);
  EXPECT_TRUE(f.limits.nofile.known);
  EXPECT_EQ(f.limits.nofile.soft, 1024u);
  EXPECT_EQ(f.limits.nofile.hard, 524288u);
  EXPECT_EQ(f.limits.nproc.soft, 8253563u);
  // Two /dev/shm mounts: the later one is on top.
  EXPECT_EQ(f.shm.size_bytes, 128 * GiB);
  EXPECT_EQ(f.cpu.usable, 48u);
  EXPECT_FALSE(f.container.detected);
  EXPECT_EQ(f.memory.total_bytes, 2113024384 * KiB);

  std::vector<Finding> findings = host_findings(f);
  ASSERT_EQ(rules_of(findings), (std::vector<std::string>{"HOST002", "HOST003"}));
  EXPECT_EQ(findings[0].subject, "RLIMIT_MEMLOCK");
  EXPECT_NE(findings[0].message.find("mlx5_0"), std::string::npos) << findings[0].message;
  EXPECT_EQ(findings[1].subject, "RLIMIT_NOFILE");
  EXPECT_NE(findings[1].fix.find("ulimit -n 524288"), std::string::npos) << findings[1].fix;
}

TEST(FixtureHost, EmptyTreeIsAllUnknown) {
  TempRoot t;
  for (const std::string& root : {t.path(), std::string("/nonexistent/mld-hostfacts-root")}) {
    host::Host h(root, {});
    HostFacts f;
    ASSERT_NO_THROW(f = collect_host_facts(h)) << root;
    EXPECT_FALSE(f.cpu.online) << root;
    EXPECT_FALSE(f.cpu.possible);
    EXPECT_FALSE(f.cpu.affinity);
    EXPECT_EQ(f.cpu.cgroup_version, 0);
    EXPECT_FALSE(f.cpu.quota_readable);
    EXPECT_FALSE(f.cpu.quota);
    EXPECT_FALSE(f.cpu.usable);
    EXPECT_TRUE(f.numa_nodes.empty());
    EXPECT_FALSE(f.memory.total_bytes);
    EXPECT_FALSE(f.memory.available_bytes);
    EXPECT_FALSE(f.shm.present);
    EXPECT_FALSE(f.shm.size_bytes);
    EXPECT_FALSE(f.limits.memlock.known);
    EXPECT_FALSE(f.limits.nofile.known);
    EXPECT_FALSE(f.limits.nproc.known);
    EXPECT_FALSE(f.kernel_release);
    EXPECT_FALSE(f.container.detected);
    EXPECT_TRUE(f.rdma_devices.empty());
    EXPECT_TRUE(host_findings(f).empty());
    nlohmann::json j;
    ASSERT_NO_THROW(j = f);
    EXPECT_EQ(j["cpus"]["usable"], nullptr);
    EXPECT_EQ(j["shm"]["size_bytes"], nullptr);
    EXPECT_EQ(j["limits"]["memlock"], nullptr);
  }
}

TEST(FixtureHost, MissingSysUsesAffinityOnly) {
  TempRoot t;
  t.write("proc/self/status", "Name:\tpython3\nCpus_allowed:\tf0\nCpus_allowed_list:\t4-7\n");
  t.write("proc/self/cgroup", "0::/user.slice\n");
  HostFacts f = collect_host_facts(host::Host(t.path(), {}));
  EXPECT_FALSE(f.cpu.online);
  EXPECT_EQ(f.cpu.affinity, range(4, 7));
  EXPECT_FALSE(f.cpu.quota_readable);
  EXPECT_EQ(f.cpu.usable, 4u);
  EXPECT_EQ(f.cpu.usable_basis, "affinity");
  EXPECT_TRUE(f.numa_nodes.empty());
  EXPECT_FALSE(f.shm.present);
}

TEST(FixtureHost, ShmMountOptions) {
  auto shm_of = [](const std::string& options, const std::string& meminfo) {
    TempRoot t;
    t.write("proc/self/mountinfo",
            "30 24 0:26 / /dev/shm rw,nosuid,nodev shared:4 - tmpfs tmpfs " + options + "\n");
    if (!meminfo.empty()) t.write("proc/meminfo", meminfo);
    return collect_host_facts(host::Host(t.path(), {})).shm;
  };
  EXPECT_EQ(shm_of("rw,size=0k,inode64", "").size_bytes, kUnlimited);  // size=0: no limit
  EXPECT_EQ(shm_of("rw,size=2g", "").size_bytes, 2 * GiB);
  EXPECT_EQ(shm_of("rw,size=1048576", "").size_bytes, 1 * MiB);
  EXPECT_EQ(shm_of("rw,size=25%", "MemTotal:        8000000 kB\n").size_bytes,
            8000000 * KiB / 100 * 25);
  EXPECT_EQ(shm_of("rw,inode64", "MemTotal:        8000000 kB\n").size_bytes, 4000000 * KiB);
  ShmFacts unknown = shm_of("rw,inode64", "");  // default size, RAM unknown
  EXPECT_TRUE(unknown.present);
  EXPECT_FALSE(unknown.size_bytes);
  EXPECT_FALSE(shm_of("rw,size=lots", "").size_bytes);
}

TEST(FixtureHost, OnlineCpusWhenNoAffinity) {
  TempRoot t;
  t.write("sys/devices/system/cpu/online", "0-5\n");
  HostFacts f = collect_host_facts(host::Host(t.path(), {}));
  EXPECT_FALSE(f.cpu.affinity);
  EXPECT_EQ(f.cpu.usable, 6u);
  EXPECT_EQ(f.cpu.usable_basis, "online CPUs");
}

// Ranks per node ///////////////////////////////////////////////////////////////

TEST(RanksPerNode, Precedence) {
  const Env all = {{"LOCAL_WORLD_SIZE", "8"},
                   {"SLURM_NTASKS_PER_NODE", "4"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  CollectOptions three;
  three.ranks_per_node = 3;
  RanksPerNode r = collect_host_facts(fixture("affinity-subset", all), three).ranks_per_node;
  EXPECT_EQ(r.count, 3u);
  EXPECT_EQ(r.source, "--ranks-per-node");
  EXPECT_EQ(r.raw, "3");

  r = collect_host_facts(fixture("affinity-subset", all)).ranks_per_node;
  EXPECT_EQ(r.count, 8u);
  EXPECT_EQ(r.source, "LOCAL_WORLD_SIZE");
  EXPECT_EQ(r.raw, "8");

  r = collect_host_facts(fixture("affinity-subset", {{"SLURM_NTASKS_PER_NODE", "4"},
                                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}))
          .ranks_per_node;
  EXPECT_EQ(r.count, 4u);
  EXPECT_EQ(r.source, "SLURM_NTASKS_PER_NODE");

  r = collect_host_facts(fixture("affinity-subset", {{"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}))
          .ranks_per_node;
  EXPECT_EQ(r.count, 2u);
  EXPECT_EQ(r.source, "OMPI_COMM_WORLD_LOCAL_SIZE");

  r = collect_host_facts(fixture("affinity-subset")).ranks_per_node;
  EXPECT_FALSE(r.count);
  EXPECT_TRUE(r.ignored.empty());
}

TEST(RanksPerNode, InvalidValuesAreSkipped) {
  RanksPerNode r =
      collect_host_facts(fixture("affinity-subset", {{"LOCAL_WORLD_SIZE", "0"},
                                                     {"SLURM_NTASKS_PER_NODE", "four"},
                                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "6"}}))
          .ranks_per_node;
  EXPECT_EQ(r.count, 6u);
  EXPECT_EQ(r.source, "OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_EQ(r.ignored,
            (std::vector<std::string>{"LOCAL_WORLD_SIZE=0", "SLURM_NTASKS_PER_NODE=four"}));
}

TEST(RanksPerNode, SlurmTasksPerNode) {
  RanksPerNode r =
      collect_host_facts(
          fixture("affinity-subset", {{"SLURM_TASKS_PER_NODE", "4(x2),3"}, {"SLURM_NODEID", "2"}}))
          .ranks_per_node;
  EXPECT_EQ(r.count, 3u);  // node 2 is the third entry
  EXPECT_EQ(r.source, "SLURM_TASKS_PER_NODE");
  EXPECT_EQ(r.raw, "4(x2),3");
  r = collect_host_facts(
          fixture("affinity-subset", {{"SLURM_TASKS_PER_NODE", "4(x2),3"}, {"SLURM_NODEID", "1"}}))
          .ranks_per_node;
  EXPECT_EQ(r.count, 4u);
  // Without SLURM_NODEID: the largest count.
  r = collect_host_facts(fixture("affinity-subset", {{"SLURM_TASKS_PER_NODE", "2,5(x2)"}}))
          .ranks_per_node;
  EXPECT_EQ(r.count, 5u);
}

TEST(RanksPerNode, ThreadFixDividesUsableCpus) {
  // affinity-subset: 16 usable CPUs; 4 ranks -> 4 threads each.
  host::Host h =
      fixture("affinity-subset", {{"LOCAL_WORLD_SIZE", "4"}, {"OMP_NUM_THREADS", "four"}});
  Facts facts = collect(h);
  std::vector<Finding> findings = findings_of(facts, {"ENV", "HOST"});
  ASSERT_EQ(rules_of(findings), (std::vector<std::string>{"ENV001"}));
  EXPECT_EQ(findings[0].env_fix, (std::vector<std::string>{"OMP_NUM_THREADS=4"}));
  EXPECT_EQ(findings[0].fix,
            "Set OMP_NUM_THREADS to a positive integer (threads per process), or unset it. On "
            "this node: 16 usable CPUs / 4 rank(s) = 4.");
}

// ENV findings //////////////////////////////////////////////////////////////////

// The environment facts of a root, with the ENV rules' findings on them.
struct CheckedEnv : EnvFacts {
  std::vector<Finding> findings;
};

class EnvFindings : public ::testing::Test {
 protected:
  void SetUp() override {
    root_.mkdir("usr/lib/x86_64-linux-gnu");
    root_.mkdir("opt/nccl/lib");
    root_.write("usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "");
  }
  CheckedEnv env(Env e) const {
    Facts facts;
    facts.env = collect_env_facts(host::Host(root_.path(), std::move(e)));
    CheckedEnv out;
    out.findings = findings_of(facts, {"ENV"});
    static_cast<EnvFacts&>(out) = std::move(facts.env);
    return out;
  }
  TempRoot root_;
};

TEST_F(EnvFindings, MalformedValues) {
  struct Case {
    const char* name;
    const char* value;
    const char* rule;
  };
  const Case cases[] = {
      {"OMP_NUM_THREADS", "four", "ENV001"},
      {"OMP_NUM_THREADS", "0", "ENV001"},
      {"OMP_NUM_THREADS", "4,,2", "ENV001"},
      {"OMP_NUM_THREADS", "2,", "ENV001"},
      {"OMP_NUM_THREADS", "", "ENV001"},
      {"MKL_NUM_THREADS", "0", "ENV001"},
      {"MKL_NUM_THREADS", "4,2", "ENV001"},
      {"OPENBLAS_NUM_THREADS", "-2", "ENV001"},
      {"GOTO_NUM_THREADS", "x", "ENV001"},
      {"NUMBA_NUM_THREADS", "eight", "ENV001"},
      {"OMP_PROC_BIND", "spred", "ENV002"},
      {"OMP_PLACES", "core", "ENV002"},
      {"OMP_PLACES", "cores(0)", "ENV002"},
      {"OMP_DYNAMIC", "maybe", "ENV002"},
      {"OMP_WAIT_POLICY", "busy", "ENV002"},
      {"GOMP_SPINCOUNT", "lots", "ENV002"},
      {"GOMP_CPU_AFFINITY", "0-3,x", "ENV002"},
      {"KMP_BLOCKTIME", "fast", "ENV002"},
      {"KMP_AFFINITY", "compactt", "ENV002"},
      {"KMP_DUPLICATE_LIB_OK", "TRUE", "ENV003"},
      {"KMP_DUPLICATE_LIB_OK", "1", "ENV003"},
      {"KMP_DUPLICATE_LIB_OK", "yes", "ENV003"},
      {"MKL_THREADING_LAYER", "INTELL", "ENV004"},
      {"MKL_THREADING_LAYER", "PGI", "ENV004"},
      {"MKL_SERVICE_FORCE_INTEL", "1", "ENV005"},
      {"NUMBA_THREADING_LAYER", "openmp", "ENV006"},
      {"OPENBLAS_CORETYPE", "Haswel", "ENV007"},
      {"TORCH_CUDA_ARCH_LIST", "8.0 ", "ENV008"},
      {"TORCH_CUDA_ARCH_LIST", "7.0;;8.0", "ENV008"},
      {"TORCH_CUDA_ARCH_LIST", "sm_80", "ENV008"},
      {"CUDA_VISIBLE_DEVICES", "0,1,0", "ENV009"},
      {"CUDA_VISIBLE_DEVICES", "0,x,1", "ENV010"},
      {"CUDA_VISIBLE_DEVICES", "0,,1", "ENV010"},
      {"LD_LIBRARY_PATH", "/usr/lib/x86_64-linux-gnu:", "ENV011"},
      {"LD_LIBRARY_PATH", "lib:/usr/lib/x86_64-linux-gnu", "ENV011"},
      {"LD_PRELOAD", "./libfoo.so", "ENV011"},
      {"LD_LIBRARY_PATH", "/usr/local/cuda-11.8/lib64:/usr/lib/x86_64-linux-gnu", "ENV012"},
      {"LD_PRELOAD", "/opt/missing/libtcmalloc.so.4", "ENV013"},
      {"GLIBC_TUNABLES", "glibc.malloc.arenamax=2", "ENV014"},
      {"GLIBC_TUNABLES", "glibc.malloc.check:glibc.malloc.arena_max=2", "ENV014"},
      {"NCCL_DEBUG", "VERBOSE", "ENV015"},
  };
  for (const Case& c : cases) {
    CheckedEnv f = env({{c.name, c.value}, {"PATH", "/usr/bin"}});
    ASSERT_EQ(rules_of(f.findings), (std::vector<std::string>{c.rule}))
        << c.name << "=\"" << c.value << '"';
    EXPECT_EQ(f.findings[0].subject, c.name);
    ASSERT_FALSE(f.findings[0].evidence.empty());
    EXPECT_EQ(f.findings[0].evidence[0].text, std::string(c.name) + "=" + c.value);
    EXPECT_FALSE(f.findings[0].fix.empty());
  }
}

TEST_F(EnvFindings, FindingDetails) {
  CheckedEnv f = env({{"CUDA_VISIBLE_DEVICES", "0,x,1"}});
  ASSERT_TRUE(f.cuda_visible_devices);
  EXPECT_EQ(f.cuda_visible_devices->devices, (std::vector<std::string>{"0"}));
  ASSERT_EQ(f.findings.size(), 1u);
  EXPECT_NE(f.findings[0].message.find("\"x\""), std::string::npos) << f.findings[0].message;
  EXPECT_NE(f.findings[0].message.find("only 0"), std::string::npos) << f.findings[0].message;

  f = env({{"MKL_THREADING_LAYER", "INTELL"}});
  ASSERT_EQ(f.findings.size(), 1u);
  EXPECT_EQ(f.findings[0].env_fix, (std::vector<std::string>{"MKL_THREADING_LAYER=GNU"}));

  f = env({{"NCCL_DEBUG", "VERBOSE"}});
  ASSERT_EQ(f.findings.size(), 1u);
  EXPECT_EQ(f.findings[0].env_fix, (std::vector<std::string>{"NCCL_DEBUG=INFO"}));

  f = env({{"LD_LIBRARY_PATH", "/usr/local/cuda-11.8/lib64::/opt/nccl/lib"}});
  EXPECT_EQ(paths_of(f.ld_library_path),
            (std::vector<std::string>{"/usr/local/cuda-11.8/lib64", "", "/opt/nccl/lib"}));
  EXPECT_TRUE(f.ld_library_path[0].missing);
  EXPECT_FALSE(f.ld_library_path[1].missing);  // "" is not looked up
  EXPECT_FALSE(f.ld_library_path[2].missing);
  EXPECT_EQ(rules_of(f.findings), (std::vector<std::string>{"ENV011", "ENV012"}));
  EXPECT_NE(f.findings[1].message.find("/usr/local/cuda-11.8/lib64"), std::string::npos);
  EXPECT_EQ(f.findings[1].message.find("/opt/nccl/lib"), std::string::npos)
      << f.findings[1].message;

  f = env(
      {{"GLIBC_TUNABLES", "glibc.malloc.check:glibc.malloc.arenamax=2:glibc.malloc.arena_max=2"}});
  ASSERT_EQ(f.findings.size(), 1u);
  EXPECT_NE(f.findings[0].message.find("\"glibc.malloc.check\" is not name=value"),
            std::string::npos);
  EXPECT_NE(f.findings[0].message.find("\"glibc.malloc.arenamax\" is not a glibc tunable"),
            std::string::npos);
  EXPECT_EQ(f.findings[0].message.find("\"glibc.malloc.arena_max\""), std::string::npos);
  ASSERT_EQ(f.glibc_tunables.size(), 2u);
}

TEST_F(EnvFindings, FactsTheRulesJudge) {
  CheckedEnv f = env({{"OMP_NUM_THREADS", "four"},
                      {"KMP_AFFINITY", "granularity=fine,compactt"},
                      {"NCCL_DEBUG", "VERBOSE"},
                      {"TORCH_CUDA_ARCH_LIST", "8.0;;sm_90"},
                      {"KMP_DUPLICATE_LIB_OK", "y"},
                      {"GLIBC_TUNABLES", "x:glibc.malloc.arenamax=2"},
                      {"LD_PRELOAD", "/opt/missing/libtcmalloc.so.4 ./libfoo.so libm.so.6"}});
  // In the order they are read, whatever the order of the environment.
  EXPECT_EQ(f.rejected, (std::vector<std::string>{"OMP_NUM_THREADS", "KMP_AFFINITY",
                                                  "TORCH_CUDA_ARCH_LIST", "NCCL_DEBUG"}));
  EXPECT_EQ(f.kmp_affinity_bad_item, "compactt");
  EXPECT_EQ(f.torch_cuda_arch_bad, (std::vector<std::string>{"", "sm_90"}));
  EXPECT_TRUE(f.kmp_duplicate_lib_ok);
  EXPECT_EQ(f.glibc_tunables_malformed, (std::vector<std::string>{"x"}));
  ASSERT_EQ(f.ld_preload.size(), 3u);
  EXPECT_TRUE(f.ld_preload[0].missing);
  EXPECT_FALSE(f.ld_preload[1].missing);  // relative: not looked up
  EXPECT_FALSE(f.ld_preload[2].missing);  // a soname ld.so searches
  EXPECT_EQ(rules_of(f.findings),
            (std::vector<std::string>{"ENV001", "ENV002", "ENV003", "ENV008", "ENV011", "ENV013",
                                      "ENV014", "ENV015"}));
  EXPECT_TRUE(env({{"CUDA_VISIBLE_DEVICES", "-1"}}).cuda_visible_devices->hides_all);
  EXPECT_FALSE(env({{"CUDA_VISIBLE_DEVICES", "0,-1"}}).cuda_visible_devices->hides_all);
  EXPECT_FALSE(env({{"CUDA_VISIBLE_DEVICES", "x"}}).cuda_visible_devices->hides_all);
}

// The detectors read the facts only: a path hostfacts found missing is
// reported without any file system behind it.
TEST(EnvDetectors, ReadFactsOnly) {
  Facts facts;
  facts.env.variables = {{"LD_LIBRARY_PATH", "/gone/lib64:/usr/lib"}};
  facts.env.ld_library_path = {{"/gone/lib64", true}, {"/usr/lib", false}};
  std::vector<Finding> findings = findings_of(facts, {"ENV"});
  ASSERT_EQ(rules_of(findings), (std::vector<std::string>{"ENV012"}));
  EXPECT_EQ(findings[0].message,
            "LD_LIBRARY_PATH names directories that do not exist: /gone/lib64");
  EXPECT_EQ(findings[0].severity, Severity::Info);
  EXPECT_EQ(findings[0].evidence[0].text, "LD_LIBRARY_PATH=/gone/lib64:/usr/lib");
  EXPECT_EQ(findings[0].evidence[0].file, "environment");
}

TEST_F(EnvFindings, CleanValuesHaveNoFindings) {
  const Env clean = {
      {"OMP_NUM_THREADS", "4,2"},
      {"MKL_NUM_THREADS", "4"},
      {"OPENBLAS_NUM_THREADS", "1"},
      {"GOTO_NUM_THREADS", "7"},
      {"NUMBA_NUM_THREADS", "8"},
      {"OMP_PROC_BIND", "spread,close"},
      {"OMP_PLACES", "cores(4)"},
      {"OMP_DYNAMIC", "false"},
      {"OMP_WAIT_POLICY", "PASSIVE"},
      {"GOMP_SPINCOUNT", "10k"},
      {"GOMP_CPU_AFFINITY", "0 3 1-2 4-15:2"},
      {"KMP_BLOCKTIME", "200ms"},
      {"KMP_AFFINITY", "granularity=fine,compact,1,0"},
      {"KMP_DUPLICATE_LIB_OK", "FALSE"},
      {"MKL_THREADING_LAYER", "gnu"},
      {"NUMBA_THREADING_LAYER", "omp"},
      {"OPENBLAS_CORETYPE", "SkylakeX"},
      {"TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX"},
      {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
      {"LD_LIBRARY_PATH", "/usr/lib/x86_64-linux-gnu:/opt/nccl/lib:$ORIGIN/../lib"},
      {"LD_PRELOAD", "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 libtcmalloc.so.4"},
      {"GLIBC_TUNABLES", "glibc.malloc.arena_max=2:glibc.pthread.rseq=0"},
      {"NCCL_DEBUG", "info"},
      {"NCCL_SOCKET_IFNAME", "eth0"},
      {"HOME", "/root"},
      {"PATH", "/usr/bin"},
  };
  CheckedEnv f = env(clean);
  EXPECT_TRUE(f.findings.empty()) << f.findings[0].rule << ": " << f.findings[0].message;
  EXPECT_EQ(f.threads.omp_num_threads, (Cpus{4, 2}));
  EXPECT_EQ(f.threads.mkl_num_threads, 4u);
  EXPECT_EQ(f.threads.openblas_num_threads, 1u);  // OPENBLAS_NUM_THREADS wins over GOTO_NUM_THREADS
  EXPECT_EQ(f.threads.numba_num_threads, 8u);
  EXPECT_EQ(f.threads.mkl_threading_layer, "GNU");
  EXPECT_EQ(f.threads.numba_threading_layer, "omp");
  ASSERT_TRUE(f.cuda_visible_devices);
  EXPECT_EQ(f.cuda_visible_devices->devices, (std::vector<std::string>{"0", "1", "2", "3"}));
  EXPECT_EQ(
      paths_of(f.ld_preload),
      (std::vector<std::string>{"/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "libtcmalloc.so.4"}));
  EXPECT_TRUE(f.rejected.empty());
  EXPECT_FALSE(f.kmp_duplicate_lib_ok);
  ASSERT_EQ(f.glibc_tunables.size(), 2u);
  // Every steering variable, sorted, and nothing else.
  std::vector<std::string> names;
  for (const EnvVar& v : f.variables) names.push_back(v.name);
  std::vector<std::string> expected;
  for (const auto& [k, v] : clean)
    if (k != "HOME" && k != "PATH") expected.push_back(k);
  EXPECT_EQ(names, expected);

  // Other accepted spellings, each alone.
  for (const Env& e : std::vector<Env>{
           {{"OMP_PLACES", "{0:4},{4:4}"}},
           {{"OMP_PLACES", "threads"}},
           {{"OMP_PROC_BIND", "TRUE"}},
           {{"KMP_BLOCKTIME", "infinite"}},
           {{"KMP_BLOCKTIME", "0"}},
           {{"GOMP_SPINCOUNT", "infinite"}},
           {{"TORCH_CUDA_ARCH_LIST", "7.5 8.6"}},
           {{"TORCH_CUDA_ARCH_LIST", "Ampere"}},
           {{"TORCH_CUDA_ARCH_LIST", "9.0a"}},
           {{"TORCH_CUDA_ARCH_LIST", ""}},
           {{"MKL_THREADING_LAYER", ""}},
           {{"CUDA_VISIBLE_DEVICES", "-1"}},
           {{"CUDA_VISIBLE_DEVICES", ""}},
           {{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}},
           {{"CUDA_VISIBLE_DEVICES", "GPU-5e4b1c7a-0f3d-4b9e-8c2a-1d6f0e9b7a35"}},
           {{"LD_LIBRARY_PATH", ""}},
           {{"KMP_DUPLICATE_LIB_OK", "0"}},
           {{"NCCL_DEBUG", "WARN"}},
           {{"GOTO_NUM_THREADS", "3"}},
       }) {
    CheckedEnv g = env(e);
    EXPECT_TRUE(g.findings.empty())
        << e.begin()->first << "=\"" << e.begin()->second
        << "\": " << (g.findings.empty() ? "" : g.findings[0].rule + " " + g.findings[0].message);
  }
  EXPECT_EQ(env({{"GOTO_NUM_THREADS", "3"}}).threads.openblas_num_threads, 3u);
}

// The live machine ////////////////////////////////////////////////////////////////

TEST(LiveHost, UsableCpusAgreeWithNproc) {
  HostFacts f = collect_host_facts(host::Host::live());
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  ASSERT_TRUE(f.cpu.affinity);
  EXPECT_EQ(f.cpu.affinity->size(), static_cast<size_t>(CPU_COUNT(&set)));

  // nproc counts the affinity mask (and honours OMP_NUM_THREADS, so unset it).
  test::CommandResult r = test::run_command("env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc");
  ASSERT_EQ(r.status, 0);
  u32 nproc = static_cast<u32>(std::stoul(r.out));
  ASSERT_TRUE(f.cpu.usable);
  if (f.cpu.quota)
    EXPECT_LE(*f.cpu.usable, nproc);  // a CFS quota may lower it; nproc ignores v1 quotas
  else
    EXPECT_EQ(*f.cpu.usable, nproc);
  EXPECT_TRUE(f.memory.total_bytes);
  EXPECT_TRUE(f.limits.nofile.known);
  EXPECT_EQ(f.limits.nofile.source, "getrlimit");
  EXPECT_TRUE(f.kernel_release);
}

TEST(LiveHost, GlibcTunablesDoNotThrow) {
  host::Host live = host::Host::live();
  std::string tunables = live.getenv("GLIBC_TUNABLES").value_or("glibc.malloc.arena_max=2");
  EXPECT_NO_THROW(parse_glibc_tunables(tunables));
  EXPECT_NO_THROW(collect_env_facts(live));
  live.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2:=::x:glibc.rtld.nns");
  EnvFacts f;
  ASSERT_NO_THROW(f = collect_env_facts(live));
  ASSERT_EQ(f.glibc_tunables.size(), 1u);
  EXPECT_EQ(f.glibc_tunables[0].key, "glibc.malloc.arena_max");
}

// ─── system-packages.cc ─────────────────────────────────────────────────────

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

}  // namespace

// A dpkg database as Debian 12 has it: a Multi-Arch package's list named
// with its architecture, libc6 listing /lib paths (not usrmerged), a status
// file with two architectures of one package.
TEST(SystemPackages, DpkgListsUsrmergeAndArchitectures) {
  fs::path root = fs::temp_directory_path() / ("mld-dpkg-" + std::to_string(::getpid()));
  fs::remove_all(root);
  write(root / "var/lib/dpkg/info/libgomp1:amd64.list",
        "/.\n/usr\n/usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0\n"
        "/usr/lib/x86_64-linux-gnu/libgomp.so.1\n");
  write(root / "var/lib/dpkg/info/libc6:amd64.list", "/lib/x86_64-linux-gnu/libc.so.6\n");
  write(root / "var/lib/dpkg/info/libomp5-14.list", "/usr/lib/llvm-14/lib/libomp.so.5\n");
  write(root / "var/lib/dpkg/info/broken.md5sums", "/usr/lib/x86_64-linux-gnu/libx.so\n");
  write(root / "var/lib/dpkg/status",
        "Package: libgomp1\nStatus: install ok installed\nArchitecture: i386\nVersion: 1-i386\n\n"
        "Package: libgomp1\nStatus: install ok installed\nArchitecture: amd64\n"
        "Version: 12.2.0-14+deb12u1\n\nPackage: libc6\nArchitecture: amd64\nVersion: 2.36-9\n\n"
        "Package: libomp5-14\nArchitecture: amd64\nVersion: 1:14.0.6-12");
  fs::create_directories(root / "usr/lib/x86_64-linux-gnu");
  write(root / "usr/lib/x86_64-linux-gnu/libgomp.so.1.0.0", "");
  fs::create_symlink("libgomp.so.1.0.0", root / "usr/lib/x86_64-linux-gnu/libgomp-alias.so.1");
  fs::create_symlink("usr/lib", root / "lib");

  host::Host h(root.string(), {});
  SystemPackages sp(h);
  EXPECT_EQ(sp.owner("/usr/lib/x86_64-linux-gnu/libgomp.so.1"),
            std::optional<std::string>("libgomp1 12.2.0-14+deb12u1 (dpkg)"));
  // The loader's spelling through the /lib symlink, and a link dpkg does not list.
  EXPECT_EQ(sp.owner("/lib/x86_64-linux-gnu/libgomp.so.1"),
            sp.owner("/usr/lib/x86_64-linux-gnu/libgomp.so.1"));
  EXPECT_EQ(sp.owner("/usr/lib/x86_64-linux-gnu/libgomp-alias.so.1"),
            std::optional<std::string>("libgomp1 12.2.0-14+deb12u1 (dpkg)"));
  EXPECT_EQ(sp.owner("/usr/lib/x86_64-linux-gnu/libc.so.6"),
            std::optional<std::string>("libc6 2.36-9 (dpkg)"));
  EXPECT_EQ(sp.owner("/usr/lib/llvm-14/lib/libomp.so.5"),
            std::optional<std::string>("libomp5-14 1:14.0.6-12 (dpkg)"));
  EXPECT_EQ(sp.owner("/usr/lib/x86_64-linux-gnu/libx.so"), std::nullopt);  // not a .list
  EXPECT_EQ(sp.owner("/opt/conda/lib/libgomp.so.1"), std::nullopt);
  EXPECT_TRUE(sp.has_database());
  fs::remove_all(root);

  // No dpkg at all: nothing, and no error.
  host::Host empty(fixture_root("two-numa"), {});
  SystemPackages none(empty);
  EXPECT_EQ(none.owner("/usr/lib/x86_64-linux-gnu/libgomp.so.1"), std::nullopt);
  EXPECT_FALSE(none.has_database());
}

// Oracle: dpkg itself, on this machine, for the system's libgomp and libc.
TEST(SystemPackages, AgreesWithDpkgQuery) {
  if (!fs::exists("/var/lib/dpkg/status") || test::run_command("command -v dpkg-query").status)
    GTEST_SKIP() << "no dpkg on this machine";
  const host::Host live = host::Host::live();
  SystemPackages sp(live);
  int compared = 0;
  for (const char* lib : {"libgomp.so.1", "libc.so.6", "libstdc++.so.6"}) {
    test::CommandResult where = test::run_command(std::string("ldconfig -p | awk '$1 == \"") + lib +
                                                  "\" && /x86-64/ { print $NF; exit }'");
    std::string path(trim(where.out));
    if (path.empty()) continue;
    // dpkg -S answers "<package>[:arch]: <path>" for the path dpkg lists.
    std::string real = fs::canonical(path).string();
    test::CommandResult s =
        test::run_command("dpkg -S " + real + " 2>/dev/null || dpkg -S " + path + " 2>/dev/null");
    std::string package = s.out.substr(0, s.out.find_first_of(":,"));
    ASSERT_FALSE(package.empty()) << "dpkg -S " << real;
    test::CommandResult v =
        test::run_command("dpkg-query -W -f='${Version}' " + s.out.substr(0, s.out.find(": ")));
    EXPECT_EQ(sp.owner(path), package + " " + v.out + " (dpkg)") << path;
    compared++;
  }
  EXPECT_GE(compared, 2);
}
