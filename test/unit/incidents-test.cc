// incidents-test.cc — one incident, one root cause first: findings grouped by
// the relations rule files declare (`replaces`, `envelope`), and stack dumps
// in logs read as threads of frames (py-spy, faulthandler, gdb, tracebacks at
// Ctrl-C) whose waits rules recognise. Rules are written in the test so the
// behaviour under test does not move with the knowledge base.
#include <gtest/gtest.h>

#include "logs/logs.h"
#include "rules/rules.h"

namespace mld {
namespace {

std::string rule_text(const std::string& id, const std::string& severity, const std::string& extra,
                      const std::string& body) {
  return "id = \"" + id + "\"\nseverity = \"" + severity + "\"\ntitle = \"" + id +
         " title\"\nexplanation = \"e\"\nreferences = [\"https://example.org/" + id + "\"]\n" +
         extra + "\n[fix]\ntext = \"fix " + id + "\"\n" + body +
         "\n[[example]]\nlog = \"x\"\nsource = \"https://example.org/" + id +
         "\"\n[[negative]]\nlog = \"n\"\nwhy = \"w\"\n";
}

const rules::RuleSet& test_rules() {
  static const rules::RuleSet set = [] {
    const std::string rules[] = {
        // The cause, an explicit envelope it names, a generic envelope.
        rule_text(
            "TST020", "error", "",
            "[[signature]]\npattern = 'Duplicate GPU detected : rank (\\d+) and rank (\\d+) both "
            "on CUDA device (\\w+)'\nmessage = \"ranks {1} and {2} on {3}\"\nsubject = \"{3}\""),
        rule_text("TST021", "error", "envelope = true",
                  "[[signature]]\npattern = 'NCCL error in: \\S+, invalid usage'"),
        rule_text("TST022", "error", "envelope = true",
                  "[[signature]]\npattern = 'DistBackendError'"),
        // A warning that explains a timeout; a note that declares a line harmless.
        rule_text("TST023", "warning", "replaces = [\"TST024\"]",
                  "[[signature]]\npattern = 'using GPU \\d+ to perform barrier'"),
        rule_text("TST024", "error", "envelope = true",
                  "[[signature]]\npattern = 'Watchdog caught collective operation timeout'"),
        rule_text("TST025", "info", "replaces = [\"TST026\"]",
                  "[[signature]]\npattern = 'NET/Plugin : No plugin found'"),
        rule_text("TST026", "error", "",
                  "[[signature]]\npattern = '(lib\\S+\\.so): cannot open shared object "
                  "file'\nmessage = \"{1} missing\""),
        // A second, unrelated cause.
        rule_text("TST027", "error", "", "[[signature]]\npattern = 'CUDA out of memory'"),
        // Stack rules: a wait under a caller, and a collective wait.
        rule_text("TST030", "error", "",
                  "[[stack]]\nframe = '^wait \\([^()]*file_baton\\.py'\nunder = '^_jit_compile "
                  "'\nmessage = \"waits on a build lock\""),
        rule_text("TST031", "error", "",
                  "[[stack]]\nframe = '^(barrier|all_reduce) "
                  "\\([^()]*distributed_c10d\\.py'\nmessage = \"waits in {1}\"\n[[stack]]\nframe = "
                  "'\\b(ncclCommInitRank\\w*|c10d::TCPStore::doGet)'\nmessage = \"waits in {1}\""),
    };
    rules::RuleSet s;
    std::vector<rules::RuleError> errors;
    for (const std::string& text : rules) {
      auto r = rules::parse_rule(text, "", errors);
      if (r) s.add(*r, errors);
    }
    for (auto& e : errors) ADD_FAILURE() << e.origin << ": " << e.message;
    return s;
  }();
  return set;
}

struct Scan {
  std::unique_ptr<logs::Scanner> scanner;
  std::vector<const Finding*> findings;
  std::vector<rules::Incident> incidents;
};

Scan scan(const std::string& text, size_t piece = 0) {
  static auto matcher = [] {
    std::vector<rules::RuleError> errors;
    auto m = logs::Matcher::compile(test_rules(), errors);
    for (auto& e : errors) ADD_FAILURE() << e.origin << ": " << e.message;
    return m;
  }();
  Scan s;
  s.scanner = std::make_unique<logs::Scanner>(matcher, logs::ScanOptions{0, "log", 1});
  if (piece == 0) piece = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += piece)
    s.scanner->feed(
        ByteView(reinterpret_cast<const u8*>(text.data()) + i, std::min(piece, text.size() - i)));
  s.scanner->finish();
  for (const logs::LogFinding* f : s.scanner->findings()) s.findings.push_back(&f->finding);
  s.incidents = rules::group_incidents(s.findings, test_rules());
  return s;
}

std::vector<std::string> ids(const std::vector<const Finding*>& fs) {
  std::vector<std::string> out;
  for (const Finding* f : fs) out.push_back(f->rule);
  return out;
}

// ─── incidents ──────────────────────────────────────────────────────────────

TEST(Incidents, TheCauseLeadsItsEnvelopes) {
  // The envelopes come first in the log; the cause ("Last error:") after.
  Scan s = scan(
      "torch.distributed.DistBackendError: NCCL error in: x.cpp:1727, invalid usage\n"
      "Last error:\n"
      "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device f000\n");
  ASSERT_EQ(s.incidents.size(), 1u);
  EXPECT_EQ(s.incidents[0].cause->rule, "TST020");
  EXPECT_EQ(ids(s.incidents[0].context), (std::vector<std::string>{"TST021", "TST022"}));
  EXPECT_EQ(s.incidents[0].severity, Severity::Error);
  EXPECT_EQ(s.incidents[0].first_line, 1u);
}

TEST(Incidents, SameRuleOtherSubjectsJoinTheFirst) {
  Scan s = scan(
      "[1,2]<stdout>: NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA device "
      "1000\n"
      "NCCL error in: x.cpp:1, invalid usage\n"
      "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device f000\n");
  ASSERT_EQ(s.incidents.size(), 1u);
  EXPECT_EQ(s.incidents[0].cause->subject, "1000");
  ASSERT_EQ(s.incidents[0].also.size(), 1u);
  EXPECT_EQ(s.incidents[0].also[0]->subject, "f000");
  EXPECT_EQ(ids(s.incidents[0].context), std::vector<std::string>{"TST021"});
}

TEST(Incidents, TwoCausesAreTwoIncidentsInLineOrder) {
  Scan s = scan(
      "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB\n"
      "noise\n"
      "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 4000\n"
      "torch.distributed.DistBackendError: NCCL error in: a.cpp:1, invalid usage\n");
  ASSERT_EQ(s.incidents.size(), 2u);
  EXPECT_EQ(s.incidents[0].cause->rule, "TST027");
  EXPECT_EQ(s.incidents[1].cause->rule, "TST020");
  // Each envelope joins the nearest cause that explains it.
  EXPECT_TRUE(s.incidents[0].context.empty());
  EXPECT_EQ(ids(s.incidents[1].context), (std::vector<std::string>{"TST021", "TST022"}));
}

TEST(Incidents, EnvelopeAloneLeadsItsOwnIncident) {
  Scan s = scan("torch.distributed.DistBackendError: [1] store->get('0') got error\n");
  ASSERT_EQ(s.incidents.size(), 1u);
  EXPECT_EQ(s.incidents[0].cause->rule, "TST022");
}

TEST(Incidents, AWarningThatExplainsAnErrorLeadsAnErrorIncident) {
  Scan s = scan(
      "[rank1]: using GPU 0 to perform barrier as devices used by this process are currently "
      "unknown\n"
      "[rank1]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)\n");
  ASSERT_EQ(s.incidents.size(), 1u);
  EXPECT_EQ(s.incidents[0].cause->rule, "TST023");
  EXPECT_EQ(s.incidents[0].severity, Severity::Error);
}

TEST(Incidents, ANoteDeclaresWhatItExplainsHarmless) {
  Scan s = scan(
      "NCCL INFO NET/Plugin : No plugin found (libnccl-net.so)\n"
      "NCCL INFO dlerror=libnccl-net.so: cannot open shared object file\n");
  ASSERT_EQ(s.incidents.size(), 1u);
  EXPECT_EQ(s.incidents[0].cause->rule, "TST025");
  EXPECT_EQ(s.incidents[0].severity, Severity::Info);
  EXPECT_EQ(ids(s.incidents[0].context), std::vector<std::string>{"TST026"});
}

TEST(Incidents, ExplainersFromTheSameRankArePreferred) {
  // Two ranks, each with its own cause; the envelope of rank 1 joins rank 1's cause.
  Scan s = scan(
      "[rank0]: RuntimeError: CUDA out of memory.\n"
      "[rank1]: Duplicate GPU detected : rank 1 and rank 2 both on CUDA device 1000\n"
      "[rank0]: x\n"
      "[rank1]: torch.distributed.DistBackendError: y\n");
  ASSERT_EQ(s.incidents.size(), 2u);
  EXPECT_EQ(s.incidents[1].cause->rule, "TST020");
  EXPECT_EQ(ids(s.incidents[1].context), std::vector<std::string>{"TST022"});
}

TEST(Incidents, CyclesOfReplacesDoNotLoop) {
  std::vector<rules::RuleError> errors;
  rules::RuleSet set;
  for (auto [a, b] : {std::pair{"TST040", "TST041"}, std::pair{"TST041", "TST040"}}) {
    auto r = rules::parse_rule(rule_text(a, "error", std::string("replaces = [\"") + b + "\"]",
                                         "[[signature]]\npattern = 'x'"),
                               "", errors);
    ASSERT_TRUE(r);
    set.add(*r, errors);
  }
  Finding f1, f2;
  f1.rule = "TST040";
  f1.evidence.push_back({"x", "log", 5, false});
  f2.rule = "TST041";
  f2.evidence.push_back({"y", "log", 2, false});
  auto incidents = rules::group_incidents({&f1, &f2}, set);
  ASSERT_EQ(incidents.size(), 1u);
  EXPECT_EQ(incidents[0].cause, &f2);  // the earliest of the cycle
}

// ─── stack dumps ────────────────────────────────────────────────────────────

const std::string kPySpy =
    "Process 46930: python -u main.py\n"
    "Python v3.11.2 (/usr/bin/python3.11)\n"
    "\n"
    "Thread 46930 (idle): \"MainThread\"\n"
    "    wait (torch/utils/file_baton.py:42)\n"
    "    _jit_compile (torch/utils/cpp_extension.py:1522)\n"
    "    load (torch/utils/cpp_extension.py:1284)\n"
    "    <module> (main.py:328)\n"
    "Thread 47073 (idle): \"Thread-1\"\n"
    "    wait (threading.py:324)\n"
    "    run (tqdm/_monitor.py:60)\n";

TEST(StackDumps, PySpyDumpNamesTheWaitAndItsCaller) {
  Scan s = scan("epoch 1\n" + kPySpy + "after\n");
  ASSERT_EQ(s.findings.size(), 1u);
  const Finding& f = *s.findings[0];
  EXPECT_EQ(f.rule, "TST030");
  ASSERT_EQ(f.evidence.size(), 3u);
  EXPECT_EQ(f.evidence[0].line, 6u);
  EXPECT_EQ(f.evidence[1].line, 7u);
  EXPECT_EQ(f.evidence[2].text,
            "Thread 46930 (idle): \"MainThread\" (py-spy dump): wait "
            "(torch/utils/file_baton.py:42) ← _jit_compile ← load ← <module> (main.py:328)");
  // Any split of the input reads the same dump.
  for (size_t piece : {1, 5, 64}) {
    Scan split = scan("epoch 1\n" + kPySpy + "after\n", piece);
    ASSERT_EQ(split.findings.size(), 1u) << piece;
    EXPECT_EQ(split.findings[0]->evidence[2].text, f.evidence[2].text) << piece;
  }
}

TEST(StackDumps, TheCallerIsRequired) {
  Scan s = scan(
      "Thread 1 (idle): \"MainThread\"\n"
      "    wait (torch/utils/file_baton.py:42)\n"
      "    my_own_lock (train.py:3)\n");
  EXPECT_TRUE(s.findings.empty());
}

TEST(StackDumps, FaulthandlerTimeoutDump) {
  Scan s = scan(
      "Timeout (0:30:00)!\n"
      "Thread 0x00007f1b2c8a1740 (most recent call first):\n"
      "  File \"/opt/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py\", "
      "line 2050 in all_reduce\n"
      "  File \"/workspace/train.py\", line 88 in step\n"
      "\n"
      "Current thread 0x00007f1b2c8a2000 (most recent call first):\n"
      "  File \"/workspace/data.py\", line 41 in load\n");
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(s.findings[0]->message, "waits in all_reduce");
  EXPECT_EQ(s.findings[0]->evidence[0].line, 3u);
}

// faulthandler dumps at a crash too: where threads were when the process
// died is no wait.
TEST(StackDumps, FaulthandlerCrashDumpIsNoHang) {
  const std::string thread =
      "Thread 0x00007f1b2c8a1740 (most recent call first):\n"
      "  File \"/x/torch/distributed/distributed_c10d.py\", line 2050 in all_reduce\n";
  EXPECT_TRUE(scan("Fatal Python error: Segmentation fault\n\n" + thread).findings.empty());
  EXPECT_EQ(scan("Timeout (0:10:00)!\n" + thread).findings.size(), 1u);
}

TEST(StackDumps, GdbBacktraceWithWrappedFrames) {
  Scan s = scan(
      "Thread 15 (Thread 0x7f003cffd700 (LWP 20292)):\n"
      "#0  0x00007f012d6496a7 in __libc_accept (fd=30) at ../sysdeps/unix/sysv/linux/accept.c:26\n"
      "#3  0x00007f778b8ae77d in std::vector<unsigned char> c10d::tcputil::recvVector<unsigned "
      "char>(int) ()\n"
      "   from /x/torch/lib/libtorch_cpu.so\n"
      "#4  0x00007f778b8aca2b in c10d::TCPStore::doGet(std::string const&) () from "
      "/x/torch/lib/libtorch_cpu.so\n");
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(s.findings[0]->message, "waits in c10d::TCPStore::doGet");
  EXPECT_EQ(s.findings[0]->evidence[0].line, 5u);
  EXPECT_NE(s.findings[0]->evidence.back().text.find("gdb backtrace"), std::string::npos);
}

TEST(StackDumps, TracebacksCountOnlyWhenInterruptedOrCutOff) {
  const std::string frames =
      "Traceback (most recent call last):\n"
      "  File \"train.py\", line 40, in <module>\n"
      "    dist.barrier()\n"
      "  File \"/x/torch/distributed/distributed_c10d.py\", line 3439, in barrier\n"
      "    work = default_pg.barrier(opts=opts)\n";
  EXPECT_EQ(scan(frames + "KeyboardInterrupt\n").findings.size(), 1u);
  EXPECT_EQ(scan(frames + "torch.distributed.elastic.multiprocessing.api.SignalException: "
                          "Process 7 got signal: 15\n")
                .findings.size(),
            1u);
  EXPECT_TRUE(scan(frames + "RuntimeError: Default process group has not been initialized\n")
                  .findings.empty());
  // The log ends inside it: a wait only when the innermost call blocks.
  const std::string head = frames.substr(0, frames.rfind("    work"));
  EXPECT_TRUE(scan(head + "    opts = make_options(timeout)\n").findings.empty());
  EXPECT_EQ(scan(head + "    work.wait()\n").findings.size(), 1u);
  EXPECT_EQ(scan(frames).findings.size(), 1u);  // default_pg.barrier(...) blocks
  // Cut by unrelated output, with no exception line: not known to be a wait.
  EXPECT_TRUE(
      scan(frames + "epoch 3 loss 0.1\nepoch 4 loss 0.1\nepoch 5 loss 0.1\n").findings.empty());
}

TEST(StackDumps, InterleavedRanksKeepTheirOwnDumps) {
  Scan s = scan(
      "[rank1]: Traceback (most recent call last):\n"
      "[rank0]: step 10\n"
      "[rank1]:   File \"/x/torch/distributed/distributed_c10d.py\", line 1, in all_reduce\n"
      "[rank0]: RuntimeError: something else\n"
      "[rank1]:     work.wait()\n"
      "[rank1]: KeyboardInterrupt\n");
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(s.findings[0]->ranks, std::vector<u32>{1});
}

TEST(StackDumps, TheInnermostRecognisedWaitReports) {
  // NCCL's init under all_reduce: the wait is NCCL's (both signatures match).
  Scan s = scan(
      "Thread 9 (active): \"MainThread\"\n"
      "    ncclCommInitRankConfig (libnccl.so.2)\n"
      "    all_reduce (torch/distributed/distributed_c10d.py:2050)\n"
      "    <module> (train.py:3)\n");
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(s.findings[0]->message, "waits in ncclCommInitRankConfig");
}

TEST(StackDumps, ThousandsOfThreadsAreReadOneByOne) {
  std::string dump = "Process 1: python\n";
  for (int t = 0; t < 5000; t++) {
    dump += "Thread " + std::to_string(100 + t) + " (idle): \"Worker\"\n";
    for (int f = 0; f < 20; f++) dump += "    work_" + std::to_string(f) + " (pool.py:1)\n";
  }
  dump +=
      "Thread 9 (active): \"MainThread\"\n    barrier (torch/distributed/distributed_c10d.py:1)\n";
  Scan s = scan(dump, 1 << 16);
  ASSERT_EQ(s.findings.size(), 1u);
  EXPECT_EQ(s.findings[0]->evidence[0].line, 5000u * 21 + 3);
}

TEST(StackDumps, FalseTriggersStartNothing) {
  Scan s = scan(
      "UserWarning: deprecated (train.py:45)\n"
      "    something (lib.py:3) more\n"
      "#0 is not a frame\n"
      "File \"x.py\", line 3, in f happened\n");
  EXPECT_TRUE(s.findings.empty());
}

}  // namespace
}  // namespace mld
