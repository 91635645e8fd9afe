// check-command.cc — `mldoctor check` and `mldoctor fix`. check prints the
// report people paste into bug trackers: a header with what collect_env shows
// (Python, key package versions, torch's CUDA build, GPUs, glibc) plus what it
// lacks (usable CPUs under affinity and cgroup quota, NUMA, /dev/shm, limits,
// ranks per node, the native-layer variables, the OpenMP runtimes of the
// import set), then the findings. fix prints the environment settings of the
// findings as shell code for `eval "$(mldoctor fix)"`.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <map>

#include "check/check.h"
#include "cli/cli.h"
#include "report/report.h"
#include "snapshot/snapshot.h"

namespace mld::cli {

namespace {

using nlohmann::json;

struct Header {
  std::vector<std::pair<std::string, std::string>> rows;
  json j;
};

std::string cpu_row(const hostfacts::CpuFacts& c, std::optional<u32> cores) {
  std::string s;
  if (c.online) s += std::to_string(c.online->size()) + " online";
  if (cores) s += (s.empty() ? "" : " · ") + std::to_string(*cores) + (*cores == 1 ? " core" : " cores");
  if (c.affinity)
    s += (s.empty() ? "" : " · ") + std::string("affinity ") + hostfacts::format_cpu_list(*c.affinity) + " (" +
         std::to_string(c.affinity->size()) + ")";
  if (c.quota) {
    char q[64];
    std::snprintf(q, sizeof q, "%.2f", c.quota->cpus());
    s += (s.empty() ? "" : " · ") + std::string("cgroup v") + std::to_string(c.quota->cgroup_version) + " quota " +
         q + " CPUs";
  }
  if (c.usable) s += (s.empty() ? "" : " · ") + std::string("usable ") + std::to_string(*c.usable) + " (" + c.usable_basis + ")";
  return s.empty() ? "unknown" : s;
}

Header make_header(const check::CheckReport& r) {
  Header h;
  const hostfacts::HostFacts& f = r.facts.host;
  std::string sys = f.os_name ? *f.os_name + " · " : std::string();
  sys += "Linux " + f.kernel_release.value_or("unknown") + " · glibc " + f.glibc_version.value_or("unknown");
  if (f.container.detected) sys += " · container: " + f.container.kind;
  h.rows.push_back({"Host", sys});
  std::string cpus = cpu_row(f.cpu, f.cpuinfo.cores) + (f.cpu_model ? " · " + *f.cpu_model : "");
  // The cores are cpuinfo's (what torch >= 2.4 sizes its pool with); say
  // when they cannot be counted rather than print a guess.
  if (!f.cpuinfo.unknown.empty() && !f.architecture.empty()) cpus += " · cores unknown: " + f.cpuinfo.unknown;
  else if (f.cpuinfo.unknown.empty() && !f.cpuinfo.initialised) cpus += " · cpuinfo would fail to initialise";
  h.rows.push_back({"CPUs", cpus});
  if (!f.numa_nodes.empty()) {
    std::string n = std::to_string(f.numa_nodes.size()) + " node" + (f.numa_nodes.size() == 1 ? "" : "s");
    for (const hostfacts::NumaNode& node : f.numa_nodes)
      n += " · node" + std::to_string(node.id) + " " + (node.cpus ? hostfacts::format_cpu_list(*node.cpus) : "?");
    h.rows.push_back({"NUMA", n});
  }
  std::string mem = f.memory.total_bytes ? hostfacts::human_bytes(*f.memory.total_bytes) : "?";
  if (f.memory.available_bytes) mem += " (" + hostfacts::human_bytes(*f.memory.available_bytes) + " available)";
  mem += " · /dev/shm " + (f.shm.size_bytes ? hostfacts::human_bytes(*f.shm.size_bytes) : std::string(f.shm.present ? "?" : "absent"));
  if (f.shm.free_bytes) mem += " (" + hostfacts::human_bytes(*f.shm.free_bytes) + " free)";
  h.rows.push_back({"Memory", mem});
  auto lim = [](const hostfacts::ResourceLimit& l, bool bytes) {
    if (!l.known) return std::string("?");
    auto v = [&](u64 x) { return x == hostfacts::kUnlimited ? std::string("unlimited") : bytes ? hostfacts::human_bytes(x) : std::to_string(x); };
    return l.soft == l.hard ? v(l.soft) : v(l.soft) + " (hard " + v(l.hard) + ")";
  };
  h.rows.push_back({"Limits", "memlock " + lim(f.limits.memlock, true) + " · nofile " + lim(f.limits.nofile, false) +
                                  " · nproc " + lim(f.limits.nproc, false)});
  h.rows.push_back({"Ranks", f.ranks_per_node.count ? std::to_string(*f.ranks_per_node.count) + " per node (" +
                                                          f.ranks_per_node.source + ")"
                                                    : "1 per node (no launcher variable)"});
  if (f.nvidia_driver || !f.gpus.empty()) {
    std::string g = std::to_string(f.gpus.size()) + " · NVIDIA driver " + f.nvidia_driver.value_or("?");
    std::map<std::string, size_t> models;
    for (const std::string& m : f.gpus) models[m]++;
    for (const auto& [m, n] : models) g += " · " + std::to_string(n) + "× " + m;
    h.rows.push_back({"GPUs", g});
  } else if (!r.gpu.gpus.empty()) {
    h.rows.push_back({"GPUs", std::to_string(r.gpu.gpus.size()) + " on the PCI bus · no NVIDIA kernel module loaded"});
  } else {
    h.rows.push_back({"GPUs", "none visible (no NVIDIA kernel module)"});
  }

  if (r.python) {
    const pyenv::Environment& e = *r.python;
    h.rows.push_back({"Python", e.python.version + " " + e.python.executable + " (" + e.interpreter.reason + ")" +
                                    (e.python.in_venv() ? " · venv " + e.python.prefix : "")});
    std::string pk;
    json pj = json::object();
    for (const pyenv::ImportedPackage& p : e.packages) {
      std::string v = p.version.value_or("?");
      pk += (pk.empty() ? "" : " · ") + p.import_name + " " + v;
      pj[p.import_name] = p.version ? json(*p.version) : json(nullptr);
      if (p.import_name == "torch") {
        const pyenv::TorchBuild& tb = r.torch_build.build;
        if (tb.known) pk += tb.cuda ? " (CUDA " + *tb.cuda + ")" : " (CPU build)";
        h.j["torch_cuda"] = tb.cuda ? json(*tb.cuda) : json(nullptr);
      }
    }
    h.rows.push_back({"Packages", pk.empty() ? "none of the known native packages" : pk});
    h.j["packages"] = pj;
  } else {
    h.rows.push_back({"Python", "not examined: " + r.python_error});
  }
  if (r.imports) {
    const check::ImportSimulation& s = *r.imports;
    std::vector<std::string> names;
    for (const pyenv::ImportStep& st : s.steps)
      if (std::find(names.begin(), names.end(), st.import_name) == names.end()) names.push_back(st.import_name);
    std::string t;
    for (const std::string& n : names) t += (t.empty() ? "" : ", ") + n;
    size_t live = 0;
    for (const loader::Object& o : s.process.objects) live += !o.removed && !o.faked;
    t = (t.empty() ? "(nothing to import)" : t) + " → " + std::to_string(s.steps.size()) + " dlopen calls, " +
        std::to_string(live) + " objects";
    std::string omp;
    for (const check::OpenMpRuntime& rt : s.openmp) omp += (omp.empty() ? "" : ", ") + rt.soname;
    t += " · OpenMP: " + (omp.empty() ? std::string("none") : omp);
    if (s.numba_layer) t += " · numba layer: " + *s.numba_layer;
    h.rows.push_back({"Imports", t});
  } else if (!r.imports_error.empty()) {
    h.rows.push_back({"Imports", "not simulated: " + r.imports_error});
  }
  if (r.torch_threads.torch) {
    const check::TorchThreads& t = r.torch_threads;
    h.rows.push_back({"Threads", t.count ? "torch starts with " + std::to_string(*t.count) + " (" + t.rule + "; " + t.basis + ")"
                                         : "torch's default unknown: " + t.unknown});
  }
  std::string env;
  for (const hostfacts::EnvVar& v : r.facts.env.variables) env += (env.empty() ? "" : " ") + v.name + "=" + v.value;
  h.rows.push_back({"Env", env.empty() ? "no native-layer variables set" : env});
  return h;
}

json python_json(const check::CheckReport& r) {
  if (!r.python) return {{"error", r.python_error}};
  const pyenv::Environment& e = *r.python;
  json pk = json::array();
  for (const pyenv::ImportedPackage& p : e.packages) {
    json ext = json::array(), libs = json::array();
    for (const pyenv::NativeFile& f : p.extension_modules) ext.push_back(f.path);
    for (const pyenv::NativeFile& f : p.libraries) libs.push_back(f.path);
    pk.push_back({{"import", p.import_name},
                  {"path", p.path},
                  {"distribution", p.distribution ? json(*p.distribution) : json(nullptr)},
                  {"version", p.version ? json(*p.version) : json(nullptr)},
                  {"extension_modules", ext},
                  {"libraries", libs}});
  }
  json dists = json::array();
  for (const pyenv::Distribution& d : e.distributions)
    dists.push_back({{"name", d.name}, {"version", d.version}, {"site", d.site_dir}});
  return {{"interpreter", e.interpreter.path},
          {"chosen_by", e.interpreter.reason},
          {"version", e.python.version},
          {"executable", e.python.executable},
          {"prefix", e.python.prefix},
          {"sys_path", e.python.sys_path},
          {"packages", pk},
          {"distributions", dists}};
}

json imports_json(const check::CheckReport& r) {
  if (!r.imports) return {{"error", r.imports_error.empty() ? json(nullptr) : json(r.imports_error)}};
  const check::ImportSimulation& s = *r.imports;
  json steps = json::array();
  for (size_t i = 0; i < s.steps.size(); i++) {
    const pyenv::ImportStep& st = s.steps[i];
    json j = {{"import", st.import_name}, {"module", st.module}, {"path", st.path}};
    if (i < s.sequence.steps.size()) {
      j["ok"] = s.sequence.steps[i].ok;
      if (!s.sequence.steps[i].ok) j["error"] = s.sequence.steps[i].error;
    }
    steps.push_back(std::move(j));
  }
  json omp = json::array();
  for (const check::OpenMpRuntime& rt : s.openmp)
    omp.push_back({{"kind", std::string(loader::openmp_kind_name(rt.kind))},
                   {"soname", rt.soname},
                   {"path", rt.path},
                   {"loaded_by", rt.brought_by}});
  return {{"program", s.program},
          {"steps", steps},
          {"openmp_runtimes", omp},
          {"numba_layer", s.numba_layer ? json(*s.numba_layer) : json(nullptr)},
          {"static_tls", {{"surplus", s.sequence.surplus}, {"static_size", s.sequence.static_size},
                          {"startup_used", s.sequence.startup_used}}}};
}


// A detector's finding carries its own message and fix; what it left empty
// comes from its rule (title, fix text, env settings).
void complete(std::vector<Finding>& findings, const rules::RuleSet& rules) {
  for (Finding& f : findings) rules::complete_from_rule(f, rules);
}

}  // namespace

// The check with its findings completed from the rules; nullopt when the
// user's rules are unusable (already reported).
std::optional<check::CheckReport> checked_report(const CommonOptions& common, const CheckOptions& opts,
                                                 const host::Host& host) {
  // The builtin rules of the findings only, unless the user adds rules.
  rules::RuleSet rule_set;
  if (!common.rules_dir.empty() || common.no_builtin_rules)
    if (!load_rules(common, rule_set)) return std::nullopt;
  check::CheckOptions co;
  co.python = opts.python;
  co.imports = opts.imports;
  co.ranks_per_node = opts.ranks_per_node;
  co.glibc = opts.glibc;
  if (co.glibc.empty()) co.glibc = snapshot::snapshot_fact(host, "glibc").value_or("");
  if (host.is_live_root()) {
    char buf[4096];
    if (getcwd(buf, sizeof buf)) co.cwd = buf;
  }
  check::CheckReport r = check::run_check(host, co);
  if (common.rules_dir.empty()) {
    std::vector<std::string> ids;
    for (const Finding& f : r.findings) ids.push_back(f.rule);
    rule_set = rules::RuleSet::builtin_subset(ids);
  }
  complete(r.findings, rule_set);
  return r;
}


nlohmann::json check_report_json(const check::CheckReport& r) {
  Header header = make_header(r);
  json findings = json::array();
  for (const Finding& f : r.findings) findings.push_back(report::finding_json(f));
  json host_j, env_j;
  hostfacts::to_json(host_j, r.facts.host);
  hostfacts::to_json(env_j, r.facts.env);
  // cpuinfo's cores (the name predates the model of cpuinfo; kept for readers of check/1).
  host_j["physical_cores"] = r.facts.host.cpuinfo.cores ? json(*r.facts.host.cpuinfo.cores) : json(nullptr);
  host_j["gpu"] = r.gpu;
  json py = python_json(r);
  if (header.j.contains("torch_cuda")) py["torch_cuda"] = header.j["torch_cuda"];
  if (r.torch_threads.torch) {
    const check::TorchThreads& t = r.torch_threads;
    py["torch_threads"] = {{"count", t.count ? json(*t.count) : json(nullptr)},
                           {"rule", t.rule},
                           {"basis", t.basis},
                           {"unknown", t.unknown.empty() ? json(nullptr) : json(t.unknown)},
                           {"evidence", t.evidence}};
  }
  json libs = json::array();
  for (const check::StackLibrary& l : r.libraries)
    libs.push_back({{"soname", l.soname},
                    {"path", l.path ? json(*l.path) : json(nullptr)},
                    {"file", l.file ? json(*l.file) : json(nullptr)},
                    {"size", l.size ? json(*l.size) : json(nullptr)}});
  return {{"schema", "mldoctor.check/1"}, {"version", MLD_VERSION},      {"host", host_j},
          {"environment", env_j},         {"python", py},                {"imports", imports_json(r)},
          {"libraries", libs},            {"findings", findings}};
}

int run_check(const CommonOptions& common, const CheckOptions& opts) {
  host::Host host = analysed_host(common);
  std::optional<check::CheckReport> checked = checked_report(common, opts, host);
  if (!checked) return 2;
  check::CheckReport& r = *checked;
  Header header = make_header(r);
  std::vector<const Finding*> all;
  for (const Finding& f : r.findings) all.push_back(&f);
  std::FILE* out = stdout;

  if (common.format == OutputFormat::Json) {
    std::fprintf(out, "%s\n", check_report_json(r).dump(2).c_str());
  } else if (common.format == OutputFormat::Markdown) {
    std::fprintf(out, "## mldoctor check\n\n| | |\n|---|---|\n");
    for (const auto& [k, v] : header.rows) std::fprintf(out, "| %s | %s |\n", k.c_str(), v.c_str());
    std::fprintf(out, "\n");
    if (r.gpu.gpus.size() >= 2) std::fprintf(out, "```\n%s```\n\n", gpu::topology_matrix_text(r.gpu).c_str());
    report::print_findings_markdown(out, all);
  } else {
    report::Style style{common.color, true};
    for (const auto& [k, v] : header.rows) std::fprintf(out, "%-9s %s\n", k.c_str(), v.c_str());
    if (r.gpu.gpus.size() >= 2) std::fprintf(out, "\n%s", gpu::topology_matrix_text(r.gpu).c_str());
    std::fprintf(out, "\n");
    if (all.empty()) std::fprintf(out, "%s no findings\n", common.color ? "\033[32m✓\033[0m" : "✓");
    for (const Finding* f : all) report::print_finding(out, *f, style);
    std::string summary = report::summary_line(all);
    if (!summary.empty()) {
      std::fprintf(out, "\n%s · mldoctor explain %s", summary.c_str(), all.front()->rule.c_str());
      if (!check::fix_settings(r.findings).empty()) std::fprintf(out, " · eval \"$(mldoctor fix)\"");
      std::fprintf(out, "\n");
    }
  }
  // An interpreter the user named and that cannot be examined is a failed
  // request, not an empty environment.
  if (opts.python && !r.python) {
    print_error(r.python_error);
    return 2;
  }
  return report::count_at_or_above(all, common.fail_on) > 0 ? 1 : 0;
}

int run_fix(const CommonOptions& common, const CheckOptions& opts, const std::string& shell) {
  host::Host host = analysed_host(common);
  std::optional<check::CheckReport> checked = checked_report(common, opts, host);
  if (!checked) return 2;
  const check::CheckReport& r = *checked;
  if (opts.python && !r.python) {
    print_error(r.python_error);
    return 2;
  }
  std::vector<check::FixSetting> settings = check::fix_settings(r.findings);
  std::FILE* out = stdout;
  if (common.format == OutputFormat::Json) {
    json a = json::array();
    for (const check::FixSetting& s : settings)
      a.push_back({{"name", s.name}, {"value", s.value ? json(*s.value) : json(nullptr)}, {"rules", s.rules}});
    std::fprintf(out, "%s\n", json({{"schema", "mldoctor.fix/1"}, {"version", MLD_VERSION}, {"settings", a}}).dump(2).c_str());
    return 0;
  }
  // Single quotes keep every byte literal: in bash a ' inside is closed,
  // escaped and reopened; fish escapes ' and \\ inside single quotes.
  auto quote = [&](const std::string& v) {
    std::string q = "'";
    for (char c : v) {
      if (c == '\'')
        q += shell == "fish" ? "\\'" : "'\\''";
      else if (c == '\\' && shell == "fish")
        q += "\\\\";
      else
        q += c;
    }
    return q + "'";
  };
  if (settings.empty()) std::fprintf(out, "# mldoctor fix: no configuration findings; nothing to set\n");
  std::vector<std::string> last_rules;
  for (const check::FixSetting& s : settings) {
    if (s.rules != last_rules) {
      std::string why;
      for (const std::string& rule : s.rules) why += (why.empty() ? "" : ", ") + rule;
      std::fprintf(out, "# %s (mldoctor explain %s)\n", why.c_str(), s.rules.front().c_str());
      last_rules = s.rules;
    }
    if (!s.value)
      std::fprintf(out, shell == "fish" ? "set -e %s\n" : "unset %s\n", s.name.c_str());
    else if (shell == "fish")
      std::fprintf(out, "set -gx %s %s\n", s.name.c_str(), quote(*s.value).c_str());
    else
      std::fprintf(out, "export %s=%s\n", s.name.c_str(), quote(*s.value).c_str());
  }
  return 0;
}

}  // namespace mld::cli
