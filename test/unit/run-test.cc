// run-test.cc — the trace model of `mldoctor run` on event sequences in the
// order glibc's ld.so produces them (research/glibc-tls-audit.md §4, checked
// against real traces of Debian's python3): start-up loads, a dlopen root and
// its dependency, a dlopen whose file is missing (only searches), one that
// fails after mapping (2.36: consistent, then close, delete, consistent; 2.41:
// delete and close inside the bracket), a later dlclose that is not a
// failure, dlerror texts attached to their failure; and the findings drawn
// from thread-count calls and runtimes.
#include "run/run.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "ld-cache-builder.h"

using namespace mld;
using namespace mld::run;

namespace {

std::string ev(const std::string& kind, const std::string& fields, int tid = 100) {
  static long t = 0;
  return "{\"ev\":\"" + kind + "\",\"pid\":100,\"tid\":" + std::to_string(tid) +
         ",\"t\":" + std::to_string(++t) + (fields.empty() ? "" : "," + fields) + "}\n";
}

std::string search(const std::string& name, const std::string& how, const std::string& by = "") {
  return ev("search", "\"name\":\"" + name + "\",\"how\":\"" + how + "\"" +
                          (by.empty() ? "" : ",\"by\":\"" + by + "\""));
}
std::string open(const std::string& path, const std::string& runtime = "") {
  return ev("open", "\"path\":\"" + path + "\",\"lmid\":0" +
                        (runtime.empty() ? "" : ",\"runtime\":\"" + runtime + "\""));
}
std::string close(const std::string& path) { return ev("close", "\"path\":\"" + path + "\""); }
std::string activity(const std::string& what) {
  return ev("activity", "\"what\":\"" + what + "\"");
}

std::string startup() {
  return ev("start",
            "\"ppid\":1,\"exe\":\"/usr/bin/"
            "python3.11\",\"glibc\":\"2.36\",\"argv\":[\"python3\",\"-c\",\"x\"]") +
         ev("open", "\"path\":\"/usr/bin/python3.11\",\"lmid\":0,\"program\":1") +
         open("/lib64/ld-linux-x86-64.so.2") + activity("add") +
         search("libc.so.6", "orig", "/usr/bin/python3.11") +
         search("/lib/x86_64-linux-gnu/libc.so.6", "ld.so.cache") +
         open("/lib/x86_64-linux-gnu/libc.so.6") + activity("consistent") + ev("preinit", "");
}

const LoadedObject* object(const TracedProcess& p, const std::string& path) {
  for (const LoadedObject& o : p.objects)
    if (o.path == path) return &o;
  return nullptr;
}

}  // namespace

