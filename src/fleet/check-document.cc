// check-document.cc — the writer of mldoctor.check/1 (docs/json-schema.md),
// the document of `check --json` that fleet and diff read back (facts.cc):
// both ends of one schema in one library.
#include "check/check.h"
#include "fleet/fleet.h"
#include "hostfacts/hostfacts.h"
#include "report/report.h"

namespace mld::fleet {

using nlohmann::json;

namespace {

json python_json(const check::CheckReport& r) {
  if (!r.python) return {{"error", r.python_error}, {"timed_out", r.python_timed_out}};
  const pyenv::Environment& e = *r.python;
  json pk = json::array();
  for (const pyenv::ImportedPackage& p : e.packages) {
    if (p.reached_by_imports && p.extension_modules.empty() && p.libraries.empty()) continue;
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
  json problems = json::array();
  for (const pyenv::ScanProblem& p : e.problems)
    problems.push_back({{"path", p.path}, {"what", p.what}});
  return {
      {"interpreter", e.interpreter.path},
      {"chosen_by", e.interpreter.reason},
      {"version", e.python.version},
      {"executable", e.python.executable},
      {"prefix", e.python.prefix},
      {"sys_path", e.python.sys_path},
      {"packages", pk},
      {"distributions", dists},
      {"probe_error", e.python.probe_error.empty() ? json(nullptr) : json(e.python.probe_error)},
      {"problems", problems}};
}

// The other interpreters with known packages, when the checked one has
// none (absent otherwise: not looked for).
void other_interpreters_json(const check::OtherInterpreters& o, json& py) {
  json list = json::array();
  for (size_t i = 0; i < o.survey.found.size(); i++) {
    const pyenv::FoundInterpreter& f = o.survey.found[i];
    json pk = json::array();
    for (const pyenv::FoundPackage& p : f.packages)
      pk.push_back({{"name", p.import_name},
                    {"distribution", p.distribution ? json(*p.distribution) : json(nullptr)},
                    {"version", p.version ? json(*p.version) : json(nullptr)}});
    list.push_back({{"path", f.path},
                    {"version", f.version},
                    {"kind", std::string(pyenv::interpreter_kind_name(f.kind))},
                    {"prefix", f.prefix},
                    {"packages", pk},
                    {"command", i < o.commands.size() ? json(o.commands[i]) : json(nullptr)}});
  }
  json skipped = json::array();
  for (const pyenv::ScanProblem& p : o.survey.skipped)
    skipped.push_back({{"path", p.path}, {"what", p.what}});
  py["other_interpreters"] = list;
  py["other_interpreters_more"] = o.survey.more;
  py["other_interpreters_examined"] = o.survey.examined;
  py["other_interpreters_skipped"] = skipped;
}

json imports_json(const check::CheckReport& r) {
  if (!r.imports)
    return {{"error", r.imports_error.empty() ? json(nullptr) : json(r.imports_error)}};
  const check::ImportSimulation& s = *r.imports;
  json steps = json::array();
  for (size_t i = 0; i < s.steps.size(); i++) {
    const pyenv::ImportStep& st = s.steps[i];
    json j = {{"import", st.import_name},
              {"module", st.module},
              {"path", st.path},
              {"source", st.source == pyenv::StepSource::Table ? "table" : "inferred"}};
    if (!st.note.empty()) j["note"] = st.note;
    if (i < s.sequence.steps.size()) {
      j["ok"] = s.sequence.steps[i].ok;
      if (!s.sequence.steps[i].ok) {
        j["failure"] = std::string(loader::step_failure_name(s.sequence.steps[i].failure));
        j["error"] = s.sequence.steps[i].error;
      }
      j["loaded"] = s.sequence.steps[i].loaded;
    }
    steps.push_back(std::move(j));
  }
  json omp = json::array();
  for (const check::OpenMpRuntime& rt : s.openmp)
    omp.push_back({{"kind", std::string(loader::openmp_kind_name(rt.kind))},
                   {"soname", rt.soname},
                   {"path", rt.path},
                   {"loaded_by", rt.brought_by}});
  // The objects the replayed process ends with (what /proc/self/maps of a
  // real import shows), each with the step that brought it.
  json objects = json::array();
  for (size_t i = 0; i < s.process.objects.size(); i++) {
    const loader::Object& o = s.process.objects[i];
    if (o.faked || o.removed) continue;
    objects.push_back(
        {{"path", o.path},
         {"loaded_by", i < s.loaded_by.size() ? json(s.loaded_by[i]) : json(nullptr)}});
  }
  json unresolved = json::array();
  for (const pyenv::UnresolvedImport& u : s.unresolved)
    unresolved.push_back({{"import", u.import_name}, {"reason", u.reason}});
  return {{"program", s.program},
          {"steps", steps},
          {"unresolved", unresolved},
          {"objects", objects},
          {"openmp_runtimes", omp},
          {"numba_layer", s.numba_layer ? json(*s.numba_layer) : json(nullptr)},
          {"mkl_layer", s.mkl_layer ? json(*s.mkl_layer) : json(nullptr)},
          {"static_tls",
           {{"surplus", s.sequence.surplus},
            {"static_size", s.sequence.static_size},
            {"startup_used", s.sequence.startup_used}}}};
}

}  // namespace

json check_document(const check::CheckReport& r, std::string_view version) {
  json findings = json::array();
  for (const Finding& f : r.findings) findings.push_back(report::finding_json(f));
  json host_j, env_j;
  hostfacts::to_json(host_j, r.facts.host);
  hostfacts::to_json(env_j, r.facts.env);
  // cpuinfo's cores (the name predates the model of cpuinfo; kept for readers of check/1).
  host_j["physical_cores"] =
      r.facts.host.cpuinfo.cores ? json(*r.facts.host.cpuinfo.cores) : json(nullptr);
  host_j["gpu"] = r.gpu;
  json py = python_json(r);
  if (r.other_interpreters) other_interpreters_json(*r.other_interpreters, py);
  if (r.python && r.python->find_package("torch"))
    py["torch_cuda"] = r.torch_build.build.cuda ? json(*r.torch_build.build.cuda) : json(nullptr);
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
  json not_read = json::array();
  for (const pyenv::ScanProblem& p : r.not_read)
    not_read.push_back({{"path", p.path}, {"what", p.what}});
  return {{"schema", "mldoctor.check/1"},
          {"version", version},
          {"host", host_j},
          {"environment", env_j},
          {"python", py},
          {"imports", imports_json(r)},
          {"libraries", libs},
          {"not_read", not_read},
          {"findings", findings}};
}

}  // namespace mld::fleet
