// logs-command.cc — `mldoctor logs`: every input scanned against the
// knowledge base's log signatures, findings de-duplicated per input with
// counts, line numbers and ranks, then grouped into incidents (the cause
// first, the envelopes it explains as its context). With --follow, findings are printed as they
// complete and an idle input is checked for end-of-log stalls. An unreadable
// input is an error for that input only; the others are still scanned, and
// what was found before a read error is still reported.
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "cli/cli.h"
#include "logs/logs.h"
#include "report/report.h"

namespace mld::cli {
namespace {

volatile std::sig_atomic_t interrupted = 0;
void on_interrupt(int) { interrupted = 1; }

struct InputResult {
  std::string path;
  std::string error;
  u64 bytes = 0;
  u64 lines = 0;
  std::string encoding;                    // "UTF-16LE" when decoded; empty: bytes as they are
  std::vector<const Finding*> findings;    // in line order
  std::vector<rules::Incident> incidents;  // cause first, most severe first
};

std::string display_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

}  // namespace

int run_logs(const CommonOptions& common, const LogsOptions& opts) {
  rules::RuleSet rule_set;
  if (!load_rules(common, rule_set)) return 2;
  std::vector<rules::RuleError> errors;
  std::shared_ptr<const logs::Matcher> matcher = logs::Matcher::compile(
      rule_set, errors, common.rules_dir.empty() ? &builtin_precompiled() : nullptr);
  for (const rules::RuleError& e : errors) print_error(e.origin + ": " + e.message);
  if (!errors.empty()) return 2;

  std::vector<std::string> paths = opts.paths.empty() ? std::vector<std::string>{"-"} : opts.paths;
  std::FILE* out = stdout;
  const bool text = common.format == OutputFormat::Text || common.format == OutputFormat::Tree;
  report::Style style{.color = common.color};
  if (opts.follow) {
    std::signal(SIGINT, on_interrupt);
    std::signal(SIGTERM, on_interrupt);
  }

  std::vector<std::unique_ptr<logs::Scanner>> scanners;
  std::vector<InputResult> results;
  bool tool_error = false;
  for (const std::string& path : paths) {
    // A terminal on standard input: say what is awaited, or the user sees
    // nothing and waits with us.
    if (path == "-" && isatty(STDIN_FILENO))
      std::fprintf(stderr,
                   "mldoctor logs: reading a log from the terminal (paste it, then Ctrl-D); "
                   "or name it: mldoctor logs FILE\n");
    InputResult r;
    r.path = display_name(path);
    auto scanner = std::make_unique<logs::Scanner>(
        matcher, logs::ScanOptions{opts.context, r.path, opts.threads});
    logs::ReadOptions ro;
    ro.on_waiting_for_writer = [&path] {
      std::fprintf(stderr,
                   "mldoctor logs: %s is a named pipe (FIFO) that no program writes to yet: "
                   "waiting for one to write and close it (Ctrl-C stops)\n",
                   path.c_str());
    };
    ro.follow = opts.follow;
    ro.stall_seconds = opts.stall_seconds;
    if (opts.follow) {
      // Live: each finding as soon as its evidence is complete.
      auto flush = [&, s = scanner.get()] {
        for (const logs::LogFinding* lf : s->take_new()) {
          if (text)
            report::print_finding(out, lf->finding, style);
          else if (common.format == OutputFormat::Json)
            std::fprintf(out, "%s\n", report::finding_json(lf->finding).dump().c_str());
          std::fflush(out);
        }
      };
      ro.stop = [] { return interrupted != 0; };
      ro.on_progress = flush;
      ro.on_idle = [flush, s = scanner.get()] {
        s->check_stall();
        flush();
      };
    }
    try {
      logs::scan_input(path, *scanner, ro);
    } catch (const IoError& e) {
      r.error = e.what();
      print_error(r.error);
      tool_error = true;
    }
    scanner->finish();
    if (opts.follow) ro.on_progress();
    r.bytes = scanner->bytes();
    r.lines = scanner->lines();
    r.encoding = scanner->encoding();
    for (const logs::LogFinding* lf : scanner->findings()) r.findings.push_back(&lf->finding);
    r.incidents = rules::group_incidents(r.findings, rule_set);
    scanners.push_back(std::move(scanner));
    results.push_back(std::move(r));
  }

  std::vector<const Finding*> all;
  std::vector<rules::Incident> all_incidents;
  for (const InputResult& r : results) {
    all.insert(all.end(), r.findings.begin(), r.findings.end());
    all_incidents.insert(all_incidents.end(), r.incidents.begin(), r.incidents.end());
  }

  if (common.format == OutputFormat::Json) {
    nlohmann::json inputs = nlohmann::json::array();
    for (const InputResult& r : results) {
      nlohmann::json fj = nlohmann::json::array();
      for (const Finding* f : r.findings) fj.push_back(report::finding_json(*f));
      // Incidents refer to findings by their index in "findings".
      nlohmann::json ij = report::incidents_json(r.incidents, r.findings);
      nlohmann::json j = {{"path", r.path},
                          {"bytes", r.bytes},
                          {"lines", r.lines},
                          {"findings", fj},
                          {"incidents", ij}};
      if (!r.error.empty()) j["error"] = r.error;
      if (!r.encoding.empty()) j["encoding"] = r.encoding;
      inputs.push_back(std::move(j));
    }
    nlohmann::json doc = {
        {"schema", "mldoctor.logs/1"}, {"version", MLD_VERSION}, {"inputs", inputs}};
    if (!opts.follow) std::fprintf(out, "%s\n", doc.dump(2).c_str());
  } else if (common.format == OutputFormat::Markdown) {
    for (const InputResult& r : results) {
      if (!r.error.empty() && r.bytes == 0) {
        std::fprintf(out, "## mldoctor logs: `%s`\n\nnot read: %s\n\n", r.path.c_str(),
                     r.error.c_str());
        continue;
      }
      std::fprintf(out, "## mldoctor logs: `%s`\n\n%llu lines scanned%s%s\n\n", r.path.c_str(),
                   static_cast<unsigned long long>(r.lines),
                   r.encoding.empty() ? "" : (" (" + r.encoding + ", decoded)").c_str(),
                   r.error.empty() ? "" : (" — " + r.error).c_str());
      report::print_incidents_markdown(out, r.incidents);
    }
  } else {
    for (const InputResult& r : results) {
      if (!opts.follow) {
        std::string incidents;
        if (r.incidents.size() < r.findings.size())
          incidents = ", " + std::to_string(r.incidents.size()) +
                      (r.incidents.size() == 1 ? " incident" : " incidents");
        // An input never read has no counts to show: its error was said.
        if (!r.error.empty() && r.bytes == 0) continue;
        std::fprintf(out, "%s: %llu line%s%s, %zu finding%s%s%s\n", r.path.c_str(),
                     static_cast<unsigned long long>(r.lines), r.lines == 1 ? "" : "s",
                     r.encoding.empty() ? "" : (" of " + r.encoding + " text").c_str(),
                     r.findings.size(), r.findings.size() == 1 ? "" : "s", incidents.c_str(),
                     r.error.empty() ? "" : " (then a read error: the rest was not scanned)");
        for (const rules::Incident& inc : r.incidents) report::print_incident(out, inc, style);
      } else {
        // Counts are final only now.
        for (const Finding* f : r.findings)
          if (f->count > 1)
            std::fprintf(out, "%s: %s seen %llu times (last at line %llu)\n", r.path.c_str(),
                         f->rule.c_str(), static_cast<unsigned long long>(f->count),
                         static_cast<unsigned long long>(f->last_line.value_or(0)));
      }
    }
    std::string summary = report::incidents_summary(all_incidents);
    if (!summary.empty()) {
      // The cause of the most severe incident (each input's come first).
      const rules::Incident* top = nullptr;
      for (const rules::Incident& inc : all_incidents)
        if (!top || inc.severity > top->severity) top = &inc;
      std::fprintf(out, "\n%s · mldoctor explain %s\n", summary.c_str(), top->cause->rule.c_str());
    }
  }
  if (tool_error) return 2;
  return report::count_at_or_above(all, common.fail_on) > 0 ? 1 : 0;
}

}  // namespace mld::cli
