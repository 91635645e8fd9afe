// jit-command.cc — `mldoctor jit [--path DIR...] [--fix [--dry-run]]`: the
// extension build caches, their locks and the toolchain, with the findings
// of the JIT rules' detectors over them; --fix removes stale locks and
// stale build outputs, deciding from the scan's facts, and prints every
// action (kept locks say why).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/cli.h"
#include "detect/detect.h"
#include "hostfacts/hostfacts.h"
#include "jit/jit.h"
#include "pyenv/pyenv.h"
#include "report/report.h"

namespace mld::cli {

namespace {

using nlohmann::json;

json optional_json(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }

json links_json(const std::vector<host::SymlinkStep>& links) {
  json out = json::array();
  for (const host::SymlinkStep& l : links)
    out.push_back({{"path", l.path}, {"target", l.target}, {"uid", l.uid}});
  return out;
}

json extension_json(const jit::Extension& e) {
  json lock = nullptr;
  if (e.lock) {
    json holders = json::array();
    for (const jit::LockHolder& h : e.lock->holders)
      holders.push_back({{"pid", h.pid}, {"command", h.command}});
    lock = {{"path", e.lock->path},
            {"real_path", e.lock->real_path},
            {"symlink", e.lock->symlink},
            {"age_seconds", e.lock->age_seconds ? json(*e.lock->age_seconds) : json(nullptr)},
            {"holders", holders},
            {"holders_complete", e.lock->holders_complete},
            {"filesystem", e.lock->filesystem},
            {"network_filesystem", e.lock->network_filesystem},
            {"advisory", e.lock->advisory}};
  }
  return {{"name", e.name},
          {"path", e.path},
          {"real_path", e.real_path},
          {"links", links_json(e.links)},
          {"root", e.root},
          {"root_kind", e.root_kind},
          {"tag", optional_json(e.tag)},
          {"module", optional_json(e.module)},
          {"build_ninja", e.has_build_ninja},
          {"lock", lock}};
}

// ", really /scratch/u/te" when links make a root's real path differ.
std::string really(const std::string& path, const std::string& real) {
  return real.empty() || real == path ? "" : ", really " + real;
}

}  // namespace

int run_jit(const CommonOptions& common, const JitCliOptions& opts) {
  host::Host host = analysed_host(common);
  jit::JitOptions jo;
  jo.paths = opts.paths;
  if (common.root == "/") {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) jo.cwd = buf;
  }
  // The interpreter tells which torch (and which CUDA) the next build is for.
  pyenv::ScanOptions so;
  so.python = opts.python;
  so.run_interpreter = host.is_live_root();
  so.packages = {"torch"};
  try {
    jit::describe_environment(jo, host, pyenv::scan_environment(host, so));
  } catch (const pyenv::PyenvError& e) {
    if (opts.python) {
      print_error(e.what());
      return 2;
    }
  }
  jo.gpu_models = hostfacts::collect_host_facts(host).gpus;
  jit::JitReport r = jit::scan(host, jo);
  detect::Facts facts;
  facts.jit = &r;
  std::vector<Finding> findings = detect::findings(detect::run_detectors(facts), rules::RuleSet());
  // The locks' findings in the order of their build directories, then the
  // others (the builds, the toolchain) in rule order.
  auto order = [&](const Finding& f) {
    return jit::lock_index(r, f.subject).value_or(r.extensions.size());
  };
  std::stable_sort(findings.begin(), findings.end(),
                   [&](const Finding& a, const Finding& b) { return order(a) < order(b); });
  std::vector<jit::FixAction> actions;
  if (opts.fix) actions = jit::fix(host, r, opts.dry_run);
  std::vector<const Finding*> all;
  for (const Finding& f : findings) all.push_back(&f);
  // What --fix removed no longer counts: not in the summary line, not in
  // the exit status (the findings stay listed, with the actions after them).
  std::vector<const Finding*> left;
  for (const Finding* f : all) {
    bool fixed = false;
    for (const jit::FixAction& a : actions) fixed |= a.done && a.path == f->subject;
    if (!fixed) left.push_back(f);
  }
  const size_t fixed_count = all.size() - left.size();
  std::FILE* out = stdout;

