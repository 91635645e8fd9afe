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
//
// Every row of the table is checked against the real `import X` on the
// machine the tests run on (test/e2e/import-table-drift.py); a package that
// machine cannot install has no row (tensorflow, jax, deepspeed, triton,
// mkl-service left it for that reason) and goes through the inference.
//
// A package the table does not know (faiss-gpu forks, xformers, flash-attn,
// bitsandbytes, decord, deepspeed...) loads its extension modules as found
// from its RECORD, in the order its Python code imports them: the scan
// follows its module-level import statements from __init__.py the way
// Python runs them (python-imports.cc), so another package it imports
// (deepspeed's `import torch`) is expanded where that happens, and its own
// modules enter where they are reached. The modules no module-level import
// reaches (lazy or dynamic imports) come after, those its __init__.py names
// first, then its other top-level modules, then the deeper ones. Every such
// step is marked Inferred. Loading more than the real import does can only
// add runtimes the job would load later anyway; loading fewer would hide
// them.
#include <algorithm>
#include <cctype>
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
        {S::Extension, {"sklearn.utils.murmurhash"}},
        {S::Extension, {"sklearn.utils._openmp_helpers"}}}},
      // `import llvmlite` loads nothing; llvmlite.binding loads its library.
      {"llvmlite.binding",
       {{S::Library, {"binding/libllvmlite.so"}, "llvmlite.binding.ffi: ctypes.CDLL"}}},
      {"numba",
       {{S::Import, {"llvmlite.binding"}, "numba.core.config imports llvmlite.binding"},
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
      {"faiss", {{S::Import, {"numpy"}}, {S::FaissSwig, {}}}},
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

  void emit(const NativeFile& f, const std::string& by, LoadTime when, std::string_view note,
            StepSource source = StepSource::Table) {
    if (!emitted_paths.insert(f.path).second) return;
    ImportStep s;
    s.import_name = statement;
    s.triggered_by = by;
    s.path = f.path;
    s.module = f.module;
    s.kind = f.kind;
    s.when = when;
    s.source = source;
    s.note = std::string(note);
    out.push_back(std::move(s));
  }

  // `name` may be a submodule ("llvmlite.binding") that the table knows.
  void import(const std::string& name) {
    if (!imported.insert(name).second) return;
    const ImportedPackage* pkg = env.find_package(name.substr(0, name.find('.')));
    if (!pkg) return;
    const PackageLoads* loads = nullptr;
    for (const PackageLoads& p : load_table())
      if (p.import_name == name) loads = &p;
    const size_t before = out.size();
    if (loads) table_steps(*pkg, *loads);
    // A package the table does not know, or a version of a known one whose
    // modules moved where the table does not look: what it holds.
    bool own = false;
    for (size_t i = before; i < out.size(); i++) own |= out[i].triggered_by == pkg->import_name;
    if (!own) inferred_steps(*pkg);
  }

  void table_steps(const ImportedPackage& pkg, const PackageLoads& loads) {
    const std::string& name = pkg.import_name;
    for (const TableStep& step : loads.steps) {
      switch (step.type) {
        case StepType::Extension:
          for (std::string_view alt : step.names)
            if (const NativeFile* f = extension(pkg, alt)) {
              emit(*f, name, LoadTime::AtImport, step.note);
              break;
            }
          break;
        case StepType::Library: {
          std::string path = host::join_path(pkg.path, step.names[0]);
          for (const NativeFile& f : pkg.libraries)
            if (f.path == path) emit(f, name, LoadTime::AtImport, step.note);
          break;
        }
        case StepType::Import: import(std::string(step.names[0])); break;
        case StepType::Cv2Native:
          for (const NativeFile& f : pkg.extension_modules) {
            std::string_view m = f.module;
            if (f.loadable_by_interpreter && (m == "cv2" || m.ends_with(".cv2"))) {
              emit(f, name, LoadTime::AtImport, step.note);
              break;
            }
          }
          break;
        case StepType::NumbaThreading: numba_threading_layer(pkg); break;
        case StepType::FaissSwig: faiss_swig(pkg); break;
      }
    }
  }

  // The package's extension modules in the order its import most plausibly
  // loads them (see the file comment).
  void inferred_steps(const ImportedPackage& pkg) {
    const std::string found_by = pkg.natives_from_record ? "RECORD" : "the package tree";
    // First what its Python code imports, in the order it runs: other
    // packages where it imports them, its own modules where they are reached.
    for (const ImportEvent& e : pkg.import_events) {
      if (e.kind == ImportEvent::Kind::Package) {
        import(e.name);
        continue;
      }
      for (const NativeFile& f : pkg.extension_modules)
        if (f.module == e.name && f.loadable_by_interpreter)
          emit(f, pkg.import_name, LoadTime::AtImport, "inferred: imported at " + e.via,
               StepSource::Inferred);
    }
    // Then the modules no module-level import reaches (imported lazily, by
    // name, or never): the job may load them later, so they are replayed
    // after, those __init__.py names first.
    std::string init_text;
    if (pkg.kind == ImportKind::Package)
      init_text = host.read_file(host::join_path(pkg.path, "__init__.py"), 1 << 20).value_or("");
    struct Ranked {
      int group;     // 0: named in __init__.py, 1: other top-level, 2: deeper
      size_t where;  // position of the name in __init__.py
      const NativeFile* file;
    };
    std::vector<Ranked> ranked;
    const std::string prefix = pkg.import_name + ".";
    for (const NativeFile& f : pkg.extension_modules) {
      if (!f.loadable_by_interpreter) continue;
      if (f.module == pkg.import_name) {
        ranked.push_back({0, 0, &f});  // `import pkg` is this module itself
        continue;
      }
      std::string_view rest =
          std::string_view(f.module).substr(f.module.starts_with(prefix) ? prefix.size() : 0);
      if (rest.find('.') != std::string_view::npos) {
        ranked.push_back({2, 0, &f});
        continue;
      }
      size_t at = word_at(init_text, rest);
      ranked.push_back({at == std::string::npos ? 1 : 0, at, &f});
    }
    std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
      if (a.group != b.group) return a.group < b.group;
      if (a.where != b.where) return a.where < b.where;
      return a.file->module < b.file->module;
    });
    const bool walked = !pkg.import_events.empty();
    for (const Ranked& r : ranked) {
      std::string note =
          r.group == 0 && r.file->module != pkg.import_name
              ? "inferred: named in " + pkg.import_name + "/__init__.py"
              : "inferred: an extension module of " + pkg.import_name + " (" + found_by + ")";
      if (walked) note += "; no module-level import reaches it";
      emit(*r.file, pkg.import_name, LoadTime::AtImport, note, StepSource::Inferred);
    }
  }

  // The first position of `word` in `text` as a whole identifier.
  static size_t word_at(std::string_view text, std::string_view word) {
    auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    for (size_t at = text.find(word); at != std::string_view::npos; at = text.find(word, at + 1)) {
      bool starts = at == 0 || !ident(text[at - 1]);
      bool ends = at + word.size() == text.size() || !ident(text[at + word.size()]);
      if (starts && ends) return at;
    }
    return std::string_view::npos;
  }

  // The first quoted 'libtbb.so.N' in numba/np/ufunc/parallel.py (the Linux
  // branch's name; the Windows and macOS names have no ".so."), else
  // libtbb.so.12, current numba's.
  std::string numba_libtbb_name(const ImportedPackage& pkg) {
    const std::string text =
        host.read_file(host::join_path(pkg.path, "np/ufunc/parallel.py"), 1 << 20).value_or("");
    for (size_t at = text.find("libtbb.so."); at != std::string::npos;
         at = text.find("libtbb.so.", at + 1)) {
      if (at == 0 || (text[at - 1] != '\'' && text[at - 1] != '"')) continue;
      const size_t end = text.find(text[at - 1], at);
      if (end == std::string::npos || end - at > 32) continue;
      const std::string name = text.substr(at, end - at);
      if (name.find_first_not_of("libtbso.0123456789") == std::string::npos) return name;
    }
    return "libtbb.so.12";
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
    // numba/np/ufunc/parallel.py _check_tbb_version_compatible(): before
    // trying tbbpool, ctypes.CDLL(libtbb_name), whether or not numba has a
    // tbbpool module; the library stays loaded when it loads (and when it
    // is missing the dlopen fails and numba moves on). The name is the one
    // that parallel.py gives for Linux: 'libtbb.so.2' up to numba 0.52
    // (Debian 11, TBB 2020), 'libtbb.so.12' since (oneTBB).
    if (order.front() == "tbbpool") {
      ImportStep s;
      s.import_name = statement;
      s.triggered_by = pkg.import_name;
      s.path = numba_libtbb_name(pkg);
      s.kind = NativeKind::Library;
      s.when = LoadTime::FirstParallelUse;
      s.note = "numba _check_tbb_version_compatible(): ctypes.CDLL(\"" + s.path + "\")";
      out.push_back(std::move(s));
    }
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

ImportPlan plan_imports(const Environment& env, const host::Host& host,
                        const std::vector<std::string>& imports) {
  ImportSetBuilder b(env, host);
  ImportPlan plan;
  for (const std::string& name : imports) {
    b.statement = name;
    const bool first_time = !b.imported.count(name);
    const size_t before = b.out.size();
    b.import(name);
    if (!first_time || b.out.size() != before) continue;
    const ImportedPackage* pkg = env.find_package(name);
    if (!pkg) {
      plan.unresolved.push_back({name, "not found on the interpreter's sys.path"});
    } else {
      // Imported but nothing new: fine when its native code came in earlier
      // (numpy after torch); otherwise it has none this model can see.
      bool has_native = false;
      for (const NativeFile& f : pkg->extension_modules) has_native |= f.loadable_by_interpreter;
      if (!has_native)
        plan.unresolved.push_back({name, pkg->extension_modules.empty()
                                             ? "no native module found (" + pkg->path + ")"
                                             : "no extension module this Python can load"});
    }
  }
  // Loads at first parallel use come after every import.
  std::vector<ImportStep> lazy;
  for (ImportStep& s : b.out)
    (s.when == LoadTime::AtImport ? plan.steps : lazy).push_back(std::move(s));
  for (ImportStep& s : lazy) plan.steps.push_back(std::move(s));
  return plan;
}

bool in_import_table(std::string_view import_name) {
  for (const PackageLoads& p : load_table())
    if (p.import_name.substr(0, p.import_name.find('.')) == import_name) return true;
  return false;
}

const std::vector<std::string>& usual_imports() {
  static const std::vector<std::string> five = {"torch", "numpy", "cv2", "sklearn", "numba"};
  return five;
}

std::vector<std::string> default_imports(const Environment& env) {
  std::vector<std::string> out = usual_imports();
  auto add = [&](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end() && env.find_package(name))
      out.push_back(name);
  };
  for (const PackageLoads& p : load_table()) add(std::string(p.import_name));
  // The other packages check examines (tensorflow, jax, deepspeed...): large
  // native stacks often loaded beside torch. The nvidia-* wheels' namespace
  // is loaded through RUNPATH, never imported, and `import llvmlite` loads
  // nothing (numba brings llvmlite.binding).
  for (const KnownPackage& k : known_packages())
    if (k.import_name != "nvidia" && k.import_name != "llvmlite") add(std::string(k.import_name));
  for (const Distribution& d : env.distributions) {
    if (d.shadowed_by || d.runtime_files.empty()) continue;
    for (const std::string& top : d.top_level) add(top);
  }
  return out;
}

}  // namespace mld::pyenv
