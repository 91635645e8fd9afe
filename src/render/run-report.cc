// run-report.cc — the report of `mldoctor run` for people (each traced
// process: its images, objects, runtimes, failed loads, thread-count calls,
// environment changes, forks) and its JSON document, mldoctor.run/1
// (docs/json-schema.md).
#include "render/run-report.h"

#include <csignal>
#include <cstring>

namespace mld::render {

using nlohmann::json;

namespace {

std::string base(const std::string& p) { return std::string(base_name(p)); }

}  // namespace

// The names sigabbrev_np() gives (glibc 2.32+; the portable build links
// against 2.31), by the platform's own constants, so the numbers are right
// on every architecture. Real-time signals have no name there either.
std::string signal_text(int sig) {
  static constexpr struct {
    int number;
    const char* name;
  } kNames[] = {
      {SIGHUP, "HUP"},   {SIGINT, "INT"},       {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},
      {SIGTRAP, "TRAP"}, {SIGABRT, "ABRT"},     {SIGBUS, "BUS"},   {SIGFPE, "FPE"},
      {SIGKILL, "KILL"}, {SIGUSR1, "USR1"},     {SIGSEGV, "SEGV"}, {SIGUSR2, "USR2"},
      {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"},     {SIGTERM, "TERM"}, {SIGSTKFLT, "STKFLT"},
      {SIGCHLD, "CHLD"}, {SIGCONT, "CONT"},     {SIGSTOP, "STOP"}, {SIGTSTP, "TSTP"},
      {SIGTTIN, "TTIN"}, {SIGTTOU, "TTOU"},     {SIGURG, "URG"},   {SIGXCPU, "XCPU"},
      {SIGXFSZ, "XFSZ"}, {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"}, {SIGWINCH, "WINCH"},
      {SIGIO, "IO"},     {SIGPWR, "PWR"},       {SIGSYS, "SYS"},
  };
  for (const auto& n : kNames)
    if (n.number == sig) return std::string("SIG") + n.name;
  return "SIG" + std::to_string(sig);
}

std::string status_text(const run::LaunchResult& r) {
  if (!r.started) return "did not start: " + r.error;
  if (!r.status.known) return "unknown (" + r.error + ")";
  if (r.status.signaled)
    return "killed by " + signal_text(r.status.code) +
           (r.status.core_dumped ? " (core dumped)" : "");
  return "exit " + std::to_string(r.status.code);
}

void print_process(std::FILE* out, const host::Host& host, const run::TracedProcess& p,
                   const std::string& indent) {
  std::string cmd;
  if (!p.images.empty()) cmd = run::command_line(p.images.back().argv, 120);
  const std::string fork_of =
      p.forked_from ? " (fork of " + std::to_string(*p.forked_from) + ")" : "";
  // A child that only exec'd a program the shims did not load in (a static
  // helper such as ldconfig, a setuid one): one line.
  if (p.images.empty() && p.objects.empty() && p.untraced_exec) {
    std::fprintf(out, "%spid %ld%s exec'd %s: not traced (the shims did not load in it)\n",
                 indent.c_str(), p.pid, fork_of.c_str(), p.untraced_exec->path.c_str());
    return;
  }
  std::fprintf(out, "%spid %ld%s %s\n", indent.c_str(), p.pid, fork_of.c_str(),
               p.images.empty() ? "(no start event: forked)" : cmd.c_str());
  for (size_t i = 0; i + 1 < p.images.size(); i++)
    std::fprintf(out, "%s  exec'd from %s\n", indent.c_str(), p.images[i].exe.c_str());
  if (p.untraced_exec)
    std::fprintf(out, "%s  then exec'd %s: not traced (the shims did not load in it)\n",
                 indent.c_str(), p.untraced_exec->path.c_str());
  if (p.unseen_after_chroot)
    std::fprintf(out, "%s  then chroot(%s): no event after it (the trace directory is not there)\n",
                 indent.c_str(), p.unseen_after_chroot->path.c_str());
  size_t dl = 0;
  for (const run::LoadedObject& o : p.objects) dl += o.kind != run::LoadKind::Startup;
  std::fprintf(out, "%s  %zu objects loaded (%zu after start-up)\n", indent.c_str(),
               p.objects.size(), dl);
  for (const run::LoadedObject& o : p.objects) {
    const std::string b = base(o.path);
    const loader::OpenMpKind kind = run::openmp_runtime_kind(o);
    std::string what = kind != loader::OpenMpKind::None
                           ? std::string(loader::openmp_kind_name(kind))
                       : o.runtime == "mkl" || b.starts_with("libmkl_rt")        ? "MKL"
                       : o.runtime == "openblas" || b.starts_with("libopenblas") ? "OpenBLAS"
                                                                                 : "";
    if (what.empty() || o.removed_by_failure) continue;
    if (kind != loader::OpenMpKind::None)
      if (std::string v = run::openmp_interface(&host, o.path); !v.empty()) what += ", " + v;
    std::fprintf(out, "%s  runtime %s (%s): %s\n", indent.c_str(), o.path.c_str(), what.c_str(),
                 run::load_chain(p, o.path).c_str());
  }
  for (const run::FailedLoad& f : p.failed) {
    std::string how = f.removed.empty() ? "not found" : "failed after mapping";
    std::fprintf(out, "%s  failed %s %s (%s%s)%s%s\n", indent.c_str(),
                 std::string(run::load_kind_name(f.kind)).c_str(), f.name.c_str(), how.c_str(),
                 f.requester.empty() ? "" : (", by " + base(f.requester)).c_str(),
                 f.message.empty() ? "" : ": ", f.message.c_str());
  }
  for (const run::ThreadCall& c : p.thread_calls) {
    std::string change =
        c.result ? " -> " + std::to_string(*c.result)
                 : " (" + (c.before ? std::to_string(*c.before) : std::string("?")) + " -> " +
                       (c.after ? std::to_string(*c.after) : std::string("?")) + ")";
    std::fprintf(out, "%s  %s(%lld)%s from %s into %s\n", indent.c_str(), c.fn.c_str(), c.value,
                 change.c_str(), base(c.caller).c_str(), base(c.runtime).c_str());
  }
  for (const run::DeviceCall& c : p.device_calls) {
    std::string args = c.fn.starts_with("nccl") && c.nranks
                           ? "nranks " + std::to_string(*c.nranks) +
                                 (c.nccl_rank ? ", rank " + std::to_string(*c.nccl_rank) : "")
                       : c.device ? std::to_string(*c.device)
                                  : "";
    std::string where = c.cuda_device ? " on device " + std::to_string(*c.cuda_device) : "";
    std::fprintf(out, "%s  %s(%s) %s%s from %s into %s\n", indent.c_str(), c.fn.c_str(),
                 args.c_str(), c.ret ? ("= " + std::to_string(*c.ret)).c_str() : "did not return",
                 where.c_str(), base(c.caller).c_str(), base(c.lib).c_str());
  }
  for (const run::EnvChange& e : p.env_changes)
    std::fprintf(out, "%s  %s %s%s%s from %s\n", indent.c_str(), e.op.c_str(), e.name.c_str(),
                 e.value ? "=" : "", e.value ? e.value->c_str() : "", base(e.caller).c_str());
  for (const run::ForkEvent& f : p.forks)
    std::fprintf(
        out, "%s  fork -> pid %ld with %ld threads%s\n", indent.c_str(), f.child, f.threads,
        f.openmp.empty() ? ""
                         : (" after OpenMP (" + base(f.openmp.front()) + ") was loaded").c_str());
  for (const run::RuntimeState& r : p.runtimes)
    if (r.threads)
      std::fprintf(out, "%s  at exit %s: %lld threads%s\n", indent.c_str(), base(r.path).c_str(),
                   *r.threads, r.config.empty() ? "" : (" (" + r.config + ")").c_str());
  if (p.bad_lines)
    std::fprintf(out, "%s  %llu event lines unreadable (cut by a crash?)\n", indent.c_str(),
                 static_cast<unsigned long long>(p.bad_lines));
}

json process_json(const run::TracedProcess& p) {
  json images = json::array();
  for (const run::Image& im : p.images)
    images.push_back(
        {{"exe", repair_utf8(im.exe)}, {"argv", im.argv}, {"ppid", im.ppid}, {"glibc", im.glibc}});
  json objects = json::array();
  for (const run::LoadedObject& o : p.objects)
    objects.push_back({{"path", repair_utf8(o.path)},
                       {"requested", repair_utf8(o.requested)},
                       {"requester", repair_utf8(o.requester)},
                       {"kind", run::load_kind_name(o.kind)},
                       {"lmid", o.lmid},
                       {"closed", o.closed},
                       {"removed_by_failure", o.removed_by_failure}});
  json failed = json::array();
  for (const run::FailedLoad& f : p.failed)
    failed.push_back({{"name", repair_utf8(f.name)},
                      {"requester", repair_utf8(f.requester)},
                      {"kind", run::load_kind_name(f.kind)},
                      {"candidates", f.candidates.size()},
                      {"removed", f.removed},
                      {"message", repair_utf8(f.message)}});
  json calls = json::array();
  for (const run::ThreadCall& c : p.thread_calls) {
    json j = {{"fn", c.fn},
              {"value", c.value},
              {"caller", repair_utf8(c.caller)},
              {"runtime", repair_utf8(c.runtime)}};
    j["before"] = c.before ? json(*c.before) : json(nullptr);
    j["after"] = c.after ? json(*c.after) : json(nullptr);
    if (c.result) j["result"] = *c.result;
    calls.push_back(std::move(j));
  }
  json devices = json::array();
  for (const run::DeviceCall& c : p.device_calls) {
    auto opt = [](const std::optional<long long>& v) { return v ? json(*v) : json(nullptr); };
    auto str = [](const std::optional<std::string>& v) {
      return v ? json(repair_utf8(*v)) : json(nullptr);
    };
    json j = {{"fn", c.fn},
              {"caller", repair_utf8(c.caller)},
              {"lib", repair_utf8(c.lib)},
              {"ret", opt(c.ret)},
              {"tid", c.tid},
              {"device", opt(c.device)},
              {"env",
               {{"CUDA_VISIBLE_DEVICES", str(c.cuda_visible_devices)},
                {"LOCAL_RANK", str(c.local_rank)},
                {"RANK", str(c.rank)},
                {"WORLD_SIZE", str(c.world_size)}}}};
    if (c.fn.starts_with("nccl")) {
      j["nccl_rank"] = opt(c.nccl_rank);
      j["nranks"] = opt(c.nranks);
      j["unique_id"] = c.comm_id;
      j["cuda_device"] = opt(c.cuda_device);
      if (!c.cuda_device_unknown.empty()) j["cuda_device_unknown"] = c.cuda_device_unknown;
      if (!c.devices.empty()) j["devices"] = c.devices;
      if (c.color) j["color"] = *c.color;
      if (c.key) j["key"] = *c.key;
    }
    devices.push_back(std::move(j));
  }
  json env = json::array();
  for (const run::EnvChange& e : p.env_changes)
    env.push_back({{"op", e.op},
                   {"name", e.name},
                   {"value", e.value ? json(repair_utf8(*e.value)) : json(nullptr)},
                   {"caller", repair_utf8(e.caller)}});
  json forks = json::array();
  for (const run::ForkEvent& f : p.forks)
    forks.push_back({{"child", f.child}, {"threads", f.threads}, {"openmp", f.openmp}});
  json runtimes = json::array();
  for (const run::RuntimeState& r : p.runtimes)
    runtimes.push_back({{"path", repair_utf8(r.path)},
                        {"kind", r.kind},
                        {"threads", r.threads ? json(*r.threads) : json(nullptr)},
                        {"config", r.config}});
  json untraced_exec = nullptr;
  if (const std::optional<run::ExecCall>& x = p.untraced_exec) {
    auto state = [](int v) -> json {
      return v > 0 ? json("reachable") : v == 0 ? json("unreachable") : json("not named");
    };
    untraced_exec = {
        {"call", x->call},
        {"path", repair_utf8(x->path)},
        {"root_changed", x->root_changed < 0 ? json(nullptr) : json(x->root_changed == 1)}};
    if (x->env_known) {
      untraced_exec["audit_shim"] = state(x->audit);
      untraced_exec["preload_shim"] = state(x->preload);
      untraced_exec["trace_dir"] = state(x->trace_dir);
    }
  }
  json j = {{"pid", p.pid},
            {"images", images},
            {"objects", objects},
            {"failed_loads", failed},
            {"thread_calls", calls},
            {"device_calls", devices},
            {"env_changes", env},
            {"forks", forks},
            {"runtimes_at_exit", runtimes},
            {"exited", p.exited},
            {"untraced_exec", untraced_exec},
            {"unseen_after_chroot",
             p.unseen_after_chroot ? json{{"path", repair_utf8(p.unseen_after_chroot->path)},
                                          {"cwd", repair_utf8(p.unseen_after_chroot->cwd)},
                                          {"caller", repair_utf8(p.unseen_after_chroot->caller)}}
                                   : json(nullptr)},
            {"unreadable_lines", p.bad_lines}};
  j["forked_from"] = p.forked_from ? json(*p.forked_from) : json(nullptr);
  return j;
}

}  // namespace mld::render
