// report.cc — text, JSON and Markdown renderings of findings and rules. The
// text form follows the doctor style of DESIGN §2a: a mark and one specific
// line per finding, its evidence and fix indented below, nothing a user cannot
// act on. Colour is a Style choice made by the caller (TTY and NO_COLOR).
#include "report/report.h"

#include <fmt/format.h>

#include <algorithm>

namespace mld::report {
namespace {

struct Colours {
  const char* on = "";
  const char* dim = "";
  const char* bold = "";
  const char* off = "";
};

Colours colours_for(Severity s, const Style& style) {
  if (!style.color) return {};
  const char* on = s == Severity::Error     ? "\033[31m"
                   : s == Severity::Warning ? "\033[33m"
                                            : "\033[36m";
  return {on, "\033[2m", "\033[1m", "\033[0m"};
}

std::string occurrences_text(const Finding& f) {
  if (f.count <= 1 && f.ranks.size() <= 1) return {};
  std::string out;
  if (f.count > 1) {
    out = fmt::format("seen {} times", f.count);
    if (f.last_line && !f.evidence.empty()) {
      for (const Evidence& e : f.evidence)
        if (!e.context && e.line) {
          out += fmt::format(", lines {}–{}", *e.line, *f.last_line);
          break;
        }
    }
  }
  if (f.ranks.size() > 1)
    out += (out.empty() ? "" : ", ") + std::string("ranks ") + format_ranges(f.ranks);
  return out;
}

void print_wrapped_block(std::FILE* out, const std::string& text, const char* indent) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (!line.empty() || (end < text.size()))
      std::fprintf(out, "%s%s\n", line.empty() ? "" : indent, line.c_str());
    start = end + 1;
  }
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  size_t b = 0;
  while (b < s.size() && s[b] == '\n') b++;
  return s.substr(b);
}

}  // namespace

const char* severity_mark(Severity s) {
  return s == Severity::Error ? "✗" : s == Severity::Warning ? "!" : "·";
}

namespace {

// "line 9" / "lines 6–7" of a finding for a one-line reference.
std::string where_text(const Finding& f) {
  for (const Evidence& e : f.evidence)
    if (!e.context && e.line) {
      if (f.last_line && *f.last_line != *e.line)
        return fmt::format("lines {}–{}", *e.line, *f.last_line);
      return fmt::format("line {}", *e.line);
    }
  return {};
}

// grep's convention: "file:line:" for evidence, "file:line-" for context.
std::string where_prefix(const Evidence& e, const Style& style) {
  const char sep = e.context ? '-' : ':';
  if (style.show_files && !e.file.empty() && e.line)
    return fmt::format("{}:{}{} ", e.file, *e.line, sep);
  if (e.line) return fmt::format("line {}{} ", *e.line, sep);
  return {};
}

// A finding's lines; `extra` (incident members) goes between its occurrences
// and its fix.
void print_finding_lines(std::FILE* out, const Finding& f, Severity shown, const Style& style,
                         const std::vector<std::string>& extra) {
  Colours c = colours_for(shown, style);
  std::fprintf(out, " %s%s%s %s  %s%s%s\n", c.on, severity_mark(shown), c.off, f.message.c_str(),
               c.dim, f.rule.c_str(), c.off);
  for (const Evidence& e : f.evidence) {
    const std::string where = where_prefix(e, style);
    if (e.context)
      std::fprintf(out, "     %s%s%s%s\n", c.dim, where.c_str(), e.text.c_str(), c.off);
    else
      std::fprintf(out, "     %s%s\n", where.c_str(), e.text.c_str());
  }
  std::string occ = occurrences_text(f);
  if (!occ.empty()) std::fprintf(out, "     %s%s%s\n", c.dim, occ.c_str(), c.off);
  for (const std::string& line : extra) std::fprintf(out, "     %s\n", line.c_str());
  if (!f.fix.empty()) std::fprintf(out, "     %sfix:%s %s\n", c.bold, c.off, f.fix.c_str());
  if (!f.collect.empty())
    std::fprintf(out, "     %snext:%s %s\n", c.bold, c.off, f.collect.c_str());
  if (!f.env_fix.empty()) {
    std::string line = env_fix_shell(f.env_fix);
    if (f.fix.find(line) == std::string::npos) std::fprintf(out, "          %s\n", line.c_str());
  }
}

// "also: <message> (line 9)" and "reported as: NCCL011 <message> (line 6)".
std::vector<std::string> incident_lines(const rules::Incident& inc) {
  std::vector<std::string> out;
  for (const Finding* f : inc.also) {
    std::string where = where_text(*f);
    out.push_back("also: " + f->message + (where.empty() ? "" : " (" + where + ")"));
  }
  for (const Finding* f : inc.context) {
    std::string where = where_text(*f);
    out.push_back("reported as: " + f->rule + " " + f->message +
                  (where.empty() ? "" : " (" + where + ")"));
  }
  return out;
}

}  // namespace

