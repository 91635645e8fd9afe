// hang-test.cc — what a hang report says from a hang sample: the worker of
// torch.multiprocessing.spawn that is not where the others wait (no rank
// variable, a launcher waiting in spawn()'s join beside them), the collective
// wait in words with the backend's settings, and a stale build lock that the
// threads do not wait on is no cause. The live processes behind these
// samples are the e2e tests' (run-hang-report).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "detect/detect.h"
#include "ld-cache-builder.h"
#include "run/run.h"

using namespace mld;
using detect::HangSample;
using detect::ProcessSample;
using detect::PythonFrame;
using detect::ThreadSample;

namespace {

const std::string kStdlib = "/usr/lib/python3.11/";
const std::string kTorch = "/usr/lib/python3/dist-packages/torch/";

ThreadSample thread(long tid, const char* syscall, std::vector<PythonFrame> python,
                    std::vector<std::string> stack = {}) {
  ThreadSample t;
  t.tid = tid;
  t.comm = "python3";
  t.state = 'S';
  t.syscall = syscall;
  t.python = std::move(python);
  t.stack = std::move(stack);
  return t;
}

ProcessSample process(long pid, long ppid, const std::string& command,
                      std::vector<ThreadSample> threads) {
  ProcessSample p;
  p.pid = pid;
  p.ppid = ppid;
  p.command = command;
  p.cpython = true;
  p.threads = std::move(threads);
  return p;
}

// The frames of a torch.multiprocessing.spawn worker below the user's
// function `run`.
std::vector<PythonFrame> spawn_worker(std::vector<PythonFrame> inner) {
  for (const PythonFrame& f :
       std::vector<PythonFrame>{{"_wrap", kTorch + "multiprocessing/spawn.py", 69},
                                {"run", kStdlib + "multiprocessing/process.py", 108},
                                {"_bootstrap", kStdlib + "multiprocessing/process.py", 314},
                                {"_main", kStdlib + "multiprocessing/spawn.py", 133},
                                {"spawn_main", kStdlib + "multiprocessing/spawn.py", 120},
                                {"<module>", "<string>", 1}})
    inner.push_back(f);
  return inner;
}

// A 2-worker gloo job started by torch.multiprocessing.spawn: worker 702
// sleeps before all_reduce, 701 waits in it, the launcher 700 waits in
// spawn()'s join, multiprocessing's resource tracker 703 reads its pipe.
HangSample spawn_job() {
  HangSample s;
  s.idle_seconds = 10;
  const std::string worker =
      "/usr/bin/python3 -c from multiprocessing.spawn import spawn_main; spawn_main(...)";
  s.processes.push_back(
      process(700, 1, "/usr/bin/python3 train.py",
              {thread(700, "poll",
                      {{"wait", kStdlib + "multiprocessing/connection.py", 947},
                       {"join", kTorch + "multiprocessing/spawn.py", 109},
                       {"start_processes", kTorch + "multiprocessing/spawn.py", 198},
                       {"spawn", kTorch + "multiprocessing/spawn.py", 240},
                       {"<module>", "/home/u/train.py", 30}})}));
  s.processes.push_back(process(
      701, 700, worker,
      {thread(701, "futex",
              spawn_worker({{"all_reduce", kTorch + "distributed/distributed_c10d.py", 1536},
                            {"run", "/home/u/train.py", 14}}),
              {"__futex_abstimed_wait_common (libc.so.6)",
               "c10d::ProcessGroupGloo::AsyncWork::wait(std::chrono::duration<long, "
               "std::ratio<1l, 1000l> >) (libtorch_cpu.so.1.13)"})}));
  s.processes.push_back(
      process(702, 700, worker,
              {thread(702, "clock_nanosleep", spawn_worker({{"run", "/home/u/train.py", 12}}),
                      {"clock_nanosleep@GLIBC_2.2.5 (libc.so.6)"})}));
  s.processes.push_back(process(
      703, 700, "/usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(6)",
      {thread(703, "read",
              {{"main", kStdlib + "multiprocessing/resource_tracker.py", 197},
               {"<module>", "<string>", 1}})}));
  return s;
}

std::vector<Finding> hang_findings(const HangSample& s) {
  host::Host host("/nonexistent-root", {});
  FindingList found;
  run::analyse_hang(s, host, "/nonexistent", nullptr, found);
  return found.findings;
}

const Finding* find(const std::vector<Finding>& findings, const std::string& rule) {
  for (const Finding& f : findings)
    if (f.rule == rule) return &f;
  return nullptr;
}

}  // namespace

