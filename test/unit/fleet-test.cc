// fleet-test.cc — the fact groups of a check report, the comparison, and the
// digest protocol driven at 64 ranks exactly as the MPI transport drives it
// (every message encoded and decoded), counting the bytes gathered.
#include "fleet/fleet.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace mld::fleet {
namespace {

using nlohmann::json;

json check_doc(const std::string& hostname, const std::string& driver, size_t distributions = 10) {
  json dists = json::array();
  for (size_t i = 0; i < distributions; i++)
    dists.push_back({{"name", "package-" + std::to_string(i)},
                     {"version", "1.0." + std::to_string(i)},
                     {"site", "/s"}});
  return {
      {"schema", "mldoctor.check/1"},
      {"version", "0.2.0"},
      {"host",
       {{"hostname", hostname},
        {"boot_id", "boot-" + hostname},
        {"nvidia_driver", driver},
        {"gpus", {"NVIDIA H100", "NVIDIA H100"}},
        {"os", "Debian 12"},
        {"kernel_release", "6.1"},
        {"glibc_version", "2.36"},
        {"memory", {{"total_bytes", 540000000000LL}}},
        {"shm", {{"present", true}, {"size_bytes", 68000000000LL}}},
        {"gpu",
         {{"interfaces",
           json::array({{{"name", "ib0"}, {"operstate", "up"}, {"running", true}},
                        {{"name", "veth1234"}, {"operstate", "up"}, {"running", true}}})},
          {"hcas", json::array()}}}}},
      {"environment", {{"variables", {{"OMP_NUM_THREADS", "8"}, {"LOCAL_RANK", "3"}}}}},
      {"python",
       {{"version", "3.11.7"},
        {"executable", "/v/bin/python"},
        {"prefix", "/v"},
        {"packages", json::array({{{"import", "torch"}, {"version", "2.3.0"}}})},
        {"distributions", dists}}},
      {"imports", {{"openmp_runtimes", json::array()}}},
      {"libraries",
       json::array({{{"soname", "libnccl.so.2"}, {"file", "libnccl.so.2.21.5"}, {"size", 1000}}})},
      {"findings", json::array()}};
}

const FactGroup& group(const MemberFacts& m, std::string_view name) {
  return m.groups[*group_index(name)];
}

TEST(FleetFacts, GroupsLeaveOutWhatDiffersByDesign) {
  MemberFacts m = facts_from_check(check_doc("node-a", "535.104.05"));
  EXPECT_EQ(m.node.name, "node-a");
  EXPECT_EQ(m.node.key, "boot-node-a");
  EXPECT_EQ(group(m, "gpu-driver").values.at("driver"), "535.104.05");
  EXPECT_EQ(group(m, "gpus").values.at("models"), "2× NVIDIA H100");
  EXPECT_EQ(group(m, "memory").values.at("total"), "503 GiB");
  // LOCAL_RANK names the rank; veth interfaces exist per container.
  EXPECT_EQ(group(m, "environment").values.count("LOCAL_RANK"), 0u);
  EXPECT_EQ(group(m, "environment").values.at("OMP_NUM_THREADS"), "8");
  EXPECT_EQ(group(m, "network").values.count("veth1234"), 0u);
  EXPECT_EQ(group(m, "network").values.at("ib0"), "up, running");
  EXPECT_EQ(group(m, "libraries").values.at("libnccl.so.2"), "libnccl.so.2.21.5 (1000 bytes)");
  // Equal documents, equal digests; one value changed, another digest.
  EXPECT_EQ(digest(group(m, "os")),
            digest(group(facts_from_check(check_doc("node-b", "1")), "os")));
  EXPECT_NE(digest(group(m, "gpu-driver")),
            digest(group(facts_from_check(check_doc("node-a", "550")), "gpu-driver")));
}

TEST(FleetFacts, OlderReportsLackGroupsNewerOnesAreRefused) {
  json old = check_doc("n", "1");
  old.erase("libraries");
  old["host"].erase("hostname");
  old["host"].erase("boot_id");
  MemberFacts m = facts_from_check(old);
  EXPECT_FALSE(group(m, "libraries").recorded);
  EXPECT_TRUE(m.node.key.empty());

  json newer = check_doc("n", "1");
  newer["schema"] = "mldoctor.check/2";
  newer["version"] = "1.4.0";
  try {
    facts_from_check(newer);
    FAIL() << "a newer schema must be refused";
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("mldoctor.check/2 (written by mldoctor 1.4.0) is newer"),
              std::string::npos)
        << e.what();
  }
  json run = {{"schema", "mldoctor.run/1"}};
  EXPECT_THROW(facts_from_check(run), ReportError);
  EXPECT_THROW(facts_from_check(json::array()), ReportError);
  EXPECT_THROW(facts_from_check(json{{"schema", "mldoctor.check/x"}}), ReportError);
  EXPECT_THROW(facts_from_check(json{{"schema", "mldoctor.check/1"}}), ReportError);  // no host
}