void print_finding(std::FILE* out, const Finding& f, const Style& style) {
  print_finding_lines(out, f, f.severity, style, {});
}

void print_incident(std::FILE* out, const rules::Incident& inc, const Style& style) {
  if (!style.context_evidence) {
    print_finding_lines(out, *inc.cause, inc.severity, style, incident_lines(inc));
    return;
  }
  rules::Incident cause_only = inc;
  cause_only.context.clear();
  print_finding_lines(out, *inc.cause, inc.severity, style, incident_lines(cause_only));
  Colours c = colours_for(inc.severity, style);
  for (const Finding* f : inc.context) {
    std::fprintf(out, "     %sreported as:%s %s  %s%s%s\n", c.dim, c.off, f->message.c_str(), c.dim,
                 f->rule.c_str(), c.off);
    for (const Evidence& e : f->evidence)
      std::fprintf(out, "       %s%s%s%s\n", e.context ? c.dim : "", where_prefix(e, style).c_str(),
                   e.text.c_str(), e.context ? c.off : "");
  }
}

std::string incidents_summary(const std::vector<rules::Incident>& incidents) {
  std::vector<const Finding*> causes;
  std::vector<Finding> shown;
  shown.reserve(incidents.size());
  for (const rules::Incident& inc : incidents) {
    shown.push_back(Finding{});
    shown.back().severity = inc.severity;
  }
  for (const Finding& f : shown) causes.push_back(&f);
  return summary_line(causes);
}

std::string env_fix_shell(const std::vector<std::string>& env_fix) {
  std::string set, unset;
  for (const std::string& e : env_fix) {
    if (!e.empty() && e[0] == '-')
      unset += " " + e.substr(1);
    else
      set += " " + e;
  }
  std::string line;
  if (!set.empty()) line = "export" + set;
  if (!unset.empty()) line += (line.empty() ? "" : "; ") + std::string("unset") + unset;
  return line;
}

std::string summary_line(const std::vector<const Finding*>& findings) {
  size_t n[3] = {0, 0, 0};
  for (const Finding* f : findings) n[static_cast<int>(f->severity)]++;
  std::vector<std::string> parts;
  if (n[2]) parts.push_back(fmt::format("{} error{}", n[2], n[2] == 1 ? "" : "s"));
  if (n[1]) parts.push_back(fmt::format("{} warning{}", n[1], n[1] == 1 ? "" : "s"));
  if (n[0]) parts.push_back(fmt::format("{} note{}", n[0], n[0] == 1 ? "" : "s"));
  std::string out;
  for (size_t i = 0; i < parts.size(); i++) out += (i ? ", " : "") + parts[i];
  return out;
}

size_t count_at_or_above(const std::vector<const Finding*>& findings, Severity fail_on) {
  return static_cast<size_t>(std::count_if(
      findings.begin(), findings.end(), [&](const Finding* f) { return f->severity >= fail_on; }));
}

nlohmann::json finding_json(const Finding& f) {
  nlohmann::json evidence = nlohmann::json::array();
  for (const Evidence& e : f.evidence) {
    nlohmann::json j = {{"text", e.text}};
    if (!e.file.empty()) j["file"] = e.file;
    if (e.line) j["line"] = *e.line;
    if (e.context) j["context"] = true;
    evidence.push_back(std::move(j));
  }
  nlohmann::json j = {{"rule", f.rule},       {"severity", severity_name(f.severity)},
                      {"subject", f.subject}, {"message", f.message},
                      {"evidence", evidence}, {"fix", f.fix},
                      {"env_fix", f.env_fix}, {"count", f.count}};
  if (f.last_line) j["last_line"] = *f.last_line;
  if (!f.collect.empty()) j["collect"] = f.collect;
  if (!f.ranks.empty()) j["ranks"] = f.ranks;
  return j;
}

