// mkl-layer.cc — what Intel MKL's single dynamic library (libmkl_rt) loads at
// its first call. libmkl_rt NEEDs no threading layer and no OpenMP runtime:
// the first MKL routine called dlopen()s libmkl_core, the OpenMP runtime of
// the layer MKL_THREADING_LAYER (or mkl-service, at `import mkl`) chose, the
// layer's libmkl_<layer>_thread and the interface layer, from libmkl_rt's own
// directory. Without modelling that, a process that holds libmkl_rt beside
// torch's libgomp looks like one OpenMP runtime; the real one has two.
//
// Observed with Debian's MKL 2020.4 (LD_DEBUG=files, research/reproductions.md):
//   1. <dir>/libmkl_core.so
//   2. the runtime, each name tried as <dir>/N, <program's dir>/N,
//      <dir>/../../../compiler/lib/intel64/N, then dlopen("N") from libmkl_rt:
//      INTEL: libiomp5.so; GNU: libgomp.so, and when that is nowhere,
//      libiomp5.so (Debian has no libgomp.so on the loader's path: MKL's GNU
//      layer then maps LLVM's libomp, though its GOMP_* calls bind to the
//      libgomp.so.1 already global in the process); SEQUENTIAL: none
//   3. <dir>/libmkl_<layer>_thread.so (libmkl_sequential.so)
//   4. <dir>/libmkl_intel_lp64.so (MKL_INTERFACE_LAYER: gf_lp64, *_ilp64)
// The CPU kernel libmkl_core picks (libmkl_def, libmkl_avx2, ...) brings no
// runtime and is not modelled. oneMKL's libmkl_rt.so.N loads the same names
// with its own ".so.N" suffix.
//
// mkl-service (research/threading.md §2) chooses the layer at `import mkl`:
// unset, GNU when an OpenMP runtime other than libiomp5 is already loaded,
// INTEL otherwise; INTEL beside such a runtime exits the process unless
// MKL_SERVICE_FORCE_INTEL is set (MKL001 reports that; nothing is loaded
// after an exit).
#include <algorithm>

#include "check/check.h"