TEST(FleetCompare, HostListsAndRanges) {
  EXPECT_EQ(compress_host_list({"gpu003", "gpu001", "gpu002", "gpu007", "login"}),
            "gpu[001-003,007], login");
  EXPECT_EQ(compress_host_list({"node-a", "node-c"}), "node-a, node-c");
  EXPECT_EQ(compress_host_list({"n9", "n10"}), "n9, n10");  // different widths stay apart
  EXPECT_EQ(format_ranges({7, 0, 1, 2, 3, 5}), "0-3,5,7");
  EXPECT_EQ(format_ranges({4, 5, 5}), "4,5");
  EXPECT_EQ(format_ranges({}), "");
}

// Drives the protocol over `facts` (one per rank) and returns the bytes
// gathered at rank 0 (digests + details) and the observations.
struct Exchange {
  size_t digest_bytes = 0;
  size_t detail_bytes = 0;
  size_t report_bytes = 0;
  Observations obs;
};

Exchange drive(const std::vector<MemberFacts>& facts) {
  Exchange r;
  std::vector<DigestMessage> digests;
  for (u32 rank = 0; rank < facts.size(); rank++) {
    std::string msg = encode_digests(rank, facts[rank]);
    r.digest_bytes += msg.size();
    digests.push_back(decode_digests(msg));
  }
  FetchPlan plan = decode_plan(encode_plan(plan_fetch(digests)));
  std::vector<std::string> answers;
  for (u32 rank = 0; rank < facts.size(); rank++) {
    answers.push_back(encode_details(plan, rank, facts[rank]));
    r.detail_bytes += answers.back().size();
  }
  r.obs = assemble(digests, facts[0], answers);
  return r;
}

// 64 ranks on 8 nodes; `differing` of the groups driver, environment,
// packages, libraries have a second value on node 5; each report lists
// `distributions` Python distributions.
std::vector<MemberFacts> fleet_of_64(size_t differing, size_t distributions) {
  std::vector<MemberFacts> out;
  for (u32 rank = 0; rank < 64; rank++) {
    u32 node = rank / 8;
    json doc = check_doc("gpu" + std::to_string(100 + node), "535.104.05", distributions);
    if (node == 5) {
      if (differing > 0) doc["host"]["nvidia_driver"] = "550.54.15";
      if (differing > 1) doc["environment"]["variables"]["NCCL_IB_DISABLE"] = "1";
      if (differing > 2) doc["python"]["packages"][0]["version"] = "2.2.0";
      if (differing > 3) doc["libraries"][0]["file"] = "libnccl.so.2.18.3";
    }
    MemberFacts m = facts_from_check(doc);
    m.report_bytes = doc.dump().size();
    out.push_back(std::move(m));
  }
  return out;
}