nlohmann::json incidents_json(const std::vector<rules::Incident>& incidents,
                              const std::vector<const Finding*>& findings) {
  auto index = [&](const Finding* f) {
    return static_cast<size_t>(std::find(findings.begin(), findings.end(), f) - findings.begin());
  };
  nlohmann::json out = nlohmann::json::array();
  for (const rules::Incident& inc : incidents) {
    nlohmann::json also = nlohmann::json::array(), context = nlohmann::json::array();
    for (const Finding* f : inc.also) also.push_back(index(f));
    for (const Finding* f : inc.context) context.push_back(index(f));
    out.push_back({{"rule", inc.cause->rule},
                   {"severity", severity_name(inc.severity)},
                   {"cause", index(inc.cause)},
                   {"also", also},
                   {"context", context}});
  }
  return out;
}

namespace {

// One finding as a Markdown section; `extra` (incident members) as a list
// before its fix.
void print_finding_markdown(std::FILE* out, const Finding& f, Severity shown,
                            const std::vector<std::string>& extra) {
  std::fprintf(out, "### %s `%s` %s\n\n", severity_mark(shown), f.rule.c_str(), f.message.c_str());
  bool any = false;
  for (const Evidence& e : f.evidence) {
    if (!any) std::fprintf(out, "```\n");
    any = true;
    if (e.line)
      std::fprintf(out, "%s%s:%llu: %s\n", e.context ? "  " : "", e.file.c_str(),
                   static_cast<unsigned long long>(*e.line), e.text.c_str());
    else
      std::fprintf(out, "%s\n", e.text.c_str());
  }
  if (any) std::fprintf(out, "```\n\n");
  std::string occ = occurrences_text(f);
  if (!occ.empty()) std::fprintf(out, "%s.\n\n", occ.c_str());
  for (const std::string& l : extra) std::fprintf(out, "- %s\n", l.c_str());
  if (!extra.empty()) std::fprintf(out, "\n");
  if (!f.fix.empty()) std::fprintf(out, "**Fix:** %s\n\n", f.fix.c_str());
  if (!f.env_fix.empty()) std::fprintf(out, "```sh\n%s\n```\n\n", env_fix_shell(f.env_fix).c_str());
}

}  // namespace

void print_incidents_markdown(std::FILE* out, const std::vector<rules::Incident>& incidents) {
  if (incidents.empty()) {
    std::fprintf(out, "No findings.\n");
    return;
  }
  for (const rules::Incident& inc : incidents)
    print_finding_markdown(out, *inc.cause, inc.severity, incident_lines(inc));
}

void print_findings_markdown(std::FILE* out, const std::vector<const Finding*>& findings) {
  if (findings.empty()) {
    std::fprintf(out, "No findings.\n");
    return;
  }
  for (const Finding* f : findings) print_finding_markdown(out, *f, f->severity, {});
}

void print_rule_line(std::FILE* out, const rules::Rule& r, const Style& style) {
  Colours c = colours_for(r.severity, style);
  std::fprintf(out, "%-8s %s%-7s%s %s%s\n", r.id.c_str(), c.on,
               std::string(severity_name(r.severity)).c_str(), c.off, r.title.c_str(),
               r.builtin ? "" : "  (user rule)");
}

