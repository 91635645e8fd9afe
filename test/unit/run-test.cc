// run-test.cc — the trace model of `mldoctor run` on event sequences in the
// order glibc's ld.so produces them (research/glibc-tls-audit.md §4, checked
// against real traces of Debian's python3): start-up loads, a dlopen root and
// its dependency, a dlopen whose file is missing (only searches), one that
// fails after mapping (2.36: consistent, then close, delete, consistent; 2.41:
// delete and close inside the bracket), a later dlclose that is not a
// failure, dlerror texts attached to their failure; and the findings drawn
// from thread-count calls and runtimes.
#include "run/run.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
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

// An exec into a program the shims did not load in: a failed exec (a PATH
// search) is not it, a traced image after it clears it, and the last one
// with no image after it is the process's untraced exec.
TEST(TraceModel, UntracedExecIsTheLastExecWithNoImageAfterIt) {
  const std::string sh = ev("start", "\"exe\":\"/usr/bin/dash\",\"argv\":[\"sh\"]");
  auto exec = [](const std::string& path, const std::string& env) {
    return ev("exec", "\"call\":\"execve\",\"path\":\"" + path + "\",\"caller\":\"sh\"" + env +
                          ",\"root_changed\":0");
  };
  const std::string env_ok = ",\"audit\":1,\"preload\":-1,\"trace_dir\":1";
  // PATH search: two failures, then a traced python.
  TracedProcess traced =
      parse_process_events(sh + exec("/a/python3", env_ok) + ev("exec_failed", "") +
                               exec("/usr/bin/python3", env_ok) + startup(),
                           100);
  EXPECT_EQ(traced.images.size(), 2u);
  EXPECT_FALSE(traced.untraced_exec);
  // The environment passed on dropped the shims: the last event is the exec.
  TracedProcess lost = parse_process_events(
      sh + exec("/usr/bin/python3", ",\"audit\":-1,\"preload\":-1,\"trace_dir\":-1"), 100);
  ASSERT_TRUE(lost.untraced_exec);
  EXPECT_EQ(lost.untraced_exec->path, "/usr/bin/python3");
  EXPECT_TRUE(lost.untraced_exec->env_known);
  EXPECT_EQ(lost.untraced_exec->audit, -1);
  // execv/execvp before the program's main: environment unknown.
  TracedProcess early = parse_process_events(
      sh + ev("exec", "\"call\":\"execvp\",\"path\":\"x\",\"root_changed\":1"), 100);
  ASSERT_TRUE(early.untraced_exec);
  EXPECT_FALSE(early.untraced_exec->env_known);
  EXPECT_EQ(early.untraced_exec->root_changed, 1);
}

// chroot() is the last event only when the new root lacked the trace
// directory; events after it (the directory bound in) clear it, and a
// failed chroot is no change.
TEST(TraceModel, ChrootIsUnseenOnlyWhenItIsTheLastEvent) {
  const std::string ch = ev("chroot", "\"path\":\"jail\",\"cwd\":\"/srv\",\"caller\":\"chroot\"");
  TracedProcess lost = parse_process_events(startup() + ch, 100);
  ASSERT_TRUE(lost.unseen_after_chroot);
  EXPECT_EQ(lost.unseen_after_chroot->path, "jail");
  EXPECT_EQ(lost.unseen_after_chroot->cwd, "/srv");
  EXPECT_FALSE(
      parse_process_events(startup() + ch + ev("chroot_failed", ""), 100).unseen_after_chroot);
  EXPECT_FALSE(
      parse_process_events(startup() + ch + ev("exec", "\"call\":\"execvp\",\"path\":\"/x\""), 100)
          .unseen_after_chroot);
}

