// run-command.cc — `mldoctor run -- CMD ...`: runs the command with the
// trace shims, then reports what happened inside every process of the job.
//
// The command's stdout/stderr/stdin, terminal and exit are its own: the
// report goes to stderr after the job ends (or to --report FILE), a hang
// report as soon as the watchdog sees one, and mldoctor ends the way the
// command ended (exit code or signal), so `mldoctor run -- CMD` can stand
// in for `CMD` in scripts and job files.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "loader/loader.h"
#include "logs/logs.h"
#include "render/run-report.h"
#include "render/stacks-report.h"
#include "report/report.h"
#include "run/run.h"

namespace mld::cli {

using nlohmann::json;

namespace {

// The rules a set of findings needs for grouping: the full set when loaded,
// else only the builtin rules they name.
rules::RuleSet rules_for(const std::vector<Finding>& findings, bool full,
                         const rules::RuleSet& full_set) {
  if (full) return full_set;
  std::vector<std::string> ids;
  for (const Finding& f : findings) ids.push_back(f.rule);
  return rules::RuleSet::builtin_subset(ids);
}

// The Python stacks of a hung job through the log rules' stack signatures
// (JIT023 for a thread in FileBaton.wait(), DIST019 for a rank in a
// collective...): one rule, whether the stack was pasted in a log or read
// from the job. Each process is its own dump (the log reader follows one
// dump at a time); a signature several processes match is one finding with
// each process's frame as evidence. The evidence says that mldoctor read
// the stacks (not a py-spy dump, and no line of a log), and a collective
// wait is worded with what the sample holds: the rank that is elsewhere,
// with its line, and the settings of the job's backend.
void scan_live_stacks(const run::HangSample& s, const std::shared_ptr<const logs::Matcher>& matcher,
                      FindingList& found) {
  std::map<std::pair<std::string, std::string>, size_t> seen;
  for (const detect::ProcessSample& p : s.processes) {
    const std::string dump = render::pyspy_text(p);
    if (dump.empty()) continue;
    const std::string origin = "mldoctor read the stacks of pid " + std::to_string(p.pid);
    logs::Scanner scan(matcher, logs::ScanOptions{0, origin, 1, origin});
    scan.feed(ByteView(dump));
    scan.finish();
    for (const logs::LogFinding* lf : scan.findings()) {
      Finding f = lf->finding;
      for (Evidence& e : f.evidence) {
        // A line of the dump mldoctor wrote itself, not of a log: no place
        // in a file, and no indentation of that dump.
        e.file.clear();
        e.line.reset();
        e.text.erase(0, e.text.find_first_not_of(' '));
      }
      const auto key = std::make_pair(f.rule, f.subject);
      if (auto it = seen.find(key); it != seen.end()) {
        Finding& first = found.findings[it->second];
        if (!f.evidence.empty() && first.evidence.size() < 16)
          first.evidence.push_back(f.evidence.front());
        continue;
      }
      seen[key] = found.findings.size();
      found.add(std::move(f));
    }
  }
  const detect::HangPeers peers = detect::hang_peers(s);
  const std::optional<detect::CollectiveWait> wait = detect::collective_wait(s);
  for (Finding& f : found.findings) {
    if (f.rule != "DIST019") continue;
    if (!peers.backend.empty()) f.env_fix = detect::collective_debug_env(peers.backend);
    if (!wait) continue;
    f.message = wait->message;
    f.fix = wait->fix;
    f.env_fix = wait->env;
    std::vector<Evidence> evidence;
    for (const std::string& line : wait->evidence) evidence.push_back({line, "", std::nullopt});
    f.evidence.insert(f.evidence.begin(), evidence.begin(), evidence.end());
  }
}

// --logs: who kept the job's output open after it exited.
std::string output_text(const run::LaunchResult& lr) {
  std::string who;
  for (const run::LaunchResult::OutputHolder& h : lr.output_holders)
    who += (who.empty() ? "" : ", ") + ("pid " + std::to_string(h.pid)) +
           (h.command.empty() ? "" : " (" + h.command + ")");
  char grace[32];
  std::snprintf(grace, sizeof grace, "%.0f s", lr.output_grace);
  return "still open after the job exited: " +
         (who.empty()
              ? std::string("a process mldoctor cannot see (another user's?)")
              : std::string(lr.output_holders.size() == 1 ? "a daemon the job left running, "
                                                          : "daemons the job left running, ") +
                    who + ",") +
         " kept it open; mldoctor stopped reading " + grace +
         " after the exit and passes the rest on unread";
}

}  // namespace

int run_run(const CommonOptions& common, const RunOptions& opts) {
  if (opts.argv.empty()) {
    print_error("run: no command given (mldoctor run [options] -- CMD ...)");
    return 2;
  }
  std::FILE* out = stderr;
  if (!opts.report_file.empty()) {
    const int fd = open(opts.report_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    out = fd >= 0 ? fdopen(fd, "w") : nullptr;
    if (!out) {
      print_error("--report " + opts.report_file + ": " + errno_text(errno));
      return 2;
    }
  }
  // The full rule set and its log matcher cost ~20 ms (every rule parsed,
  // every confirmation pattern compiled): made before the job only when
  // its output is matched live or the user brings rules (a broken rule
  // file must stop us before the job starts), otherwise only when a failed
  // process left dlerror texts to match.
  rules::RuleSet rule_set;
  bool full_rules = false;
  std::shared_ptr<const logs::Matcher> matcher;
  auto load_matcher = [&]() -> bool {
    if (full_rules) return true;
    if (!load_rules(common, rule_set)) return false;
    std::vector<rules::RuleError> rule_errors;
    matcher = logs::Matcher::compile(rule_set, rule_errors,
                                     common.rules_dir.empty() ? &builtin_precompiled() : nullptr);
    for (const rules::RuleError& e : rule_errors) print_error(e.origin + ": " + e.message);
    full_rules = rule_errors.empty();
    return full_rules;
  };
  if ((opts.logs || !common.rules_dir.empty() || common.no_builtin_rules) && !load_matcher())
    return 2;

  std::string trace_dir, error;
  bool temporary = false;
  if (!run::prepare_trace_dir(opts.trace_dir, trace_dir, temporary, error)) {
    print_error(error);
    return 2;
  }
  host::Host host = host::Host::live();
  char cwd_buf[4096];
  const std::string cwd = getcwd(cwd_buf, sizeof cwd_buf) ? cwd_buf : "";

  run::LaunchOptions lo;
  lo.argv = opts.argv;
  lo.trace_dir = trace_dir;
  lo.hang_timeout = opts.hang_timeout;
  lo.kill_on_hang = opts.kill_on_hang;
  std::optional<std::string> shims = run::find_shim_dir(host);
  std::vector<Finding> hang_findings;
  std::vector<std::string> hangs_shown;  // the causes of hangs reported while the job ran
  lo.on_hang = [&](const run::HangSample& s) {
    std::signal(SIGPIPE, SIG_IGN);  // the child is started: it keeps its own disposition
    FindingList found;
    run::analyse_hang(s, host, cwd, full_rules ? &rule_set : nullptr, found);
    if (load_matcher()) scan_live_stacks(s, matcher, found);
    const long idle = static_cast<long>(s.idle_seconds);
    if (common.format != OutputFormat::Json && opts.kill_on_hang) {
      // One line now; the report once, when the job has ended.
      std::fprintf(out,
                   "\nmldoctor run: no progress for %ld s: the job looks hung; stopping it "
                   "(--kill-on-hang), the report follows\n",
                   idle);
      std::fflush(out);
    } else if (common.format != OutputFormat::Json) {
      // The job keeps running, maybe for hours: the report now.
      std::fprintf(out,
                   "\nmldoctor run: no progress for %ld s: the job looks hung (it keeps running; "
                   "--kill-on-hang stops it)\n",
                   idle);
      // The finding that names the cause leads; RUN002 (the hang itself,
      // with every thread's stacks) and what it explains are its context.
      std::vector<const Finding*> ptrs;
      for (const Finding& f : found.findings) ptrs.push_back(&f);
      report::Style style{common.color, true};
      style.context_evidence = true;
      for (const rules::Incident& inc :
           rules::group_incidents(ptrs, rules_for(found.findings, full_rules, rule_set))) {
        report::print_incident(out, inc, style);
        hangs_shown.push_back(inc.cause->rule + " " + inc.cause->message);
      }
      std::fflush(out);
    }
    for (Finding& f : found.findings) hang_findings.push_back(std::move(f));
  };
  if (shims) lo.shim_dir = *shims;
  // --logs: each stream scanned as it passes, the findings join the report.
  std::unique_ptr<logs::Scanner> out_scan, err_scan;
  if (opts.logs) {
    out_scan = std::make_unique<logs::Scanner>(matcher, logs::ScanOptions{2, "stdout", 1});
    err_scan = std::make_unique<logs::Scanner>(matcher, logs::ScanOptions{2, "stderr", 1});
    lo.capture_output = true;
    lo.on_output = [&](int stream, ByteView data) {
      (stream == 1 ? *out_scan : *err_scan).feed(data);
    };
  }
  // The memory cgroup's OOM kills and the clock, to explain a death.
  const run::DeathBaseline death_baseline = run::death_baseline(host);
  run::LaunchResult lr;
  if (shims) {
    lr = run::launch(host, lo);
  } else {
    // No shims: the command still runs, watched from outside only.
    lo.shim_dir = "/nonexistent-mldoctor-shims";
    lr = run::launch(host, lo);
    lr.not_traced_reasons.push_back(
        "the trace shims (libmldoctor-audit.so, libmldoctor-preload.so) were not "
        "found next to mldoctor or in ../lib/mldoctor; set MLDOCTOR_SHIM_DIR");
  }
  // A report written into a closed pipe must not kill us before we end the
  // way the job ended (exit_like restores the default for a SIGPIPE death).
  // Only now: the child inherits an ignored SIGPIPE across exec.
  std::signal(SIGPIPE, SIG_IGN);
  if (!lr.started) print_error(lr.error);

  run::Trace trace = run::read_trace(trace_dir);
  if (temporary) run::remove_trace_dir(trace_dir);

  FindingList found;
  run::AnalysisContext ctx;
  ctx.host = &host;
  ctx.status = lr.status;
  ctx.not_traced_reasons = lr.not_traced_reasons;
  if (shims) {
    ctx.shims_glibc_needed = run::shims_glibc_needed(host, *shims);
    ctx.shim_dir = *shims;
  }
  ctx.trace_dir = trace_dir;
  ctx.tls_reserved = lr.tls_room.reserved;
  ctx.child_pid = lr.started ? lr.pid : 0;
  ctx.rules = full_rules ? &rule_set : nullptr;
  // Killed by a signal the kernel or another process sends for a reason the
  // machine records (not the ones a user sends to stop a job).
  std::optional<detect::DeathFacts> death;
  const int sig = lr.status.code;
  if (lr.started && lr.status.known && lr.status.signaled && !lr.killed_on_hang &&
      (sig == SIGKILL || sig == SIGBUS || sig == SIGILL || sig == SIGSEGV)) {
    std::vector<long> pids;
    for (const auto& [pid, p] : trace.processes) pids.push_back(pid);
    death = run::gather_death(host, death_baseline, lr.status, lr.pid, pids, lr.peak_rss_bytes);
    ctx.death = &*death;
  }
  run::analyse(trace, ctx, found);
  // dlerror texts through the log rules: the knowledge base's explanations
  // of "cannot open shared object file", "version `GLIBCXX_…' not found".
  // Only for processes that failed: a program that probes for an optional
  // library (llvmlite looks for libsvml.so) and goes on has handled it.
  std::string dlerror_lines;
  for (const auto& [pid, p] : trace.processes) {
    const bool failed = pid == lr.pid ? lr.status.signaled || lr.status.code != 0 : !p.exited;
    if (failed)
      for (const run::DlError& e : p.dlerrors) dlerror_lines += e.message + "\n";
  }
  if (!dlerror_lines.empty() && load_matcher()) {
    logs::Scanner scanner(matcher, logs::ScanOptions{0, "dlerror", 1});
    scanner.feed(ByteView(reinterpret_cast<const u8*>(dlerror_lines.data()), dlerror_lines.size()));
    scanner.finish();
    for (const logs::LogFinding* lf : scanner.findings()) found.findings.push_back(lf->finding);
  }
  for (logs::Scanner* sc : {out_scan.get(), err_scan.get()}) {
    if (!sc) continue;
    sc->finish();
    for (const logs::LogFinding* lf : sc->findings()) found.findings.push_back(lf->finding);
  }
  // A finding that explains another hides it (`replaces`: TLS001 from the
  // trace says what the dlerror text's TLS010 says, with the fix).
  rules::drop_replaced(found.findings, rules_for(found.findings, full_rules, rule_set));
  // One incident per cause: the trace's and the output's findings grouped as
  // `logs` groups a log's (an envelope is context of the error it wraps),
  // the hang's among themselves (RUN002 is context of the finding that names
  // why the job hangs; a thread-count finding of the trace says nothing of
  // that). Most severe first; at equal severity the hang's cause first.
  const size_t first_hang = found.findings.size();
  for (Finding& f : hang_findings) found.findings.push_back(std::move(f));
  std::vector<const Finding*> all, job_findings, hang_ptrs;
  for (size_t i = 0; i < found.findings.size(); i++) {
    all.push_back(&found.findings[i]);
    (i < first_hang ? job_findings : hang_ptrs).push_back(&found.findings[i]);
  }
  const rules::RuleSet incident_rules = rules_for(found.findings, full_rules, rule_set);
  std::vector<rules::Incident> incidents = rules::group_incidents(hang_ptrs, incident_rules);
  for (rules::Incident& inc : rules::group_incidents(job_findings, incident_rules))
    incidents.push_back(inc);
  std::stable_sort(
      incidents.begin(), incidents.end(),
      [](const rules::Incident& a, const rules::Incident& b) { return a.severity > b.severity; });
  auto from_hang = [&](const rules::Incident& inc) {
    return static_cast<size_t>(inc.cause - found.findings.data()) >= first_hang;
  };

  const std::string cmd = run::command_line(opts.argv, 120);
  if (common.format == OutputFormat::Json) {
    json procs = json::array();
    for (const auto& [pid, p] : trace.processes) procs.push_back(render::process_json(p));
    json findings = json::array();
    for (const Finding* f : all) findings.push_back(report::finding_json(*f));
    // Incidents refer to findings by their index in "findings".
    json incidents_doc = report::incidents_json(incidents, all);
    json status = {{"started", lr.started}, {"seconds", lr.seconds}};
    if (lr.status.signaled)
      status["signal"] = render::signal_text(lr.status.code);
    else
      status["exit_code"] = lr.status.code;
    status["killed_on_hang"] = lr.killed_on_hang;
    json doc = {{"schema", "mldoctor.run/1"},   {"version", MLD_VERSION},
                {"command", opts.argv},         {"status", status},
                {"processes", procs},           {"not_traced", lr.not_traced_reasons},
                {"trace_errors", trace.errors}, {"findings", findings},
                {"incidents", incidents_doc}};
    {
      const run::TlsRoomChange& t = lr.tls_room;
      doc["static_tls_room"] = {
          {"change_bytes", t.bytes ? json(*t.bytes) : json(nullptr)},
          {"program", t.program.empty() ? json(nullptr) : json(t.program)},
          {"probe_change_bytes", t.probe_bytes ? json(*t.probe_bytes) : json(nullptr)},
          {"reserved_bytes", t.reserved},
          {"note", t.note.empty() ? json(nullptr) : json(t.note)}};
    }
    if (opts.logs) {
      json holders = json::array();
      for (const run::LaunchResult::OutputHolder& h : lr.output_holders)
        holders.push_back({{"pid", h.pid}, {"command", h.command}});
      doc["output"] = {{"open_after_exit", lr.output_left_open},
                       {"grace_seconds", lr.output_grace},
                       {"held_by", holders}};
    }
    std::fprintf(out, "%s\n", doc.dump(2).c_str());
  } else {
    report::Style style{common.color, true};
    style.context_evidence = true;
    std::string stopped;
    if (lr.killed_on_hang && !lr.hangs.empty())
      stopped = " (stopped by mldoctor after " +
                std::to_string(static_cast<long>(lr.hangs.back().idle_seconds)) +
                " s without progress: --kill-on-hang)";
    std::fprintf(out, "\nmldoctor run: %s\n", cmd.c_str());
    std::fprintf(out, "%-9s %s after %.2f s%s\n", "status", render::status_text(lr).c_str(),
                 lr.seconds, stopped.c_str());
    if (lr.output_left_open) std::fprintf(out, "%-9s %s\n", "output", output_text(lr).c_str());
    if (const run::TlsRoomChange& t = lr.tls_room; t.reserved)
      std::fprintf(out,
                   "%-9s under the shims this glibc leaves %lld bytes more static TLS for "
                   "dlopen(); a %llu-byte reserve was preloaded, so a module that fails "
                   "without run fails under it%s%s\n",
                   "tls", static_cast<long long>(*t.bytes),
                   static_cast<unsigned long long>(t.reserved), t.note.empty() ? "" : "; ",
                   t.note.c_str());
    else if (!t.bytes && !ctx.shim_dir.empty())
      std::fprintf(out,
                   "%-9s the shims' effect on static TLS was not measured (%s): a module within "
                   "about 64 bytes of the limit may load under run and fail without it\n",
                   "tls", t.note.c_str());
    for (const std::string& h : hangs_shown)
      std::fprintf(out, "%-9s reported above while the job ran: %s\n", "hang", h.c_str());
    // A child that only exec'd a program the shims did not load in was
    // not traced: counted apart.
    size_t unseen = 0;
    for (const auto& [pid, p] : trace.processes)
      unseen += p.images.empty() && p.objects.empty() && p.untraced_exec;
    std::fprintf(
        out, "%-9s %zu traced%s\n", "processes", trace.processes.size() - unseen,
        unseen ? (", " + std::to_string(unseen) + " exec'd a program not traced").c_str() : "");
    for (const auto& [pid, p] : trace.processes) render::print_process(out, host, p, "  ");
    for (const std::string& e : trace.errors) std::fprintf(out, "  trace: %s\n", e.c_str());
    std::fprintf(out, "\n");
    if (incidents.empty())
      std::fprintf(out, "%s no findings\n", common.color ? "\033[32m✓\033[0m" : "✓");
    // A hang printed while the job ran is not printed again.
    for (const rules::Incident& inc : incidents)
      if (hangs_shown.empty() || !from_hang(inc)) report::print_incident(out, inc, style);
    std::string summary = report::incidents_summary(incidents);
    if (!summary.empty())
      std::fprintf(out, "\n%s · mldoctor explain %s\n", summary.c_str(),
                   incidents.front().cause->rule.c_str());
  }
  if (!temporary && common.format != OutputFormat::Json)
    std::fprintf(out, "trace events kept in %s\n", trace_dir.c_str());
  std::fflush(out);
  if (out != stderr) std::fclose(out);
  // Never forked (no pipe, no pty): our failure. Forked but exec failed: the
  // child's 127 or 126, as a shell would.
  if (!lr.started) return lr.pid == 0 ? 2 : lr.status.code ? lr.status.code : 127;
  run::exit_like(lr.status);
}

}  // namespace mld::cli