void print_rule_text(std::FILE* out, const rules::Rule& r, const Style& style) {
  Colours c = colours_for(r.severity, style);
  std::fprintf(out, "%s%s%s  %s%s%s  (%s)\n\n", c.bold, r.id.c_str(), c.off, c.on, r.title.c_str(),
               c.off, std::string(severity_name(r.severity)).c_str());
  print_wrapped_block(out, trim(r.explanation), "  ");
  std::fprintf(out, "\n%sFix%s\n", c.bold, c.off);
  if (!r.fix.text.empty()) print_wrapped_block(out, trim(r.fix.text), "  ");
  if (!r.fix.env.empty()) {
    std::fprintf(out, "  export");
    for (const std::string& e : r.fix.env) std::fprintf(out, " %s", e.c_str());
    std::fprintf(out, "\n");
  }
  for (const std::string& cmd : r.fix.commands) std::fprintf(out, "  $ %s\n", cmd.c_str());
  if (!r.collect.empty()) {
    std::fprintf(out, "\n%sWhen a log shows only this, collect next%s\n", c.bold, c.off);
    print_wrapped_block(out, trim(r.collect), "  ");
  }
  if (r.is_log_rule()) {
    std::fprintf(out, "\n%sRecognised in logs by%s\n", c.bold, c.off);
    for (const rules::Signature& s : r.signatures)
      std::fprintf(out, "  %s%s\n", s.pattern.c_str(),
                   s.at_end ? "   (as the log's last line)" : "");
    for (const rules::StackSignature& s : r.stacks)
      std::fprintf(out, "  a hung thread's stack frame %s%s%s\n", s.frame.c_str(),
                   s.under.empty() ? "" : " under ", s.under.c_str());
    if (!r.sources.empty()) {
      std::fprintf(out, "\n%sPrinted by%s\n", c.bold, c.off);
      for (const rules::Source& s : r.sources) {
        if (!s.package.empty())  // a closed binary: which one, at which package version
          std::fprintf(out, "  %s in Debian's %s %s (%s)\n", s.path.c_str(), s.package.c_str(),
                       s.tag.c_str(), rules::source_url(s).c_str());
        else
          std::fprintf(out, "  %s\n", rules::source_url(s).c_str());
      }
    }
  } else if (!r.detector.empty()) {
    std::fprintf(out, "\n%sDetected by%s %s (mldoctor check / libs / run)\n", c.bold, c.off,
                 r.detector.c_str());
  }
  if (!r.replaces.empty()) {
    std::string ids;
    for (const std::string& id : r.replaces) ids += (ids.empty() ? "" : ", ") + id;
    std::fprintf(out, "\n%sExplains%s %s (shown as context of this finding)\n", c.bold, c.off,
                 ids.c_str());
  }
  if (r.envelope)
    std::fprintf(
        out,
        "\n%sAn envelope:%s in a log or a hang report, any error of another rule is its cause and "
        "leads the incident\n",
        c.bold, c.off);
  std::fprintf(out, "\n%sReferences%s\n", c.bold, c.off);
  for (const std::string& ref : r.references) std::fprintf(out, "  %s\n", ref.c_str());
}

nlohmann::json rule_json(const rules::Rule& r) {
  nlohmann::json sigs = nlohmann::json::array();
  for (const rules::Signature& s : r.signatures) {
    nlohmann::json j = {{"pattern", s.pattern}};
    if (!s.message.empty()) j["message"] = s.message;
    if (!s.followed_by.empty()) j["followed_by"] = s.followed_by, j["within"] = s.within;
    if (s.at_end) j["at_end"] = true;
    if (s.case_insensitive) j["case_insensitive"] = true;
    sigs.push_back(std::move(j));
  }
  nlohmann::json stacks = nlohmann::json::array();
  for (const rules::StackSignature& s : r.stacks) {
    nlohmann::json j = {{"frame", s.frame}};
    if (!s.under.empty()) j["under"] = s.under;
    if (!s.message.empty()) j["message"] = s.message;
    stacks.push_back(std::move(j));
  }
  nlohmann::json sources = nlohmann::json::array();
  for (const rules::Source& s : r.sources) {
    static constexpr const char* kSyntax[] = {"printf", "brace", "literal"};
    nlohmann::json j = {{"path", s.path}, {"tag", s.tag}};
    if (s.package.empty())
      j["repository"] = s.repository, j["line"] = s.line;
    else
      j["package"] = s.package;
    j["format"] = s.format;
    j["syntax"] = kSyntax[static_cast<int>(s.syntax)];
    j["url"] = rules::source_url(s);
    if (!s.values.empty()) j["values"] = s.values;
    sources.push_back(std::move(j));
  }
  nlohmann::json j = {
      {"id", r.id},
      {"severity", severity_name(r.severity)},
      {"title", r.title},
      {"explanation", trim(r.explanation)},
      {"fix", {{"text", trim(r.fix.text)}, {"env", r.fix.env}, {"commands", r.fix.commands}}},
      {"references", r.references},
      {"builtin", r.builtin}};
  if (!r.detector.empty()) j["detector"] = r.detector;
  if (!sigs.empty()) j["signatures"] = sigs;
  if (!stacks.empty()) j["stacks"] = stacks;
  if (!sources.empty()) j["sources"] = sources;
  if (!r.replaces.empty()) j["replaces"] = r.replaces;
  if (r.envelope) j["envelope"] = true;
  if (!r.collect.empty()) j["collect"] = trim(r.collect);
  if (r.withdrawn) j["withdrawn"] = true;
  return j;
}

