// death-test.cc — a command that died of a signal: the facts `run` gathers
// through the host layer (the kernel log's records, the memory cgroup's OOM
// kills, the CPU's flags) on fixture trees in the formats the kernel writes,
// and the RUN003-RUN006 detectors' every branch — what they say when the
// machine recorded the cause, when it recorded something else, and when it
// could not be read. The real deaths are in test/e2e/run-deaths.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "detect/detect.h"
#include "host/host.h"
#include "rules/rules.h"
#include "run/run.h"

namespace mld {
namespace {

namespace fs = std::filesystem;

struct Tree {
  fs::path root = fs::temp_directory_path() /
                  ("mld-death-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  static inline int counter = 0;
  Tree() { fs::create_directories(root); }
  ~Tree() { fs::remove_all(root); }
  void write(const std::string& path, const std::string& text) {
    fs::path p = root / path.substr(1);
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
};

// /dev/kmsg's format: "<prio>,<seq>,<usec>,<flags>;<message>", continuation
// lines " KEY=value".
const char* kKmsg =
    "6,1000,4975358934,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
    "task=python3,pid=8250,uid=0\n"
    " SUBSYSTEM=memory\n"
    "3,1001,4975358954,-;Memory cgroup out of memory: Killed process 8250 (python3) "
    "total-vm:75160kB, anon-rss:65152kB\n"
    "6,1002,4975359000,-;Killed process 18250 (other) total-vm:1kB\n"
    "6,1003,4993922831,-;traps: python3[8455] trap invalid opcode ip:7f877b3b80fd "
    "sp:7ffdbc0b2ec0 error:0 in libill.so[10fd,7f877b3b8000+1000]\n"
    "6,1004,10,-;python3[8250]: segfault at 0 before the job started\n"
    "not a record\n";

TEST(HostKernelLog, RecordsSinceATimeFromAKmsgFile) {
  Tree t;
  t.write("/dev/kmsg", kKmsg);
  host::Host h(t.root.string(), {});
  std::string error;
  auto records = h.kernel_log(1000000, 100, &error);
  ASSERT_TRUE(records) << error;
  ASSERT_EQ(records->size(), 4u);  // the one at 10 µs is older; continuation and junk skipped
  EXPECT_EQ((*records)[0].usec, 4975358934u);
  EXPECT_EQ((*records)[1].message,
            "Memory cgroup out of memory: Killed process 8250 (python3) total-vm:75160kB, "
            "anon-rss:65152kB");
  EXPECT_EQ(h.kernel_log(0, 2, &error)->size(), 2u);  // at most `max`
  host::Host empty(fs::temp_directory_path().string(), {});
  EXPECT_FALSE(empty.kernel_log(0, 10, &error));
  EXPECT_NE(error.find("dev/kmsg"), std::string::npos);
}

TEST(HostCpuFlags, FirstFlagsLine) {
  Tree t;
  t.write("/proc/cpuinfo",
          "processor\t: 0\nmodel name\t: Test CPU\nflags\t\t: fpu sse4_2  avx2 popcnt\n\n"
          "processor\t: 1\nflags\t\t: fpu\n");
  host::Host h(t.root.string(), {});
  EXPECT_EQ(h.cpu_flags(), (std::set<std::string>{"fpu", "sse4_2", "avx2", "popcnt"}));
  Tree none;
  EXPECT_TRUE(host::Host(none.root.string(), {}).cpu_flags().empty());
}

// A cgroup v1 memory hierarchy whose oom_kill moves while the job runs; the
// kernel's lines about the job's pids, not others'; the CPU.
TEST(GatherDeath, CgroupV1OomKillsKernelLinesAndCpu) {
  Tree t;
  t.write("/proc/self/cgroup", "4:memory:/job/step0\n0::/\n");
  t.write("/sys/fs/cgroup/memory/job/step0/memory.oom_control",
          "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
  t.write("/sys/fs/cgroup/memory/job/step0/memory.limit_in_bytes", "100663296\n");
  t.write("/sys/fs/cgroup/memory/job/step0/memory.max_usage_in_bytes", "100659200\n");
  t.write("/dev/kmsg", kKmsg);
  t.write("/proc/cpuinfo",
          "model name\t: Test CPU\nflags\t\t: cx16 lahf_lm popcnt pni sse4_1 sse4_2 ssse3 avx\n");
  host::Host h(t.root.string(), {});
  run::DeathBaseline b = run::death_baseline(h);
  EXPECT_EQ(b.cgroup_path, "/job/step0");
  EXPECT_EQ(b.oom_kills, std::optional<u64>(2));
  b.started_usec = 4000000000u;  // the fixture's records are after it, but the one at 10 µs
  t.write("/sys/fs/cgroup/memory/job/step0/memory.oom_control",
          "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  run::ExitStatus killed{true, true, 9, false};
  detect::DeathFacts d = run::gather_death(h, b, killed, 8250, {8251}, 120u << 20);
  EXPECT_EQ(d.job_pids, (std::vector<long>{8250, 8251}));
  EXPECT_EQ(d.oom_kills_before, std::optional<u64>(2));
  EXPECT_EQ(d.oom_kills_after, std::optional<u64>(3));
  EXPECT_EQ(d.memory_limit, std::optional<u64>(96u << 20));
  ASSERT_EQ(d.kernel_lines.size(), 2u) << "only pid 8250's lines since the job started";
  EXPECT_NE(d.kernel_lines[0].find("pid=8250"), std::string::npos);
  EXPECT_NE(d.kernel_lines[1].find("Killed process 8250 (python3)"), std::string::npos);
  EXPECT_TRUE(d.kernel_note.empty());
  EXPECT_EQ(d.cpu_model, "Test CPU");
  EXPECT_EQ(d.cpu_level, "x86-64-v2");
  EXPECT_NE(std::find(d.cpu_lacks.begin(), d.cpu_lacks.end(), "avx2"), d.cpu_lacks.end());
  EXPECT_EQ(std::find(d.cpu_lacks.begin(), d.cpu_lacks.end(), "avx"), d.cpu_lacks.end());
}

TEST(GatherDeath, CgroupV2AndNothingReadable) {
  Tree t;
  t.write("/proc/self/cgroup", "0::/user.slice/job\n");
  t.write("/sys/fs/cgroup/user.slice/job/memory.events",
          "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n");
  t.write("/sys/fs/cgroup/user.slice/job/memory.max", "max\n");
  host::Host h(t.root.string(), {});
  run::DeathBaseline b = run::death_baseline(h);
  EXPECT_EQ(b.cgroup_path, "/user.slice/job");
  EXPECT_EQ(b.oom_kills, std::optional<u64>(1));
  detect::DeathFacts d = run::gather_death(h, b, {true, true, 9, false}, 7, {}, std::nullopt);
  EXPECT_EQ(d.oom_kills_after, std::optional<u64>(1));
  EXPECT_EQ(d.memory_limit, std::nullopt);  // "max"
  EXPECT_TRUE(d.kernel_lines.empty());
  EXPECT_NE(d.kernel_note.find("not readable"), std::string::npos);

  Tree bare;  // no cgroup at all
  host::Host hb(bare.root.string(), {});
  detect::DeathFacts n =
      run::gather_death(hb, run::death_baseline(hb), {true, true, 9, false}, 7, {}, std::nullopt);
  EXPECT_FALSE(n.oom_kills_after);
  EXPECT_NE(n.cgroup_note.find("no memory cgroup"), std::string::npos);
}

// The detectors, through the one place findings are made.
std::vector<Finding> findings_of(const detect::DeathFacts& d) {
  detect::Facts facts;
  facts.death = &d;
  return detect::findings(detect::run_detectors(facts), rules::RuleSet());
}

detect::DeathFacts died_of(int signal) {
  detect::DeathFacts d;
  d.pid = 42;
  d.signal = signal;
  d.memory_cgroup = "/job";
  return d;
}

bool has_evidence(const Finding& f, std::string_view text) {
  for (const Evidence& e : f.evidence)
    if (e.text.find(text) != std::string::npos) return true;
  return false;
}

TEST(DeathDetectors, SigkillByTheOomKillerOrNot) {
  detect::DeathFacts oom = died_of(9);
  oom.oom_kills_before = 0;
  oom.oom_kills_after = 1;
  oom.memory_limit = 96u << 20;
  oom.memory_peak = 96u << 20;
  oom.peak_rss_bytes = 100u << 20;
  std::vector<Finding> f = findings_of(oom);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "RUN003");
  EXPECT_EQ(f[0].severity, Severity::Error);
  EXPECT_EQ(f[0].message,
            "pid 42 was killed by the kernel's OOM killer in memory cgroup /job (limit 96 MiB)");
  EXPECT_TRUE(has_evidence(f[0], "0 before the job, 1 after"));
  EXPECT_TRUE(has_evidence(f[0], "memory cgroup peak: 96 MiB of 96 MiB"));
  EXPECT_TRUE(has_evidence(f[0], "largest resident set of the job's processes: 100 MiB"));

  // The kernel's line alone is enough (a cgroup without the counter).
  detect::DeathFacts line = died_of(9);
  line.kernel_lines = {"Out of memory: Killed process 42 (python3)"};
  EXPECT_NE(findings_of(line)[0].message.find("OOM killer"), std::string::npos);

  // Both readable and neither moved: someone else sent it.
  detect::DeathFacts other = died_of(9);
  other.oom_kills_before = 3;
  other.oom_kills_after = 3;
  f = findings_of(other);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("not by the OOM killer"), std::string::npos) << f[0].message;
  EXPECT_NE(f[0].fix.find("sacct"), std::string::npos);

  // Nothing could be read: it says so, with the reason, and gives the rule's fix.
  detect::DeathFacts unknown = died_of(9);
  unknown.kernel_note = "the kernel log is not readable: /dev/kmsg: Operation not permitted";
  unknown.cgroup_note = "no memory cgroup of this process was found under /sys/fs/cgroup";
  f = findings_of(unknown);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("could not be read"), std::string::npos) << f[0].message;
  EXPECT_TRUE(has_evidence(f[0], "Operation not permitted"));
  EXPECT_TRUE(has_evidence(f[0], "no memory cgroup"));
  EXPECT_FALSE(f[0].fix.empty());
}

TEST(DeathDetectors, SigbusWithAndWithoutAFullDevShm) {
  detect::DeathFacts full = died_of(7);
  full.shm_size = 1u << 20;
  full.shm_free = 0;
  std::vector<Finding> f = findings_of(full);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "RUN004");
  EXPECT_EQ(f[0].message, "pid 42 died of SIGBUS with /dev/shm full (0 bytes free of 1 MiB)");
  detect::DeathFacts room = died_of(7);
  room.shm_size = 8ull << 30;
  room.shm_free = 7ull << 30;
  f = findings_of(room);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NE(f[0].message.find("truncated"), std::string::npos) << f[0].message;
  EXPECT_FALSE(has_evidence(f[0], "resident set"));  // memory is a SIGKILL's concern only
}

TEST(DeathDetectors, SigillAndSigsegvNameTheObject) {
  detect::DeathFacts ill = died_of(4);
  ill.cpu_model = "Test CPU";
  ill.cpu_level = "x86-64-v2";
  ill.cpu_lacks = {"avx2", "avx512f"};
  ill.kernel_lines = {
      "traps: python3[42] trap invalid opcode ip:7f8 sp:7ff error:0 in libfoo.so[10fd,7f8+1000]"};
  std::vector<Finding> f = findings_of(ill);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "RUN005");
  EXPECT_EQ(
      f[0].message,
      "pid 42 died of SIGILL in libfoo.so: an instruction this CPU (Test CPU, x86-64-v2) does "
      "not execute");
  EXPECT_TRUE(has_evidence(f[0], "the CPU lacks: avx2 avx512f"));
  EXPECT_NE(f[0].fix.find("libfoo.so"), std::string::npos);
  ill.kernel_lines.clear();
  ill.kernel_note = "the kernel log is not readable: /dev/kmsg: Permission denied";
  f = findings_of(ill);
  EXPECT_EQ(f[0].message.find(" in "), std::string::npos) << "no object without the trap line";
  EXPECT_TRUE(has_evidence(f[0], "Permission denied"));

  detect::DeathFacts segv = died_of(11);
  segv.kernel_lines = {
      "python3[42]: segfault at 0 ip 7f sp 7f error 4 in libc.so.6[167ad8,7f+156000]"};
  f = findings_of(segv);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rule, "RUN006");
  EXPECT_EQ(f[0].message,
            "pid 42 died of a segmentation fault in libc.so.6 (the C runtime: the bad pointer came "
            "from its caller)");
  segv.kernel_lines = {"python3[42]: segfault at 8 ip 7f sp 7f error 4 in libext.so[10,7f+2000]"};
  f = findings_of(segv);
  EXPECT_EQ(f[0].message, "pid 42 died of a segmentation fault in libext.so");
  EXPECT_NE(f[0].fix.find("rebuild or reinstall libext.so"), std::string::npos);
  // Other signals (a user's SIGTERM) are no death these rules explain.
  EXPECT_TRUE(findings_of(died_of(15)).empty());
}

}  // namespace
}  // namespace mld
