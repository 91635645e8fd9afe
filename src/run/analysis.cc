// analysis.cc — what the events of a job mean. The facts of the hazards
// other commands see too go to their detectors (src/detect/rules/):
//   OMP001  the OpenMP runtimes each process held, with the chain of loads
//           that brought each and whether the process aborted
//   TLS001  a dlopen that failed on static TLS: the real failure, replayed
//           through the loader model of this process to get the TLS already
//           in use and the GLIBC_TUNABLES value under which it loads (with
//           and without the audit module, which itself costs surplus)
// and the trace's own:
//   THR003  each process's thread-count calls in time order, with their
//           callers and the counts before and after (seed 003: numba's
//           omppool resets torch's libgomp count)
//   DIST001–DIST003  each process's GPU binding and the device each NCCL
//           communicator was made on (cudaSetDevice, cuCtxSetCurrent,
//           ncclCommInitRank*, with RANK/LOCAL_RANK/CUDA_VISIBLE_DEVICES)
//   RUN001  whether the shims saw inside the command at all
// Failed loads and dlerror texts are also matched against the log rules by
// the CLI, which owns the rule databases.
#include <algorithm>
#include <map>
#include <set>

#include "detect/detect.h"
#include "elf/elf.h"
#include "loader/loader.h"
#include "run/run.h"