std::string rule_markdown(const rules::Rule& r) {
  std::string out;
  out += fmt::format("\n## {}\n\n**{}** · {}{}\n\n{}\n\n### Fix\n\n", r.id, r.title,
                     severity_name(r.severity), r.withdrawn ? " · withdrawn" : "",
                     trim(r.explanation));
  if (!r.fix.text.empty()) out += trim(r.fix.text) + "\n\n";
  if (!r.fix.env.empty()) {
    out += "```sh\nexport";
    for (const std::string& e : r.fix.env) out += " " + e;
    out += "\n```\n\n";
  }
  if (!r.fix.commands.empty()) {
    out += "```sh\n";
    for (const std::string& cmd : r.fix.commands) out += cmd + "\n";
    out += "```\n\n";
  }
  if (!r.collect.empty())
    out += "### When a log shows only this, collect next\n\n" + trim(r.collect) + "\n\n";
  if (r.is_log_rule()) {
    out += "### Log signatures\n\n";
    for (const rules::Signature& s : r.signatures) {
      std::string p = s.pattern;
      std::replace(p.begin(), p.end(), '`', '\'');
      out += fmt::format(
          "- `{}`{}{}\n", p, s.at_end ? " — only as the log's last line" : "",
          s.followed_by.empty() ? "" : fmt::format(" — with a following `{}` line", s.followed_by));
    }
    for (const rules::StackSignature& s : r.stacks) {
      std::string frame = s.frame, under = s.under;
      std::replace(frame.begin(), frame.end(), '`', '\'');
      std::replace(under.begin(), under.end(), '`', '\'');
      out += fmt::format("- in a stack dump of a hung job, a thread at a frame `{}`{}\n", frame,
                         under.empty() ? "" : fmt::format(" called from `{}`", under));
    }
    out += "\n";
    if (!r.sources.empty()) {
      out += "Printed by:\n\n";
      for (const rules::Source& s : r.sources) {
        std::string format = s.format;
        std::replace(format.begin(), format.end(), '`', '\'');
        std::replace(format.begin(), format.end(), '\n', ' ');
        if (!s.package.empty())
          out += fmt::format("- [`{}`]({}) in Debian's {} {}: `{}`\n", s.path, rules::source_url(s),
                             s.package, s.tag, format);
        else
          out += fmt::format("- [{} `{}`:{}]({}) at {}: `{}`\n", s.repository, s.path, s.line,
                             rules::source_url(s), s.tag, format);
      }
      out += "\n";
    }
  } else if (!r.detector.empty()) {
    out += fmt::format("Detected by `{}`.\n\n", r.detector);
  }
  if (!r.replaces.empty()) {
    std::string ids;
    for (const std::string& id : r.replaces)
      ids += fmt::format("{}[{}](#{})", ids.empty() ? "" : ", ", id, id);
    out += "Explains " + ids + ": their findings are shown as context of this one.\n\n";
  }
  if (r.envelope)
    out +=
        "An envelope: in a log or a hang report, an error of any other rule is its cause and leads "
        "the "
        "incident; this finding is shown as its context.\n\n";
  out += "### References\n\n";
  for (const std::string& ref : r.references) out += "- <" + ref + ">\n";

  return out;
}

std::string rules_markdown(const rules::RuleSet& rules) {
  std::string out =
      "# Rule reference\n\n"
      "Generated from `rules/*.toml` by `mldoctor rules --markdown`; do not edit by hand.\n"
      "`mldoctor explain ID` prints one rule.\n\n"
      "| id | severity | title | found by |\n|---|---|---|---|\n";
  for (const rules::Rule& r : rules.all()) {
    if (r.withdrawn) continue;
    out += fmt::format("| [{}](#{}) | {} | {} | {} |\n", r.id, r.id, severity_name(r.severity),
                       r.title, !r.is_log_rule() ? "`" + r.detector + "`" : std::string("logs"));
  }
  for (const rules::Rule& r : rules.all()) out += rule_markdown(r);
  return out;
}

void print_error(const std::string& what) {
  std::fprintf(stderr, "mldoctor: error: %s\n", what.c_str());
}

}  // namespace mld::report
