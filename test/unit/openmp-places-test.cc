// openmp-places-test.cc — the topologies GNU libgomp and LLVM libomp see
// (hostfacts/openmp-topology.cc) and the places they bind threads to
// (openmp-places.cc): on the real CPU dumps of test/fixtures/cpus (an AMD
// EPYC 7451 without CPUID leaf 0xB, an Intel Xeon with it, the CI machine
// kind's AMD guest with it), on the CPUID answers of this project's AMD EPYC
// test VM that hides leaf 0xB (recorded with `mldoctor snapshot`, see
// kNoLeafB below), and on the rules of which variable wins in each runtime
// (measured with Debian's libgomp 12 and LLVM libomp 14:
// test/e2e/scenario-thr004-binding.py runs the real programs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "hostfacts/hostfacts.h"

using namespace mld;
namespace fs = std::filesystem;

namespace {

fs::path fixture(const std::string& kind, const std::string& name) {
  if (const char* src = std::getenv("MLD_SOURCE_DIR"))
    return fs::path(src) / "test" / "fixtures" / kind / name;
  return fs::path(__FILE__).parent_path().parent_path() / "fixtures" / kind / name;
}

hostfacts::OpenMpTopology topology_of(const std::string& kind, const std::string& name,
                                      std::vector<u32> mask) {
  host::Host h(fixture(kind, name).string(), {});
  return hostfacts::model_openmp_topology(
      hostfacts::read_openmp_topology_inputs(h, "x86_64", mask));
}

std::vector<u32> range(u32 n) {
  std::vector<u32> v;
  for (u32 i = 0; i < n; i++) v.push_back(i);
  return v;
}

// The topology leaves of the AMD EPYC (family 0x1a) KVM guest this project's
// tests run on, as `mldoctor snapshot` recorded them (.mldoctor/cpuid, CPU
// 0 and CPU 1 sections): the highest basic leaf is 0xd, leaf 4 and leaf 0xB
// answer zeros (the hypervisor hides them), leaf 1 gives 254 logical
// processors per package and, per vCPU, a legacy APIC ID that is not the
// one of /proc/cpuinfo (0 and 1 there).
const char* kNoLeafB =
    "CPU 0:\n"
    "   0x00000000 0x00: eax=0x0000000d ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
    "   0x00000001 0x00: eax=0x00b00f21 ebx=0x2bfe0800 ecx=0xfed83203 edx=0x178bfbff\n"
    "   0x00000004 0x00: eax=0x00000000 ebx=0x00000000 ecx=0x00000000 edx=0x00000000\n"
    "   0x0000000b 0x00: eax=0x00000000 ebx=0x00000000 ecx=0x00000000 edx=0x00000000\n"
    "   0x80000000 0x00: eax=0x80000021 ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
    "   0x80000001 0x00: eax=0x00b00f21 ebx=0x40000000 ecx=0x440001f1 edx=0x25d3fbff\n"
    "   0x80000008 0x00: eax=0x00003030 ebx=0x20000005 ecx=0x00000000 edx=0x00000000\n"
    "CPU 1:\n"
    "   0x00000000 0x00: eax=0x0000000d ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
    "   0x00000001 0x00: eax=0x00b00f21 ebx=0xcffe0800 ecx=0xfed83203 edx=0x178bfbff\n"
    "   0x00000004 0x00: eax=0x00000000 ebx=0x00000000 ecx=0x00000000 edx=0x00000000\n"
    "   0x0000000b 0x00: eax=0x00000000 ebx=0x00000000 ecx=0x00000000 edx=0x00000000\n"
    "   0x80000000 0x00: eax=0x80000021 ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
    "   0x80000001 0x00: eax=0x00b00f21 ebx=0x40000000 ecx=0x440001f1 edx=0x25d3fbff\n"
    "   0x80000008 0x00: eax=0x00003030 ebx=0x20000005 ecx=0x00000000 edx=0x00000000\n";

// The kernel's view of that guest: two cores of one thread.
hostfacts::OpenMpTopologyInputs no_leaf_b_inputs(bool per_cpu = true) {
  hostfacts::OpenMpTopologyInputs in;
  in.arch = "x86_64";
  in.mask = {0, 1};
  std::string error;
  std::optional<std::map<u32, host::CpuidDump>> dumps = host::parse_cpuid_dumps(kNoLeafB, &error);
  EXPECT_TRUE(dumps) << error;
  if (per_cpu) in.cpuid = *dumps;
  in.any_cpuid = dumps->at(0);
  in.proc_cpuinfo =
      "processor\t: 0\nvendor_id\t: AuthenticAMD\nphysical id\t: 0\ncore id\t\t: 0\napicid\t\t: "
      "0\ninitial apicid\t: 0\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\nphysical id\t: "
      "0\ncore id\t\t: 1\napicid\t\t: 1\ninitial apicid\t: 1\n\n";
  for (u32 c : in.mask) {
    in.sysfs[c].core_cpus = std::to_string(c) + "\n";
    in.sysfs[c].package_cpus = "0-1\n";
  }
  return in;
}

hostfacts::EnvFacts env(std::vector<hostfacts::EnvVar> vars) {
  hostfacts::EnvFacts e;
  e.variables = std::move(vars);
  return e;
}

hostfacts::OmpPlaces gnu(const hostfacts::OpenMpTopology& t, std::vector<hostfacts::EnvVar> v) {
  return hostfacts::omp_places(hostfacts::OmpRuntime::Gnu, env(std::move(v)), t, {});
}
hostfacts::OmpPlaces llvm(const hostfacts::OpenMpTopology& t, std::vector<hostfacts::EnvVar> v) {
  return hostfacts::omp_places(hostfacts::OmpRuntime::Llvm, env(std::move(v)), t, {});
}

std::string places(const hostfacts::OmpPlaces& p) {
  return p.places ? hostfacts::format_places(*p.places, 100) : "unknown: " + p.unknown;
}

}  // namespace

