// import-set.cc — what `import torch, numpy, cv2, sklearn, numba` dlopens,
// in order, without importing anything. Static TLS and OpenMP conflicts
// depend on the order in which objects enter the process (the first
// initial-exec TLS user that does not fit fails; the first OpenMP runtime
// loaded is the one later symbol lookups bind to), so the loader model needs
// this sequence, not just a set.
//
// How it is chosen: a table per package of the loads its import performs, in
// the order glibc reports them (LD_DEBUG=files) for torch 1.13, numpy 1.24,
// numba 0.56, scipy 1.10 and Debian's cv2 4.6 on Debian 12, with alternatives
// for other layouts (numpy 2's numpy._core, pip opencv's cv2/cv2.abi3.so).
// A dependency imported inside a package (numpy inside torch, llvmlite inside
// numba) is expanded where that package imports it; Python imports a module
// once, so a package already imported adds nothing later. An extension
// module's dlopen precedes the imports its PyInit performs (Debian's cv2 is
// loaded before numpy). This is an approximation of real import order: other
// versions move imports around, only loads the table knows are listed, and
// numba's threading layer is loaded at the first parallel call, not at import.
// A name the table does not know stands for its top-level extension module.
#include <set>

#include "pyenv/pyenv.h"

namespace mld::pyenv {

namespace {

enum class StepType {
  Extension,       // first existing of `names` (dotted module names)
  Library,         // names[0]: a path relative to the package directory, ctypes-loaded
  Import,          // names[0]: another top-level package, imported here
  Cv2Native,       // opencv's native module, wherever the layout puts it
  NumbaThreading,  // numba.np.ufunc.{tbbpool,omppool,workqueue}, by NUMBA_THREADING_LAYER
  FaissSwig,       // faiss/loader.py: the _swigfaiss variant the CPU supports
};

struct TableStep {
  StepType type;
  std::vector<std::string_view> names;
  std::string_view note = {};
};

struct PackageLoads {
  std::string_view import_name;
  std::vector<TableStep> steps;
};

const std::vector<PackageLoads>& load_table() {
  using S = StepType;
  static const std::vector<PackageLoads> table = {
      {"torch",
       {{S::Library,
         {"lib/libtorch_global_deps.so"},
         "torch/__init__.py _load_global_deps(): ctypes.CDLL(..., RTLD_GLOBAL)"},
        {S::Extension, {"torch._C"}},
        {S::Import, {"numpy"}, "torch imports numpy after torch._C"}}},
      {"numpy",
       {{S::Extension, {"numpy.core._multiarray_umath", "numpy._core._multiarray_umath"}},
        {S::Extension, {"numpy.core._multiarray_tests", "numpy._core._multiarray_tests"}},
        {S::Extension, {"numpy.linalg._umath_linalg"}},
        {S::Extension, {"numpy.fft._pocketfft_internal", "numpy.fft._pocketfft_umath"}},
        {S::Extension, {"numpy.random.mtrand"}},
        {S::Extension, {"numpy.random.bit_generator"}},
        {S::Extension, {"numpy.random._common"}},
        {S::Extension, {"numpy.random._bounded_integers"}},
        {S::Extension, {"numpy.random._mt19937"}},
        {S::Extension, {"numpy.random._philox"}},
        {S::Extension, {"numpy.random._pcg64"}},
        {S::Extension, {"numpy.random._sfc64"}},
        {S::Extension, {"numpy.random._generator"}}}},
      {"scipy", {{S::Import, {"numpy"}}, {S::Extension, {"scipy._lib._ccallback_c"}}}},
      {"cv2",
       {{S::Cv2Native, {}, "opencv's native module"},
        {S::Import, {"numpy"}, "cv2's PyInit imports numpy"}}},
      {"sklearn",
       {{S::Extension, {"sklearn.__check_build._check_build"}},
        {S::Import, {"numpy"}},
        {S::Import, {"scipy"}},
        {S::Extension, {"sklearn.utils._openmp_helpers"}},
        {S::Extension, {"sklearn.utils.murmurhash"}}}},
      {"llvmlite", {{S::Library, {"binding/libllvmlite.so"}, "llvmlite.binding.ffi: ctypes.CDLL"}}},
      {"numba",
       {{S::Import, {"llvmlite"}, "numba.core.config imports llvmlite.binding"},
        {S::Import, {"numpy"}},
        {S::Extension, {"numba.core.typeconv._typeconv"}},
        {S::Extension, {"numba._helperlib"}},
        {S::Extension, {"numba._dynfunc"}},
        {S::Extension, {"numba._dispatcher"}},
        {S::Extension, {"numba._devicearray"}},
        {S::Extension, {"numba.core.runtime._nrt_python"}},
        {S::Extension, {"numba.np.ufunc._internal"}},
        {S::Extension, {"numba.experimental.jitclass._box"}},
        {S::Import, {"scipy"}, "numba imports scipy when it is installed"},
        {S::NumbaThreading, {}}}},
      {"tensorflow",
       {{S::Import, {"numpy"}},
        {S::Extension, {"tensorflow.python.platform._pywrap_cpu_feature_guard"}},
        {S::Extension, {"tensorflow.python._pywrap_tensorflow_internal"}}}},
      {"jaxlib",
       {{S::Extension, {"jaxlib.cpu_feature_guard"}}, {S::Extension, {"jaxlib.xla_extension"}}}},
      {"jax", {{S::Import, {"numpy"}}, {S::Import, {"jaxlib"}}}},
      {"mkl", {{S::Extension, {"mkl._mklinit"}}, {S::Extension, {"mkl._py_mkl_service"}}}},
      {"faiss", {{S::Import, {"numpy"}}, {S::FaissSwig, {}}}},
      {"triton", {{S::Extension, {"triton._C.libtriton"}}}},
      {"deepspeed", {{S::Import, {"torch"}, "deepspeed imports torch first"}}},
  };
  return table;
}

struct ImportSetBuilder {
  ImportSetBuilder(const Environment& e, const host::Host& h) : env(e), host(h) {}
  const Environment& env;
  const host::Host& host;
  std::string statement;  // the top-level import being expanded
  std::set<std::string> imported;
  std::set<std::string> emitted_paths;
  std::vector<ImportStep> out;