// Without rank variables the workers are told apart from the launcher and
// the resource tracker: the one not in the collective is named by pid with
// its line, never the launcher's join, and a gloo job's fix asks for no
// NCCL setting.
TEST(HangPeers, SpawnWorkersAreComparedNotTheLauncher) {
  const HangSample s = spawn_job();
  const detect::HangPeers peers = detect::hang_peers(s);
  ASSERT_EQ(peers.groups.size(), 2u);
  EXPECT_FALSE(peers.by_rank);
  EXPECT_EQ(peers.odd, 1u);
  EXPECT_TRUE(peers.collective_split);
  EXPECT_EQ(peers.backend, "gloo");
  EXPECT_EQ(peers.names(peers.odd_members()), "pid 702");
  EXPECT_EQ(peers.names(peers.waiting_members()), "pid 701");

  const std::optional<detect::CollectiveWait> wait = detect::collective_wait(s);
  ASSERT_TRUE(wait);
  EXPECT_EQ(wait->message,
            "pid 702 is asleep (clock_nanosleep) at train.py:12 (run) while pid 701 waits in "
            "all_reduce at train.py:14 (run)");
  EXPECT_NE(wait->fix.find("look at what pid 702 does at train.py:12 (run) (pid 702; its whole "
                           "stack: mldoctor stacks 702)"),
            std::string::npos)
      << wait->fix;
  EXPECT_EQ(wait->env, std::vector<std::string>{"TORCH_DISTRIBUTED_DEBUG=DETAIL"});

  host::Host host("/nonexistent-root", {});
  FindingList found;
  run::analyse_hang(s, host, "/nonexistent", nullptr, found);
  ASSERT_FALSE(found.findings.empty());
  const Finding& hang = found.findings[0];
  EXPECT_EQ(hang.rule, "RUN002");
  EXPECT_NE(hang.message.find("; pid 702 is not where pid 701 waits in a collective (pid 702: at "
                              "train.py:12 (run), main thread in clock_nanosleep; pid 701: "
                              "all_reduce at train.py:14 (run), main thread in futex)"),
            std::string::npos)
      << hang.message;
  EXPECT_EQ(hang.message.find("spawn"), std::string::npos) << hang.message;
  EXPECT_EQ(hang.fix.find("NCCL_DEBUG"), std::string::npos) << hang.fix;
  EXPECT_NE(hang.fix.find("TORCH_DISTRIBUTED_DEBUG=DETAIL"), std::string::npos) << hang.fix;

  // The same job where no worker waits in a collective: no odd one is
  // guessed, and the process named is a worker, not the launcher's join.
  HangSample idle = s;
  idle.processes[1].threads[0] =
      thread(701, "clock_nanosleep", spawn_worker({{"run", "/home/u/train.py", 12}}));
  EXPECT_TRUE(detect::hang_peers(idle).groups.empty());
  EXPECT_FALSE(detect::collective_wait(idle));
  FindingList idle_found;
  run::analyse_hang(idle, host, "/nonexistent", nullptr, idle_found);
  ASSERT_FALSE(idle_found.findings.empty());
  EXPECT_NE(idle_found.findings[0].message.find("; pid 701's main thread: at train.py:12 (run)"),
            std::string::npos)
      << idle_found.findings[0].message;
}

// Two ranks of an NCCL job: the settings for NCCL; no native frame to say
// which backend: both.
TEST(HangPeers, DebugSettingsFollowTheBackend) {
  HangSample s = spawn_job();
  s.processes[1].threads[0].stack = {
      "c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long, std::ratio<1l, 1000l> "
      ">) (libtorch_cuda.so)"};
  EXPECT_EQ(detect::hang_peers(s).backend, "nccl");
  EXPECT_EQ(detect::collective_wait(s)->env,
            (std::vector<std::string>{"NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL"}));
  s.processes[1].threads[0].stack.clear();
  s.processes[2].threads[0].stack.clear();
  EXPECT_EQ(detect::hang_peers(s).backend, "");
  EXPECT_EQ(detect::collective_wait(s)->env,
            (std::vector<std::string>{"NCCL_DEBUG=INFO", "TORCH_DISTRIBUTED_DEBUG=DETAIL"}));
}

// A stale build lock in the caches is the cause only when a thread waits in
// torch's FileBaton (or no Python stack tells): here the threads sleep
// elsewhere, so neither the lock rules nor RUN002 blame it.
TEST(HangAnalysis, AStaleLockNobodyWaitsOnIsNoCause) {
  mld::test::TempDir t;
  mld::test::make_dirs(t.path() + "/ext/a");
  mld::test::write_file(t.path() + "/ext/a/lock", "");
  host::Host host(t.path(), {{"TORCH_EXTENSIONS_DIR", "/ext"}});
  HangSample s;
  s.idle_seconds = 30;
  s.processes.push_back(
      process(5151, 1, "python3 train.py",
              {thread(5151, "clock_nanosleep", {{"<module>", "/home/u/train.py", 3}})}));
  FindingList found;
  run::analyse_hang(s, host, "/nonexistent", nullptr, found);
  ASSERT_EQ(found.findings.size(), 1u);
  EXPECT_EQ(found.findings[0].rule, "RUN002");
  EXPECT_EQ(found.findings[0].message.find("build lock"), std::string::npos)
      << found.findings[0].message;
  // In torch's FileBaton.wait(): the lock is the cause.
  s.processes[0].threads[0].python = {{"wait", kTorch + "utils/file_baton.py", 42},
                                      {"_jit_compile", kTorch + "utils/cpp_extension.py", 1509},
                                      {"<module>", "/home/u/train.py", 3}};
  FindingList waiting;
  run::analyse_hang(s, host, "/nonexistent", nullptr, waiting);
  EXPECT_TRUE(find(waiting.findings, "JIT001"));
  EXPECT_NE(waiting.findings[0].message.find("build lock that no process holds"),
            std::string::npos);
}
