// thr004-test.cc — THR004 as a pure function of host facts: ranks per node,
// this rank's affinity mask and the OpenMP binding variables.
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

std::vector<std::string> thr004(const hostfacts::Facts& h) {
  detect::Facts facts;
  facts.host = &h;
  std::vector<std::string> out;
  for (const Finding& f : detect_all(facts))
    if (f.rule == "THR004") out.push_back(f.message);
  return out;
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
  EXPECT_TRUE(thr004(node(4, all, {{"OMP_PROC_BIND", "false"}, {"OMP_PLACES", "cores"}})).empty());
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
  EXPECT_TRUE(thr004(node(4, all, {{"OMP_PROC_BIND", "FALSE"}, {"OMP_PLACES", "cores"}})).empty());
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

}  // namespace
}  // namespace mld
