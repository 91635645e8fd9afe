// detect.cc — runs the registered detectors and turns their results into
// findings with the rule files (rules::finding_from): severity, title and the
// generic fix come only from there.
#include "detect/detect.h"

#include <stdexcept>

#include "detect/registry.h"
#include "host/host.h"

namespace mld::detect {

const std::vector<Detector>& detectors() {
  static const std::vector<Detector> all = registered_detectors();
  return all;
}

Detections run_detectors(const Facts& facts) {
  Detections out;
  for (const Detector& d : detectors()) {
    const size_t before = out.size();
    d.detect(facts, out);
    for (size_t i = before; i < out.size(); i++)
      if (out[i].rule.empty()) out[i].rule = d.rule;
  }
  return out;
}

std::vector<Finding> findings(Detections detections, const rules::RuleSet& rules) {
  // Only the builtin rules not in `rules` are parsed (a fraction of a
  // millisecond each; all of them take several).
  std::vector<std::string> missing;
  for (const Detection& d : detections)
    if (!rules.find(d.rule)) missing.push_back(d.rule);
  const rules::RuleSet builtin =
      missing.empty() ? rules::RuleSet() : rules::RuleSet::builtin_subset(missing);
  std::vector<Finding> out;
  for (Detection& d : detections) {
    const rules::Rule* rule = rules.find(d.rule);
    if (!rule) rule = builtin.find(d.rule);
    if (!rule) throw std::logic_error("detector result for " + d.rule + ", which has no rule file");
    out.push_back(rules::finding_from(std::move(d), *rule));
  }
  return out;
}

OpenMpProcess openmp_process(const loader::Process& process, std::string name) {
  OpenMpProcess out;
  out.process = std::move(name);
  for (size_t i : loader::openmp_runtimes(process)) {
    const loader::Object& o = process.objects[i];
    const std::string needed = loader::needed_by(process, i);
    out.runtimes.push_back({loader::openmp_kind(o), std::string(loader::object_soname(o)), o.path,
                            "", needed.empty() ? "" : "needed by " + needed, i,
                            loader::kmp_library_name(o), Installer::Unknown, ""});
  }
  for (const loader::Object& o : process.objects)
    if (!o.faked && !o.removed && loader::object_soname(o).starts_with("libmkl_rt"))
      out.has_mkl = true;
  return out;
}

std::optional<std::string> owner_of(const SimulatedProcess& p, std::string_view path) {
  if (p.owners) {
    auto it = p.owners->find(host::normalize_path(path));
    if (it != p.owners->end()) return it->second;
  }
  if (p.system_packages) return p.system_packages->owner(path);
  return std::nullopt;
}

void add_loaded_by(const SimulatedProcess& p, Detection& d) {
  if (!p.loaded_by) return;
  for (size_t i = 0; i < p.process->objects.size(); i++) {
    const loader::Object& o = p.process->objects[i];
    if (o.faked || o.path.empty()) continue;
    if (d.message.find(o.path) == std::string::npos && d.subject != o.path) continue;
    std::optional<std::string> owner = owner_of(p, o.path);
    d.evidence.push_back({std::string(base_name(o.path)) + " is loaded by " + (*p.loaded_by)[i] +
                              (owner ? ", from " + *owner : ""),
                          "", std::nullopt});
  }
}

std::vector<SimulatedProcess::FailedLoad> failed_loads(
    const loader::DlopenSequence& seq, const std::function<std::string(size_t)>& caller) {
  // A missing dependency fails the call with "<its name>: cannot open
  // shared object file: No such file or directory" (loader::Loader::dlopen):
  // LD001's, with the paths tried. The object itself missing, or anything
  // that stops ld.so on a file that is there, is not.
  constexpr std::string_view kMissing =
      ": cannot open shared object file: No such file or directory";
  std::vector<SimulatedProcess::FailedLoad> out;
  for (size_t i = 0; i < seq.steps.size(); i++) {
    const loader::DlopenStep& st = seq.steps[i];
    if (st.ok || st.failure != loader::StepFailure::Load) continue;
    if (st.error.ends_with(kMissing) && !st.error.starts_with(st.object + ":")) continue;
    out.push_back({st.object, caller ? caller(i) : std::string(), st.error});
  }
  return out;
}

StaticTlsAccount static_tls_account(const loader::DlopenSequence& seq,
                                    const loader::DlopenStep& step) {
  return {step.error,      step.tls_module,  step.bytes_needed, step.bytes_left,
          seq.static_size, seq.startup_used, seq.surplus};
}

}  // namespace mld::detect

namespace mld::detect {

namespace {

// Where an installed package's or the standard library's files start:
// ".../site-packages/", ".../dist-packages/", ".../lib/python3.11/".
size_t library_prefix_end(std::string_view file) {
  for (std::string_view marker : {"/site-packages/", "/dist-packages/"})
    if (size_t at = file.rfind(marker); at != std::string_view::npos) return at + marker.size();
  for (size_t at = file.find("/lib/python"); at != std::string_view::npos;
       at = file.find("/lib/python", at + 1)) {
    const size_t slash = file.find('/', at + 11);
    if (slash != std::string_view::npos) {
      const std::string_view version = file.substr(at + 11, slash - at - 11);
      if (!version.empty() && version.find_first_not_of("0123456789.") == std::string_view::npos)
        return slash + 1;
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::string short_python_file(std::string_view file) {
  const size_t end = library_prefix_end(file);
  return std::string(end == std::string_view::npos ? file : file.substr(end));
}

std::string python_frame_text(const PythonFrame& f) {
  return f.function + " (" + short_python_file(f.file) +
         (f.line > 0 ? ":" + std::to_string(f.line) : std::string()) + ")";
}

const PythonFrame* user_python_frame(const std::vector<PythonFrame>& frames) {
  for (const PythonFrame& f : frames) {
    if (f.file.starts_with("<frozen") || library_prefix_end(f.file) != std::string_view::npos)
      continue;
    return &f;
  }
  return nullptr;
}

}  // namespace mld::detect