namespace mld::run {

std::string openmp_interface(const host::Host* host, const std::string& path) {
  if (!host) return "";
  try {
    elf::ElfFile elf = elf::ElfFile::parse(host->open_sparse(path));
    std::string best;
    std::vector<int> best_parts;
    for (const elf::VersionDef& d : elf.version_defs()) {
      if (!d.name.starts_with("OMP_")) continue;
      std::vector<int> parts;
      size_t i = 4;
      while (i < d.name.size()) {
        size_t j = d.name.find('.', i);
        if (j == std::string_view::npos) j = d.name.size();
        int v = 0;
        for (size_t k = i; k < j && k < i + 4; k++)
          if (d.name[k] >= '0' && d.name[k] <= '9') v = v * 10 + (d.name[k] - '0');
        parts.push_back(v);
        i = j + 1;
      }
      if (best.empty() || parts > best_parts) {
        best = std::string(d.name);
        best_parts = parts;
      }
    }
    return best;
  } catch (const std::exception&) {
    return "";
  }
}

namespace {

// A chroot() after which the process left no event: which of the trace
// directory and the shims the new root lacks at their paths (looked at from
// here: the root is a directory of this machine's tree).
detect::TraceCoverage::UnseenRoot unseen_root(const RootChange& r, const AnalysisContext& ctx) {
  std::string root = r.path;
  if (!root.starts_with("/") && !r.cwd.empty()) root = r.cwd + "/" + root;
  while (root.size() > 1 && root.ends_with("/")) root.pop_back();
  detect::TraceCoverage::UnseenRoot u{root, r.caller.empty() ? "the process" : r.caller, {}};
  auto missing = [&](const std::string& path) {
    return !ctx.host || ctx.host->stat(root + path).kind == host::FileKind::Missing;
  };
  if (!ctx.trace_dir.empty() && missing(ctx.trace_dir))
    u.reasons.push_back("the trace directory " + ctx.trace_dir + " is not at that path inside " +
                        root + ": nothing after chroot() could be recorded");
  if (!ctx.shim_dir.empty() && missing(ctx.shim_dir + "/libmldoctor-audit.so"))
    u.reasons.push_back("mldoctor's shims (" + ctx.shim_dir + ") are not at that path inside " +
                        root +
                        " as mldoctor's own mount namespace shows it: a program started there "
                        "cannot load them unless the job bound them in");
  if (u.reasons.empty())
    u.reasons.push_back("no event was written after chroot(" + r.path +
                        "): the trace directory could not be written from the new root");
  return u;
}

// Why the shims did not load in the program an exec turned a traced process
// into, from what the exec call recorded (libc-calls.c): the environment it
// passed on, whether the shims and the trace directory could be reached,
// whether the process had changed its root, and the file when it can be
// read from here.
std::vector<std::string> untraced_exec_reasons(const ExecCall& x, const std::string& from,
                                               const AnalysisContext& ctx) {
  const std::string needs =
      ctx.shims_glibc_needed.empty() ? "" : " (they need " + ctx.shims_glibc_needed + ")";
  const std::string by = !x.caller.empty() ? x.caller : !from.empty() ? from : "the process";
  if (x.env_known && x.audit < 0 && x.preload < 0)
    return {"the environment " + by + " passed to " + x.call +
            "() no longer names mldoctor's shims in LD_AUDIT or LD_PRELOAD: it cleared or "
            "rebuilt the environment"};
  if (x.env_known && x.trace_dir < 0)
    return {"the environment " + by + " passed to " + x.call +
            "() no longer has MLDOCTOR_TRACE_DIR: it cleared or rebuilt the environment"};
  const bool unreachable = x.audit == 0 || x.preload == 0 || x.trace_dir == 0;
  if (x.root_changed == 1 && unreachable)
    return {"the process had changed its root directory (a chroot) before " + x.call +
            "(), and mldoctor's shims or its trace directory are not at the same paths there"};
  if (x.root_changed == 1)
    return {"the process had changed its root directory (a chroot) before " + x.call +
            "(); the shims are reachable there, so that root's ld.so refused them: a static or "
            "setuid program, or a glibc older than the one the shims were built for" +
            needs + "; ld.so's own line on the job's stderr says which"};
  if (unreachable)
    return {"mldoctor's shims or its trace directory could not be reached at their paths when " +
            by + " called " + x.call + "() (another mount namespace, or removed)"};
  if (ctx.host && x.path.find('/') != std::string::npos)
    if (std::vector<std::string> r = untraceable_reasons(*ctx.host, x.path); !r.empty()) return r;
  return {
      "its ld.so did not load the shims: a static or setuid program, or a glibc older than "
      "the one the shims were built for" +
      needs + "; ld.so's own line on the job's stderr says which"};
}

std::string base(const std::string& p) { return std::string(base_name(p)); }

const LoadedObject* find_object(const TracedProcess& p, const std::string& path) {
  for (size_t i = p.objects.size(); i-- > 0;)
    if (p.objects[i].path == path) return &p.objects[i];
  return nullptr;
}

std::string process_name(const TracedProcess& p) {
  if (p.images.empty()) return "pid " + std::to_string(p.pid);
  const Image& im = p.images.back();
  const std::string cmd = command_line(im.argv, 80);
  return "pid " + std::to_string(p.pid) + " (" + (cmd.empty() ? base(im.exe) : cmd) + ")";
}

}  // namespace

loader::OpenMpKind openmp_runtime_kind(const LoadedObject& o) {
  if (o.runtime == "gnu-openmp") return loader::OpenMpKind::Gnu;
  if (o.runtime == "kmp-openmp")
    return o.path.find("iomp") != std::string::npos ? loader::OpenMpKind::Intel
                                                    : loader::OpenMpKind::Llvm;
  if (!o.runtime.empty()) return loader::OpenMpKind::None;  // MKL, OpenBLAS
  loader::Object named;
  named.path = o.path;
  return loader::openmp_kind(named);
}

namespace {

// The OpenMP runtimes the process loaded, each with its chain of loads.
detect::OpenMpProcess openmp_facts(const TracedProcess& p, const AnalysisContext& ctx) {
  detect::OpenMpProcess out;
  out.observed = true;
  out.process = process_name(p);
  out.aborted =
      ctx.status && ctx.status->signaled && ctx.status->code == 6 && p.pid == ctx.child_pid;
  std::set<std::string> seen;
  for (const LoadedObject& o : p.objects) {
    if (o.removed_by_failure || o.path.empty() || !seen.insert(o.path).second) continue;
    if (base(o.path).starts_with("libmkl_rt")) out.has_mkl = true;
    const loader::OpenMpKind k = openmp_runtime_kind(o);
    if (k == loader::OpenMpKind::None) continue;
    out.runtimes.push_back({k, base(o.path), o.path, openmp_interface(ctx.host, o.path),
                            load_chain(p, o.path), 0, "", detect::Installer::Unknown, ""});
  }
  return out;
}

// The thread-count calls of the process, in time order.
detect::ThreadCountCalls thread_count_facts(const TracedProcess& p) {
  detect::ThreadCountCalls out;
  out.process = process_name(p);
  for (const ThreadCall& c : p.thread_calls)
    out.calls.push_back({c.fn, c.value, c.before, c.after, c.caller, c.runtime});
  return out;
}

// How the process bound itself to a GPU and where its NCCL communicators
// were made: cudaSetDevice calls and cuCtxSetCurrent of a primary context
// it retained (as the device of that context; another context as an
// unknown device, -1) are its requests; ncclCommInitRank* its inits.
std::optional<detect::DeviceProcess> device_facts(const TracedProcess& p) {
  if (p.device_calls.empty()) return std::nullopt;
  detect::DeviceProcess out;
  out.pid = p.pid;
  out.process = process_name(p);
  std::map<u64, long long> context_device;
  for (const DeviceCall& c : p.device_calls) {
    out.cuda_visible_devices = c.cuda_visible_devices;
    out.local_rank = c.local_rank;
    out.rank = c.rank;
    out.world_size = c.world_size;
    if (c.fn == "cuDevicePrimaryCtxRetain" && c.ctx && c.device) {
      context_device[c.ctx] = *c.device;
    } else if (c.fn == "cudaSetDevice" && c.device) {
      out.requests.push_back({c.fn, *c.device, c.ret, c.caller, c.tid, c.t});
    } else if (c.fn == "cuCtxSetCurrent" && c.ctx) {
      auto it = context_device.find(c.ctx);
      out.requests.push_back(
          {c.fn, it == context_device.end() ? -1 : it->second, c.ret, c.caller, c.tid, c.t});
    } else if (c.fn == "ncclCommInitRank" || c.fn == "ncclCommInitRankConfig") {
      out.inits.push_back({c.fn, c.ret, c.nccl_rank, c.nranks, c.comm_id, c.cuda_device,
                           c.cuda_device_unknown, c.caller, c.tid, c.t});
    }
  }
  return out;
}

// The real static TLS failure, replayed through the loader model of this
// process: the program, then each dlopen() root in the order it happened,
// with and without run's audit module (one more namespace:
// research/glibc-tls-audit.md §3) and the reserve it was started with.
void static_tls_facts(const TracedProcess& p, const AnalysisContext& ctx,
                      std::vector<detect::StaticTlsFailure>& out) {
  const FailedLoad* failure = nullptr;
  for (const FailedLoad& f : p.failed)
    if (f.message.find("static TLS") != std::string::npos) {
      failure = &f;
      break;
    }
  if (!failure || p.images.empty() || !ctx.host) return;
  const host::Host& host = *ctx.host;
  const Image& im = p.images.back();

  detect::StaticTlsFailure f;
  f.source = detect::StaticTlsFailure::Source::Trace;
  f.object = failure->name;
  f.error = failure->message;
  f.process = process_name(p);
  f.requester = failure->requester;
  f.failing_module = failure->message.substr(0, failure->message.find(": "));

  std::vector<std::string> roots;
  for (const LoadedObject& o : p.objects)
    if (o.kind == LoadKind::Dlopen && o.lmid == 0 && o.t < failure->t && !o.closed &&
        !o.removed_by_failure)
      roots.push_back(o.path);
  roots.push_back(failure->name);
  f.replayed_calls = roots.size();

  std::optional<loader::GlibcVersion> glibc = loader::parse_glibc_version(im.glibc);
  try {
    if (!glibc) throw std::runtime_error("glibc release unknown");
    ShimComparison models =
        model_with_and_without_shims(host, im.exe, *glibc, roots, ctx.tls_reserved);
    const loader::DlopenSequence& plain = models.plain;
    const loader::DlopenSequence& under_run = models.under_run;
    const loader::DlopenStep& last = under_run.steps.back();
    if (!last.ok) {
      for (const loader::DlopenStep& st : under_run.steps)
        if (!st.ok && !st.tls_module.empty()) {
          f.model = detect::static_tls_account(under_run, st);
          f.model->error = last.error;
          break;
        }
    }
    f.loads_without_audit = plain.steps.back().ok;
    if (under_run.tunables_fix) {
      // The model knows the loads up to the failure, not what the job would
      // have loaded after it: round the exact value up to a page so later
      // imports have room too (static TLS costs that many bytes per thread).
      std::string item = *under_run.tunables_fix;
      const size_t eq = item.find('=');
      if (eq != std::string::npos &&
          item.find_first_not_of("0123456789", eq + 1) == std::string::npos) {
        const u64 exact = std::stoull(item.substr(eq + 1));
        const u64 rounded = (exact + 4095) / 4096 * 4096;
        item = item.substr(0, eq + 1) + std::to_string(rounded);
        f.rounding = detect::StaticTlsFailure::Rounding{item.substr(0, eq), exact, rounded};
      }
      f.tunables = loader::merge_glibc_tunables(host.getenv("GLIBC_TUNABLES"), item);
    }
  } catch (const std::exception& e) {
    f.replay_error = e.what();
  }
  out.push_back(std::move(f));
}

}  // namespace

std::string command_line(const std::vector<std::string>& argv, size_t max_bytes) {
  std::string cmd;
  for (const std::string& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  for (char& c : cmd)
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (cmd.size() > max_bytes) cmd = cmd.substr(0, max_bytes > 3 ? max_bytes - 3 : 0) + "...";
  return cmd;
}

std::string load_chain(const TracedProcess& p, const std::string& path) {
  std::string out;
  std::string current = path;
  std::set<std::string> seen;
  for (int depth = 0; depth < 12 && seen.insert(current).second; depth++) {
    const LoadedObject* o = find_object(p, current);
    if (!o) break;
    if (!out.empty()) out += ", ";
    switch (o->kind) {
      case LoadKind::Startup:
        if (o->requester.empty()) {
          out += o->requested.empty() ? "the program" : "loaded at start-up";
          return out;
        }
        out += "needed by " + base(o->requester) + " at start-up";
        return out;
      case LoadKind::Dlopen:
        out += "dlopen()ed by " + (o->requester.empty() ? std::string("?") : base(o->requester));
        if (depth > 0) out += " as " + o->path;
        return out;
      case LoadKind::Needed: out += "needed by " + base(o->requester); break;
    }
    current = o->requester;
  }
  return out;
}

void analyse(const Trace& trace, const AnalysisContext& ctx, FindingSink& sink) {
  // The trace's own hazards first, then those other commands see too, then
  // what could not be seen: three sets of facts, each through the detectors.
  auto report = [&](const detect::Facts& facts) {
    for (Finding& f :
         detect::findings(detect::run_detectors(facts), ctx.rules ? *ctx.rules : rules::RuleSet()))
      sink.add(std::move(f));
  };
  // How the command died, first: it is what the user asks.
  if (ctx.death) {
    detect::Facts death;
    death.death = ctx.death;
    report(death);
  }
  detect::Facts own, shared;
  for (const auto& [pid, p] : trace.processes) {
    own.thread_counts.push_back(thread_count_facts(p));
    if (std::optional<detect::DeviceProcess> d = device_facts(p))
      own.device_bindings.push_back(std::move(*d));
    shared.openmp.push_back(openmp_facts(p, ctx));
    static_tls_facts(p, ctx, shared.static_tls);
  }
  report(own);
  report(shared);
  // The command itself left no events, or exec'd a program the shims did
  // not load in: what ran there could not be seen.
  detect::Facts coverage;
  detect::TraceCoverage c{
      ctx.child_pid,
      trace.processes.count(ctx.child_pid) && !trace.processes.at(ctx.child_pid).images.empty(),
      ctx.not_traced_reasons, std::nullopt};
  if (auto it = trace.processes.find(ctx.child_pid);
      it != trace.processes.end() && it->second.untraced_exec) {
    const ExecCall& x = *it->second.untraced_exec;
    const TracedProcess& p = it->second;
    const std::string from = p.images.empty() ? x.caller : p.images.back().exe;
    c.command_exec = detect::TraceCoverage::UntracedExec{
        x.path, from, untraced_exec_reasons(x, from, ctx), x.root_changed == 1};
  }
  if (auto it = trace.processes.find(ctx.child_pid);
      it != trace.processes.end() && it->second.unseen_after_chroot) {
    RootChange r = *it->second.unseen_after_chroot;
    // The main program's caller name is what dladdr gives (argv[0]): the
    // image's executable says more.
    if (r.caller.find('/') == std::string::npos && !it->second.images.empty())
      r.caller = it->second.images.back().exe;
    c.command_chroot = unseen_root(r, ctx);
  }
  coverage.trace_coverage = std::move(c);
  report(coverage);
}

}  // namespace mld::run