  const NativeFile* extension(const ImportedPackage& pkg, std::string_view module) {
    for (const NativeFile& f : pkg.extension_modules)
      if (f.module == module && f.loadable_by_interpreter) return &f;
    return nullptr;
  }

  void emit(const NativeFile& f, const std::string& by, LoadTime when, std::string_view note) {
    if (!emitted_paths.insert(f.path).second) return;
    ImportStep s;
    s.import_name = statement;
    s.triggered_by = by;
    s.path = f.path;
    s.module = f.module;
    s.kind = f.kind;
    s.when = when;
    s.note = std::string(note);
    out.push_back(std::move(s));
  }

  void import(const std::string& name) {
    if (!imported.insert(name).second) return;
    const ImportedPackage* pkg = env.find_package(name);
    if (!pkg) return;
    const PackageLoads* loads = nullptr;
    for (const PackageLoads& p : load_table())
      if (p.import_name == name) loads = &p;
    if (!loads) {
      // A package the table does not know: its own top-level extension
      // module (`name<EXT_SUFFIX>`), which is what `import name` dlopens
      // when the name is a single-file extension module.
      if (const NativeFile* f = extension(*pkg, name)) emit(*f, name, LoadTime::AtImport, "");
      return;
    }
    for (const TableStep& step : loads->steps) {
      switch (step.type) {
        case StepType::Extension:
          for (std::string_view alt : step.names)
            if (const NativeFile* f = extension(*pkg, alt)) {
              emit(*f, name, LoadTime::AtImport, step.note);
              break;
            }
          break;
        case StepType::Library: {
          std::string path = host::join_path(pkg->path, step.names[0]);
          for (const NativeFile& f : pkg->libraries)
            if (f.path == path) emit(f, name, LoadTime::AtImport, step.note);
          break;
        }
        case StepType::Import: import(std::string(step.names[0])); break;
        case StepType::Cv2Native:
          for (const NativeFile& f : pkg->extension_modules) {
            std::string_view m = f.module;
            if (f.loadable_by_interpreter && (m == "cv2" || m.ends_with(".cv2"))) {
              emit(f, name, LoadTime::AtImport, step.note);
              break;
            }
          }
          break;
        case StepType::NumbaThreading: numba_threading_layer(*pkg); break;
        case StepType::FaissSwig: faiss_swig(*pkg); break;
      }
    }
  }

  // numba/np/ufunc/parallel.py _launch_threads(): NUMBA_THREADING_LAYER picks
  // a list of candidates, the first that imports wins. Which one loads
  // depends on libtbb being loadable (the loader model's question), so every
  // candidate present is listed, in priority order.
  void numba_threading_layer(const ImportedPackage& pkg) {
    std::string layer = host.getenv("NUMBA_THREADING_LAYER").value_or("default");
    std::vector<std::string_view> order;
    if (layer == "tbb" || layer == "safe")
      order = {"tbbpool"};
    else if (layer == "omp")
      order = {"omppool"};
    else if (layer == "workqueue")
      order = {"workqueue"};
    else if (layer == "threadsafe" || layer == "forksafe")
      order = {"tbbpool", "omppool"};
    else
      order = {"tbbpool", "omppool", "workqueue"};
    std::string note = "first parallel call; NUMBA_THREADING_LAYER=" + layer +
                       (order.size() > 1 ? ": the first candidate that loads wins" : "");
    for (std::string_view o : order)
      if (const NativeFile* f = extension(pkg, "numba.np.ufunc." + std::string(o)))
        emit(*f, pkg.import_name, LoadTime::FirstParallelUse, note);
  }

  // faiss/loader.py: AVX512 build when the CPU has it, else AVX2, else generic.
  void faiss_swig(const ImportedPackage& pkg) {
    int level = host.cpu_features().x86_64_level;
    std::vector<std::string_view> order;
    if (level >= 4) order.push_back("faiss._swigfaiss_avx512");
    if (level >= 3) order.push_back("faiss._swigfaiss_avx2");
    order.push_back("faiss._swigfaiss");
    for (std::string_view o : order)
      if (const NativeFile* f = extension(pkg, o)) {
        emit(*f, pkg.import_name, LoadTime::AtImport, "faiss/loader.py picks by CPU features");
        return;
      }
  }
};

}  // namespace

std::vector<ImportStep> usual_import_set(const Environment& env, const host::Host& host,
                                         const std::vector<std::string>& imports) {
  ImportSetBuilder b(env, host);
  std::vector<ImportStep> lazy;
  for (const std::string& name : imports) {
    b.statement = name;
    b.import(name);
  }
  // Loads at first parallel use come after every import.
  std::vector<ImportStep> ordered;
  for (ImportStep& s : b.out)
    (s.when == LoadTime::AtImport ? ordered : lazy).push_back(std::move(s));
  for (ImportStep& s : lazy) ordered.push_back(std::move(s));
  return ordered;
}

}  // namespace mld::pyenv