TEST(FleetProtocol, BytesGrowWithDifferingGroupsNotWithReportSize) {
  Exchange uniform = drive(fleet_of_64(0, 400));
  EXPECT_EQ(uniform.detail_bytes, 0u) << "nothing differs: no details are fetched";

  // The digests do not depend on the report's size.
  Exchange uniform_big = drive(fleet_of_64(0, 4000));
  EXPECT_EQ(uniform_big.digest_bytes, uniform.digest_bytes);
  EXPECT_EQ(uniform_big.detail_bytes, 0u);

  std::vector<size_t> details;
  for (size_t k = 1; k <= 4; k++) {
    Exchange r = drive(fleet_of_64(k, 400));
    details.push_back(r.detail_bytes);
    EXPECT_EQ(r.digest_bytes, uniform.digest_bytes);
    Comparison c = compare(r.obs);
    size_t differs = 0;
    for (const GroupComparison& g : c.groups) differs += g.differs();
    EXPECT_EQ(differs, k);
    // Only rank 40 (node 5's leader) answers: one copy per distinct value.
    std::vector<size_t> answered;
    EXPECT_EQ(c.nodes.size(), 8u);
  }
  for (size_t i = 1; i < details.size(); i++) EXPECT_GT(details[i], details[i - 1]);
  // Ten times the report, same differing groups: the same bytes.
  Exchange big = drive(fleet_of_64(4, 4000));
  EXPECT_EQ(big.detail_bytes, details.back());
  size_t reports = 0;
  for (const MemberFacts& m : fleet_of_64(4, 4000)) reports += m.report_bytes;
  EXPECT_LT(big.digest_bytes + big.detail_bytes, reports / 100);
  std::printf(
      "64 ranks: digests %zu B, details for 1..4 differing groups %zu/%zu/%zu/%zu B, full reports "
      "%zu B\n",
      big.digest_bytes, details[0], details[1], details[2], details[3], reports);
}

TEST(FleetProtocol, ComparisonNamesNodesAndPartialNodes) {
  std::vector<MemberFacts> facts = fleet_of_64(2, 10);
  // Rank 9 alone (node gpu101) gets another thread count.
  json doc = check_doc("gpu101", "535.104.05");
  doc["environment"]["variables"]["OMP_NUM_THREADS"] = "1";
  facts[9] = facts_from_check(doc);
  Exchange r = drive(facts);
  Comparison c = compare(r.obs);
  const GroupComparison& drv = c.groups[*group_index("gpu-driver")];
  ASSERT_TRUE(drv.differs());
  EXPECT_EQ(describe_members(c, r.obs, drv.variants[1].members), "gpu105");
  EXPECT_EQ(describe_members(c, r.obs, drv.variants[0].members), "gpu[100-104,106-107]");
  const GroupComparison& env = c.groups[*group_index("environment")];
  ASSERT_EQ(env.variants.size(), 3u);
  EXPECT_EQ(describe_members(c, r.obs, env.variants[2].members), "gpu101 (rank 9)");
  ASSERT_FALSE(c.findings.empty());
  EXPECT_EQ(c.findings.front().rule, "FLEET001");
  EXPECT_EQ(c.findings.front().severity, Severity::Error);
  EXPECT_EQ(c.findings.front().message,
            "Nodes differ in NVIDIA driver: driver is 535.104.05 on gpu[100-104,106-107]; "
            "550.54.15 on gpu105");
  EXPECT_EQ(c.findings.front().fix, "Make gpu105 match the other 7 of 8 nodes: driver 535.104.05");
}

