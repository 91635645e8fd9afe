// detect-test.cc — the detector registry against the rule files (ids both
// ways), the one conversion of a detection into a finding, the one
// suppression (`replaces`), and detectors as pure functions of facts.
#include "detect/detect.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "hostfacts/hostfacts.h"
#include "rules/rules.h"

namespace mld {
namespace {

TEST(DetectorRegistry, EveryDetectorHasAFactRule) {
  const rules::RuleSet& rules = rules::RuleSet::builtin();
  ASSERT_FALSE(detect::detectors().empty());
  for (const detect::Detector& d : detect::detectors()) {
    const rules::Rule* r = rules.find(d.rule);
    ASSERT_NE(r, nullptr) << d.rule << " is registered but has no rules/" << d.rule << ".toml";
    EXPECT_FALSE(r->detector.empty()) << d.rule << " is a log rule (signatures), not a fact rule";
    EXPECT_FALSE(r->withdrawn) << d.rule;
  }
  for (size_t i = 1; i < detect::detectors().size(); i++)
    EXPECT_LT(std::string(detect::detectors()[i - 1].rule),
              std::string(detect::detectors()[i].rule));
}

TEST(DetectorRegistry, EveryFactRuleHasADetector) {
  std::set<std::string> registered;
  for (const detect::Detector& d : detect::detectors()) registered.insert(d.rule);
  for (const rules::Rule& r : rules::RuleSet::builtin().all()) {
    if (r.detector.empty() || r.withdrawn) continue;
    EXPECT_TRUE(registered.count(r.id))
        << r.id << " is a fact rule without a detector in src/detect/rules/" << r.id << ".cc";
  }
}

TEST(DetectorRegistry, AnUnknownIdIsABug) {
  detect::Detections d(1);
  d[0].rule = "ZZZ999";
  EXPECT_THROW(detect::findings(d, rules::RuleSet()), std::logic_error);
}

TEST(FindingFrom, SeverityTitleAndFixComeFromTheRule) {
  std::vector<rules::RuleError> errors;
  std::optional<rules::Rule> rule = rules::parse_rule(
      "id = \"TST001\"\nseverity = \"warning\"\nescalated_severity = \"error\"\ntitle = \"A "
      "test\"\n"
      "detector = \"test\"\nexplanation = \"x\"\nreferences = [\"https://example.org\"]\n"
      "[fix]\ntext = \"Do this.\"\nenv = [\"A=1\"]\n",
      "", errors);
  ASSERT_TRUE(rule) << (errors.empty() ? "" : errors[0].message);
  Detection d;
  d.rule = "TST001";
  d.subject = "s";
  Finding f = rules::finding_from(d, *rule);
  EXPECT_EQ(f.severity, Severity::Warning);
  EXPECT_EQ(f.message, "A test");
  EXPECT_EQ(f.fix, "Do this.");
  EXPECT_EQ(f.env_fix, std::vector<std::string>{"A=1"});
  d.escalated = true;
  d.message = "specific";
  d.fix = "exact action";
  d.env_fix = {"B=2"};
  f = rules::finding_from(d, *rule);
  EXPECT_EQ(f.severity, Severity::Error);
  EXPECT_EQ(f.message, "specific");
  EXPECT_EQ(f.fix, "exact action");
  EXPECT_EQ(f.env_fix, std::vector<std::string>{"B=2"});
}

TEST(FindingFrom, EscalationIsOnlyForFactRules) {
  std::vector<rules::RuleError> errors;
  EXPECT_FALSE(rules::parse_rule(
      "id = \"TST002\"\nseverity = \"warning\"\nescalated_severity = \"error\"\ntitle = \"A "
      "test\"\n"
      "explanation = \"x\"\nreferences = [\"https://example.org\"]\n[fix]\ntext = \"Do this.\"\n"
      "[[signature]]\npattern = \"x\"\n[[example]]\nlog = \"x\"\n[[negative]]\nlog = \"y\"\nwhy = "
      "\"z\"\n",
      "", errors));
}

TEST(DropReplaced, AFactFindingHidesTheRulesItReplaces) {
  rules::RuleSet rules = rules::RuleSet::builtin_subset({"GPU006", "ENV009", "TLS001", "TLS010"});
  std::vector<Finding> findings(4);
  findings[0].rule = "ENV009";
  findings[1].rule = "GPU006";
  findings[2].rule = "TLS010";
  findings[2].evidence.push_back({"line", "log", 7});
  findings[3].rule = "TLS001";
  rules::drop_replaced(findings, rules);
  ASSERT_EQ(findings.size(), 2u);
  EXPECT_EQ(findings[0].rule, "GPU006");
  EXPECT_EQ(findings[1].rule, "TLS001");
  // Without the explaining finding nothing is hidden.
  std::vector<Finding> alone(1);
  alone[0].rule = "ENV009";
  rules::drop_replaced(alone, rules);
  EXPECT_EQ(alone.size(), 1u);
}

detect::OpenMpProcess two_runtimes(loader::OpenMpKind second) {
  detect::OpenMpProcess p;
  p.process = "import torch, cv2";
  p.runtimes.push_back({loader::OpenMpKind::Gnu, "libgomp.so.1", "/usr/lib/libgomp.so.1", "",
                        "loaded by import torch", 0, "", detect::Installer::Unknown, ""});
  p.runtimes.push_back({second, "libomp.so.5", "/usr/lib/libomp.so.5", "OMP_5.0",
                        "loaded by import cv2", 1, "", detect::Installer::Unknown, ""});
  return p;
}

std::vector<Finding> detect_all(const detect::Facts& facts) {
  return detect::findings(detect::run_detectors(facts), rules::RuleSet());
}

TEST(Omp001, OneDetectorForPredictedAndObservedProcesses) {
  detect::Facts facts;
  facts.openmp.push_back(two_runtimes(loader::OpenMpKind::Llvm));
  std::vector<Finding> f = detect_all(facts);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "OMP001");
  EXPECT_EQ(f[0].severity, Severity::Warning);  // one GNU, one LLVM: no abort
  EXPECT_EQ(f[0].message,
            "2 OpenMP runtimes would be loaded by `import torch, cv2`: each keeps its own thread "
            "pool and thread count");
  EXPECT_EQ(f[0].evidence[1].text,
            "LLVM libomp libomp.so.5 => /usr/lib/libomp.so.5 (OMP_5.0), loaded by import cv2");