// ─── what each runtime sees ────────────────────────────────────────────────

TEST(OpenMpTopology, AmdWithoutLeafBIsOneCoreToLibompAndTwoToLibgomp) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  ASSERT_EQ(t.llvm.unknown, "");
  EXPECT_TRUE(t.llvm.legacy_apic);
  EXPECT_EQ(t.llvm.method, "legacy APIC IDs (CPUID leaves 1 and 4)");
  ASSERT_EQ(t.llvm.skipped.size(), 2u);
  EXPECT_EQ(t.llvm.skipped[0], "CPUID leaf 0x1f absent (highest basic leaf 0xd)");
  EXPECT_EQ(t.llvm.skipped[1],
            "CPUID leaf 0xb not supported: sub-leaf 0 reports no logical processors (EBX=0)");
  EXPECT_EQ(t.llvm.packages, 1u);
  EXPECT_EQ(t.llvm.cores, 1u);
  // APIC IDs 43 and 207 under 8 bits of logical processors: threads of core 0.
  ASSERT_EQ(t.llvm.cpus.size(), 2u);
  EXPECT_EQ(t.llvm.cpus[0].thread, 43u);
  EXPECT_EQ(t.llvm.cpus[1].thread, 207u);
  EXPECT_EQ(t.llvm.ids_from, "the CPUID answers of each CPU");
  ASSERT_FALSE(t.llvm.steps.empty());
  EXPECT_NE(t.llvm.steps.back().find("254 logical processors per package (8 APIC ID bits)"),
            std::string::npos)
      << t.llvm.steps.back();
  EXPECT_NE(t.llvm.steps.back().find("leaf 4 is all zero as on AMD"), std::string::npos);
  EXPECT_EQ(t.gomp.unknown, "");
  EXPECT_EQ(t.gomp.core_cpus.at(0), std::vector<u32>{0});
  EXPECT_EQ(t.gomp.core_cpus.at(1), std::vector<u32>{1});
}

TEST(OpenMpTopology, WithoutPerCpuLeavesTheApicIdsComeFromProcCpuinfo) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs(false));
  ASSERT_EQ(t.llvm.unknown, "");
  EXPECT_EQ(t.llvm.cores, 1u);  // leaf 4 gives no core bits whatever the IDs
  EXPECT_NE(t.llvm.ids_from.find("APIC IDs of /proc/cpuinfo for 2 CPU(s)"), std::string::npos)
      << t.llvm.ids_from;
  EXPECT_EQ(t.llvm.cpus[1].thread, 1u);
}

