// libs-command.cc — `mldoctor libs PATH... [--load-order A,B] [--tree|--json]`:
// loads each PATH as ld.so loads it when it is run (exec: $ORIGIN from the
// resolved path; a library given as PATH the `ld.so --list PATH` way), shows
// where every object comes from and why, the paths tried for anything
// missing, and the hazards of the result. With --load-order, the objects are
// then dlopen()ed in order into the first PATH's process: each call's outcome
// (a missing library, an unmet version need, no room for static TLS), each
// failed call rolled back as glibc does, and the hazards of the process the
// calls leave.
#include <unistd.h>

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/cli.h"
#include "detect/detect.h"
#include "loader/loader.h"
#include "render/libs-report.h"
#include "report/report.h"

namespace mld::cli {

namespace {

using loader::GlibcVersion;
using loader::How;
using loader::Object;
using loader::Process;
using nlohmann::json;

using Target = elf::ElfTarget;

std::optional<Target> target_of(const host::Host& host, const std::string& path,
                                std::string* error) {
  try {
    // The ELF identification is all that is needed here: read 64 bytes
    // rather than mapping the file (a mapping's faults and unmap cost more on
    // the machines measured). When the read fails, map() says precisely why.
    std::optional<std::string> head = host.read_file(path, 64);
    if (!head) host.map(path);
    ByteView v =
        head ? ByteView(reinterpret_cast<const u8*>(head->data()), head->size()) : ByteView();
    std::optional<Target> t = elf::elf_target(v);
    if (!t) *error = path + ": not an ELF file";
    return t;
  } catch (const std::exception& e) {
    *error = e.what();
    return std::nullopt;
  }
}

struct Session {
  loader::SearchConfig config;
  std::unique_ptr<loader::Loader> loader;
  GlibcVersion glibc;
};

Session make_session(const host::Host& host, Target t, const std::string& glibc_override) {
  Session s;
  s.config = loader::SearchConfig::for_host(host, t.machine, t.is_64, GlibcVersion{});
  std::optional<GlibcVersion> g;
  if (!glibc_override.empty()) {
    g = loader::parse_glibc_version(glibc_override);
    if (!g)
      throw std::runtime_error("--glibc " + glibc_override + ": expected a release like 2.36");
  } else {
    g = loader::detect_glibc_version(host, s.config.system_dirs);
  }
  s.glibc = g.value_or(GlibcVersion{});
  s.config = loader::SearchConfig::for_host(host, t.machine, t.is_64, s.glibc);
  s.loader = std::make_unique<loader::Loader>(host, s.config);
  return s;
}

}  // namespace

int run_libs(const CommonOptions& common, const LibsOptions& opts) {
  host::Host host = analysed_host(common);
  std::map<Target, Session> sessions;
  json inputs = json::array();
  FindingList findings;
  bool tool_error = false;
  std::FILE* out = stdout;
  std::vector<std::unique_ptr<Process>> programs;  // the facts point into them
  const Process* first_process = nullptr;
  Session* first_session = nullptr;
  std::string first_path;
  size_t first_index = 0;  // of its facts
  Process grown;           // the first program after --load-order's calls
  detect::Facts facts;     // for the detectors of hazards other commands see too
  // Owners of system files (dpkg), read only if a finding names one.
  auto system_packages = std::make_shared<const hostfacts::SystemPackages>(host);

  for (const std::string& path : opts.paths) {
    std::string error;
    std::optional<Target> t = target_of(host, path, &error);
    if (!t) {
      print_error(error);
      tool_error = true;
      inputs.push_back({{"path", path}, {"error", error}});
      continue;
    }
    // Another architecture: resolved as its loader would on this tree, never
    // by another's rules; one the model does not know is not resolved.
    if (!loader::loader_modelled(t->machine, t->is_64)) {
      error = path + ": an " + std::string(elf::machine_name(t->machine)) + " object (ELFCLASS" +
              (t->is_64 ? "64" : "32") +
              "): mldoctor models the loaders of x86-64, AArch64 and i386 only; its "
              "dependencies are not resolved";
      print_error(error);
      tool_error = true;
      inputs.push_back({{"path", path}, {"error", error}});
      continue;
    }
    std::string no_loader;
    if (const std::string ld = loader::loader_path(t->machine, t->is_64);
        host.stat(ld).kind != host::FileKind::Regular)
      no_loader = "no " + std::string(elf::machine_name(t->machine)) + " loader here (" + ld +
                  " is missing): nothing on this tree can load this object; its dependencies "
                  "are where that loader would look on this tree. To see them as on its own "
                  "machine, run mldoctor there, or pass --root with that machine's tree";
    auto it = sessions.find(*t);
    if (it == sessions.end()) it = sessions.emplace(*t, make_session(host, *t, opts.glibc)).first;
    Session& s = it->second;
    programs.push_back(std::make_unique<Process>(s.loader->load_program(path)));
    const Process& p = *programs.back();
    facts.simulated.push_back(
        {path, &p, loader::check_versions(p), nullptr, nullptr, "", system_packages});
    facts.openmp.push_back(detect::openmp_process(p, path));
    if (common.format == OutputFormat::Json) {
      json versions = json::array();
      for (const loader::VersionProblem& vp : facts.simulated.back().version_problems)
        versions.push_back(
            {{"kind", vp.kind == loader::VersionProblem::NotFound       ? "not_found"
                      : vp.kind == loader::VersionProblem::WeakNotFound ? "weak_not_found"
                                                                        : "no_version_info"},
             {"message", loader::version_problem_text(p, vp)}});
      json j = {{"path", path},
                {"objects", render::process_json(p)},
                {"errors", p.errors},
                {"version_problems", versions}};
      if (!no_loader.empty()) j["note"] = no_loader;
      inputs.push_back(std::move(j));
    } else {
      std::fprintf(out, "%s\n", path.c_str());
      if (!no_loader.empty()) std::fprintf(out, "  note: %s\n", no_loader.c_str());
      if (common.format == OutputFormat::Tree && !p.objects.empty()) {
        std::vector<bool> shown(p.objects.size(), false);
        shown[0] = true;
        render::print_tree_node(out, p, 0, "", shown);
      } else {
        render::print_list(out, p);
      }
    }
    if (!first_process) {
      first_index = facts.simulated.size() - 1;
      first_process = &p;
      first_session = &s;
      first_path = path;
    }
  }

  json load_order_json;
  if (!opts.load_order.empty() && first_process && first_session) {
    std::vector<std::string> notes;
    std::optional<loader::StaticTlsParams> params = loader::StaticTlsParams::for_process(
        host, first_session->config.e_machine, first_session->glibc, &notes);
    if (!params) throw std::runtime_error("static TLS is not modelled for this architecture");
    // The dlopen() calls grow a copy: the program's own hazards above are
    // those of the program as it starts.
    grown = *first_process;
    loader::DlopenSequence seq =
        loader::simulate_dlopen_sequence(*first_session->loader, grown, opts.load_order, *params);
    // From here the first program's hazards are those of the process the
    // calls leave (failed calls rolled back), so runtimes and duplicates of
    // the loaded modules count together, and a call that failed on a version
    // need is LD002's.
    std::vector<loader::VersionProblem> versions = loader::check_versions(grown);
    for (const loader::DlopenStep& st : seq.steps)
      versions.insert(versions.end(), st.version_problems.begin(), st.version_problems.end());
    facts.simulated[first_index] = {
        first_path, &grown, std::move(versions), nullptr,
        nullptr,    "",     system_packages,     detect::failed_loads(seq, nullptr)};
    facts.openmp[first_index] = detect::openmp_process(grown, first_path);
    for (const loader::DlopenStep& st : seq.steps) {
      if (st.ok || st.tls_module.empty()) continue;
      detect::StaticTlsFailure f;
      f.source = detect::StaticTlsFailure::Source::LoadOrder;
      f.object = st.object;
      f.error = st.error;
      f.model = detect::static_tls_account(seq, st);
      f.tunables = seq.tunables_fix;
      facts.static_tls.push_back(std::move(f));
      break;  // later steps run in a process that already failed
    }
    if (common.format == OutputFormat::Json) {
      json steps = json::array();
      for (const loader::DlopenStep& st : seq.steps) {
        steps.push_back(
            {{"object", st.object},
             {"ok", st.ok},
             {"failure", st.ok ? json(nullptr) : json(loader::step_failure_name(st.failure))},
             {"error", st.ok ? json(nullptr) : json(st.error)},
             {"tls_module", st.tls_module.empty() ? json(nullptr) : json(st.tls_module)},
             {"bytes_needed", st.bytes_needed},
             {"bytes_left", st.bytes_left},
             {"loaded", st.loaded}});
      }
      load_order_json = {
          {"glibc", loader::to_string(first_session->glibc)},
          {"surplus", seq.surplus},
          {"static_size", seq.static_size},
          {"startup_used", seq.startup_used},
          {"steps", std::move(steps)},
          {"tunables_fix", seq.tunables_fix ? json(*seq.tunables_fix) : json(nullptr)},
          {"notes", notes}};
    } else {
      std::fprintf(out,
                   "\ndlopen() from %s (glibc %s, static TLS %llu bytes, %llu used at startup, "
                   "surplus %llu):\n",
                   first_path.c_str(), loader::to_string(first_session->glibc).c_str(),
                   static_cast<unsigned long long>(seq.static_size),
                   static_cast<unsigned long long>(seq.startup_used),
                   static_cast<unsigned long long>(seq.surplus));
      for (const loader::DlopenStep& st : seq.steps) {
        if (st.ok)
          std::fprintf(out, "  ok    %s\n", st.object.c_str());
        else
          std::fprintf(out, "  fails %s: %s\n", st.object.c_str(), st.error.c_str());
      }
      for (const std::string& n : notes)
        std::fprintf(out, "  note: GLIBC_TUNABLES: %s\n", n.c_str());
    }
  }

  for (Finding& f : detect::findings(detect::run_detectors(facts), rules::RuleSet()))
    findings.add(std::move(f));

  size_t failing = 0;
  for (const Finding& f : findings.findings)
    if (f.severity >= common.fail_on) failing++;
  if (common.format == OutputFormat::Json) {
    json doc = {{"schema", "mldoctor.libs/1"}, {"version", MLD_VERSION}};
    json loaders = json::array();
    for (const auto& [t, s] : sessions) {
      loaders.push_back(
          {{"machine", std::string(elf::machine_name(t.machine))},
           {"class", t.is_64 ? 64 : 32},
           {"glibc", loader::to_string(s.glibc)},
           {"system_dirs", s.config.system_dirs},
           {"hwcaps_subdirs", s.config.hwcaps_subdirs},
           {"ld_library_path",
            s.config.ld_library_path ? json(*s.config.ld_library_path) : json(nullptr)},
           {"preload", s.config.preload}});
    }
    doc["loaders"] = std::move(loaders);
    doc["inputs"] = std::move(inputs);
    if (!load_order_json.is_null()) doc["load_order"] = std::move(load_order_json);
    json fj = json::array();
    for (const Finding& f : findings.findings) fj.push_back(report::finding_json(f));
    doc["findings"] = std::move(fj);
    std::string text = doc.dump(2);
    std::fprintf(out, "%s\n", text.c_str());
  } else {
    if (!findings.findings.empty()) std::fprintf(out, "\n");
    for (const Finding& f : findings.findings)
      report::print_finding(out, f, {.color = common.color});
    size_t errors = 0, warnings = 0;
    for (const Finding& f : findings.findings) {
      errors += f.severity == Severity::Error;
      warnings += f.severity == Severity::Warning;
    }
    const size_t notes = findings.findings.size() - errors - warnings;
    if (errors + warnings > 0)
      std::fprintf(out, "\n%zu error%s, %zu warning%s\n", errors, errors == 1 ? "" : "s", warnings,
                   warnings == 1 ? "" : "s");
    else if (!tool_error)  // said, so that silence is never the answer
      std::fprintf(out, "\n%s no %s\n", common.color ? "\033[32m✓\033[0m" : "✓",
                   notes ? ("errors or warnings (" + std::to_string(notes) +
                            (notes == 1 ? " note)" : " notes)"))
                               .c_str()
                         : "findings");
  }
  // Every input's files are still mapped; unmapping them one by one costs
  // more than the whole analysis of a small input, and exit does it at once.
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(tool_error ? 2 : failing > 0 ? 1 : 0);
}

}  // namespace mld::cli