TEST(TraceAnalysis, CommandThatExecedOutOfSightIsNamedWithTheRecordedCause) {
  Trace trace;
  TracedProcess p = parse_process_events(
      ev("start", "\"exe\":\"/usr/sbin/chroot\",\"argv\":[\"chroot\"]") +
          ev("exec",
             "\"call\":\"execvp\",\"path\":\"/bin/sh\",\"caller\":\"chroot\",\"audit\":1,"
             "\"preload\":-1,\"trace_dir\":1,\"root_changed\":1"),
      4242);
  trace.processes[4242] = p;
  AnalysisContext ctx;
  ctx.child_pid = 4242;
  ctx.shims_glibc_needed = "GLIBC_2.34";
  FindingList found;
  analyse(trace, ctx, found);
  ASSERT_EQ(found.findings.size(), 1u);
  const Finding& f = found.findings[0];
  EXPECT_EQ(f.rule, "RUN001");
  EXPECT_NE(f.message.find("ran /bin/sh (an exec from /usr/sbin/chroot)"), std::string::npos)
      << f.message;
  ASSERT_EQ(f.evidence.size(), 1u);
  EXPECT_NE(f.evidence[0].text.find("refused them"), std::string::npos) << f.evidence[0].text;
  EXPECT_NE(f.evidence[0].text.find("they need GLIBC_2.34"), std::string::npos);
  EXPECT_NE(f.fix.find("inside the new root"), std::string::npos) << f.fix;

  // A command whose last exec went into a traced program: nothing to say.
  trace.processes[4242] =
      parse_process_events(ev("start", "\"exe\":\"/usr/bin/dash\"") +
                               ev("exec",
                                  "\"call\":\"execve\",\"path\":\"/usr/bin/python3\",\"audit\":1,"
                                  "\"preload\":-1,\"trace_dir\":1,\"root_changed\":0") +
                               startup(),
                           4242);
  FindingList none;
  analyse(trace, ctx, none);
  EXPECT_TRUE(none.findings.empty());
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

// The kernel's own view as the oracle: a real process with a dual-stack
// listener on the rendezvous port (as torch's TCPStore has), a connection to
// it and an IPv6 listener. /proc/net/tcp6 prints the IPv4-mapped addresses
// as 0000000000000000FFFF00000100007F; the report must say 127.0.0.1, name
// MASTER_PORT's role, and print a real IPv6 address as the process sees it.
TEST(HangAnalysis, SocketsAsAddressesWithTheRendezvousPortNamed) {
  int probe = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(probe, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof any;
  ASSERT_EQ(bind(probe, reinterpret_cast<sockaddr*>(&any), sizeof any), 0);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&any), &len), 0);
  const std::string port = std::to_string(ntohs(any.sin_port));
  close(probe);
  const char* script = R"(
import os, socket, sys, time
port = int(os.environ["MASTER_PORT"])
def at(s):
    a = s.getsockname()
    return "%s %d" % (a[0], a[1])
try:
    store = socket.socket(socket.AF_INET6)
except OSError:
    print("no-ipv6", flush=True)  # a kernel without IPv6: no dual-stack listener
    sys.exit(0)
store.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
store.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
store.bind(("::ffff:127.0.0.1", port))
store.listen()
client = socket.socket(socket.AF_INET6)
client.connect(("::ffff:127.0.0.1", port))
peer, _ = store.accept()
print("client " + at(client))
try:
    v6 = socket.socket(socket.AF_INET6)
    v6.bind(("::1", 0))
    v6.listen()
    print("v6 " + at(v6))
except OSError:
    pass
