// thr001-test.cc — THR001, the thread budget, over the ranks that really
// share this rank's CPUs: every rank's mask when known (fleet, srun's
// SLURM_CPU_BIND_LIST), this rank alone when the launcher bound each rank,
// the whole node on this rank's mask otherwise. And the launcher variables
// that say which, read by hostfacts::collect_rank_binding.
#include <gtest/gtest.h>

#include "detect/detect.h"
#include "hostfacts/hostfacts.h"

namespace mld {
namespace {

// A 2-CPU node with `ranks` ranks, this one on `mask`, OMP_NUM_THREADS=omp
// when set.
hostfacts::Facts node(u32 ranks, std::vector<u32> mask, std::optional<u32> omp = std::nullopt) {
  hostfacts::Facts f;
  f.host.ranks_per_node.count = ranks;
  f.host.ranks_per_node.source = "OMPI_COMM_WORLD_LOCAL_SIZE";
  f.host.cpu.online = std::vector<u32>{0, 1};
  f.host.cpu.usable = static_cast<u32>(mask.size());
  f.host.cpu.usable_basis = "affinity";
  f.host.cpu.affinity = std::move(mask);
  if (omp) f.env.threads.omp_num_threads = std::vector<u32>{*omp};
  return f;
}

std::vector<Finding> thr001(const hostfacts::Facts& h) {
  detect::Facts facts;
  facts.host = &h;
  facts.threads = detect::ThreadPools{};
  std::vector<Finding> out;
  for (Finding& f : detect::findings(detect::run_detectors(facts), rules::RuleSet()))
    if (f.rule == "THR001") out.push_back(std::move(f));
  return out;
}

std::string evidence(const Finding& f) {
  std::string out;
  for (const auto& e : f.evidence) out += e.text + "\n";
  return out;
}

TEST(Thr001, UnboundRanksShareTheNode) {
  // 2 ranks, neither bound, no threads variable: 2 × 2 threads on 2 CPUs.
  std::vector<Finding> f = thr001(node(2, {0, 1}));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message,
            "2 rank(s) × 2 threads = 4 busy threads on 2 usable CPUs (affinity): the ranks "
            "oversubscribe the node");
  EXPECT_NE(evidence(f[0]).find("the ranks are taken to share this rank's CPUs: no launcher said"),
            std::string::npos)
      << evidence(f[0]);
}

TEST(Thr001, RanksBoundByTheLauncherHaveTheirOwnCpus) {
  // mpirun --bind-to core: this rank has CPU 0, one thread per CPU of it.
  hostfacts::Facts h = node(2, {0});
  h.host.rank_binding.bound = true;
  h.host.rank_binding.source = "OMPI_MCA_orte_bound_at_launch=1";
  EXPECT_TRUE(thr001(h).empty());
  // A real excess still counts: 4 threads on the one CPU it is bound to.
  h.env.threads.omp_num_threads = std::vector<u32>{4};
  std::vector<Finding> f = thr001(h);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message,
            "1 rank(s) × 4 threads = 4 busy threads on 1 usable CPUs (this rank's own CPUs 0): "
            "the rank oversubscribes its CPUs");
  EXPECT_NE(evidence(f[0]).find("each rank of the node is bound to CPUs of its own "
                                "(OMPI_MCA_orte_bound_at_launch=1)"),
            std::string::npos);
  EXPECT_NE(f[0].fix.find("give each rank 1 thread(s) — 1 usable CPUs / 1 rank(s)"),
            std::string::npos)
      << f[0].fix;
}

// More ranks than CPUs: one thread each is the least and still too many.
// The settings are offered while they lower the count; once every pool runs
// one thread there is none left to offer (`mldoctor fix` stops printing
// them), and the fix says what does resolve it.
TEST(Thr001, MoreRanksThanCpusSaysNoSettingResolvesIt) {
  std::vector<Finding> f = thr001(node(4, {0, 1}, 4));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].env_fix, (std::vector<std::string>{"OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
                                                    "OPENBLAS_NUM_THREADS=1"}));
  EXPECT_NE(f[0].fix.find("4 ranks on 2 usable CPUs oversubscribe with any thread count: run at "
                          "most 2 ranks on these CPUs"),
            std::string::npos)
      << f[0].fix;
  hostfacts::Facts one = node(4, {0, 1}, 1);
  one.env.threads.mkl_num_threads = 1;
  one.env.threads.openblas_num_threads = 1;
  f = thr001(one);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message,
            "4 rank(s) × 1 threads = 4 busy threads on 2 usable CPUs (affinity): the ranks "
            "oversubscribe the node");
  EXPECT_TRUE(f[0].env_fix.empty());
}

