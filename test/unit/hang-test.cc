// hang-test.cc — what a hang report says from a hang sample: the worker of
// torch.multiprocessing.spawn that is not where the others wait (no rank
// variable, a launcher waiting in spawn()'s join beside them), the collective
// wait in words with the backend's settings, the deadlock between the GIL and
// glibc's loader lock from native stacks (frames as libdw names them in
// Debian's glibc 2.36 and python3.11), and a stale build lock that the
// threads do not wait on is no cause. The live processes behind these
// samples are the e2e tests' (run-hang-report, run-loader-lock-deadlock).
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

namespace {

// One process deadlocked between the GIL and the loader lock: thread 12036
// walks the loaded objects with a ctypes callback and waits for the GIL
// inside dl_iterate_phdr; thread 12037 holds the GIL in ctypes.CDLL's
// dlopen, waiting for the loader's mutex; thread 12038, a second walker,
// waits for that mutex too, without the GIL. Frames as libdw named them in
// the real deadlock of run-loader-lock-deadlock.py (Debian 12: glibc 2.36,
// python3.11 with dynamic symbols only: take_gil is "??").
HangSample inversion(const std::string& iterating_file) {
  HangSample s;
  s.idle_seconds = 5;
  s.processes.push_back(process(
      12000, 1, "/usr/bin/python3 repro.py",
      {thread(12000, "futex", {{"<module>", "/tmp/t/repro.py", 33}},
              {"__futex_abstimed_wait_common (libc.so.6)", "PyEval_RestoreThread (python3.11)"}),
       thread(12036, "futex",
              {{"iterate", iterating_file, 18},
               {"run", kStdlib + "threading.py", 975},
               {"_bootstrap_inner", kStdlib + "threading.py", 1038},
               {"_bootstrap", kStdlib + "threading.py", 995}},
              {"__futex_abstimed_wait_common (libc.so.6)",
               "pthread_cond_timedwait@@GLIBC_2.3.2 (libc.so.6)", "?? (python3.11)",
               "PyEval_RestoreThread (python3.11)", "PyGILState_Ensure (python3.11)",
               "?? (_ctypes.cpython-311-x86_64-linux-gnu.so)",
               "?? (_ctypes.cpython-311-x86_64-linux-gnu.so)", "?? (libffi.so.8.1.2)",
               "?? (libffi.so.8.1.2)", "dl_iterate_phdr (libc.so.6)"}),
       // The other walker waits for the loader lock without the GIL (ctypes
       // released it for the foreign call): not the holder.
       thread(12038, "futex",
              {{"iterate", iterating_file, 18}, {"run", kStdlib + "threading.py", 975}},
              {"__GI___lll_lock_wait (libc.so.6)", "__pthread_mutex_lock@GLIBC_2.2.5 (libc.so.6)",
               "dl_iterate_phdr (libc.so.6)", "?? (libffi.so.8.1.2)", "?? (libffi.so.8.1.2)",
               "ffi_call (libffi.so.8.1.2)"}),
       thread(
           12037, "futex",
           {{"__init__", kStdlib + "ctypes/__init__.py", 376},
            {"open_close", "/tmp/t/repro.py", 24},
            {"run", kStdlib + "threading.py", 975}},
           {"__GI___lll_lock_wait (libc.so.6)", "__pthread_mutex_lock@GLIBC_2.2.5 (libc.so.6)",
            "_dl_add_to_namespace_list (ld-linux-x86-64.so.2)",
            "_dl_map_object_from_fd (ld-linux-x86-64.so.2)",
            "_dl_map_object (ld-linux-x86-64.so.2)", "dl_open_worker_begin (ld-linux-x86-64.so.2)",
            "_dl_catch_exception (libc.so.6)", "dl_open_worker (ld-linux-x86-64.so.2)",
            "_dl_catch_exception (libc.so.6)", "_dl_open (ld-linux-x86-64.so.2)",
            "dlopen_doit (libc.so.6)", "_dl_catch_exception (libc.so.6)",
            "_dl_catch_error (libc.so.6)", "_dlerror_run (libc.so.6)",
            "dlopen@GLIBC_2.2.5 (libc.so.6)", "?? (_ctypes.cpython-311-x86_64-linux-gnu.so)"})}));
  return s;
}

}  // namespace

