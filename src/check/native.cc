// native.cc — the loader findings of the simulated import set: what the
// process of `import torch, numpy, ...` would hold, and what would break.
//
// The facts of OMP001 (the runtimes, each with the import that brings it)
// and TLS001 (the first import that fails on static TLS, with the tunable)
// go to their detectors (src/detect/rules/).
//
// The loader's own hazards (LD001 missing, LD002 unmet versions, LD003/LD004
// duplicate runtimes) come from loader::find_hazards on the replayed process,
// each tied to the import that brought the object. The rest is specific to a
// Python process:
//   MKL001  the threading layer MKL (and mkl-service's check at `import mkl`)
//           would pick beside GNU OpenMP: research/threading.md §2
//   CUDA001 two major versions of one CUDA library
#include <algorithm>
#include <cctype>
#include <map>

#include "check/check.h"

namespace mld::check {

namespace {

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

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

// The objects a finding's message names, with the import that loaded each.
void add_provenance(const ImportSimulation& sim, Finding& f) {
  for (size_t i = 0; i < sim.process.objects.size(); i++) {
    const loader::Object& o = sim.process.objects[i];
    if (o.faked || o.path.empty()) continue;
    if (f.message.find(o.path) == std::string::npos && f.subject != o.path) continue;
    f.evidence.push_back(
        {basename_of(o.path) + " is loaded by " + sim.loaded_by[i], "", std::nullopt});
  }
}

const loader::Object* first_with_soname_prefix(const ImportSimulation& sim, std::string_view prefix,
                                               size_t* index) {
  for (size_t i = 0; i < sim.process.objects.size(); i++) {
    const loader::Object& o = sim.process.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    std::string so = o.elf->soname() ? std::string(*o.elf->soname()) : basename_of(o.path);
    if (so.starts_with(prefix)) {
      *index = i;
      return &o;
    }
  }
  return nullptr;
}

// mkl-service's _mklinit (research/threading.md §2): at `import mkl` it
// looks for an OpenMP runtime already global in the process; anything that
// is not libiomp5 counts as GNU. MKL_THREADING_LAYER=INTEL with such a
// runtime present prints the "incompatible with libgomp.so.1" error and
// exits. Unset, it picks GNU when a GNU runtime is already loaded and INTEL
// otherwise — and exports MKL_THREADING_LAYER=INTEL to every child process,
// which then dies if it imports torch before numpy. libmkl_rt on its own
// defaults to the INTEL layer, i.e. libiomp5 beside libgomp.
void find_mkl_layer(const ImportSimulation& sim, const host::Host& host, bool mkl_service,
                    FindingSink& sink) {
  size_t mkl_index = 0;
  const loader::Object* mkl = first_with_soname_prefix(sim, "libmkl_rt", &mkl_index);
  if (!mkl) return;
  const OpenMpRuntime* gnu_before = nullptr;
  const OpenMpRuntime* gnu_after = nullptr;
  for (const OpenMpRuntime& r : sim.openmp) {
    if (basename_of(r.path).find("libiomp5.so") != std::string::npos &&
        r.kind != loader::OpenMpKind::Gnu)
      continue;
    if (r.load_index < mkl_index && !gnu_before) gnu_before = &r;
    if (r.load_index > mkl_index && !gnu_after) gnu_after = &r;
  }
  if (!gnu_before && !gnu_after) return;
  const std::optional<std::string> raw = host.getenv("MKL_THREADING_LAYER");
  const std::string layer = upper(raw.value_or(""));
  if (!layer.empty() && layer != "INTEL") return;  // GNU, SEQUENTIAL, TBB: no clash

  Finding f;
  f.rule = "MKL001";
  f.subject = "MKL_THREADING_LAYER";
  const std::string mkl_by = sim.loaded_by[mkl_index];
  if (layer == "INTEL" && gnu_before) {
    f.severity = Severity::Error;
    f.message = "MKL_THREADING_LAYER=" + *raw + " is incompatible with " +
                basename_of(gnu_before->path) + ", loaded before MKL: " +
                (mkl_service ? "mkl-service prints this and exits at `import mkl`"
                             : "MKL's Intel layer would start libiomp5 beside it");
  } else if (gnu_before) {
    // mkl-service would see the GNU runtime and pick GNU; plain libmkl_rt
    // keeps its INTEL default.
    if (mkl_service) return;
    f.severity = Severity::Warning;
    f.message =
        "MKL_THREADING_LAYER is not set: libmkl_rt would run its default INTEL layer on libiomp5 "
        "beside " +
        basename_of(gnu_before->path) +
        ", loaded before it — two OpenMP thread pools in one process";
  } else {
    f.severity = Severity::Warning;
    f.message =
        "libmkl_rt is loaded before " + basename_of(gnu_after->path) + " (" +
        gnu_after->brought_by + "): MKL picks its INTEL layer (libiomp5)" +
        (mkl_service
             ? ", and mkl-service exports MKL_THREADING_LAYER=INTEL to child processes, which exit "
               "with \"MKL_THREADING_LAYER=INTEL is incompatible with " +
                   basename_of(gnu_after->path) + "\" if they import it first"
             : std::string(", beside GNU OpenMP: two thread pools in one process"));
  }
  f.evidence.push_back(
      {"MKL_THREADING_LAYER " + (raw ? "= " + *raw : std::string("is unset")), "", std::nullopt});
  f.evidence.push_back(
      {basename_of(mkl->path) + " => " + mkl->path + ", loaded by " + mkl_by, "", std::nullopt});
  const OpenMpRuntime* g = gnu_before ? gnu_before : gnu_after;
  f.evidence.push_back({std::string(loader::openmp_kind_name(g->kind)) + " " + g->soname + " => " +
                            g->path + ", loaded by " + g->brought_by,
                        "", std::nullopt});
  f.fix =
      "use MKL's GNU threading layer, which runs on the libgomp the other packages load: "
      "export MKL_THREADING_LAYER=GNU (and leave MKL_SERVICE_FORCE_INTEL unset)";
  f.env_fix.push_back("MKL_THREADING_LAYER=GNU");
  sink.add(std::move(f));
}

// libcudart.so.12 -> {"libcudart", 12}; nullopt for names without a major.
std::optional<std::pair<std::string, std::string>> cuda_family(const std::string& soname) {
  static const char* families[] = {"libcudart",    "libcublas", "libcublasLt",  "libcudnn",
                                   "libcufft",     "libcurand", "libcusparse",  "libcusolver",
                                   "libnccl",      "libnvrtc",  "libnvJitLink", "libcupti",
                                   "libnvToolsExt"};
  size_t so = soname.find(".so.");
  if (so == std::string::npos) return std::nullopt;
  std::string base = soname.substr(0, so);
  if (std::find(std::begin(families), std::end(families), base) == std::end(families))
    return std::nullopt;
  std::string rest = soname.substr(so + 4);
  std::string major = rest.substr(0, rest.find('.'));
  if (major.empty()) return std::nullopt;
  return std::make_pair(base, major);
}

void find_cuda_majors(const ImportSimulation& sim, FindingSink& sink) {
  std::map<std::string, std::map<std::string, size_t>> seen;  // family -> major -> object
  for (size_t i = 0; i < sim.process.objects.size(); i++) {
    const loader::Object& o = sim.process.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    std::string so = o.elf->soname() ? std::string(*o.elf->soname()) : basename_of(o.path);
    if (auto fam = cuda_family(so)) seen[fam->first].emplace(fam->second, i);
  }
  for (const auto& [family, majors] : seen) {
    if (majors.size() < 2) continue;
    Finding f;
    f.rule = "CUDA001";
    f.severity = Severity::Warning;
    f.subject = family;
    f.message = std::to_string(majors.size()) + " major versions of " + family +
                " would be loaded by `" + imports_text(sim) + "`";
    for (const auto& [major, i] : majors)
      f.evidence.push_back({family + ".so." + major + " => " + sim.process.objects[i].path +
                                ", loaded by " + sim.loaded_by[i],
                            "", std::nullopt});
    f.fix =
        "install the packages built for one CUDA major version (the nvidia-*-cu12 wheels with a "
        "cu12 torch, or all cu11)";
    sink.add(std::move(f));
  }
}

}  // namespace

void find_native_hazards(const CheckReport& report, const host::Host& host, FindingSink& sink) {
  if (!report.imports) return;
  const ImportSimulation& sim = *report.imports;
  FindingList local;
  loader::find_hazards(sim.process, imports_text(sim), local);
  for (Finding& f : local.findings) {
    add_provenance(sim, f);
    sink.add(std::move(f));
  }
  const bool mkl_service = report.python && report.python->find_package("mkl") != nullptr;
  find_mkl_layer(sim, host, mkl_service, sink);
  find_cuda_majors(sim, sink);
}

void gather_native_facts(const CheckReport& report, const host::Host& host, detect::Facts& facts) {
  if (!report.imports) return;
  const ImportSimulation& sim = *report.imports;
  // The OpenMP runtimes, each with the import that brings it.
  detect::OpenMpProcess omp;
  omp.process = imports_text(sim);
  size_t unused = 0;
  omp.has_mkl = first_with_soname_prefix(sim, "libmkl_rt", &unused) != nullptr;
  for (const OpenMpRuntime& r : sim.openmp)
    omp.runtimes.push_back({r.kind, r.soname, r.path, "", "loaded by " + r.brought_by});
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