print("ready", flush=True)
time.sleep(60)
)";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    dup2(out[1], 1);
    close(out[0]);
    setenv("MASTER_PORT", port.c_str(), 1);
    execlp("python3", "python3", "-c", script, static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  std::string said;
  char buf[256];
  for (ssize_t n;
       said.find("ready\n") == std::string::npos && (n = read(out[0], buf, sizeof buf)) > 0;)
    said.append(buf, static_cast<size_t>(n));
  close(out[0]);
  if (said.find("no-ipv6") != std::string::npos) {
    waitpid(child, nullptr, 0);
    GTEST_SKIP() << "this kernel has no IPv6: no dual-stack listener to read";
  }
  std::string client_port, v6_address, v6_port;
  {
    std::istringstream in(said);
    std::string what, address, p;
    while (in >> what && what != "ready") {
      in >> address >> p;
      if (what == "client") client_port = p;
      if (what == "v6") v6_address = address, v6_port = p;
    }
  }
  host::Host host("/", {});
  HangSample s = sample_processes(host, {child}, 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_FALSE(client_port.empty()) << said;
  ASSERT_EQ(s.processes.size(), 1u);
  std::string all;
  for (const std::string& so : s.processes[0].sockets) all += so + "\n";
  const std::string store = " (MASTER_PORT: the c10d store) ";
  EXPECT_NE(all.find("tcp 127.0.0.1:" + port + " -> [::]:0" + store + "LISTEN\n"),
            std::string::npos)
      << all;
  EXPECT_NE(
      all.find("tcp 127.0.0.1:" + client_port + " -> 127.0.0.1:" + port + store + "ESTABLISHED\n"),
      std::string::npos)
      << all;
  EXPECT_NE(
      all.find("tcp 127.0.0.1:" + port + " -> 127.0.0.1:" + client_port + store + "ESTABLISHED\n"),
      std::string::npos)
      << all;
  if (!v6_address.empty()) {  // a machine without IPv6 loopback has no such socket
    EXPECT_NE(all.find("tcp [" + v6_address + "]:" + v6_port + " -> [::]:0 LISTEN\n"),
              std::string::npos)
        << all;
  }
  EXPECT_EQ(all.find("FFFF"), std::string::npos) << all;
}

// Ranks of a distributed job: rank from the launcher's variables in each
// process's environment, main threads grouped by where they are, and the
// rank that is not where the others are named first, with its pid in the fix.
TEST(HangAnalysis, TheRankNotInTheCollectiveIsNamedFirst) {
  mld::test::TempDir t;
  const std::string proc = t.path() + "/proc";
  mld::test::make_dirs(proc + "/net");
  auto process = [&](long pid, const std::string& env, const char* syscall, const char* wchan) {
    const std::string dir = proc + "/" + std::to_string(pid);
    const std::string task = dir + "/task/" + std::to_string(pid);
    mld::test::make_dirs(task);
    mld::test::write_file(dir + "/cmdline", std::string("python3\0train.py\0", 17));
    mld::test::write_file(dir + "/environ", env);
    mld::test::write_file(task + "/comm", "python3\n");
    mld::test::write_file(task + "/stat",
                          std::to_string(pid) + " (python3) S 1 1 1 0 -1 0 0 0 0 0 7 3 0 0\n");
    mld::test::write_file(task + "/wchan", wchan);
    mld::test::write_file(task + "/syscall",
                          std::string(syscall) + " 0x0 0x0 0x0 0x0 0x0 0x0 0x7ffc 0x7f00\n");
  };
  const std::string env = std::string("PATH=/usr/bin\0MASTER_PORT=29500\0", 32);
  process(5000, env + std::string("RANK=0\0", 7), "202", "futex_wait_queue");   // futex
  process(5001, env + std::string("RANK=1\0", 7), "230", "hrtimer_nanosleep");  // clock_nanosleep
  process(5002, env + std::string("OMPI_COMM_WORLD_RANK=2\0", 23), "202", "futex_wait_queue");
  process(5003, env + std::string("SLURM_PROCID=3\0", 15), "202", "futex_wait_queue");
  process(4999, env, "61", "do_wait");  // the launcher: no rank
  host::Host host(t.path(), {});
  HangSample s = sample_processes(host, {4999, 5000, 5001, 5002, 5003}, 30);
  ASSERT_EQ(s.processes.size(), 5u);
  EXPECT_FALSE(s.processes[0].rank);
  ASSERT_TRUE(s.processes[3].rank);
  EXPECT_EQ(*s.processes[3].rank, 2u);
  EXPECT_EQ(s.processes[3].rank_variable, "OMPI_COMM_WORLD_RANK");
  FindingList found;
  analyse_hang(s, host, "/nonexistent", nullptr, found);
  ASSERT_FALSE(found.findings.empty());
  const Finding& f = found.findings[0];
  EXPECT_EQ(f.rule, "RUN002");
  EXPECT_NE(f.message.find("rank 1 is not where ranks 0, 2–3 are (main thread in clock_nanosleep "
                           "in hrtimer_nanosleep)"),
            std::string::npos)
      << f.message;
  ASSERT_GE(f.evidence.size(), 2u);
  EXPECT_EQ(f.evidence[0].text,
            "rank 1 (pid 5001), main thread: clock_nanosleep in hrtimer_nanosleep");
  EXPECT_EQ(f.evidence[1].text,
            "ranks 0, 2–3 (pid 5000, 5002, 5003), main thread: futex in futex_wait_queue");
  EXPECT_NE(f.fix.find("rank 1 is doing"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("mldoctor stacks 5001"), std::string::npos) << f.fix;

  // Two ranks in two places: neither is called the odd one.
  HangSample two = sample_processes(host, {5000, 5001}, 30);
  FindingList found2;
  analyse_hang(two, host, "/nonexistent", nullptr, found2);
  ASSERT_FALSE(found2.findings.empty());
  EXPECT_NE(found2.findings[0].message.find("the ranks' main threads are in 2 different places"),
            std::string::npos)
      << found2.findings[0].message;
  // Two ranks, one of them waiting inside torch.distributed (native stacks
  // as the live sampler reads them): the other is the odd one.
  two.processes[0].threads[0].stack = {
      "__futex_abstimed_wait_common (libc.so.6)",
      "c10d::Work::wait(std::chrono::duration<long, std::ratio<1l, 1000l> >) "
      "(libtorch_cpu.so.1.13.0)"};
  two.processes[1].threads[0].stack = {"clock_nanosleep@GLIBC_2.2.5 (libc.so.6)",
                                       "?? (python3.11)"};
  FindingList split;
  analyse_hang(two, host, "/nonexistent", nullptr, split);
  ASSERT_FALSE(split.findings.empty());
  EXPECT_NE(split.findings[0].message.find(
                "rank 1 is not where rank 0 waits in a collective (main thread in "
                "clock_nanosleep in hrtimer_nanosleep)"),
            std::string::npos)
      << split.findings[0].message;
  EXPECT_NE(split.findings[0].fix.find("mldoctor stacks 5001"), std::string::npos);
  // With Python stacks (as src/pystack reads them): the odd rank's own line
  // and the collective the other waits in, in the message and the fix; a
  // torch/distributed frame alone says "in a collective".
  HangSample py = two;
  py.processes[0].threads[0].stack.clear();
  py.processes[1].threads[0].stack.clear();
  py.processes[0].threads[0].python = {
      {"all_reduce", "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", 1541},
      {"step", "/home/u/train.py", 88},
      {"<module>", "/home/u/train.py", 120}};
  py.processes[1].threads[0].python = {{"load", "/home/u/data.py", 41},
                                       {"step", "/home/u/train.py", 80},
                                       {"<module>", "/home/u/train.py", 120}};
  FindingList pyfound;
  analyse_hang(py, host, "/nonexistent", nullptr, pyfound);
  ASSERT_FALSE(pyfound.findings.empty());
  const Finding& pf = pyfound.findings[0];
  EXPECT_NE(pf.message.find("rank 1 is not where rank 0 waits in a collective (rank 1: at "
                            "data.py:41 (load), main thread in clock_nanosleep in "
                            "hrtimer_nanosleep; rank 0: all_reduce at train.py:88 (step), main "
                            "thread in futex in futex_wait_queue)"),
            std::string::npos)
      << pf.message;
  EXPECT_NE(pf.fix.find("look at what rank 1 is doing at data.py:41 (load) instead of joining the "
                        "others in all_reduce at train.py:88 (step) (pid 5001"),
            std::string::npos)
      << pf.fix;
  bool shown = false;
  for (const Evidence& e : pf.evidence)
    shown |= e.text ==
             "    Python: all_reduce (torch/distributed/distributed_c10d.py:1541) <- "
             "step (/home/u/train.py:88) <- <module> (/home/u/train.py:120)";
  EXPECT_TRUE(shown) << "rank 0's Python stack, files of installed packages shortened";
  // All in one place.
  HangSample same = sample_processes(host, {5000, 5002, 5003}, 30);
  FindingList found3;
  analyse_hang(same, host, "/nonexistent", nullptr, found3);
  ASSERT_FALSE(found3.findings.empty());
  EXPECT_NE(found3.findings[0].message.find("ranks 0, 2–3 all wait in one place"),
            std::string::npos)
      << found3.findings[0].message;
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
