// cpu-topology-test.cc — the CPUID dump format, the model of PyTorch's
// cpuinfo counts and torch's default intra-op thread count per build rule,
// on the CPU fixtures of test/fixtures/cpus (real machines) and
// test/fixtures/cpus-derived (one documented change each) and
// test/fixtures/cpus-qemu (snapshots of QEMU guests). Every expected
// number is in the fixture's `expected` file: the cpuinfo counts were
// produced by the real cpuinfo code run on the tree (SOURCE.md says how), the
// torch counts per rule are written out per fixture. No test here depends on
// the CPU it runs on, except the live capture's round trip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "check/check.h"
#include "hostfacts/hostfacts.h"

using namespace mld;
namespace fs = std::filesystem;

namespace {

fs::path fixtures_dir(const std::string& kind) {
  if (const char* src = std::getenv("MLD_SOURCE_DIR"))
    return fs::path(src) / "test" / "fixtures" / kind;
  return fs::path(__FILE__).parent_path().parent_path() / "fixtures" / kind;
}

std::map<std::string, std::string> read_expected(const fs::path& dir) {
  std::map<std::string, std::string> kv;
  std::ifstream in(dir / "expected");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

std::vector<fs::path> fixtures() {
  std::vector<fs::path> out;
  for (const char* kind : {"cpus", "cpus-derived", "cpus-qemu"}) {
    const fs::path base = fixtures_dir(kind);
    if (!fs::is_directory(base)) continue;
    for (const fs::directory_entry& e : fs::directory_iterator(base))
      if (e.is_directory() && fs::exists(e.path() / "expected")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<u32> number(const std::map<std::string, std::string>& kv, const std::string& key) {
  auto it = kv.find(key);
  if (it == kv.end() || it->second == "unknown") return std::nullopt;
  return static_cast<u32>(std::stoul(it->second));
}

// The report torch_default_threads() reads: the tree's facts, glibc 2.36.
check::CheckReport report_for(const host::Host& host, std::map<std::string, std::string> env = {}) {
  check::CheckReport r;
  r.facts = hostfacts::collect(host);
  for (auto& [k, v] : env) r.facts.env.variables.push_back({k, v});
  r.glibc = loader::GlibcVersion{2, 36};
  return r;
}

check::TorchBuildFacts torch(const std::string& version, bool mkl = false,
                             std::optional<bool> exports = {}) {
  check::TorchBuildFacts b;
  b.installed = true;
  b.build.known = true;
  b.build.version = version;
  int major = 0, minor = 0;
  std::sscanf(version.c_str(), "%d.%d", &major, &minor);
  b.build.major = major;
  b.build.minor = minor;
  b.build.config_h = "/torch/include/ATen/Config.h";
  b.build.mkl_enabled = mkl;
  b.build.mkl_sequential = false;
  b.build.parallel_openmp = true;
  b.exports_default_num_threads = exports;
  return b;
}

}  // namespace

// ─── the CPUID dump ─────────────────────────────────────────────────────────

TEST(CpuidDump, ParsesCpuidRawFormat) {
  const std::string text =
      "CPU 0:\n"
      "   0x00000000 0x00: eax=0x00000010 ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
      "   0x0000000b 0x01: eax=0x00000005 ebx=0x00000002 ecx=0x00000201 edx=0x00000001\n"
      "CPU 1:\n"
      "   0x00000000 0x00: eax=0x00000011 ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n";
  std::string error;
  std::optional<host::CpuidDump> d = host::parse_cpuid_dump(text, &error);
  ASSERT_TRUE(d) << error;
  EXPECT_EQ(d->cpu, 0u);
  EXPECT_EQ(d->vendor(), "AuthenticAMD");
  EXPECT_EQ(d->query(0).eax, 0x10u);
  EXPECT_EQ(d->query(0xB, 1).ecx, 0x201u);
  EXPECT_FALSE(d->has(0xB, 2));
  EXPECT_EQ(d->query(0xB, 2).eax, 0u);  // not recorded: zeros
  std::optional<host::CpuidDump> second = host::parse_cpuid_dump(text, &error, 1);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->query(0).eax, 0x11u);
  // Round trip through the writer.
  std::optional<host::CpuidDump> again =
      host::parse_cpuid_dump(host::format_cpuid_dump(*d), &error);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->leaves.size(), d->leaves.size());
  EXPECT_EQ(again->query(0xB, 1).ebx, 2u);
}

TEST(CpuidDump, RejectsDamagedLines) {
  std::string error;
  EXPECT_FALSE(
      host::parse_cpuid_dump("CPU 0:\n   0x00000000 0x00: eax=0x1 ebx=zz ecx=0 edx=0\n", &error));
  EXPECT_NE(error.find("line 2"), std::string::npos) << error;
  EXPECT_FALSE(host::parse_cpuid_dump("   0x00000000 0x00: eax=0x1 ebx=0x2\n",
                                      &error));  // registers missing
  EXPECT_FALSE(host::parse_cpuid_dump("", &error));
  EXPECT_FALSE(host::parse_cpuid_dump(std::string("\x7f"
                                                  "ELF\x02\x01\x01\0\0\0",
                                                  10),
                                      &error));
  EXPECT_FALSE(
      host::parse_cpuid_dump("CPU 0:\n   0x0 0x0: eax=0x1 ebx=0x2 ecx=0x3 edx=0x4\n", &error, 5));
}

#if defined(__x86_64__)
TEST(CpuidDump, LiveCaptureRoundTrips) {
  std::string why;
  std::optional<host::CpuidDump> live = host::Host::live().cpuid(&why);
  ASSERT_TRUE(live) << why;
  EXPECT_TRUE(live->has(0));
  EXPECT_GE(live->query(0).eax, 1u);
  std::string error;
  std::optional<host::CpuidDump> again =
      host::parse_cpuid_dump(host::format_cpuid_dump(*live), &error);
  ASSERT_TRUE(again) << error;
  EXPECT_EQ(again->leaves.size(), live->leaves.size());
  EXPECT_EQ(again->vendor(), live->vendor());
}
#endif

// ─── cpuinfo's counts on real and derived CPUs ──────────────────────────────

TEST(CpuinfoCount, EveryFixtureAsTheRealCpuinfoCountsIt) {
  std::vector<fs::path> all = fixtures();
  ASSERT_GE(all.size(), 8u) << "CPU fixtures missing under " << fixtures_dir("cpus");
  for (const fs::path& dir : all) {
    SCOPED_TRACE(dir.string());
    std::map<std::string, std::string> kv = read_expected(dir);
    host::Host host(dir.string(), {});
    const std::string arch = hostfacts::analysed_architecture(host);
    EXPECT_EQ(arch, kv["arch"]);
    hostfacts::CpuinfoCounts c = hostfacts::count_cpuinfo(host, arch);
    std::optional<u32> processors = number(kv, "processors"), cores = number(kv, "cpuinfo_cores");
    if (!processors) {
      EXPECT_FALSE(c.unknown.empty()) << "expected unknown counts";
      EXPECT_FALSE(c.processors);
      continue;
    }
    EXPECT_TRUE(c.unknown.empty()) << c.unknown;
    EXPECT_TRUE(c.initialised);
    EXPECT_EQ(c.processors, processors);
    EXPECT_EQ(c.cores, cores);
    if (std::optional<u32> pre = number(kv, "processors_arm_pre_20bd32c")) {
      EXPECT_EQ(c.arm_unlisted_processors, pre);
    }
    EXPECT_FALSE(c.steps.empty());
  }
}

// sched_getaffinity(2) drops inactive CPUs from the task's mask; the status
// file keeps them. A guest booted with maxcpus=3 of 8: numba counts 3.
TEST(Affinity, OfflineCpusAreNotCounted) {
  host::Host host((fixtures_dir("cpus-qemu") / "qemu-spr-smt-maxcpus3").string(), {});
  hostfacts::CpuFacts cpu = hostfacts::collect_cpu_facts(host);
  ASSERT_TRUE(cpu.online);
  EXPECT_EQ(*cpu.online, (std::vector<u32>{0, 1, 2}));
  ASSERT_TRUE(cpu.affinity);
  EXPECT_EQ(*cpu.affinity, (std::vector<u32>{0, 1, 2}));  // Cpus_allowed_list says 0-7
  EXPECT_NE(cpu.affinity_source.find("online"), std::string::npos) << cpu.affinity_source;
  EXPECT_EQ(cpu.usable, 3u);
}

// ─── torch's default on every fixture, per build rule ───────────────────────

TEST(TorchDefaultThreads, EveryFixtureEveryRule) {
  for (const fs::path& dir : fixtures()) {
    SCOPED_TRACE(dir.string());
    std::map<std::string, std::string> kv = read_expected(dir);
    host::Host host(dir.string(), {});
    const check::CheckReport r = report_for(host);
    const std::pair<const char*, const char*> rules[] = {{"1.13.0a0", "torch_lt_2_2"},
                                                         {"2.2.1", "torch_2_2"},
                                                         {"2.4.1+cpu", "torch_2_4"},
                                                         {"2.14.0", "torch_2_14"}};
    for (auto [version, key] : rules) {
      SCOPED_TRACE(version);
      ASSERT_TRUE(kv.count(key)) << "no " << key << " in expected";
      check::TorchBuildFacts b = torch(version);
      b.e_machine = kv["arch"] == "aarch64" ? elf::EM_AARCH64 : elf::EM_X86_64;
      check::TorchThreads t = check::torch_default_threads(b, r);
      EXPECT_TRUE(t.torch);
      EXPECT_FALSE(t.rule.empty());
      EXPECT_EQ(t.count, number(kv, key)) << t.rule << " / " << t.basis << " / " << t.unknown;
      if (!t.count) {
        EXPECT_FALSE(t.unknown.empty());
      }
    }
  }
}

TEST(TorchDefaultThreads, EnvironmentFirstWithStoiSemantics) {
  host::Host host((fixtures_dir("cpus") / "intel-clx-6230-2s-smt").string(), {});
  auto count = [&](std::map<std::string, std::string> env, bool mkl = false) {
    check::CheckReport r = report_for(host, env);
    r.facts.env.threads.mkl_num_threads.reset();
    if (env.count("MKL_NUM_THREADS"))
      r.facts.env.threads.mkl_num_threads =
          static_cast<u32>(std::atoi(env["MKL_NUM_THREADS"].c_str()));
    if (env.count("OMP_NUM_THREADS"))
      r.facts.env.threads.omp_num_threads =
          std::vector<u32>{static_cast<u32>(std::atoi(env["OMP_NUM_THREADS"].c_str()))};
    return check::torch_default_threads(torch("1.13.0a0", mkl), r).count;
  };
  EXPECT_EQ(count({{"OMP_NUM_THREADS", "3"}}), 3u);
  EXPECT_EQ(count({{"OMP_NUM_THREADS", "4,2"}}), 4u);  // std::stoi stops at ','
  EXPECT_EQ(count({{"OMP_NUM_THREADS", " 7"}}), 7u);   // leading blanks pass
  EXPECT_EQ(count({{"OMP_NUM_THREADS", "2"}, {"MKL_NUM_THREADS", "5"}}), 5u);  // MKL over OMP
  EXPECT_EQ(count({{"OMP_NUM_THREADS", "3"}, {"MKL_NUM_THREADS", "abc"}}),
            3u);                                      // invalid MKL ignored
  EXPECT_EQ(count({{"OMP_NUM_THREADS", "0"}}), 40u);  // <= 0 ignored: the default (80 online / 2)
  EXPECT_EQ(count({{"OMP_NUM_THREADS", "-2"}}), 40u);
  EXPECT_EQ(count({{"OMP_NUM_THREADS", "99999999999"}}), 40u);  // out of range
  // An MKL build takes mkl_get_max_threads(): known only when a variable sets it.
  EXPECT_EQ(count({{"MKL_NUM_THREADS", "6"}}, true), 6u);
  EXPECT_EQ(count({}, true), std::nullopt);
}

TEST(TorchDefaultThreads, SaysWhyItCannotKnow) {
  host::Host host((fixtures_dir("cpus") / "kvm-qemu64-6vcpu").string(), {});
  check::CheckReport r = report_for(host);
  // MKL unknown: no Config.h and no build string.
  check::TorchBuildFacts b = torch("2.4.1");
  b.build.mkl_enabled.reset();
  b.build.config_h.reset();
  check::TorchThreads t = check::torch_default_threads(b, r);
  EXPECT_FALSE(t.count);
  EXPECT_NE(t.unknown.find("MKL"), std::string::npos) << t.unknown;
  // ... unless the environment decides either way.
  check::CheckReport pinned = report_for(host, {{"OMP_NUM_THREADS", "2"}});
  pinned.facts.env.threads.omp_num_threads = std::vector<u32>{2};
  EXPECT_EQ(check::torch_default_threads(b, pinned).count, 2u);
  // An unreadable version.
  check::TorchBuildFacts v = torch("2.4.1");
  v.build.major.reset();
  v.build.minor.reset();
  v.build.version = "unknown";
  EXPECT_FALSE(check::torch_default_threads(v, r).count);
  // The version and libc10 disagree (a 2.x version, libc10 without the symbol).
  check::TorchThreads d = check::torch_default_threads(torch("2.4.1", false, false), r);
  EXPECT_FALSE(d.count);
  EXPECT_NE(d.unknown.find("disagree"), std::string::npos) << d.unknown;
  // The 2.4 rule on an x86 tree without a CPUID dump.
  const fs::path tmp = fs::temp_directory_path() / ("mld-cpu-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::copy(fixtures_dir("cpus") / "kvm-qemu64-6vcpu", tmp, fs::copy_options::recursive);
  fs::remove(tmp / ".mldoctor" / "cpuid");
  host::Host bare(tmp.string(), {});
  check::TorchThreads u = check::torch_default_threads(torch("2.4.1"), report_for(bare));
  EXPECT_FALSE(u.count);
  EXPECT_NE(u.unknown.find("CPUID"), std::string::npos) << u.unknown;
  // The < 2.2 rule needs no CPUID: online CPUs / 2.
  EXPECT_EQ(check::torch_default_threads(torch("1.13.0a0"), report_for(bare)).count, 3u);
  fs::remove_all(tmp);
}

// torch 2.14's cap as Debian's libc10.so.2.14.1 computes it (disassembled):
// sched_getaffinity(0, 128 bytes, ...) fails on a kernel with more than 1024
// CPU ids and then caps nothing; on the hardware_concurrency() path a 0 takes
// the mask's count.
TEST(TorchDefaultThreads, Torch214AffinityCapAsLibc10Does) {
  host::Host host((fixtures_dir("cpus") / "intel-clx-6230-2s-smt").string(), {});
  check::CheckReport r = report_for(host);
  r.facts.host.cpu.affinity = std::vector<u32>{0, 1, 2};
  const std::optional<u32> capped = check::torch_default_threads(torch("2.14.0"), r).count;
  EXPECT_EQ(capped, 3u);
  EXPECT_EQ(check::torch_default_threads(torch("2.13.0"), r).count,
            number(read_expected(fixtures_dir("cpus") / "intel-clx-6230-2s-smt"), "torch_2_4"));
  std::vector<u32> possible;
  for (u32 c = 0; c < 1025; c++) possible.push_back(c);
  r.facts.host.cpu.possible = possible;
  check::TorchThreads wide = check::torch_default_threads(torch("2.14.0"), r);
  EXPECT_EQ(wide.count, check::torch_default_threads(torch("2.13.0"), r).count) << wide.basis;
  EXPECT_NE(wide.basis.find("1024"), std::string::npos) << wide.basis;
  // cpuinfo fails and get_nprocs() says 0: the mask's count, not 1.
  check::CheckReport z = report_for(host);
  z.facts.host.cpuinfo.initialised = false;
  z.facts.host.cpu.online = std::vector<u32>{};
  z.facts.host.cpu.affinity = std::vector<u32>{0, 1, 2, 3};
  EXPECT_EQ(check::torch_default_threads(torch("2.14.0"), z).count, 4u);
  EXPECT_EQ(check::torch_default_threads(torch("2.13.0"), z).count, 1u);
}

// ─── THR002 from the facts ──────────────────────────────────────────────────

namespace {

// A replayed `import torch, numba` whose torch._C and numba's omppool both
// resolve libgomp.so.1 to one object.
check::ImportSimulation shared_libgomp() {
  check::ImportSimulation sim;
  sim.numba_layer = "omp";
  auto object = [&](std::string path, std::string by) {
    loader::Object o;
    o.path = std::move(path);
    sim.process.objects.push_back(std::move(o));
    sim.loaded_by.push_back(std::move(by));
  };
  object("/usr/bin/python3.11", "the interpreter");
  object("/usr/lib/x86_64-linux-gnu/libgomp.so.1", "import torch (torch._C)");
  object("/usr/lib/python3/dist-packages/torch/_C.so", "import torch (torch._C)");
  object("/usr/lib/python3/dist-packages/numba/np/ufunc/omppool.so",
         "numba's first parallel call (omppool)");
  for (size_t i : {2, 3}) {
    loader::Resolution res;
    res.name = "libgomp.so.1";
    res.object = 1;
    sim.process.objects[i].needed.push_back(res);
  }
  return sim;
}

std::vector<Finding> thr002(const check::CheckReport& r) {
  // The facts check gathers, then every detector: THR002's findings.
  detect::Facts facts;
  facts.host = &r.facts;
  facts.threads = check::thread_pools(r);
  std::vector<Finding> out;
  for (Finding& f : detect::findings(detect::run_detectors(facts), rules::RuleSet()))
    if (f.rule == "THR002") out.push_back(std::move(f));
  return out;
}

}  // namespace

TEST(Thr002, KnownCountsDecide) {
  host::Host host((fixtures_dir("cpus") / "kvm-qemu64-6vcpu").string(), {});
  check::CheckReport r = report_for(host);
  r.imports = shared_libgomp();
  r.torch_threads = check::torch_default_threads(torch("1.13.0a0"), r);  // 6 online / 2 = 3
  ASSERT_EQ(r.torch_threads.count, 3u);
  r.facts.host.cpu.affinity = std::vector<u32>{0, 1, 2, 3, 4, 5};  // numba: 6
  std::vector<Finding> f = thr002(r);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("from 3 to 6"), std::string::npos) << f[0].message;
  EXPECT_EQ(f[0].env_fix, std::vector<std::string>{"NUMBA_NUM_THREADS=3"});
  // numba asking for torch's count: nothing changes.
  r.facts.env.threads.numba_num_threads = 3;
  EXPECT_TRUE(thr002(r).empty());
}

TEST(Thr002, WarnsWithItsReasonWhenTorchCannotBeKnown) {
  host::Host host((fixtures_dir("cpus") / "kvm-qemu64-6vcpu").string(), {});
  check::CheckReport r = report_for(host);
  r.imports = shared_libgomp();
  check::TorchBuildFacts b = torch("2.4.1");
  b.build.mkl_enabled.reset();
  b.build.config_h.reset();
  r.torch_threads = check::torch_default_threads(b, r);
  ASSERT_FALSE(r.torch_threads.count);
  r.facts.host.cpu.affinity = std::vector<u32>{0, 1, 2, 3, 4, 5};
  r.facts.host.cpu.usable = 6;
  for (std::optional<u32> numba : {std::optional<u32>(), std::optional<u32>(3)}) {
    r.facts.env.threads.numba_num_threads = numba;
    std::vector<Finding> f = thr002(r);
    ASSERT_EQ(f.size(), 1u) << "a false \"no findings\" when torch's count is unknown";
    EXPECT_NE(f[0].message.find("not certain"), std::string::npos) << f[0].message;
    EXPECT_NE(f[0].message.find("MKL"), std::string::npos) << f[0].message;
    // The fix that is right either way: both pools pinned to one value.
    EXPECT_EQ(f[0].env_fix, (std::vector<std::string>{"OMP_NUM_THREADS=6", "NUMBA_NUM_THREADS=6"}));
  }
  // No shared runtime (numba's layer is not omp): nothing to say.
  r.imports->numba_layer = "workqueue";
  EXPECT_TRUE(thr002(r).empty());
}