TEST(OpenMpTopology, DuplicateLegacyApicIdsFallBackToProcCpuinfo) {
  // Two vCPUs answering one legacy APIC ID: libomp's check fails
  // (LegacyApicIDsNotUnique) and /proc/cpuinfo's core ids are used.
  hostfacts::OpenMpTopologyInputs in = no_leaf_b_inputs();
  in.cpuid.at(1).leaves[{1, 0}].ebx = in.cpuid.at(0).query(1).ebx;
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(in);
  EXPECT_EQ(t.llvm.method, "/proc/cpuinfo");
  EXPECT_EQ(t.llvm.cores, 2u);
  ASSERT_EQ(t.llvm.skipped.size(), 3u);
  EXPECT_EQ(t.llvm.skipped[2],
            "legacy APIC IDs (CPUID leaves 1 and 4): CPUs 0 and 1 have one APIC ID (43)");
}

TEST(OpenMpTopology, RealAmdEpyc7451WithoutLeafB) {
  // Zen 1 has no leaf 0xB: every CPU's legacy APIC ID (48 logical
  // processors per package, 6 bits) splits the two sockets, and leaf 4 is
  // zero, so libomp sees each socket as one core of 48 threads.
  const hostfacts::OpenMpTopology t = topology_of("cpus", "amd-epyc7451-2s-smt", range(96));
  ASSERT_EQ(t.llvm.unknown, "");
  EXPECT_EQ(t.llvm.method, "legacy APIC IDs (CPUID leaves 1 and 4)");
  EXPECT_EQ(t.llvm.ids_from, "the CPUID answers of each CPU");
  EXPECT_EQ(t.llvm.packages, 2u);
  EXPECT_EQ(t.llvm.cores, 2u);
  ASSERT_EQ(t.gomp.unknown, "");
  // libgomp's cores from sysfs: two CPUs each.
  EXPECT_EQ(t.gomp.core_cpus.at(0).size(), 2u);
  const hostfacts::OmpPlaces g = gnu(t, {{"OMP_PLACES", "cores"}});
  const hostfacts::OmpPlaces l = llvm(t, {{"OMP_PLACES", "cores"}});
  ASSERT_TRUE(g.places && l.places);
  EXPECT_EQ(g.places->size(), 48u);
  ASSERT_EQ(l.places->size(), 2u);
  EXPECT_EQ(l.places->at(0).size(), 48u);
  EXPECT_TRUE(l.pins(range(96)));  // two sockets: still pinned, per socket
}

TEST(OpenMpTopology, RealIntelXeonWithLeafB) {
  const hostfacts::OpenMpTopology t = topology_of("cpus", "intel-clx-6230-2s-smt", range(80));
  ASSERT_EQ(t.llvm.unknown, "");
  EXPECT_EQ(t.llvm.method, "x2APIC IDs (CPUID leaf 0xb)");
  EXPECT_EQ(t.llvm.skipped,
            std::vector<std::string>{"CPUID leaf 0x1f absent (highest basic leaf 0x16)"});
  EXPECT_EQ(t.llvm.packages, 2u);
  EXPECT_EQ(t.llvm.cores, 40u);
  const hostfacts::OmpPlaces l = llvm(t, {{"OMP_PROC_BIND", "spread"}});
  const hostfacts::OmpPlaces g = gnu(t, {{"OMP_PLACES", "cores"}});
  ASSERT_TRUE(l.places && g.places);
  EXPECT_EQ(l.places->size(), 40u);
  EXPECT_EQ(*l.places, *g.places);  // both runtimes agree where leaf 0xB exists
}

TEST(OpenMpTopology, CiAmdGuestWithLeafB) {
  // The CI machine kind's Zen 4 guest answers leaf 0xB (SMT shift 0, core
  // shift 5): libomp sees its two vCPUs as two cores and pins them.
  const hostfacts::OpenMpTopology t = topology_of("cpus", "amd-epyc-kvm-ci-2vcpu", {0, 1});
  ASSERT_EQ(t.llvm.unknown, "");
  EXPECT_EQ(t.llvm.method, "x2APIC IDs (CPUID leaf 0xb)");
  EXPECT_EQ(t.llvm.cores, 2u);
  EXPECT_TRUE(llvm(t, {{"OMP_PROC_BIND", "spread"}}).pins({0, 1}));
}

