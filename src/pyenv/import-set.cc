// import-set.cc — what `import torch, numpy, cv2, sklearn, numba` dlopens,
// in order, without importing anything. Static TLS and OpenMP conflicts
// depend on the order in which objects enter the process (the first
// initial-exec TLS user that does not fit fails; the first OpenMP runtime
// loaded is the one later symbol lookups bind to), so the loader model needs
// this sequence, not just a set.
//
// The order is the import system's: ImportWalker (python-imports.cc) runs
// the import statements of every module the import reaches, depth first,
// across packages (sklearn's `from scipy.sparse import ...` enters scipy and
// then scipy.sparse, whose modules import numpy's), and each extension module
// it finds (by the interpreter's suffixes, in the package tree: whether or
// not RECORD lists it) is a dlopen at that point. Python imports a module
// once, so a package already imported adds nothing later.
//
// What no import statement shows comes from a table per package, each row
// checked against the real imports (test/e2e/import-table-drift.py on this
// machine and in the Debian roots): ctypes loads (torch's
// libtorch_global_deps before torch._C, llvmlite's library), imports an
// extension module's PyInit performs (Debian's cv2 loads numpy), numba's
// threading layer (loaded at the first parallel call, not at import),
// faiss's pick by CPU features, and the extension modules a real import
// loads that the walk might not reach (a dynamic import): those are placed
// where their module has run when the walk did not place them.
//
// Both branches of an `if` or `try` are followed, and a package named in
// the import set also replays its extension modules that no module-level
// import reaches (lazy or dynamic imports), after: loading more than the
// real import does only adds runtimes the job may load later anyway;
// loading fewer would hide them.
#include <algorithm>
#include <cctype>
#include <set>

#include "pyenv/pyenv.h"

namespace mld::pyenv {

namespace {

enum class StepType {
  Extension,  // first existing of `names` (dotted module names)
  // names[0], an extension module loaded only where the walk reaches its
  // package, in this order: when the walk loads a later Order step of the
  // same package, this one loads first (what PyInits import that no statement
  // shows); never added at the row's end.
  Order,
  Library,         // names[0]: a path relative to the top-level package, ctypes-loaded
  Import,          // names[0]: a module imported here (a PyInit's import)
  Cv2Native,       // opencv's native module, wherever the layout puts it
  NumbaThreading,  // numba.np.ufunc.{tbbpool,omppool,workqueue}, by NUMBA_THREADING_LAYER
  FaissSwig,       // faiss/loader.py: the _swigfaiss variant the CPU supports
};

struct TableStep {
  StepType type;
  std::vector<std::string_view> names;
  std::string_view note = {};
  // When: right before extension module `before` loads, or once module
  // `after` has run (an extension module: its PyInit); neither: once the
  // row's own module has run. A step already done by the walk adds nothing.
  std::string_view before = {};
  std::string_view after = {};
};

struct PackageLoads {
  std::string_view import_name;  // the module whose import the row describes
  std::vector<TableStep> steps;
  // Extension modules the walk must not load by itself: a step of the row
  // decides which (numba's threading layer, faiss's variant).
  std::vector<std::string_view> decided_by_row = {};
};

const std::vector<PackageLoads>& load_table() {
  using S = StepType;
  static const std::vector<PackageLoads> table = {
      {"torch",
       {{S::Library,
         {"lib/libtorch_global_deps.so"},
         "torch/__init__.py _load_global_deps(): ctypes.CDLL(..., RTLD_GLOBAL)",
         "torch._C"},
        {S::Extension, {"torch._C"}},
        {S::Import, {"numpy"}, "torch imports numpy after torch._C", {}, "torch._C"}}},
      // numpy 1.x imports numpy.random in its __init__ (numpy 2 only when
      // first used): the walk decides whether it loads, the row its order
      // (mtrand's Cython body imports _mt19937 first, which no statement
      // shows). Rows that loaded them unconditionally over-predicted 11
      // loads of `import numpy` in Debian 13 and unstable.
      {"numpy",
       {{S::Extension, {"numpy.core._multiarray_umath", "numpy._core._multiarray_umath"}},
        {S::Order, {"numpy.random.mtrand"}},
        {S::Order, {"numpy.random.bit_generator"}},
        {S::Order, {"numpy.random._common"}},
        {S::Order, {"numpy.random._bounded_integers"}},
        {S::Order, {"numpy.random._mt19937"}},
        {S::Order, {"numpy.random._philox"}},
        {S::Order, {"numpy.random._pcg64"}},
        {S::Order, {"numpy.random._sfc64"}},
        {S::Order, {"numpy.random._generator"}}}},
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
       {{S::Library,
         {"binding/libllvmlite.so"},
         "llvmlite.binding.ffi: ctypes.CDLL",
         {},
         "llvmlite.binding.ffi"}}},
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
        {S::NumbaThreading, {}}},
       /*decided_by_row=*/
       {"numba.np.ufunc.tbbpool", "numba.np.ufunc.omppool", "numba.np.ufunc.workqueue"}},
      {"faiss",
       {{S::Import, {"numpy"}}, {S::FaissSwig, {}}},
       /*decided_by_row=*/{"faiss._swigfaiss", "faiss._swigfaiss_avx2", "faiss._swigfaiss_avx512"}},
  };
  return table;
}

const PackageLoads* row_of(std::string_view module) {
  for (const PackageLoads& p : load_table())
    if (p.import_name == module) return &p;
  return nullptr;
}

std::string top_of(std::string_view module) {
  return std::string(module.substr(0, module.find('.')));
}