namespace mld::check {

namespace {

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

std::string dir_of(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool is_mkl_service(const pyenv::ImportStep& s) { return s.module == "mkl._mklinit"; }

// The index of the live object whose name or soname is `name`.
std::optional<size_t> answering(const loader::Process& p, const std::string& name) {
  for (size_t i = 0; i < p.objects.size(); i++) {
    const loader::Object& o = p.objects[i];
    if (o.faked || o.removed) continue;
    if (loader::object_soname(o) == name ||
        std::find(o.names.begin(), o.names.end(), name) != o.names.end())
      return i;
  }
  return std::nullopt;
}

}  // namespace

std::string mkl_threading_layer(const ImportSimulation& sim, const host::Host& host, bool* exits) {
  if (exits) *exits = false;
  std::string layer = upper(host.getenv("MKL_THREADING_LAYER").value_or(""));
  auto service = std::find_if(sim.steps.begin(), sim.steps.end(), is_mkl_service);
  if (service == sim.steps.end()) return layer.empty() ? "INTEL" : layer;
  // The OpenMP runtimes loaded before `import mkl`: mkl-service's
  // dlsym(RTLD_DEFAULT, "omp_get_num_threads") finds the first.
  size_t at = static_cast<size_t>(service - sim.steps.begin());
  std::optional<std::string> first;
  for (size_t i = 0; i < at && i < sim.sequence.steps.size() && !first; i++)
    for (const std::string& path : sim.sequence.steps[i].loaded)
      for (const loader::Object& o : sim.process.objects)
        if (o.path == path && !o.removed && o.elf &&
            loader::openmp_kind(o) != loader::OpenMpKind::None)
          first = std::string(base_name(path));
  bool other = first && first->find("libiomp5.so") == std::string::npos;
  if (layer.empty()) return other ? "GNU" : "INTEL";
  if (layer == "INTEL" && other && !host.getenv("MKL_SERVICE_FORCE_INTEL") && exits) *exits = true;
  return layer;
}

void append_mkl_first_call(loader::Loader& loader, ImportSimulation& sim,
                           const loader::StaticTlsParams& params) {
  const loader::Process& p = sim.process;
  std::optional<size_t> rt;
  for (size_t i = 0; i < p.objects.size() && !rt; i++) {
    const loader::Object& o = p.objects[i];
    if (!o.faked && !o.removed && o.elf && loader::object_soname(o).starts_with("libmkl_rt"))
      rt = i;
  }
  if (!rt) return;
  const host::Host& host = loader.host();
  bool exits = false;
  const std::string layer = mkl_threading_layer(sim, host, &exits);
  if (exits) return;  // mkl-service stops the process at `import mkl`
  sim.mkl_layer = layer;

  const std::string mkl_path = p.objects[*rt].path;
  const std::string dir = dir_of(mkl_path);
  // "libmkl_rt.so.2" -> ".so.2": oneMKL's libraries carry the same suffix.
  std::string file(base_name(mkl_path));
  std::string suffix =
      file.find(".so") == std::string::npos ? ".so" : file.substr(file.find(".so"));
  auto lib = [&](const std::string& stem) { return host::join_path(dir, stem + suffix); };

  // The import that brought libmkl_rt: its first call is made there.
  std::string by = "MKL";
  for (size_t i = 0; i < sim.sequence.steps.size() && i < sim.steps.size(); i++)
    for (const std::string& path : sim.sequence.steps[i].loaded)
      if (path == mkl_path) by = sim.steps[i].import_name;

  std::vector<std::string> runtimes;
  std::string thread;
  if (layer == "INTEL") {
    runtimes = {"libiomp5.so"};
    thread = "libmkl_intel_thread";
  } else if (layer == "GNU") {
    runtimes = {"libgomp.so", "libiomp5.so"};
    thread = "libmkl_gnu_thread";
  } else if (layer == "TBB") {
    runtimes = {"libtbb.so.2"};
    thread = "libmkl_tbb_thread";
  } else if (layer == "PGI") {
    runtimes = {"libpgmp.so"};
    thread = "libmkl_pgi_thread";
  } else {
    thread = "libmkl_sequential";
  }

  // The runtime: the first name found the first way.
  std::optional<std::string> runtime;
  for (const std::string& name : runtimes) {
    for (const std::string& candidate :
         {host::join_path(dir, name), host::join_path(dir_of(sim.program), name),
          host::join_path(dir, "../../../compiler/lib/intel64/" + name)})
      if (host.stat(candidate).kind == host::FileKind::Regular) {
        runtime = candidate;
        break;
      }
    if (runtime) break;
    if (std::optional<size_t> loaded = answering(p, name)) {
      runtime = p.objects[*loaded].path;
      break;
    }
    loader::Process trial = p;
    std::string error;
    std::vector<size_t> added;
    try {
      added = loader.dlopen(trial, name, rt, &error);
    } catch (const std::exception&) {
      added.clear();
    }
    if (!added.empty() && error.empty() && !trial.objects[added.front()].faked) {
      runtime = trial.objects[added.front()].path;
      break;
    }
  }

  std::string iface = upper(host.getenv("MKL_INTERFACE_LAYER").value_or("LP64"));
  std::string iface_lib = iface.starts_with("GNU") ? "libmkl_gf" : "libmkl_intel";
  iface_lib += iface.find("ILP64") != std::string::npos ? "_ilp64" : "_lp64";

  std::vector<std::string> paths = {lib("libmkl_core")};
  if (runtime) paths.push_back(*runtime);
  paths.push_back(lib(thread));
  paths.push_back(lib(iface_lib));

  const std::string note =
      "libmkl_rt's first call: MKL_THREADING_LAYER=" + layer +
      (runtimes.empty() || runtime ? std::string() : "; " + runtimes.front() + " was not found");
  for (const std::string& path : paths) {
    pyenv::ImportStep s;
    s.import_name = by;
    s.triggered_by = "libmkl_rt";
    s.path = path;
    s.kind = pyenv::NativeKind::Library;
    s.when = pyenv::LoadTime::MklFirstCall;
    s.note = note;
    sim.steps.push_back(std::move(s));
  }
  loader::DlopenSequence more =
      loader::simulate_dlopen_sequence(loader, sim.process, paths, params);
  for (loader::DlopenStep& st : more.steps) sim.sequence.steps.push_back(std::move(st));
}

}  // namespace mld::check
