// check-report.cc — the text and Markdown header of `mldoctor check`: what
// collect_env shows (Python, key package versions, torch's CUDA build, GPUs,
// glibc) plus what it lacks (usable CPUs under affinity and cgroup quota,
// NUMA, /dev/shm, limits, ranks per node, the native-layer variables, the
// OpenMP runtimes of the import set, torch's starting thread count). One row
// per line; every value comes from the report's facts. When the checked
// interpreter has none of the known packages, the Packages row lists the
// machine's other interpreters that have them with the command to check
// each, and "no findings" says which interpreter it holds for.
#include "render/check-report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "report/report.h"

namespace mld::render {

namespace {

std::string cpu_row(const hostfacts::CpuFacts& c, std::optional<u32> cores) {
  std::string s;
  if (c.online) s += std::to_string(c.online->size()) + " online";
  if (cores)
    s += (s.empty() ? "" : " · ") + std::to_string(*cores) + (*cores == 1 ? " core" : " cores");
  if (c.affinity)
    s += (s.empty() ? "" : " · ") + std::string("affinity ") +
         hostfacts::format_cpu_list(*c.affinity) + " (" + std::to_string(c.affinity->size()) + ")";
  if (c.quota) {
    char q[64];
    std::snprintf(q, sizeof q, "%.2f", c.quota->cpus());
    s += (s.empty() ? "" : " · ") + std::string("cgroup v") +
         std::to_string(c.quota->cgroup_version) + " quota " + q + " CPUs";
  }
  if (c.usable)
    s += (s.empty() ? "" : " · ") + std::string("usable ") + std::to_string(*c.usable) + " (" +
         c.usable_basis + ")";
  return s.empty() ? "unknown" : s;
}

// "torch 1.13.0a0+gitunknown · numba 0.56.4 · cv2 ?" (?: no metadata, as Debian's cv2).
std::string package_list(const std::vector<pyenv::FoundPackage>& packages) {
  std::string s;
  for (const pyenv::FoundPackage& p : packages)
    s += (s.empty() ? "" : " · ") + p.import_name + " " + p.version.value_or("?");
  return s;
}

std::string command_for(const check::OtherInterpreters& o, size_t i) {
  return i < o.commands.size() ? o.commands[i]
                               : "mldoctor check --python " + o.survey.found[i].path;
}

// The rows under "Packages" when the checked interpreter has none of the
// known packages: each other interpreter that has some, and the command
// that checks it; what was passed over (at most three, the JSON has all).
void other_interpreter_rows(const check::CheckReport& r, bool markdown,
                            std::vector<HeaderRow>& rows) {
  const check::OtherInterpreters& o = *r.other_interpreters;
  for (size_t i = 0; i < o.survey.found.size(); i++) {
    const pyenv::FoundInterpreter& f = o.survey.found[i];
    std::string line = f.path + " (" + std::string(pyenv::interpreter_kind_name(f.kind)) + ", " +
                       f.version + "): " + package_list(f.packages);
    if (markdown)
      rows.push_back({"", line + " · `" + command_for(o, i) + "`"});
    else {
      rows.push_back({"", line});
      rows.push_back({"", "  " + command_for(o, i)});
    }
  }
  if (o.survey.more)
    rows.push_back({"", "and " + std::to_string(o.survey.more) + " more with known packages"});
  if (!o.survey.skipped.empty()) {
    std::string passed;
    for (size_t i = 0; i < o.survey.skipped.size() && i < 3; i++)
      passed += (i ? " · " : "") + o.survey.skipped[i].path + ": " + o.survey.skipped[i].what;
    if (o.survey.skipped.size() > 3)
      passed += " · " + std::to_string(o.survey.skipped.size() - 3) + " more (--json)";
    rows.push_back({"", "passed over: " + passed});
  }
}

// The best other interpreter, for the summary line: what it has ("torch",
// else its first known packages) and the command that checks it.
struct Pointer {
  std::string what;
  std::string command;
};
std::optional<Pointer> best_other(const check::CheckReport& r) {
  if (!r.other_interpreters || r.other_interpreters->survey.found.empty()) return std::nullopt;
  const pyenv::FoundInterpreter& best = r.other_interpreters->survey.found.front();
  Pointer p{"", command_for(*r.other_interpreters, 0)};
  for (const pyenv::FoundPackage& k : best.packages)
    if (k.import_name == "torch") p.what = "torch";
  for (size_t i = 0; p.what != "torch" && i < best.packages.size() && i < 3; i++)
    p.what += (i ? ", " : "") + best.packages[i].import_name;
  return p;
}

// The files not read that the header lists; the JSON has every one.
constexpr size_t kNotReadShown = 10;

// What "no findings" holds for when the packages are elsewhere.
std::string checked_interpreter(const check::CheckReport& r) {
  if (!r.python) return "no Python examined";
  return r.python->python.executable + ", which has none of the known native packages";
}

}  // namespace

std::vector<HeaderRow> check_header(const check::CheckReport& r, bool markdown) {
  std::vector<HeaderRow> rows;
  const hostfacts::HostFacts& f = r.facts.host;
  std::string sys = f.os_name ? *f.os_name + " · " : std::string();
  sys += "Linux " + f.kernel_release.value_or("unknown") + " · glibc " +
         f.glibc_version.value_or("unknown");
  if (f.container.detected) sys += " · container: " + f.container.kind;
  rows.push_back({"Host", sys});
  std::string cpus = cpu_row(f.cpu, f.cpuinfo.cores) + (f.cpu_model ? " · " + *f.cpu_model : "");
  // The cores are cpuinfo's (what torch >= 2.4 sizes its pool with); say
  // when they cannot be counted rather than print a guess.
  if (!f.cpuinfo.unknown.empty() && !f.architecture.empty())
    cpus += " · cores unknown: " + f.cpuinfo.unknown;
  else if (f.cpuinfo.unknown.empty() && !f.cpuinfo.initialised)
    cpus += " · cpuinfo would fail to initialise";
  rows.push_back({"CPUs", cpus});
  if (!f.numa_nodes.empty()) {
    std::string n =
        std::to_string(f.numa_nodes.size()) + " node" + (f.numa_nodes.size() == 1 ? "" : "s");
    for (const hostfacts::NumaNode& node : f.numa_nodes)
      n += " · node" + std::to_string(node.id) + " " +
           (node.cpus ? hostfacts::format_cpu_list(*node.cpus) : "?");
    rows.push_back({"NUMA", n});
  }
  std::string mem = f.memory.total_bytes ? hostfacts::human_bytes(*f.memory.total_bytes) : "?";
  if (f.memory.available_bytes)
    mem += " (" + hostfacts::human_bytes(*f.memory.available_bytes) + " available)";
  if (f.shm.disk_backed) {
    // Not the disk's size: that is no shared-memory size (HOST004 says more).
    mem += " · /dev/shm not a tmpfs (a directory on " + f.shm.fstype +
           (f.shm.mount_point.empty() ? "" : " at " + f.shm.mount_point) + ")";
  } else {
    mem += " · /dev/shm " + (f.shm.size_bytes ? hostfacts::human_bytes(*f.shm.size_bytes)
                                              : std::string(f.shm.present ? "?" : "absent"));
    if (f.shm.free_bytes) mem += " (" + hostfacts::human_bytes(*f.shm.free_bytes) + " free)";
  }
  rows.push_back({"Memory", mem});
  auto lim = [](const hostfacts::ResourceLimit& l, bool bytes) {
    if (!l.known) return std::string("?");
    auto v = [&](u64 x) {
      return x == hostfacts::kUnlimited ? std::string("unlimited")
             : bytes                    ? hostfacts::human_bytes(x)
                                        : std::to_string(x);
    };
    return l.soft == l.hard ? v(l.soft) : v(l.soft) + " (hard " + v(l.hard) + ")";
  };
  rows.push_back({"Limits", "memlock " + lim(f.limits.memlock, true) + " · nofile " +
                                lim(f.limits.nofile, false) + " · nproc " +
                                lim(f.limits.nproc, false)});
  rows.push_back({"Ranks", f.ranks_per_node.count
                               ? std::to_string(*f.ranks_per_node.count) + " per node (" +
                                     f.ranks_per_node.source + ")"
                               : "1 per node (no launcher variable)"});
  if (f.nvidia_driver || !f.gpus.empty()) {
    std::string g =
        std::to_string(f.gpus.size()) + " · NVIDIA driver " + f.nvidia_driver.value_or("?");
    std::map<std::string, size_t> models;
    for (const std::string& m : f.gpus) models[m]++;
    for (const auto& [m, n] : models) g += " · " + std::to_string(n) + "× " + m;
    rows.push_back({"GPUs", g});
  } else if (!r.gpu.gpus.empty()) {
    rows.push_back({"GPUs", std::to_string(r.gpu.gpus.size()) +
                                " on the PCI bus · no NVIDIA kernel module loaded"});
  } else {
    rows.push_back({"GPUs", "none visible (no NVIDIA kernel module)"});
  }

  if (r.python) {
    const pyenv::Environment& e = *r.python;
    rows.push_back({"Python", e.python.version + " " + e.python.executable + " (" +
                                  e.interpreter.reason + ")" +
                                  (e.python.in_venv() ? " · venv " + e.python.prefix : "")});
    if (!e.python.probe_error.empty())
      rows.push_back({"", "described from its layout: " + e.python.probe_error});
    std::string pk;
    for (const pyenv::ImportedPackage& p : e.packages) {
      if (p.reached_by_imports && p.extension_modules.empty() && p.libraries.empty()) continue;
      pk += (pk.empty() ? "" : " · ") + p.import_name + " " + p.version.value_or("?");
      if (p.import_name == "torch" && r.torch_build.build.known)
        pk +=
            r.torch_build.build.cuda ? " (CUDA " + *r.torch_build.build.cuda + ")" : " (CPU build)";
    }
    if (!pk.empty()) {
      rows.push_back({"Packages", pk});
    } else if (r.other_interpreters && !r.other_interpreters->survey.found.empty()) {
      rows.push_back(
          {"Packages", "none of the known native packages; other interpreters here have them:"});
      other_interpreter_rows(r, markdown, rows);
    } else if (r.other_interpreters) {
      size_t n = r.other_interpreters->survey.examined;
      rows.push_back({"Packages", "none of the known native packages (" +
                                      (n == 0   ? std::string("no other interpreter found here")
                                       : n == 1 ? std::string("nor has the other interpreter "
                                                              "found here")
                                                : "nor have the " + std::to_string(n) +
                                                      " other interpreters found here") +
                                      ")"});
      if (!r.other_interpreters->survey.skipped.empty()) other_interpreter_rows(r, markdown, rows);
    } else {
      rows.push_back({"Packages", "none of the known native packages"});
    }
  } else {
    rows.push_back({"Python", "not examined: " + r.python_error});
    if (r.other_interpreters && !r.other_interpreters->survey.found.empty()) {
      rows.push_back({"Packages", "other interpreters here have known native packages:"});
      other_interpreter_rows(r, markdown, rows);
    }
  }
  if (r.imports) {
    const check::ImportSimulation& s = *r.imports;
    std::vector<std::string> names;
    for (const pyenv::ImportStep& st : s.steps)
      if (std::find(names.begin(), names.end(), st.import_name) == names.end())
        names.push_back(st.import_name);
    std::string t;
    for (const std::string& n : names) t += (t.empty() ? "" : ", ") + n;
    size_t live = 0;
    for (const loader::Object& o : s.process.objects) live += !o.removed && !o.faked;
    t = (t.empty() ? "(nothing to import)" : t) + " → " + std::to_string(s.steps.size()) +
        " dlopen calls, " + std::to_string(live) + " objects";
    size_t inferred = 0;
    for (const pyenv::ImportStep& st : s.steps)
      inferred += st.source == pyenv::StepSource::Inferred;
    if (inferred)
      t += " (" + std::to_string(inferred) + " inferred from packages the table does not know)";
    for (const pyenv::UnresolvedImport& u : s.unresolved)
      t += " · " + u.import_name + ": " + u.reason;
    // A failed call is rolled back: what follows runs without its objects.
    for (size_t i = 0; i < s.sequence.steps.size() && i < s.steps.size(); i++)
      if (!s.sequence.steps[i].ok)
        t += " · fails: " +
             (s.steps[i].module.empty() ? std::string(base_name(s.steps[i].path))
                                        : s.steps[i].module) +
             " (" + std::string(loader::step_failure_name(s.sequence.steps[i].failure)) + ")";
    std::string omp;
    for (const check::OpenMpRuntime& rt : s.openmp) omp += (omp.empty() ? "" : ", ") + rt.soname;
    t += " · OpenMP: " + (omp.empty() ? std::string("none") : omp);
    if (s.numba_layer) t += " · numba layer: " + *s.numba_layer;
    rows.push_back({"Imports", t});
  } else if (!r.imports_error.empty()) {
    rows.push_back({"Imports", "not simulated: " + r.imports_error});
  }
  if (r.torch_threads.torch) {
    const check::TorchThreads& t = r.torch_threads;
    rows.push_back({"Threads", t.count ? "torch starts with " + std::to_string(*t.count) + " (" +
                                             t.rule + "; " + t.basis + ")"
                                       : "torch's default unknown: " + t.unknown});
  }
  std::string env;
  for (const hostfacts::EnvVar& v : r.facts.env.variables)
    env += (env.empty() ? "" : " ") + v.name + "=" + v.value;
  rows.push_back({"Env", env.empty() ? "no native-layer variables set" : env});
  // Files refused because they are no regular files: each is a FIFO, a
  // socket or a device where a file should be, and a user acts on it.
  for (size_t i = 0; i < r.not_read.size() && i < kNotReadShown; i++)
    rows.push_back({i ? "" : "Not read", r.not_read[i].path + ": " + r.not_read[i].what});
  if (r.not_read.size() > kNotReadShown)
    rows.push_back({"", std::to_string(r.not_read.size() - kNotReadShown) + " more (--json)"});
  return rows;
}

void print_check_markdown(std::FILE* out, const check::CheckReport& r) {
  std::fprintf(out, "## mldoctor check\n\n| | |\n|---|---|\n");
  for (const auto& [k, v] : check_header(r, true))
    std::fprintf(out, "| %s | %s |\n", k.c_str(), v.c_str());
  std::fprintf(out, "\n");
  if (r.gpu.gpus.size() >= 2)
    std::fprintf(out, "```\n%s```\n\n", gpu::topology_matrix_text(r.gpu).c_str());
  std::vector<const Finding*> all;
  for (const Finding& f : r.findings) all.push_back(&f);
  std::optional<Pointer> other = best_other(r);
  if (all.empty() && other) {
    // Not a bare "No findings." for an interpreter without the packages.
    std::fprintf(out, "No findings (%s); for %s: `%s`.\n", checked_interpreter(r).c_str(),
                 other->what.c_str(), other->command.c_str());
    return;
  }
  if (all.empty() && r.other_interpreters && r.python) {
    std::fprintf(out, "No findings (%s).\n", checked_interpreter(r).c_str());
    return;
  }
  report::print_findings_markdown(out, all);
  if (other)
    std::fprintf(out, "Checked: %s; for %s: `%s`.\n", checked_interpreter(r).c_str(),
                 other->what.c_str(), other->command.c_str());
}

void print_check_text(std::FILE* out, const check::CheckReport& r, bool color,
                      const std::string& fix_command) {
  for (const auto& [k, v] : check_header(r)) std::fprintf(out, "%-9s %s\n", k.c_str(), v.c_str());
  if (r.gpu.gpus.size() >= 2) std::fprintf(out, "\n%s", gpu::topology_matrix_text(r.gpu).c_str());
  std::fprintf(out, "\n");
  std::vector<const Finding*> all;
  for (const Finding& f : r.findings) all.push_back(&f);
  // With none of the known packages, "no findings" says little about the
  // job: which interpreter it holds for, and the one to check instead.
  std::optional<Pointer> other = best_other(r);
  std::string pointer = other ? "for " + other->what + ": " + other->command : "";
  const char* tick = color ? "\033[32m✓\033[0m" : "✓";
  const bool bare = !other && !(r.other_interpreters && r.python);
  if (all.empty() && bare) std::fprintf(out, "%s no findings\n", tick);
  if (all.empty() && !bare)
    std::fprintf(out, "%s no findings (%s)%s\n", tick, checked_interpreter(r).c_str(),
                 other ? (" · " + pointer).c_str() : "");
  for (const Finding* f : all) report::print_finding(out, *f, report::Style{color, true});
  std::string summary = report::summary_line(all);
  if (!summary.empty()) {
    std::fprintf(out, "\n%s · mldoctor explain %s", summary.c_str(), all.front()->rule.c_str());
    if (!check::fix_settings(r.findings).empty())
      std::fprintf(out, " · eval \"$(%s)\"", fix_command.c_str());
    if (other) std::fprintf(out, " · %s", pointer.c_str());
    std::fprintf(out, "\n");
  }
}

}  // namespace mld::render