TEST(Thr001, KnownMasksCountTheRanksThatMeetThisOne) {
  // fleet: 4 ranks, two on CPU 0 and two on CPU 1 (this one on 0).
  hostfacts::Facts h = node(4, {0});
  h.host.rank_binding.masks = std::vector<std::vector<u32>>{{0}, {0}, {1}, {1}};
  h.host.rank_binding.source = "fleet: every rank's affinity mask";
  std::vector<Finding> f = thr001(h);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].message,
            "2 rank(s) × 1 threads = 2 busy threads on 1 usable CPUs (CPUs 0 of the ranks sharing "
            "them): the ranks oversubscribe the CPUs they share");
  EXPECT_NE(evidence(f[0]).find("2 of the node's 4 ranks run on CPUs that meet this rank's"),
            std::string::npos);
  // Disjoint masks, one thread each: nothing.
  h.host.rank_binding.masks = std::vector<std::vector<u32>>{{0}, {1}};
  h.host.ranks_per_node.count = 2;
  EXPECT_TRUE(thr001(h).empty());
  // Every rank on the whole node: the node's budget, as without masks.
  hostfacts::Facts all = node(2, {0, 1});
  all.host.rank_binding.masks = std::vector<std::vector<u32>>{{0, 1}, {0, 1}};
  f = thr001(all);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("2 rank(s) × 2 threads = 4 busy threads on 2 usable CPUs (CPUs 0-1"),
            std::string::npos)
      << f[0].message;
}

// collect_rank_binding over a fixture environment; `own` is this rank's mask.
hostfacts::RankBinding binding(std::map<std::string, std::string> env, std::vector<u32> own,
                               std::optional<std::vector<std::vector<u32>>> masks = {}) {
  host::Host h("/nonexistent-root", std::move(env));
  return hostfacts::collect_rank_binding(h, own, masks);
}

TEST(RankBinding, SlurmListBelievedWhereThisTasksEntryIsItsMask) {
  hostfacts::RankBinding b = binding(
      {{"SLURM_CPU_BIND_TYPE", "map_cpu:"}, {"SLURM_CPU_BIND_LIST", "0,1"}, {"SLURM_LOCALID", "1"}},
      {1});
  ASSERT_TRUE(b.masks);
  EXPECT_EQ(*b.masks, (std::vector<std::vector<u32>>{{0}, {1}}));
  EXPECT_TRUE(b.bound);
  EXPECT_EQ(b.source, "SLURM_CPU_BIND_TYPE=map_cpu: SLURM_CPU_BIND_LIST=0,1");
  b = binding({{"SLURM_CPU_BIND_TYPE", "mask_cpu:"},
               {"SLURM_CPU_BIND_LIST", "0x3,0xC"},
               {"SLURM_LOCALID", "0"}},
              {0, 1});
  ASSERT_TRUE(b.masks);
  EXPECT_EQ(*b.masks, (std::vector<std::vector<u32>>{{0, 1}, {2, 3}}));
  // An entry that is not this task's mask: ignored, and said so.
  b = binding(
      {{"SLURM_CPU_BIND_TYPE", "map_cpu:"}, {"SLURM_CPU_BIND_LIST", "0,1"}, {"SLURM_LOCALID", "0"}},
      {0, 1});
  EXPECT_FALSE(b.masks);
  EXPECT_FALSE(b.bound);
  ASSERT_EQ(b.ignored.size(), 1u);
  EXPECT_NE(b.ignored[0].find("is not its affinity mask"), std::string::npos);
  EXPECT_FALSE(hostfacts::parse_slurm_cpu_bind_list("none", "0,1"));
  EXPECT_FALSE(hostfacts::parse_slurm_cpu_bind_list("mask_cpu:", "0xZ"));
}

TEST(RankBinding, OpenMpiBoundAtLaunchPerCoreOnly) {
  // Open MPI's default for 2 ranks: a core each.
  EXPECT_TRUE(
      binding({{"OMPI_MCA_orte_bound_at_launch", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, {0}).bound);
  EXPECT_TRUE(binding({{"OMPI_MCA_orte_bound_at_launch", "1"},
                       {"OMPI_MCA_hwloc_base_binding_policy", "core"},
                       {"OMPI_COMM_WORLD_SIZE", "8"}},
                      {0})
                  .bound);
  // A socket each (the default beyond 2 ranks), or overload allowed: ranks may share.
  EXPECT_FALSE(
      binding({{"OMPI_MCA_orte_bound_at_launch", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, {0}).bound);
  EXPECT_FALSE(binding({{"OMPI_MCA_orte_bound_at_launch", "1"},
                        {"OMPI_MCA_hwloc_base_binding_policy", "socket"}},
                       {0, 1})
                   .bound);
  EXPECT_FALSE(binding({{"OMPI_MCA_orte_bound_at_launch", "1"},
                        {"OMPI_MCA_hwloc_base_binding_policy", "core:overload-allowed"}},
                       {0})
                   .bound);
  EXPECT_FALSE(binding({{"OMPI_MCA_hwloc_base_binding_policy", "none"}}, {0, 1}).bound);
  // fleet's gathered masks win over every variable.
  hostfacts::RankBinding b =
      binding({{"OMPI_MCA_orte_bound_at_launch", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}}, {0, 1},
              std::vector<std::vector<u32>>{{0, 1}, {0, 1}});
  EXPECT_FALSE(b.bound);
  EXPECT_EQ(b.source, "fleet: every rank's affinity mask");
}

}  // namespace
}  // namespace mld
