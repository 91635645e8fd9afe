// thr004-test.cc — THR004 as a pure function of facts: ranks per node, this
// rank's affinity mask, the OpenMP binding variables, the topology each
// OpenMP runtime sees and the runtimes the job loads (check's import
// replay). Without a topology (the first tests) the places are unknown and
// a binding setting is taken to pin.
#include <gtest/gtest.h>

#include "detect/detect.h"

namespace mld {
namespace {

std::vector<Finding> detect_all(const detect::Facts& facts) {
  return detect::findings(detect::run_detectors(facts), rules::RuleSet());
}

// THR004 from host facts: ranks per node, this rank's mask, the variables.
hostfacts::Facts node(u32 ranks, std::vector<u32> mask, std::vector<hostfacts::EnvVar> env) {
  hostfacts::Facts f;
  f.host.ranks_per_node.count = ranks;
  f.host.ranks_per_node.source = "LOCAL_WORLD_SIZE";
  f.host.ranks_per_node.raw = std::to_string(ranks);
  f.host.cpu.online = std::vector<u32>{0, 1, 2, 3};
  f.host.cpu.affinity = std::move(mask);
  f.host.cpu.affinity_source = "/proc/self/status";
  f.env.variables = std::move(env);
  return f;
}

std::vector<std::string> thr004(const hostfacts::Facts& h,
                                const std::optional<detect::OpenMpProcess>& job = std::nullopt) {
  detect::Facts facts;
  facts.host = &h;
  if (job) facts.openmp.push_back(*job);
  std::vector<std::string> out;
  for (const Finding& f : detect_all(facts))
    if (f.rule == "THR004") out.push_back(f.message);
  return out;
}

// The AMD EPYC guest whose hypervisor hides CPUID leaf 0xB, two CPUs: libomp
// sees one core (legacy APIC IDs, leaf 4 zero), the kernel and libgomp two.
hostfacts::OpenMpTopology no_leaf_b() {
  const char* dump =
      "CPU 0:\n"
      "   0x00000000 0x00: eax=0x0000000d ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
      "   0x00000001 0x00: eax=0x00b00f21 ebx=0x2bfe0800 ecx=0xfed83203 edx=0x178bfbff\n"
      "CPU 1:\n"
      "   0x00000000 0x00: eax=0x0000000d ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
      "   0x00000001 0x00: eax=0x00b00f21 ebx=0xcffe0800 ecx=0xfed83203 edx=0x178bfbff\n";
  hostfacts::OpenMpTopologyInputs in;
  in.arch = "x86_64";
  in.mask = {0, 1};
  in.cpuid = *host::parse_cpuid_dumps(dump, nullptr);
  for (u32 c : in.mask) {
    in.sysfs[c].core_cpus = std::to_string(c);
    in.sysfs[c].package_cpus = "0-1";
  }
  return hostfacts::model_openmp_topology(in);
}

hostfacts::Facts two_cpus(std::vector<hostfacts::EnvVar> env) {
  hostfacts::Facts f = node(2, {0, 1}, std::move(env));
  f.host.cpu.online = std::vector<u32>{0, 1};
  f.host.openmp_topology = no_leaf_b();
  return f;
}

detect::OpenMpProcess job_with(std::vector<loader::OpenMpKind> kinds) {
  detect::OpenMpProcess p;
  p.process = "import mod";
  for (loader::OpenMpKind k : kinds) {
    detect::OpenMpRuntime r;
    r.kind = k;
    r.soname = k == loader::OpenMpKind::Gnu ? "libgomp.so.1" : "libomp.so.5";
    r.path = "/usr/lib/x86_64-linux-gnu/" + r.soname;
    r.how = "loaded by import mod (mod)";
    p.runtimes.push_back(r);
  }
  return p;
}

TEST(Thr004, UnboundRanksWithBindingShareTheirCores) {
  const std::vector<u32> all = {0, 1, 2, 3};
  EXPECT_EQ(thr004(node(4, all, {{"OMP_PROC_BIND", "true"}})).size(), 1u);
  EXPECT_EQ(thr004(node(4, all, {{"OMP_PLACES", "cores"}})).size(), 1u);  // places alone bind
  EXPECT_EQ(thr004(node(2, all, {{"KMP_AFFINITY", "granularity=fine,compact,1,0"}})).size(), 1u);
  EXPECT_EQ(thr004(node(2, all, {{"KMP_AFFINITY", "explicit,proclist=[0,1]"}})).size(), 1u);
  std::vector<std::string> m =
      thr004(node(4, all, {{"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "cores"}}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_NE(
      m[0].find(
          "OMP_PROC_BIND=close OMP_PLACES=cores pins the OpenMP threads of each of the 4 ranks"),
      std::string::npos);
  EXPECT_NE(m[0].find("whole node (0-3)"), std::string::npos);
}

TEST(Thr004, NothingWithoutBindingOrWithBoundRanksOrOneRank) {
  const std::vector<u32> all = {0, 1, 2, 3};
  EXPECT_TRUE(thr004(node(4, all, {})).empty());
  // libgomp: OMP_PROC_BIND=false turns binding off whatever OMP_PLACES says
  // (LLVM libomp 14 still binds: OmpProcBindFalseStillBindsLibompToOmpPlaces).
  EXPECT_TRUE(thr004(node(4, all, {{"OMP_PROC_BIND", "false"}, {"OMP_PLACES", "cores"}}),
                     job_with({loader::OpenMpKind::Gnu}))
                  .empty());
  EXPECT_TRUE(thr004(node(4, all, {{"KMP_AFFINITY", "none"}})).empty());
  EXPECT_TRUE(thr004(node(1, all, {{"OMP_PROC_BIND", "true"}})).empty());
  EXPECT_TRUE(
      thr004(node(4, {0}, {{"OMP_PROC_BIND", "true"}})).empty());  // the launcher bound this rank
  EXPECT_TRUE(thr004(node(2, {0, 1}, {{"OMP_PROC_BIND", "true"}})).empty());  // a half share each
  hostfacts::Facts unknown = node(4, all, {{"OMP_PROC_BIND", "true"}});
  unknown.host.ranks_per_node.count.reset();
  EXPECT_TRUE(thr004(unknown).empty());
}

TEST(Thr004, OmpProcBindAsTheRuntimesReadIt) {
  const std::vector<u32> all = {0, 1, 2, 3};
  EXPECT_TRUE(thr004(node(4, all, {{"OMP_PROC_BIND", "FALSE"}, {"OMP_PLACES", "cores"}}),
                     job_with({loader::OpenMpKind::Gnu}))
                  .empty());
  EXPECT_TRUE(thr004(node(4, all, {{"OMP_PROC_BIND", "0"}})).empty());  // invalid: ignored
  std::vector<std::string> m =
      thr004(node(4, all, {{"OMP_PROC_BIND", "0"}, {"OMP_PLACES", "cores"}}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].rfind("OMP_PLACES=cores pins", 0), 0u) << m[0];
  EXPECT_EQ(thr004(node(4, all, {{"OMP_PROC_BIND", "spread, close"}})).size(), 1u);
}

TEST(Thr004, MasksLargerThanAShareOverlap) {
  std::vector<std::string> m = thr004(node(2, {0, 1, 2}, {{"OMP_PROC_BIND", "spread"}}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_NE(m[0].find("this rank's affinity mask (0-2) holds 3 of the node's 4 online CPUs, more "
                      "than a 1/2 share"),
            std::string::npos);
}

TEST(Thr004, GompCpuAffinityIgnoresTheRanksMasks) {
  std::vector<std::string> m = thr004(node(2, {1}, {{"GOMP_CPU_AFFINITY", "0-1"}}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_NE(m[0].find("whatever the rank's affinity mask (1)"), std::string::npos);
  // OMP_PLACES takes precedence over GOMP_CPU_AFFINITY and follows the mask.
  EXPECT_TRUE(
      thr004(node(2, {1}, {{"GOMP_CPU_AFFINITY", "0-1"}, {"OMP_PLACES", "cores"}})).empty());
}

TEST(Thr004, EachRuntimeIsJudgedOnTheTopologyItSees) {
  // OMP_PROC_BIND=spread: libgomp pins one thread per CPU, libomp's one
  // core is the whole mask.
  const hostfacts::Facts f = two_cpus({{"OMP_PROC_BIND", "spread"}});
  std::vector<std::string> gomp = thr004(f, job_with({loader::OpenMpKind::Gnu}));
  ASSERT_EQ(gomp.size(), 1u);
  EXPECT_NE(gomp[0].find("OMP_PROC_BIND=spread pins the OpenMP threads of each of the 2 ranks"),
            std::string::npos)
      << gomp[0];
  EXPECT_NE(gomp[0].find("GNU libgomp (loaded by import mod (mod)) binds them to 2 places "
                         "(OMP_PROC_BIND=spread: threads {0},{1})"),
            std::string::npos)
      << gomp[0];
  EXPECT_TRUE(thr004(f, job_with({loader::OpenMpKind::Llvm})).empty());
  EXPECT_TRUE(thr004(f, job_with({loader::OpenMpKind::Intel})).empty());
  EXPECT_TRUE(thr004(f, job_with({})).empty());  // the job loads no OpenMP runtime
  // Both loaded: libgomp pins, and the message says libomp does not.
  std::vector<std::string> both =
      thr004(f, job_with({loader::OpenMpKind::Llvm, loader::OpenMpKind::Gnu}));
  ASSERT_EQ(both.size(), 1u);
  EXPECT_NE(both[0].find("LLVM libomp (loaded by import mod (mod)) does not pin"),
            std::string::npos)
      << both[0];
  // KMP_AFFINITY granularity=fine pins with libomp, and libgomp ignores it.
  const hostfacts::Facts fine = two_cpus({{"KMP_AFFINITY", "granularity=fine,compact"}});
  EXPECT_EQ(thr004(fine, job_with({loader::OpenMpKind::Llvm})).size(), 1u);
  EXPECT_TRUE(thr004(fine, job_with({loader::OpenMpKind::Gnu})).empty());
}

TEST(Thr004, UnknownRuntimeSaysWhichPinsAndWhy) {
  std::vector<std::string> m = thr004(two_cpus({{"OMP_PROC_BIND", "spread"}}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_NE(m[0].find("; GNU libgomp binds them to 2 places"), std::string::npos) << m[0];
  EXPECT_NE(m[0].find("; LLVM libomp does not pin: it binds each thread to {0-1}, the whole "
                      "mask (OMP_PROC_BIND=spread: cores (the default granularity)): it sees 1 "
                      "core in 1 package here (CPUID leaf 0xb not supported: sub-leaf 0 reports "
                      "no logical processors (EBX=0), so it decodes legacy APIC IDs (CPUID "
                      "leaves 1 and 4), which give 1 core per package)"),
            std::string::npos)
      << m[0];
  EXPECT_NE(m[0].find("which of them the job loads is not known here"), std::string::npos);
  // Neither pins: OMP_PLACES=sockets is one place, the whole mask, to both.
  EXPECT_TRUE(thr004(two_cpus({{"OMP_PLACES", "sockets"}})).empty());
  // libomp alone pins (threads): present, and libgomp's no-binding said.
  std::vector<std::string> k = thr004(two_cpus({{"KMP_AFFINITY", "granularity=fine,compact"}}));
  ASSERT_EQ(k.size(), 1u);
  EXPECT_NE(k[0].find("GNU libgomp does not pin: it does not bind; KMP_AFFINITY is LLVM's"),
            std::string::npos)
      << k[0];
}

TEST(Thr004, OmpProcBindFalseStillBindsLibompToOmpPlaces) {
  const hostfacts::Facts f = two_cpus({{"OMP_PROC_BIND", "false"}, {"OMP_PLACES", "threads"}});
  EXPECT_TRUE(thr004(f, job_with({loader::OpenMpKind::Gnu})).empty());
  std::vector<std::string> m = thr004(f, job_with({loader::OpenMpKind::Llvm}));
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].rfind("OMP_PLACES=threads pins", 0), 0u) << m[0];
}

}  // namespace
}  // namespace mld