TEST(FleetProtocol, MalformedAndForeignMessagesAreRefused) {
  MemberFacts m = facts_from_check(check_doc("a", "1"));
  std::string msg = encode_digests(3, m);
  EXPECT_EQ(decode_digests(msg).rank, 3u);
  for (size_t cut = 0; cut < msg.size(); cut += 7)
    EXPECT_THROW(decode_digests(msg.substr(0, cut)), ReportError);
  std::string other = msg;
  other[5] = 9;  // another protocol version
  try {
    decode_digests(other);
    FAIL();
  } catch (const ReportError& e) {
    EXPECT_NE(std::string(e.what()).find("every rank must run the same mldoctor"),
              std::string::npos);
  }
  EXPECT_THROW(decode_plan("MLDFP\x01\xff\xff\xff\xff"), ReportError);
  EXPECT_TRUE(decode_details("").empty());
  // Details that do not match any announced digest are refused.
  std::vector<DigestMessage> d = {decode_digests(encode_digests(0, m))};
  FetchPlan plan;
  plan.requests.push_back({0, *group_index("os")});
  MemberFacts liar = facts_from_check(check_doc("a", "1"));
  liar.groups[*group_index("os")].values["kernel"] = "forged";
  EXPECT_THROW(assemble(d, m, {encode_details(plan, 0, liar)}), ReportError);
}

TEST(FleetCompare, EveryFactGroupHasOneFleetRule) {
  // The FLEET detectors name the groups they cover: each group but check's
  // own findings raises exactly one of them when it differs.
  std::map<std::string, std::string> rule_of;
  for (const GroupSpec& spec : group_specs()) {
    detect::FleetFacts fleet;
    detect::FleetFacts::Category cat;
    cat.name = std::string(spec.name);
    cat.weights = {2, 1};
    fleet.differing.push_back(cat);
    detect::Facts facts;
    facts.fleet = &fleet;
    const detect::Detections found = detect::run_detectors(facts);
    if (spec.name == "findings") {
      EXPECT_TRUE(found.empty());
      continue;
    }
    ASSERT_EQ(found.size(), 1u) << spec.name;
    rule_of[cat.name] = found[0].rule;
  }
  EXPECT_EQ(rule_of["gpu-driver"], "FLEET001");
  EXPECT_EQ(rule_of["distributions"], "FLEET002");
  EXPECT_EQ(rule_of["memory"], "FLEET003");
  EXPECT_EQ(rule_of["infiniband"], "FLEET004");
  EXPECT_EQ(rule_of["cpu-binding"], "FLEET005");
}

TEST(FleetClock, ShortestRoundTripWins) {
  // Remote clock 10 s ahead; the second sample had the shortest round trip.
  std::vector<ClockSample> s = {
      {100.0, 110.5, 101.0}, {200.0, 210.001, 200.002}, {300.0, 309.0, 300.5}};
  ASSERT_TRUE(clock_offset(s).has_value());
  EXPECT_NEAR(*clock_offset(s), 10.0, 1e-9);
  EXPECT_FALSE(clock_offset({}).has_value());
}

TEST(FleetClock, OffsetBeyondASecondIsAFinding) {
  std::vector<MemberFacts> facts = {facts_from_check(check_doc("gpu001", "535")),
                                    facts_from_check(check_doc("gpu002", "535"))};
  Exchange r = drive(facts);
  r.obs.clock_offset = {0.0, 2.5};
  Comparison c = compare(r.obs);
  ASSERT_TRUE(c.max_clock_offset.has_value());
  EXPECT_DOUBLE_EQ(*c.max_clock_offset, 2.5);
  ASSERT_EQ(c.findings.size(), 1u);
  EXPECT_EQ(c.findings[0].rule, "FLEET006");
  EXPECT_EQ(c.findings[0].message, "The nodes' clocks are 2.500 s apart");
  ASSERT_EQ(c.findings[0].evidence.size(), 2u);
  EXPECT_EQ(c.findings[0].evidence[1].text, "gpu002: +2.500 s from gpu001");
  r.obs.clock_offset = {0.0, -0.004};
  c = compare(r.obs);
  EXPECT_TRUE(c.findings.empty());
  EXPECT_DOUBLE_EQ(*c.max_clock_offset, 0.004);
}