TEST(TraceModel, StartupAndDlopenWithDependency) {
  std::string t = startup() + search("/x/_C.so", "orig", "/usr/bin/python3.11") + activity("add") +
                  open("/x/_C.so") + search("libgomp.so.1", "orig", "/x/_C.so") +
                  search("/lib/libgomp.so.1", "ld.so.cache") + open("/lib/libgomp.so.1") +
                  activity("consistent");
  TracedProcess p = parse_process_events(t, 100);
  ASSERT_EQ(p.images.size(), 1u);
  EXPECT_EQ(p.images[0].argv.size(), 3u);
  const LoadedObject* libc = object(p, "/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_TRUE(libc);
  EXPECT_EQ(libc->kind, LoadKind::Startup);
  EXPECT_EQ(libc->requester, "/usr/bin/python3.11");
  const LoadedObject* mod = object(p, "/x/_C.so");
  ASSERT_TRUE(mod);
  EXPECT_EQ(mod->kind, LoadKind::Dlopen);
  const LoadedObject* gomp = object(p, "/lib/libgomp.so.1");
  ASSERT_TRUE(gomp);
  EXPECT_EQ(gomp->kind, LoadKind::Needed);
  EXPECT_EQ(gomp->requester, "/x/_C.so");
  EXPECT_EQ(load_chain(p, "/lib/libgomp.so.1"),
            "needed by _C.so, dlopen()ed by python3.11 as /x/_C.so");
  EXPECT_TRUE(p.failed.empty());
}

TEST(TraceModel, MissingFileIsAFailureWithItsCandidatesAndMessage) {
  std::string t =
      startup() + search("libnothere.so", "orig", "/x/_ctypes.so") +
      search("/lib/libnothere.so", "default") + search("/usr/lib/libnothere.so", "default") +
      ev("dlerror",
         "\"message\":\"libnothere.so: cannot open shared object file: No such file or directory\","
         "\"caller\":\"/x/_ctypes.so\"");
  TracedProcess p = parse_process_events(t, 100);
  ASSERT_EQ(p.failed.size(), 1u);
  const FailedLoad& f = p.failed[0];
  EXPECT_EQ(f.name, "libnothere.so");
  EXPECT_EQ(f.requester, "/x/_ctypes.so");
  EXPECT_EQ(f.kind, LoadKind::Dlopen);
  EXPECT_EQ(f.candidates.size(), 2u);
  EXPECT_TRUE(f.removed.empty());
  EXPECT_NE(f.message.find("cannot open shared object file"), std::string::npos);
}

TEST(TraceModel, RollbackAfterMappingGlibc236Order) {
  // objsearch → add → objopen → consistent → objclose → delete → consistent
  std::string t =
      startup() + search("/x/tlsmod5.so", "orig", "/usr/bin/python3.11") + activity("add") +
      open("/x/tlsmod5.so") + activity("consistent") + close("/x/tlsmod5.so") + activity("delete") +
      activity("consistent") +
      ev("dlerror", "\"message\":\"/x/tlsmod5.so: cannot allocate memory in static TLS block\"");
  TracedProcess p = parse_process_events(t, 100);
  ASSERT_EQ(p.failed.size(), 1u);
  EXPECT_EQ(p.failed[0].name, "/x/tlsmod5.so");
  EXPECT_EQ(p.failed[0].removed, std::vector<std::string>{"/x/tlsmod5.so"});
  EXPECT_NE(p.failed[0].message.find("static TLS"), std::string::npos);
  EXPECT_TRUE(object(p, "/x/tlsmod5.so")->removed_by_failure);
}

TEST(TraceModel, RollbackInsideTheBracketGlibc241Order) {
  std::string t = startup() + search("/x/a.so", "orig", "/usr/bin/python3.11") + activity("add") +
                  open("/x/a.so") + search("libb.so", "orig", "/x/a.so") + open("/x/libb.so") +
                  activity("delete") + close("/x/libb.so") + close("/x/a.so") +
                  activity("consistent");
  TracedProcess p = parse_process_events(t, 100);
  ASSERT_EQ(p.failed.size(), 1u);
  EXPECT_EQ(p.failed[0].name, "/x/a.so");  // the dlopen root, not the dependency
  EXPECT_EQ(p.failed[0].removed.size(), 2u);
}

TEST(TraceModel, LaterDlcloseIsNotAFailure) {
  std::string t = startup() + search("/x/a.so", "orig", "/usr/bin/python3.11") + activity("add") +
                  open("/x/a.so") + activity("consistent") +
                  ev("threads",
                     "\"fn\":\"omp_set_num_threads\",\"value\":2,\"before\":1,\"after\":2,"
                     "\"caller\":\"/x/a.so\",\"runtime\":\"/lib/libgomp.so.1\"") +
                  close("/x/a.so") + activity("delete") + activity("consistent");
  TracedProcess p = parse_process_events(t, 100);
  EXPECT_TRUE(p.failed.empty());
  EXPECT_TRUE(object(p, "/x/a.so")->closed);
  EXPECT_FALSE(object(p, "/x/a.so")->removed_by_failure);
}

TEST(TraceModel, ExitTeardownClosesAreNotDlcloses) {
  std::string t =
      startup() + ev("exit", "\"threads\":1") + close("/lib/x86_64-linux-gnu/libc.so.6");
  TracedProcess p = parse_process_events(t, 100);
  EXPECT_TRUE(p.exited);
  EXPECT_FALSE(object(p, "/lib/x86_64-linux-gnu/libc.so.6")->closed);
}

TEST(TraceModel, DamagedLinesAreCountedNotFatal) {
  std::string t =
      startup() + "{\"ev\":\"open\",\"path\":\"/x/\xff\xfe.so\",\"lmid\":0,\"t\":999}\n" +
      "garbage\n" + "[1,2]\n" + "{\"ev\":\"open\",\"path\":\"/x/cut";  // a crash mid-write
  TracedProcess p = parse_process_events(t, 100);
  EXPECT_EQ(p.bad_lines, 3u);
  ASSERT_TRUE(object(p, "/x/\xEF\xBF\xBD\xEF\xBF\xBD.so"));  // invalid UTF-8 repaired, line kept
}

TEST(TraceAnalysis, ThreadCountChangedByAnotherLibrary) {
  Trace trace;
  std::string t = startup() +
                  ev("threads",
                     "\"fn\":\"omp_set_num_threads\",\"value\":1,\"before\":2,\"after\":1,"
                     "\"caller\":\"/lib/libtorch_cpu.so.1.13\",\"runtime\":\"/lib/libgomp.so.1\"") +
                  ev("threads",
                     "\"fn\":\"omp_set_num_threads\",\"value\":1,\"before\":1,\"after\":1,"
                     "\"caller\":\"/lib/libtorch_cpu.so.1.13\",\"runtime\":\"/lib/libgomp.so.1\"") +
                  ev("threads",
                     "\"fn\":\"omp_set_num_threads\",\"value\":4,\"before\":1,\"after\":4,"
                     "\"caller\":\"/numba/np/ufunc/omppool.so\",\"runtime\":\"/lib/libgomp.so.1\"");
  trace.processes.emplace(100, parse_process_events(t, 100));
  AnalysisContext ctx;
  ctx.child_pid = 100;
  FindingList found;
  analyse(trace, ctx, found);
  ASSERT_EQ(found.findings.size(), 1u);
  const Finding& f = found.findings[0];
  EXPECT_EQ(f.rule, "THR003");
  EXPECT_NE(f.message.find("omppool.so changed libgomp.so.1's thread count from 1 to 4"),
            std::string::npos)
      << f.message;
  EXPECT_NE(f.message.find("libtorch_cpu.so.1.13 had set it to 1"), std::string::npos) << f.message;
  EXPECT_EQ(f.env_fix, std::vector<std::string>{"NUMBA_NUM_THREADS=1"});
}

TEST(TraceAnalysis, SameCallerOrSameValueIsNoOverride) {
  Trace trace;
  std::string t = startup() +
                  ev("threads",
                     "\"fn\":\"omp_set_num_threads\",\"value\":2,\"before\":4,\"after\":2,"
                     "\"caller\":\"/a.so\",\"runtime\":\"/lib/libgomp.so.1\"") +
                  ev("threads",
                     "\"fn\":\"omp_set_num_threads\",\"value\":3,\"before\":2,\"after\":3,"
                     "\"caller\":\"/a.so\",\"runtime\":\"/lib/libgomp.so.1\"") +
                  ev("threads",
                     "\"fn\":\"omp_set_num_threads\",\"value\":3,\"before\":3,\"after\":3,"
                     "\"caller\":\"/b.so\",\"runtime\":\"/lib/libgomp.so.1\"");
  trace.processes.emplace(100, parse_process_events(t, 100));
  AnalysisContext ctx;
  ctx.child_pid = 100;
  FindingList found;
  analyse(trace, ctx, found);
  EXPECT_TRUE(found.findings.empty());
}

// libomp.so.5 by its name, the copy by what the audit module saw it define.
TEST(TraceAnalysis, TwoLlvmRuntimesAndAnAbortIsAnError) {
  Trace trace;
  std::string t = startup() + search("/x/a.so", "orig", "/usr/bin/python3.11") + activity("add") +
                  open("/x/a.so") + search("libomp.so.5", "orig", "/x/a.so") +
                  open("/lib/libomp.so.5") + activity("consistent") +
                  search("/x/b.so", "orig", "/usr/bin/python3.11") + activity("add") +
                  open("/x/b.so") + search("libiomp5.so", "orig", "/x/b.so") +
                  open("/x/lib/libcopy.so", "kmp-openmp") + activity("consistent");
  trace.processes.emplace(100, parse_process_events(t, 100));
  AnalysisContext ctx;
  ctx.child_pid = 100;
  ctx.status = ExitStatus{.known = true, .signaled = true, .code = 6};
  FindingList found;
  analyse(trace, ctx, found);
  ASSERT_EQ(found.findings.size(), 1u);
  EXPECT_EQ(found.findings[0].rule, "OMP001");
  EXPECT_EQ(found.findings[0].severity, Severity::Error);
  EXPECT_NE(found.findings[0].message.find("aborted"), std::string::npos);
  ASSERT_EQ(found.findings[0].evidence.size(), 2u);
  EXPECT_NE(found.findings[0].evidence[1].text.find("needed by b.so, dlopen()ed by python3.11"),
            std::string::npos);
}

TEST(TraceAnalysis, ACommandWithoutEventsWasNotSeen) {
  Trace trace;
  AnalysisContext ctx;
  ctx.child_pid = 4242;
  ctx.not_traced_reasons = {"/bin/x is statically linked: there is no ld.so to load the shims"};
  FindingList found;
  analyse(trace, ctx, found);
  ASSERT_EQ(found.findings.size(), 1u);
  EXPECT_EQ(found.findings[0].rule, "RUN001");
  EXPECT_NE(found.findings[0].evidence[0].text.find("statically linked"), std::string::npos);
}

// The event line parser: the escapes the writer produces (and the rest of
// JSON's), surrogate pairs, raw non-UTF-8 bytes; nested objects, fractions
// and integers beyond long long reject the line.
TEST(TraceModel, EventLineSubsetOfJson) {
  std::string t = ev("start",
                     "\"exe\":\"/opt/caf\\u00e9/py \\\"q\\\" \\\\ \\ud83d\\ude00\\t\",\"ppid\":-1,"
                     "\"argv\":[\"a\",\"\\u000a\",\"\\ud800x\"],\"x\":true,\"y\":null");
  t += "{\"ev\":\"open\",\"path\":\"/a\",\"nested\":{\"k\":1}}\n";
  t += "{\"ev\":\"open\",\"path\":\"/b\",\"t\":1.5}\n";
  t += "{\"ev\":\"open\",\"path\":\"/c\",\"t\":99999999999999999999}\n";
  t += "{\"ev\":\"open\",\"path\":\"/d\"} trailing\n";
  t += "  {\"ev\" : \"open\" , \"path\" : \"/e\" }  \n";
  TracedProcess p = parse_process_events(t, 100);
  ASSERT_EQ(p.images.size(), 1u);
  EXPECT_EQ(p.images[0].exe, "/opt/caf\xC3\xA9/py \"q\" \\ \xF0\x9F\x98\x80\t");
  EXPECT_EQ(p.images[0].ppid, -1);
  EXPECT_EQ(p.images[0].argv, (std::vector<std::string>{"a", "\n", "\xEF\xBF\xBDx"}));
  EXPECT_EQ(p.bad_lines, 4u);
  ASSERT_EQ(p.objects.size(), 1u);
  EXPECT_EQ(p.objects[0].path, "/e");
}

// The hang sample of a rooted /proc: a thread in connect(2) whose socket is
// in SYN_SENT names the address nothing answers at.
TEST(HangAnalysis, ConnectionWithoutAnswerIsTheCause) {
  mld::test::TempDir t;
  const std::string proc = t.path() + "/proc";
  mld::test::make_dirs(proc + "/4242/task/4242");
  mld::test::make_dirs(proc + "/4242/fd");
  mld::test::make_dirs(proc + "/net");
  mld::test::write_file(proc + "/4242/cmdline", std::string("python3\0train.py\0", 17));
  mld::test::write_file(proc + "/4242/task/4242/comm", "python3\n");
  mld::test::write_file(proc + "/4242/task/4242/stat",
                        "4242 (python3) S 1 4242 4242 0 -1 0 0 0 0 0 7 3 0 0\n");
  mld::test::write_file(proc + "/4242/task/4242/wchan", "inet_wait_for_connect");
  mld::test::write_file(proc + "/4242/task/4242/syscall",
                        "42 0x3 0x7ffc 0x10 0x0 0x0 0x0 0x7ffc 0x7f00\n");
  std::filesystem::create_symlink("socket:[777]", proc + "/4242/fd/3");
  mld::test::write_file(proc + "/net/tcp",
                        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
                        "retrnsmt   uid  timeout inode\n"
                        "   0: 0100007F:A1B2 0900000A:7334 02 00000000:00000000 01:00000100 "
                        "00000003     0        0 777 "
                        "1 0000000000000000 200 0 0 10 -1\n");
  host::Host host(t.path(), {});
  HangSample s = sample_processes(host, {4242}, 30);
  ASSERT_EQ(s.processes.size(), 1u);
  ASSERT_EQ(s.processes[0].threads.size(), 1u);
  EXPECT_EQ(s.processes[0].threads[0].syscall, "connect");
  ASSERT_EQ(s.processes[0].sockets.size(), 1u);
  EXPECT_EQ(s.processes[0].sockets[0], "tcp 127.0.0.1:41394 -> 10.0.0.9:29492 SYN_SENT");
  FindingList found;
  analyse_hang(s, host, "/nonexistent", nullptr, found);
  ASSERT_FALSE(found.findings.empty());
  EXPECT_EQ(found.findings[0].rule, "RUN002");
  EXPECT_NE(
      found.findings[0].message.find("gets no answer (pid 4242 connecting to 10.0.0.9:29492)"),
      std::string::npos)
      << found.findings[0].message;
  EXPECT_NE(found.findings[0].fix.find("MASTER_ADDR"), std::string::npos);
}

// A job hung on extension build locks: the hang first, naming the stale
// lock as the cause, then each lock's finding in the order of its build
// directory (a held one before a stale one here).
TEST(HangAnalysis, StaleBuildLockIsTheCauseAndLocksFollowInTheirOrder) {
  mld::test::TempDir t;
  mld::test::make_dirs(t.path() + "/ext/a");
  mld::test::make_dirs(t.path() + "/ext/b");
  mld::test::write_file(t.path() + "/ext/a/lock", "");
  mld::test::write_file(t.path() + "/ext/b/lock", "");
  mld::test::make_dirs(t.path() + "/proc/4242/fd");
  mld::test::write_file(t.path() + "/proc/4242/comm", "python3\n");
  std::filesystem::create_symlink("/ext/a/lock", t.path() + "/proc/4242/fd/3");
  host::Host host(t.path(), {{"TORCH_EXTENSIONS_DIR", "/ext"}});
  HangSample s;
  s.idle_seconds = 30;
  ProcessSample p;
  p.pid = 5151;
  p.command = "python3 train.py";
  p.threads.push_back({5151, "python3", 'S', "hrtimer_nanosleep", "clock_nanosleep", {}});
  s.processes.push_back(p);
  FindingList found;
  analyse_hang(s, host, "/nonexistent", nullptr, found);
  ASSERT_EQ(found.findings.size(), 3u);
  EXPECT_EQ(found.findings[0].rule, "RUN002");
  EXPECT_EQ(found.findings[0].subject, "pid 5151");
  EXPECT_EQ(found.findings[0].message,
            "no CPU progress, no output and no events for 30 s (1 process; threads: 1 in "
            "clock_nanosleep): the job is waiting for a torch extension build lock that no "
            "process holds");
  EXPECT_EQ(found.findings[0].severity, Severity::Warning);
  EXPECT_EQ(found.findings[1].rule, "JIT002");
  EXPECT_EQ(found.findings[1].subject, "/ext/a/lock");
  EXPECT_EQ(found.findings[2].rule, "JIT001");
  EXPECT_EQ(found.findings[2].subject, "/ext/b/lock");
}