  facts.openmp[0] = two_runtimes(loader::OpenMpKind::Llvm);
  facts.openmp[0].runtimes[0].kind = loader::OpenMpKind::Intel;
  facts.openmp[0].observed = true;
  facts.openmp[0].aborted = true;
  facts.openmp[0].process = "pid 7 (python3 train.py)";
  f = detect_all(facts);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::Error);  // the rule's escalated severity
  EXPECT_NE(f[0].message.find(
                "were loaded in pid 7 (python3 train.py): the second LLVM/Intel copy aborted it"),
            std::string::npos);

  facts.openmp[0].runtimes.pop_back();
  EXPECT_TRUE(detect_all(facts).empty());
}

// The fix follows where the runtimes come from; a mixture (or an unknown
// origin) gets the rule's general fix.
TEST(Omp001, FixForWheelsCondaAndTheDistribution) {
  detect::Facts facts;
  facts.openmp.push_back(two_runtimes(loader::OpenMpKind::Gnu));
  auto fix_with = [&](detect::Installer a, detect::Installer b) {
    facts.openmp[0].runtimes[0].installer = a;
    facts.openmp[0].runtimes[0].owner = "torch 2.1.0";
    facts.openmp[0].runtimes[1].installer = b;
    facts.openmp[0].runtimes[1].owner = "scikit-learn 1.3.2";
    std::vector<Finding> f = detect_all(facts);
    return f.size() == 1 ? f[0].fix : std::string("(no single finding)");
  };
  using detect::Installer;
  EXPECT_EQ(
      fix_with(Installer::Wheel, Installer::Wheel)
          .rfind("these wheels (torch 2.1.0, scikit-learn 1.3.2) each vendor their own OpenMP "
                 "runtime, and pip cannot make them share one",
                 0),
      0u);
  EXPECT_NE(fix_with(Installer::Conda, Installer::Conda)
                .find("install these packages from one "
                      "channel"),
            std::string::npos);
  EXPECT_NE(fix_with(Installer::System, Installer::System).find("all the distribution's"),
            std::string::npos);
  const std::string general = fix_with(Installer::Wheel, Installer::System);
  EXPECT_NE(general.find("Install the packages from one source"), std::string::npos) << general;
  EXPECT_EQ(general, fix_with(Installer::Unknown, Installer::Wheel));
}

}  // namespace
}  // namespace mld

namespace mld {

// ENV016 reads the torch store facts only: a torch >= 2.4 built without
// libuv is reported, with the variable's effect; one built with libuv, or
// older than 2.4 (libuv not asked for by default), is not.
TEST(Env016, TorchWithoutLibuv) {
  auto run = [](bool by_default, bool without, const char* use_libuv) {
    hostfacts::Facts host;
    if (use_libuv) host.env.variables.push_back({"USE_LIBUV", use_libuv});
    detect::Facts facts;
    facts.host = &host;
    facts.torch_store = detect::TorchStore{
        "2.14.1+debian", "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.2.14.1", by_default, without};
    std::vector<Finding> out;
    for (Finding& f : detect::findings(detect::run_detectors(facts), rules::RuleSet()))
      if (f.rule == "ENV016") out.push_back(std::move(f));
    return out;
  };
  std::vector<Finding> f = run(true, true, nullptr);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].severity, Severity::Warning);
  EXPECT_EQ(f[0].subject, "torch 2.14.1+debian");
  EXPECT_NE(f[0].message.find("init_process_group (env://, tcp://) and torchrun fail"),
            std::string::npos)
      << f[0].message;
  EXPECT_EQ(f[0].env_fix, (std::vector<std::string>{"USE_LIBUV=0"}));
  EXPECT_EQ(f[0].evidence[0].file, "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.2.14.1");
  // "1" is what rendezvous.py reads as "use libuv": the same finding.
  EXPECT_EQ(run(true, true, "1")[0].message, f[0].message);
  // Any other value turns libuv off for python starts; torchrun still fails.
  f = run(true, true, "0");
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(
      f[0].message.find("USE_LIBUV=0 lets init_process_group start under python, but torchrun"),
      std::string::npos)
      << f[0].message;
  EXPECT_TRUE(f[0].env_fix.empty());
  EXPECT_NE(f[0].fix.find("Start the ranks without torchrun"), std::string::npos) << f[0].fix;
  EXPECT_TRUE(run(true, false, nullptr).empty());  // built with libuv
  EXPECT_TRUE(run(false, true, nullptr).empty());  // before 2.4: libuv not asked for
}

}  // namespace mld