TEST(LoaderLockInversion, BothThreadsAreNamedWithTheirLines) {
  const std::vector<Finding> found = hang_findings(inversion("/tmp/t/repro.py"));
  const Finding* d = find(found, "RUN007");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->severity, Severity::Error);
  EXPECT_EQ(d->subject, "pid 12000");
  EXPECT_EQ(d->message,
            "deadlock in pid 12000: thread 12036 at repro.py:18 (iterate) is inside "
            "dl_iterate_phdr, which holds glibc's loader lock, and its callback waits for the GIL "
            "(PyEval_RestoreThread); thread 12037 at repro.py:24 (open_close), in __init__ "
            "(ctypes/__init__.py:376) holds the GIL and waits for the loader lock in dlopen");
  EXPECT_NE(d->fix.find("your code calls dl_iterate_phdr with a Python callback (iterate "
                        "(/tmp/t/repro.py:18))"),
            std::string::npos)
      << d->fix;
  // The hang itself is still reported (it leads nothing: RUN007 explains it).
  EXPECT_TRUE(find(found, "RUN002"));
}

TEST(LoaderLockInversion, TheCallerIsNamedInTheFix) {
  // The findings outlive the pointer into them (a temporary here was a
  // use-after-free that ASan caught).
  const std::vector<Finding> found =
      hang_findings(inversion("/usr/lib/python3/dist-packages/threadpoolctl.py"));
  const Finding* d = find(found, "RUN007");
  ASSERT_TRUE(d);
  EXPECT_NE(d->fix.find("pip install -U 'threadpoolctl>=3.7'"), std::string::npos) << d->fix;
}

// The walker was made to drop the GIL inside its callback (another thread
// asked for it) and takes it back from the eval loop: take_gil, static and
// unnamed in Debian's python3.11, straight under _PyEval_EvalFrameDefault,
// with no named GIL entry (seen under load, run-loader-lock-deadlock.py).
TEST(LoaderLockInversion, GilTakenBackInsideTheCallbackUnnamed) {
  HangSample s = inversion("/tmp/t/repro.py");
  ThreadSample& walker = s.processes[0].threads[1];
  walker.python.insert(walker.python.begin(), PythonFrame{"visit", "/tmp/t/repro.py", 7});
  walker.stack = {"__futex_abstimed_wait_common (libc.so.6)",
                  "pthread_cond_timedwait@@GLIBC_2.3.2 (libc.so.6)",
                  "?? (python3.11)",
                  "_PyEval_EvalFrameDefault (python3.11)",
                  "_PyFunction_Vectorcall (python3.11)",
                  "PyObject_Vectorcall (python3.11)",
                  "?? (_ctypes.cpython-311-x86_64-linux-gnu.so)",
                  "?? (libffi.so.8.1.2)",
                  "dl_iterate_phdr (libc.so.6)"};
  const std::vector<Finding> found = hang_findings(s);
  const Finding* d = find(found, "RUN007");
  ASSERT_TRUE(d);
  EXPECT_NE(d->message.find("thread 12036 at repro.py:7 (visit) is inside dl_iterate_phdr"),
            std::string::npos)
      << d->message;
  EXPECT_NE(d->message.find("waits for the GIL (take_gil, unnamed in python3.11)"),
            std::string::npos)
      << d->message;
  // A condition wait from a library that is not the interpreter is no GIL.
  walker.stack[2] = "?? (libfoo.so)";
  EXPECT_FALSE(find(hang_findings(s), "RUN007"));
}

// Each half alone is no deadlock: a callback waiting for the GIL with no
// thread stuck in the loader, or a thread in dlopen's mutex with no callback
// under the loader lock.
TEST(LoaderLockInversion, OneHalfIsNotEnough) {
  HangSample no_opener = inversion("/tmp/t/repro.py");
  no_opener.processes[0].threads[3].stack = {"clock_nanosleep@GLIBC_2.2.5 (libc.so.6)"};
  no_opener.processes[0].threads[3].syscall = "clock_nanosleep";
  EXPECT_FALSE(find(hang_findings(no_opener), "RUN007"));
  HangSample no_iterator = inversion("/tmp/t/repro.py");
  no_iterator.processes[0].threads[1].stack.pop_back();  // dl_iterate_phdr
  EXPECT_FALSE(find(hang_findings(no_iterator), "RUN007"));
}