TEST(OpenMpTopology, TreeWithOneCpuSectionUsesProcCpuinfoApicIds) {
  // A QEMU "EPYC" guest recorded before per-CPU leaves were: leaf 0xB with
  // SMT shift 1; the other CPUs' x2APIC IDs from /proc/cpuinfo.
  const hostfacts::OpenMpTopology t = topology_of("cpus-qemu", "qemu-epyc-no-x2apic-smt", range(8));
  ASSERT_EQ(t.llvm.unknown, "");
  EXPECT_EQ(t.llvm.method, "x2APIC IDs (CPUID leaf 0xb)");
  EXPECT_EQ(t.llvm.cores, 4u);
  EXPECT_NE(t.llvm.ids_from.find("/proc/cpuinfo"), std::string::npos) << t.llvm.ids_from;
}

TEST(OpenMpTopology, UnknownWithoutCpuidOrMask) {
  hostfacts::OpenMpTopologyInputs in = no_leaf_b_inputs();
  in.cpuid.clear();
  in.any_cpuid.reset();
  in.cpuid_missing = "the tree has no CPUID dump";
  EXPECT_NE(hostfacts::model_openmp_topology(in).llvm.unknown.find("no CPUID data"),
            std::string::npos);
  in.mask.clear();
  EXPECT_EQ(hostfacts::model_openmp_topology(in).gomp.unknown, "this process's CPUs are unknown");
}

// ─── which variable wins, and the places ───────────────────────────────────

TEST(OpenMpPlaces, OmpProcBindUsesThreadsInLibgompAndCoresInLibomp) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  for (const char* v : {"true", "spread", "close", "primary"}) {
    const hostfacts::OmpPlaces g = gnu(t, {{"OMP_PROC_BIND", v}});
    const hostfacts::OmpPlaces l = llvm(t, {{"OMP_PROC_BIND", v}});
    EXPECT_EQ(places(g), "{0},{1}") << v;
    EXPECT_TRUE(g.pins({0, 1})) << v;
    EXPECT_EQ(places(l), "{0-1}") << v;
    EXPECT_TRUE(l.binds) << v;
    EXPECT_FALSE(l.pins({0, 1})) << v;  // one place: the whole mask
  }
}

TEST(OpenMpPlaces, KmpAffinityGranularityDefaultsToCore) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  EXPECT_FALSE(llvm(t, {{"KMP_AFFINITY", "compact"}}).pins({0, 1}));
  EXPECT_FALSE(llvm(t, {{"KMP_AFFINITY", "explicit,proclist=[0,1]"}}).pins({0, 1}));
  EXPECT_TRUE(llvm(t, {{"KMP_AFFINITY", "granularity=fine,compact,1,0"}}).pins({0, 1}));
  EXPECT_TRUE(llvm(t, {{"KMP_AFFINITY", "granularity=thread,scatter"}}).pins({0, 1}));
  EXPECT_FALSE(llvm(t, {{"KMP_AFFINITY", "none"}}).binds);
  EXPECT_EQ(llvm(t, {{"KMP_AFFINITY", "granularity=tile,compact"}}).unknown,
            "granularity=tile is not modelled");
  // libgomp does not read it.
  EXPECT_FALSE(gnu(t, {{"KMP_AFFINITY", "granularity=fine,compact"}}).binds);
}

TEST(OpenMpPlaces, KmpAffinityWithATypeWinsInLibomp) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  const hostfacts::OmpPlaces l =
      llvm(t, {{"KMP_AFFINITY", "none"}, {"OMP_PLACES", "threads"}, {"OMP_PROC_BIND", "true"}});
  EXPECT_FALSE(l.binds);
  ASSERT_EQ(l.notes.size(), 2u);
  EXPECT_EQ(l.notes[0], "OMP_PLACES is ignored because KMP_AFFINITY has been defined");
  // A KMP_AFFINITY without a type does not rival the OpenMP variables.
  EXPECT_TRUE(llvm(t, {{"KMP_AFFINITY", "verbose"}, {"OMP_PLACES", "threads"}}).pins({0, 1}));
  // libgomp's OMP_PLACES is untouched by it.
  EXPECT_TRUE(gnu(t, {{"KMP_AFFINITY", "none"}, {"OMP_PLACES", "threads"}}).pins({0, 1}));
}

TEST(OpenMpPlaces, OmpProcBindFalse) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  // libgomp: off whatever else is set; libomp 14 still binds to OMP_PLACES.
  EXPECT_FALSE(gnu(t, {{"OMP_PROC_BIND", "false"}, {"OMP_PLACES", "threads"}}).binds);
  EXPECT_TRUE(llvm(t, {{"OMP_PROC_BIND", "false"}, {"OMP_PLACES", "threads"}}).pins({0, 1}));
  EXPECT_FALSE(llvm(t, {{"OMP_PROC_BIND", "false"}}).binds);
  // libomp: KMP_AFFINITY beats it.
  EXPECT_TRUE(llvm(t, {{"OMP_PROC_BIND", "false"}, {"KMP_AFFINITY", "granularity=fine,compact"}})
                  .pins({0, 1}));
}