  if (common.format == OutputFormat::Json) {
    json roots = json::array(), exts = json::array(), findings_json = json::array(),
         acts = json::array(), broken = json::array();
    for (const jit::BuildRoot& b : r.roots)
      roots.push_back({{"path", b.path}, {"kind", b.kind}, {"real_path", b.real_path}});
    for (const jit::BrokenLink& b : r.broken_links)
      broken.push_back({{"path", b.path},
                        {"what", b.what},
                        {"name", b.name},
                        {"root_kind", b.root_kind},
                        {"loop", b.loop},
                        {"target", b.loop ? json(nullptr) : json(b.target)},
                        {"missing", b.loop ? json(nullptr) : json(b.missing)},
                        {"links", links_json(b.links)}});
    for (const jit::Extension& e : r.extensions) exts.push_back(extension_json(e));
    for (const Finding& f : findings) findings_json.push_back(report::finding_json(f));
    for (const jit::FixAction& a : actions)
      acts.push_back({{"action", a.action},
                      {"path", a.path},
                      {"real_path", a.real_path.empty() ? json(nullptr) : json(a.real_path)},
                      {"done", a.done},
                      {"reason", a.reason}});
    const jit::Toolchain& t = r.toolchain;
    json tc = {{"ninja", optional_json(t.ninja)},
               {"cuda_home", optional_json(t.cuda_home)},
               {"cuda_home_source", t.cuda_home_source},
               {"nvcc", optional_json(t.nvcc)},
               {"cuda_version", optional_json(t.cuda_version)},
               {"nvcc_max_gcc", t.nvcc_max_gcc ? json(*t.nvcc_max_gcc) : json(nullptr)},
               {"gcc", optional_json(t.gcc)},
               {"gcc_major", t.gcc_major ? json(*t.gcc_major) : json(nullptr)}};
    json doc = {{"schema", "mldoctor.jit/1"},
                {"version", MLD_VERSION},
                {"python_tag", optional_json(jo.python_tag)},
                {"torch_cuda", jo.torch_installed ? optional_json(jo.torch_cuda) : json(nullptr)},
                {"roots", roots},
                {"extensions", exts},
                {"broken_links", broken},
                {"toolchain", tc},
                {"processes_scanned", r.processes_scanned},
                {"findings", findings_json},
                {"actions", acts}};
    std::fprintf(out, "%s\n", doc.dump(2).c_str());
  } else if (common.format == OutputFormat::Markdown) {
    std::fprintf(out, "## mldoctor jit\n\n");
    for (const jit::BuildRoot& b : r.roots)
      std::fprintf(out, "- build root `%s` (%s%s)\n", b.path.c_str(), b.kind.c_str(),
                   really(b.path, b.real_path).c_str());
    std::fprintf(out, "- %zu extension build%s\n\n", r.extensions.size(),
                 r.extensions.size() == 1 ? "" : "s");
    report::print_findings_markdown(out, all);
  } else {
    report::Style style{common.color, true};
    if (r.roots.empty()) std::fprintf(out, "no extension build roots found\n");
    for (const jit::BuildRoot& b : r.roots) {
      size_t n = 0;
      for (const jit::Extension& e : r.extensions) n += e.root == b.path;
      std::fprintf(out, "%s (%s%s): %zu build%s\n", b.path.c_str(), b.kind.c_str(),
                   really(b.path, b.real_path).c_str(), n, n == 1 ? "" : "s");
    }
    const jit::Toolchain& t = r.toolchain;
    std::fprintf(
        out, "toolchain: ninja %s · CUDA %s%s · gcc %s\n", t.ninja ? t.ninja->c_str() : "missing",
        t.cuda_version ? t.cuda_version->c_str() : "none",
        t.cuda_home ? (" at " + *t.cuda_home).c_str() : "",
        t.gcc_major ? std::to_string(*t.gcc_major).c_str() : (t.gcc ? t.gcc->c_str() : "missing"));
    std::fprintf(out, "\n");
    if (all.empty()) std::fprintf(out, "%s no findings\n", common.color ? "\033[32m✓\033[0m" : "✓");
    for (const Finding* f : all) report::print_finding(out, *f, style);
    if (!actions.empty()) std::fprintf(out, "\n");
    for (const jit::FixAction& a : actions) {
      if (a.action != "remove") {
        std::fprintf(out, "kept %s: %s\n", a.path.c_str(), a.reason.c_str());
        continue;
      }
      // What was removed is named by its real path, the only one removed
      // through; the name the scan found it by follows when links differ.
      const bool duplicate = a.reason.starts_with("the same file as ");
      std::string line = std::string(opts.dry_run ? "would remove"
                                     : a.done     ? "removed"
                                                  : "could not remove") +
                         (a.path.ends_with("/lock") ? " stale lock " : " stale build output ") +
                         a.real_path;
      if (a.real_path != a.path)
        line += " (named " + a.path + " through symbolic links, which stay)";
      if (duplicate)
        line += ": " + a.reason;
      else if (!a.done && !opts.dry_run)
        line += ": " + a.reason;
      std::fprintf(out, "%s\n", line.c_str());
    }
    std::string summary = report::summary_line(left);
    const std::string fixed_text = fixed_count ? std::to_string(fixed_count) + " fixed" : "";
    if (!summary.empty())
      std::fprintf(out, "\n%s%s · mldoctor explain %s\n", summary.c_str(),
                   fixed_count ? (" left, " + fixed_text).c_str() : "", left.front()->rule.c_str());
    else if (fixed_count)
      std::fprintf(out, "\n%s, nothing left\n", fixed_text.c_str());
  }
  for (const jit::FixAction& a : actions)
    if (a.action == "remove" && !a.done && !opts.dry_run) return 2;
  return report::count_at_or_above(left, common.fail_on) > 0 ? 1 : 0;
}

}  // namespace mld::cli
