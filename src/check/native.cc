// native.cc — the facts of the simulated import set: the process of
// `import torch, numpy, ...` as the loader would build it, each object with
// the import that loads it. From it the detectors of src/detect/rules/
// predict the loader's hazards (LD001-LD005), OMP001 (the runtimes, each
// with the import that brings it), MKL001 (the threading layer MKL, and
// mkl-service's check at `import mkl`, would pick beside GNU OpenMP:
// research/threading.md §2), CUDA001 (two majors of one CUDA library) and
// TLS001 (the first import that fails on static TLS, with the tunable).
#include <algorithm>

#include "check/check.h"

namespace mld::check {

namespace {

std::string basename_of(const std::string& p) { return std::string(base_name(p)); }

std::string imports_text(const ImportSimulation& sim) {
  std::vector<std::string> names;
  for (const pyenv::ImportStep& s : sim.steps)
    if (std::find(names.begin(), names.end(), s.import_name) == names.end())
      names.push_back(s.import_name);
  std::string t = "import ";
  for (size_t i = 0; i < names.size(); i++) t += (i ? ", " : "") + names[i];
  return t;
}

// The first libmkl_rt of the process, by index.
std::optional<size_t> mkl_rt_of(const loader::Process& p) {
  for (size_t i = 0; i < p.objects.size(); i++) {
    const loader::Object& o = p.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    if (loader::object_soname(o).starts_with("libmkl_rt")) return i;
  }
  return std::nullopt;
}

// The conda environment of the interpreter: its prefix when it holds
// conda-meta/, else "".
std::string conda_prefix_of(const host::Host& host, const CheckReport& report) {
  if (!report.python) return "";
  const std::string& prefix = report.python->python.prefix;
  if (prefix.empty() || prefix == "/usr") return "";
  return host.stat(host::join_path(prefix, "conda-meta")).kind == host::FileKind::Directory ? prefix
                                                                                            : "";
}

// The INSTALLER of the distribution whose package holds `file` ("pip",
// "conda", "uv"), if one is known.
std::optional<std::string> installer_tag(const CheckReport& report, const std::string& file) {
  if (!report.python) return std::nullopt;
  for (const pyenv::ImportedPackage& p : report.python->packages)
    for (const auto* list : {&p.extension_modules, &p.libraries})
      for (const pyenv::NativeFile& f : *list)
        if (host::normalize_path(f.path) == file && !f.distribution.empty())
          if (const pyenv::Distribution* d = report.python->find_distribution(f.distribution))
            return d->installer;
  return std::nullopt;
}

// Who installed a runtime: a package in site-packages by its distribution's
// INSTALLER (conda installs into site-packages too; a wheel without one is
// pip's), else a conda prefix's lib/, else the distribution's packages
// (/usr/lib, /lib).
detect::Installer installer_of(const CheckReport& report, const std::string& conda_prefix,
                               const std::string& path, const std::optional<std::string>& owner) {
  const std::string file = host::normalize_path(path);
  if (owner && owner->ends_with(" (dpkg)")) return detect::Installer::System;
  if (file.find("/site-packages/") != std::string::npos) {
    std::optional<std::string> tag = installer_tag(report, file);
    return tag && *tag == "conda" ? detect::Installer::Conda : detect::Installer::Wheel;
  }
  if (!conda_prefix.empty() && file.starts_with(conda_prefix + "/"))
    return detect::Installer::Conda;
  if (file.starts_with("/usr/lib/") || file.starts_with("/lib/") || file.starts_with("/lib64/") ||
      file.starts_with("/usr/lib64/"))
    return detect::Installer::System;
  return owner ? detect::Installer::Wheel : detect::Installer::Unknown;
}

}  // namespace

void gather_native_facts(const CheckReport& report, const host::Host& host, detect::Facts& facts) {
  facts.threads = thread_pools(report);
  const TorchBuildFacts& torch = report.torch_build;
  if (torch.installed && torch.no_libuv_string) {
    detect::TorchStore store;
    store.version = torch.build.version;
    store.libtorch_cpu = torch.libtorch_cpu;
    store.libuv_by_default =
        torch.build.major &&
        (*torch.build.major > 2 || (*torch.build.major == 2 && torch.build.minor.value_or(0) >= 4));
    store.built_without_libuv = *torch.no_libuv_string;
    facts.torch_store = std::move(store);
  }
  if (!report.imports) return;
  const ImportSimulation& sim = *report.imports;
  // The OpenMP runtimes, each with the import that brings it.
  // The process itself, for the loader's hazards; the version needs are
  // read here, from the objects' version sections.
  // A step that failed on a version need was unloaded again: its unmet
  // need is the step's, not the final process's.
  std::vector<loader::VersionProblem> versions = loader::check_versions(sim.process);
  for (const loader::DlopenStep& st : sim.sequence.steps)
    versions.insert(versions.end(), st.version_problems.begin(), st.version_problems.end());
  const std::string conda_prefix = conda_prefix_of(host, report);
  facts.simulated.push_back(
      {imports_text(sim), &sim.process, std::move(versions), &sim.loaded_by, &sim.owners,
       conda_prefix, std::make_shared<hostfacts::SystemPackages>(host),
       detect::failed_loads(sim.sequence, [&sim](size_t i) {
         return i < sim.steps.size() ? describe_step(sim.steps[i]) : std::string();
       })});
  const detect::SimulatedProcess& simulated = facts.simulated.back();
  // The OpenMP runtimes, each with the import that brings it, and MKL's
  // place among them.
  detect::OpenMpProcess omp;
  omp.process = imports_text(sim);
  for (const OpenMpRuntime& r : sim.openmp) {
    std::optional<std::string> owner = detect::owner_of(simulated, r.path);
    omp.runtimes.push_back({r.kind, r.soname, r.path, "",
                            "loaded by " + r.brought_by + (owner ? ", from " + *owner : ""),
                            r.load_index,
                            r.kind == loader::OpenMpKind::Gnu
                                ? std::string()
                                : loader::kmp_library_name(sim.process.objects[r.load_index]),
                            installer_of(report, conda_prefix, r.path, owner), owner.value_or("")});
  }
  if (std::optional<size_t> mkl = mkl_rt_of(sim.process)) {
    omp.has_mkl = true;
    omp.mkl = detect::MklLoad{sim.process.objects[*mkl].path,
                              "loaded by " + sim.loaded_by[*mkl],
                              *mkl,
                              report.python && report.python->find_package("mkl") != nullptr,
                              host.getenv("MKL_THREADING_LAYER"),
                              host.getenv("MKL_SERVICE_FORCE_INTEL").has_value()};
  }
  facts.openmp.push_back(std::move(omp));
  // The first import that fails on static TLS (the later ones run in a
  // process that already failed), with the tunable that lets it load.
  for (size_t i = 0; i < sim.sequence.steps.size() && i < sim.steps.size(); i++) {
    const loader::DlopenStep& st = sim.sequence.steps[i];
    if (st.ok || st.tls_module.empty()) continue;
    const pyenv::ImportStep& s = sim.steps[i];
    detect::StaticTlsFailure f;
    f.source = detect::StaticTlsFailure::Source::Import;
    f.object = st.object;
    f.error = st.error;
    f.import_name = s.import_name;
    f.module = s.module.empty() ? basename_of(s.path) : s.module;
    f.import_order = imports_text(sim);
    f.model = detect::static_tls_account(sim.sequence, st);
    if (sim.sequence.tunables_fix)
      f.tunables =
          loader::merge_glibc_tunables(host.getenv("GLIBC_TUNABLES"), *sim.sequence.tunables_fix);
    facts.static_tls.push_back(std::move(f));
    break;
  }
}

}  // namespace mld::check