TEST(OpenMpPlaces, OmpPlacesNamesAndCounts) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  EXPECT_EQ(places(gnu(t, {{"OMP_PLACES", "cores"}})), "{0},{1}");
  EXPECT_EQ(places(llvm(t, {{"OMP_PLACES", "cores"}})), "{0-1}");
  EXPECT_EQ(places(gnu(t, {{"OMP_PLACES", "sockets"}})), "{0-1}");
  EXPECT_EQ(places(llvm(t, {{"OMP_PLACES", "threads"}})), "{0},{1}");
  EXPECT_EQ(places(gnu(t, {{"OMP_PLACES", "threads(1)"}})), "{0}");
  EXPECT_TRUE(gnu(t, {{"OMP_PLACES", "threads(1)"}}).pins({0, 1}));
  EXPECT_EQ(places(gnu(t, {{"OMP_PLACES", "{0:2}:2:1"}})), "{0-1},{1}");
  EXPECT_EQ(places(llvm(t, {{"OMP_PLACES", "{0},{1},{5}"}})), "{0},{1}");
  EXPECT_EQ(llvm(t, {{"OMP_PLACES", "ll_caches"}}).unknown, "OMP_PLACES=ll_caches is not modelled");
  // numa_domains: libomp without hwloc falls back to cores; libgomp reads
  // the nodes.
  EXPECT_EQ(places(llvm(t, {{"OMP_PLACES", "numa_domains"}})), "{0-1}");
  hostfacts::NumaNode n;
  n.cpus = std::vector<u32>{0, 1};
  EXPECT_EQ(places(hostfacts::omp_places(hostfacts::OmpRuntime::Gnu,
                                         env({{"OMP_PLACES", "numa_domains"}}), t, {n})),
            "{0-1}");
}

TEST(OpenMpPlaces, InvalidOmpPlacesIsCoresToLibompAndIgnoredByLibgomp) {
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  hostfacts::EnvFacts e = env({{"OMP_PLACES", "junk"}});
  e.rejected.push_back("OMP_PLACES");
  EXPECT_FALSE(hostfacts::omp_places(hostfacts::OmpRuntime::Gnu, e, t, {}).binds);
  const hostfacts::OmpPlaces l = hostfacts::omp_places(hostfacts::OmpRuntime::Llvm, e, t, {});
  EXPECT_TRUE(l.binds);
  EXPECT_EQ(places(l), "{0-1}");
}

TEST(OpenMpPlaces, GompCpuAffinity) {
  hostfacts::OpenMpTopologyInputs in = no_leaf_b_inputs();
  in.mask = {1};
  const hostfacts::OpenMpTopology bound = hostfacts::model_openmp_topology(in);
  // libgomp: absolute CPUs, whatever the mask; libomp drops CPU 0.
  const hostfacts::OmpPlaces g = gnu(bound, {{"GOMP_CPU_AFFINITY", "0-1"}});
  EXPECT_TRUE(g.absolute);
  EXPECT_EQ(places(g), "{0},{1}");
  const hostfacts::OmpPlaces l = llvm(bound, {{"GOMP_CPU_AFFINITY", "0-1"}});
  EXPECT_FALSE(l.absolute);
  EXPECT_EQ(places(l), "{1}");
  EXPECT_FALSE(l.pins({1}));
  EXPECT_FALSE(llvm(bound, {{"GOMP_CPU_AFFINITY", "0"}}).binds);  // none left: no affinity
  // libomp: GOMP_CPU_AFFINITY beats OMP_PLACES; libgomp: the reverse.
  const hostfacts::OpenMpTopology t = hostfacts::model_openmp_topology(no_leaf_b_inputs());
  EXPECT_EQ(places(llvm(t, {{"GOMP_CPU_AFFINITY", "0"}, {"OMP_PLACES", "threads"}})), "{0}");
  EXPECT_EQ(places(gnu(t, {{"GOMP_CPU_AFFINITY", "0"}, {"OMP_PLACES", "threads"}})), "{0},{1}");
}