struct ImportSetBuilder {
  ImportSetBuilder(const Environment& e, const host::Host& h)
      : env(e),
        host(h),
        walker(
            h, [this](const std::string& top) { return env.find_package(top); }, problems) {
    walker.set_listener([this](const ImportEvent& ev) { on_event(ev); });
    for (const PackageLoads& row : load_table()) {
      for (std::string_view d : row.decided_by_row) decided.insert(std::string(d));
      for (const TableStep& st : row.steps)
        if (st.type == StepType::Extension || st.type == StepType::Order)
          for (std::string_view n : st.names) table_modules.insert(std::string(n));
    }
  }
  const Environment& env;
  const host::Host& host;
  std::vector<ScanProblem> problems;  // env.problems has them from the scan's walk
  ImportWalker walker;
  std::string statement;  // the top-level import being expanded
  std::set<std::string> emitted_paths;
  std::set<std::string> decided;        // extension modules a row's step places
  std::set<std::string> table_modules;  // extension modules a row names
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

  // `import name` as a statement of the job (or a row's import).
  void import(const std::string& name, const std::string& via) { walker.import(name, {}, via); }

  void on_event(const ImportEvent& e) {
    switch (e.kind) {
      case ImportEvent::Kind::Extension: {
        anchored_steps(e.name, /*before=*/true);
        if (decided.count(e.name)) return;
        const ImportedPackage* pkg = env.find_package(top_of(e.name));
        const NativeFile* f = pkg ? extension(*pkg, e.name) : nullptr;
        if (!f) return;
        const bool tabled = table_modules.count(e.name) > 0;
        // The table's order is the real one (an extension module's PyInit
        // imports others, which no statement shows): what its row places
        // before this module happens first.
        if (tabled) row_steps_before(e.name);
        emit(*f, pkg->import_name, LoadTime::AtImport,
             (tabled ? "imported at " : "inferred: imported at ") + e.via,
             tabled ? StepSource::Table : StepSource::Inferred);
        return;
      }
      case ImportEvent::Kind::ModuleDone:
        anchored_steps(e.name, /*before=*/false);
        if (const PackageLoads* row = row_of(e.name)) row_steps(*row);
        return;
      case ImportEvent::Kind::Package:
      case ImportEvent::Kind::Module: return;
    }
  }

  // The steps of every row anchored before or after `module`.
  void anchored_steps(const std::string& module, bool before) {
    for (const PackageLoads& row : load_table())
      for (const TableStep& st : row.steps)
        if ((before ? st.before : st.after) == module) do_step(row, st);
  }

  // The steps a started row places before extension module `module`.
  void row_steps_before(const std::string& module) {
    for (const PackageLoads& row : load_table()) {
      if (!walker.started(std::string(row.import_name))) continue;
      auto names = [&](const TableStep& st) {
        return (st.type == StepType::Extension || st.type == StepType::Order) &&
               std::find(st.names.begin(), st.names.end(), module) != st.names.end();
      };
      auto at = std::find_if(row.steps.begin(), row.steps.end(), names);
      if (at == row.steps.end()) continue;
      const std::string package = module.substr(0, module.rfind('.'));
      for (auto st = row.steps.begin(); st != at; ++st) {
        if (!st->before.empty() || !st->after.empty() || st->type == StepType::NumbaThreading)
          continue;
        if (st->type == StepType::Order &&
            (at->type != StepType::Order || !st->names[0].starts_with(package + ".")))
          continue;
        do_step(row, *st);
      }
    }
  }

  // The row's own steps once its module has run: what the walk did not do.
  void row_steps(const PackageLoads& row) {
    for (const TableStep& st : row.steps)
      if (st.before.empty() && st.after.empty() && st.type != StepType::Order) do_step(row, st);
  }

  void do_step(const PackageLoads& row, const TableStep& step) {
    const ImportedPackage* pkg = env.find_package(top_of(row.import_name));
    if (!pkg) return;
    const std::string& name = pkg->import_name;
    switch (step.type) {
      case StepType::Extension:
      case StepType::Order:
        for (std::string_view alt : step.names)
          if (const NativeFile* f = extension(*pkg, alt)) {
            if (emitted_paths.count(f->path)) break;
            // What the table anchors to this load happens around it.
            anchored_steps(std::string(alt), /*before=*/true);
            emit(*f, name, LoadTime::AtImport,
                 step.note.empty() ? "table: loaded by `import " + std::string(row.import_name) +
                                         "` (no import statement reaches it)"
                                   : std::string(step.note));
            anchored_steps(std::string(alt), /*before=*/false);
            break;
          }
        break;
      case StepType::Library: {
        std::string path = host::join_path(pkg->path, step.names[0]);
        for (const NativeFile& f : pkg->libraries)
          if (f.path == path) emit(f, name, LoadTime::AtImport, step.note);
        break;
      }
      case StepType::Import:
        import(std::string(step.names[0]), std::string(row.import_name) + " (table)");
        break;
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

  // A package named in the import set: its extension modules that no
  // module-level import reached, in the order its import most plausibly
  // loads them (those its __init__.py names first, then its other top-level
  // modules, then the deeper ones).
  void unreached_steps(const ImportedPackage& pkg) {
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
      if (!f.loadable_by_interpreter || emitted_paths.count(f.path) || decided.count(f.module))
        continue;
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
    for (const Ranked& r : ranked) {
      std::string note = r.group == 0 && r.file->module != pkg.import_name
                             ? "inferred: named in " + pkg.import_name + "/__init__.py"
                             : "inferred: an extension module of " + pkg.import_name;
      note += "; no module-level import reaches it";
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
    const bool first_time = !b.walker.started(name);
    const size_t before = b.out.size();
    b.import(name, "import " + name);
    const ImportedPackage* pkg = env.find_package(top_of(name));
    if (first_time && pkg && pkg->import_name == name && !in_import_table(name))
      b.unreached_steps(*pkg);
    if (!first_time || b.out.size() != before) continue;
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