// ─── launcher.cc ─────────────────────────────────────────────────────────────

Launcher launcher(std::map<std::string, std::string> env,
                  std::optional<std::vector<std::string>> pmi = std::vector<std::string>{
                      "ext3x", "flux", "isolated"}) {
  return detect_launcher(host::Host("/nonexistent-root", std::move(env)), pmi);
}

TEST(Launcher, SrunWithoutPmixIsRefusedBeforeMpiInit) {
  // Plain srun under MpiDefault=none: no PMIx, no PMI at all.
  Launcher l = launcher({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(l.kind, LauncherKind::SrunWithoutPmix);
  EXPECT_NE(l.problem.find("without PMIx (--mpi=pmix)"), std::string::npos) << l.problem;
  // srun --mpi=pmi2 with Debian's Open MPI (pmix components only).
  l = launcher({{"SLURM_STEP_ID", "0"}, {"PMI_FD", "7"}, {"PMI_RANK", "0"}});
  EXPECT_NE(l.problem.find("no PMI-1/PMI-2 component (its pmix components: ext3x, flux, isolated)"),
            std::string::npos)
      << l.problem;
  // An Open MPI with Slurm's PMI-2 (s2), or an MPI whose components are unknown: let it try.
  EXPECT_TRUE(
      launcher({{"SLURM_STEP_ID", "0"}, {"PMI_FD", "7"}}, std::vector<std::string>{"s1", "s2"})
          .problem.empty());
  EXPECT_TRUE(launcher({{"SLURM_STEP_ID", "0"}, {"PMI_FD", "7"}}, std::nullopt).problem.empty());
  EXPECT_NE(launcher_advice().find("srun --mpi=pmix"), std::string::npos);
  EXPECT_NE(launcher_advice().find("MpiDefault=pmix"), std::string::npos);
}

TEST(Launcher, WorldSizeFromTheLauncherThatStartedTheRank) {
  Launcher l = launcher({{"SLURM_STEP_ID", "3"},
                         {"PMIX_RANK", "0"},
                         {"PMIX_NAMESPACE", "slurm.pmix.5.3"},
                         {"SLURM_STEP_NUM_TASKS", "4"},
                         {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(l.kind, LauncherKind::Pmix);
  EXPECT_TRUE(l.problem.empty());
  EXPECT_EQ(l.world_size, 4u);
  EXPECT_EQ(l.world_size_source, "SLURM_STEP_NUM_TASKS=4");
  EXPECT_FALSE(world_size_problem(l, 4));
  // mpirun -np 2 inside an allocation of 8: mpirun's own count.
  l = launcher(
      {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(l.kind, LauncherKind::Mpirun);
  EXPECT_EQ(l.world_size, 2u);
  // salloc -n2 mldoctor fleet: a world of one where the allocation has 2.
  l = launcher({{"SLURM_JOB_ID", "7"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(l.kind, LauncherKind::NoLauncher);
  std::optional<std::string> p = world_size_problem(l, 1);
  ASSERT_TRUE(p);
  EXPECT_NE(p->find("MPI made a world of 1 rank(s), but SLURM_NTASKS=2 says the job has 2"),
            std::string::npos)
      << *p;
  EXPECT_NE(p->find("srun --mpi=pmix"), std::string::npos);
  // torchrun's WORLD_SIZE without MPI; and nothing at all.
  EXPECT_TRUE(world_size_problem(launcher({{"WORLD_SIZE", "4"}}), 1));
  EXPECT_FALSE(world_size_problem(launcher({}), 1));
  EXPECT_FALSE(under_launcher(host::Host("/nonexistent-root", {{"SLURM_JOB_ID", "7"}})));
  EXPECT_TRUE(under_launcher(host::Host("/nonexistent-root", {{"OMPI_COMM_WORLD_RANK", "0"}})));
}

}  // namespace
}  // namespace mld::fleet
