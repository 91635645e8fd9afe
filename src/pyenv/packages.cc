// packages.cc — where the packages whose native code causes trouble live,
// and which ELF files they bring. `import torch` is resolved the way
// importlib's FileFinder resolves it (per sys.path entry: a package directory
// with __init__, then a module file with one of the interpreter's suffixes;
// a bare directory only as a namespace portion), so a shadowed copy later on
// sys.path is named but not examined. Inside the package the walk is cheap on
// purpose — torch alone holds thousands of files: only names that can be a
// shared object (".so", ".so.N") are opened, and only their first 64 bytes,
// so the ELF header (not the name) decides what each is; only names that can
// be a directory are stat'ed, and headers, tests and caches are not entered.
// An extension module is what import can load: the interpreter's EXT_SUFFIX,
// ".abi3.so", or a plain ".so" that defines PyInit_<name> (the one case where
// the dynamic symbols are read). Everything else is a vendored library
// (torch/lib, auditwheel's <dist>.libs, nvidia/*/lib, mkl's <prefix>/lib).
#include <algorithm>
#include <deque>
#include <set>

#include "elf/elf.h"
#include "pyenv/pyenv.h"

namespace mld::pyenv {

const std::vector<KnownPackage>& known_packages() {
  static const std::vector<KnownPackage> known = {
      {"torch", {"torch"}},
      {"numpy", {"numpy"}},
      {"scipy", {"scipy"}},
      {"sklearn", {"scikit-learn"}},
      {"cv2",
       {"opencv-python", "opencv-python-headless", "opencv-contrib-python",
        "opencv-contrib-python-headless"}},
      {"numba", {"numba"}},
      {"llvmlite", {"llvmlite"}},
      {"tensorflow",
       {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tf-nightly"}},
      {"jax", {"jax"}},
      {"jaxlib", {"jaxlib"}},
      {"mkl", {"mkl-service"}},
      {"faiss", {"faiss-cpu", "faiss-gpu", "faiss"}},
      {"deepspeed", {"deepspeed"}},
      {"triton", {"triton", "pytorch-triton"}},
      {"nvidia", {}},  // the nvidia-*-cu1x CUDA wheels share this namespace
  };
  return known;
}

namespace {

// Distributions that install shared libraries outside site-packages
// (RECORD paths like "../../libiomp5.so", i.e. <prefix>/lib).
constexpr std::string_view kLibraryOnlyDistributions[] = {
    "mkl", "intel-openmp", "tbb", "intel-cmplr-lib-rt", "intel-cmplr-lib-ur", "dpcpp-cpp-rt"};

// Directories inside a package that import never loads native code from.
bool skipped_dir(std::string_view name) {
  static const std::set<std::string_view> skip = {
      "__pycache__", "include",  "tests",      "test",    "testing", "share",    "docs",
      "doc",         "examples", "benchmarks", "headers", "cmake",   "pkgconfig"};
  return skip.count(name) > 0;
}

bool named_like_shared_object(std::string_view name) {
  return name.ends_with(".so") || name.find(".so.") != std::string_view::npos;
}

// Names worth a stat to see whether they are directories: files inside
// packages almost always carry an extension ("x.py", "x.h", "x.json").
bool may_be_dir(std::string_view name) {
  // "python-3.11": opencv-python's per-version directory of cv2's module.
  return name.find('.') == std::string_view::npos || name.ends_with(".libs") ||
         name.ends_with(".dylibs") || name.starts_with("python-");
}

bool is_lib_dir_name(std::string_view name) {
  return name == "lib" || name == "lib64" || name.ends_with(".libs");
}

u16 machine_for(std::string_view machine) {
  if (machine == "x86_64") return elf::EM_X86_64;
  if (machine == "aarch64" || machine == "arm64") return elf::EM_AARCH64;
  if (machine == "ppc64le" || machine == "ppc64") return elf::EM_PPC64;
  if (machine == "s390x") return elf::EM_S390;
  if (machine == "riscv64") return elf::EM_RISCV;
  if (machine.size() == 4 && machine[0] == 'i' && machine.substr(2) == "86") return elf::EM_386;
  return 0;
}

struct PackageScanner {
  PackageScanner(const host::Host& h, const PythonFacts& p, std::vector<ScanProblem>& out)
      : host(h), py(p), problems(out) {}
  const host::Host& host;
  const PythonFacts& py;
  std::vector<ScanProblem>& problems;
  u16 expected_machine = 0;
  std::map<std::string, std::optional<std::vector<std::string>>> listings;

  static constexpr int kMaxDepth = 8;
  static constexpr size_t kMaxEntriesPerPackage = 200000;
  size_t entries_seen = 0;

  const std::vector<std::string>* list(const std::string& dir) {
    auto it = listings.find(dir);
    if (it == listings.end()) it = listings.emplace(dir, host.list_dir(dir)).first;
    return it->second ? &*it->second : nullptr;
  }
  bool listed_has(const std::string& dir, const std::string& name) {
    const std::vector<std::string>* names = list(dir);
    return names && std::binary_search(names->begin(), names->end(), name);
  }

  // The file's ELF header decides; nullopt (with a problem where it
  // matters) when it is no shared object. A file named as this
  // interpreter's extension module stays one when its header is damaged:
  // import dlopen()s it all the same and fails, and the replay says how.
  std::optional<NativeFile> classify(const std::string& path, bool in_lib_dir,
                                     const std::string& module_prefix) {
    const std::string name(base_name(path));
    std::string stem;
    bool named_extension = false;  // by its name alone, as import finds it
    if (!in_lib_dir) {
      if (!py.ext_suffix.empty() && name.ends_with(py.ext_suffix)) {
        stem = name.substr(0, name.size() - py.ext_suffix.size());
        named_extension = true;
      } else if (name.ends_with(".abi3.so")) {
        stem = name.substr(0, name.size() - 8);
        named_extension = true;
      } else if (std::string abi3 = multiarch_abi3_suffix();
                 !abi3.empty() && name.ends_with(abi3)) {
        stem = name.substr(0, name.size() - abi3.size());
        named_extension = true;
      }
    }
    auto module_name = [&](const std::string& s) {
      return module_prefix.empty() ? s : module_prefix + "." + s;
    };
    auto damaged = [&](const std::string& what) -> std::optional<NativeFile> {
      problems.push_back({path, what});
      if (!named_extension) return std::nullopt;
      NativeFile f;
      f.path = path;
      f.kind = NativeKind::ExtensionModule;
      f.module = module_name(stem);
      f.e_machine = expected_machine;
      return f;
    };
    std::string why;
    std::optional<std::string> head = host.read_file(path, 64, &why);
    if (!head) {
      host::FileStat st = host.stat(path);
      if (st.kind == host::FileKind::Directory) return std::nullopt;
      std::optional<std::string> target = host.read_link(path);
      if (target && st.kind == host::FileKind::Missing)
        problems.push_back({path, "dangling symlink to " + *target});
      else
        problems.push_back({path, "cannot read: " + why});
      return std::nullopt;
    }
    ByteView bytes(*head);
    if (!elf::has_elf_magic(bytes)) {
      // Linker scripts named libfoo.so are normal in lib directories.
      if (head->starts_with("/*") || head->starts_with("INPUT") || head->starts_with("GROUP") ||
          head->starts_with("OUTPUT_FORMAT"))
        return std::nullopt;
      return damaged("named like a shared object but not an ELF file");
    }
    if (bytes.size() < 20) return damaged("truncated ELF header");
    u8 ei_class = bytes.u8_at(4), ei_data = bytes.u8_at(5);
    if ((ei_class != 1 && ei_class != 2) || (ei_data != 1 && ei_data != 2))
      return damaged("invalid ELF class or byte order");
    bool be = ei_data == 2;
    u16 e_type = bytes.u16_at(16, be);
    if (e_type != elf::ET_DYN)
      return damaged("not a shared object (e_type " + std::to_string(e_type) + ")");
    NativeFile f;
    f.path = path;
    f.is_64 = ei_class == 2;
    f.e_machine = bytes.u16_at(18, be);
    if (expected_machine && f.e_machine != expected_machine)
      problems.push_back({path, "built for " + std::string(elf::machine_name(f.e_machine)) +
                                    ", the interpreter is " + py.machine});
    if (std::optional<std::string> target = host.read_link(path))
      f.link_target = host::normalize_path(
          target->front() == '/' ? *target : host::join_path(host::dir_name(path), *target));

    bool extension = named_extension;
    if (!in_lib_dir && !extension) {
      if (size_t tag = name.find(".cpython-"); tag != std::string::npos && name.ends_with(".so")) {
        stem = name.substr(0, tag);
        extension = true;
        f.loadable_by_interpreter = false;
        problems.push_back({path, "extension module for another Python (" +
                                      name.substr(tag + 1, name.size() - tag - 4) +
                                      "), import skips it"});
      } else if (name.ends_with(".so") && name.find('.') == name.size() - 3) {
        stem = name.substr(0, name.size() - 3);
        extension = defines_pyinit(path, stem);
      }
    }
    if (extension) {
      f.kind = NativeKind::ExtensionModule;
      f.module = module_name(stem);
    } else {
      f.kind = NativeKind::Library;
    }
    return f;
  }

  // A plain "x.so" outside lib directories is an extension module only if it
  // exports PyInit_x: the one case that reads the dynamic symbols.
  bool defines_pyinit(const std::string& path, const std::string& stem) {
    try {
      elf::ElfFile e = elf::ElfFile::parse(host.open_sparse(path));
      std::string want = "PyInit_" + stem;
      for (const elf::DynamicSymbol& s : e.dynamic_symbols())
        if (s.defined() && s.name == want) return true;
    } catch (const ParseError& e) {
      problems.push_back({path, std::string("corrupt ELF: ") + e.what()});
    } catch (const IoError& e) {
      problems.push_back({path, e.what()});
    }
    return false;
  }

  // Walks one package directory. `module_prefix` is the dotted name of
  // `dir` ("numba.np.ufunc"); empty below a lib directory.
  void walk(const std::string& dir, const std::string& module_prefix, int depth, bool in_lib_dir,
            std::set<host::FileId>& visited, std::vector<NativeFile>& out) {
    host::FileStat st = host.stat(dir);
    if (st.kind != host::FileKind::Directory) return;
    if (!visited.insert(st.id).second) {
      problems.push_back(
          {dir, "directory cycle (a symlink back to an enclosing directory); not entered again"});
      return;
    }
    const std::vector<std::string>* names = list(dir);
    if (!names) {
      problems.push_back({dir, "cannot list directory"});
      return;
    }
    for (const std::string& name : *names) {
      if (++entries_seen > kMaxEntriesPerPackage) {
        if (entries_seen == kMaxEntriesPerPackage + 1)
          problems.push_back({dir, "package walk stopped after " +
                                       std::to_string(kMaxEntriesPerPackage) + " entries"});
        return;
      }
      std::string path = host::join_path(dir, name);
      if (named_like_shared_object(name)) {
        if (std::optional<NativeFile> f = classify(path, in_lib_dir, module_prefix))
          out.push_back(std::move(*f));
        continue;
      }
      if (!may_be_dir(name) || skipped_dir(name) || depth >= kMaxDepth) continue;
      host::FileStat sub = host.stat(path);
      if (sub.kind == host::FileKind::Error) {
        problems.push_back({path, errno_text(sub.error)});
        continue;
      }
      if (sub.kind != host::FileKind::Directory) continue;
      bool lib = in_lib_dir || is_lib_dir_name(name);
      walk(path, lib || name.find('.') != std::string::npos ? "" : module_prefix + "." + name,
           depth + 1, lib, visited, out);
    }
    // Listings of walked directories are not needed again.
    listings.erase(dir);
  }

  // Debian's newer interpreters also import the stable ABI with the multiarch tag
  // of their EXT_SUFFIX (".abi3-x86_64-linux-gnu.so", sid's psutil): from
  // ".cpython-314-x86_64-linux-gnu.so", the tag after the version.
  std::string multiarch_abi3_suffix() const {
    // Seen in 3.13 (trixie) and 3.14 (sid); bookworm's 3.11 has no such suffix.
    if (py.major == 3 && py.minor < 13 && py.minor != 0) return "";
    const std::string& e = py.ext_suffix;
    if (!e.starts_with(".cpython-") || !e.ends_with("-linux-gnu.so")) return "";
    size_t dash = e.find('-', 9);
    if (dash == std::string::npos) return "";
    return ".abi3" + e.substr(dash);
  }

  std::vector<std::string> module_suffixes() const {
    std::vector<std::string> s;
    if (!py.ext_suffix.empty()) s.push_back(py.ext_suffix);
    s.push_back(".abi3.so");
    if (std::string abi3 = multiarch_abi3_suffix(); !abi3.empty()) s.push_back(abi3);
    s.push_back(".so");
    s.push_back(".py");
    s.push_back(".pyc");
    return s;
  }

  // importlib's FileFinder over sys.path for one top-level name.
  std::optional<ImportedPackage> resolve(const std::string& import_name) {
    std::optional<ImportedPackage> found;
    std::vector<std::pair<std::string, std::string>> portions;  // path, site dir
    std::vector<std::string> suffixes = module_suffixes();
    std::set<std::string> seen_dirs;
    for (const std::string& entry : py.sys_path) {
      if (entry.empty() || entry.front() != '/' || !seen_dirs.insert(entry).second) continue;
      if (!list(entry)) continue;
      std::optional<std::pair<ImportKind, std::string>> hit;
      if (listed_has(entry, import_name)) {
        std::string dir = host::join_path(entry, import_name);
        if (host.stat(dir).kind == host::FileKind::Directory) {
          bool regular = false;
          for (const std::string& s : suffixes)
            if (listed_has(dir, "__init__" + s)) regular = true;
          if (regular)
            hit = {ImportKind::Package, dir};
          else if (!found)
            portions.push_back({dir, entry});
        }
      }
      if (!hit)
        for (const std::string& s : suffixes)
          if (listed_has(entry, import_name + s)) {
            hit = {ImportKind::Module, host::join_path(entry, import_name + s)};
            break;
          }
      if (!hit) continue;
      if (found) {
        found->shadowed_paths.push_back(hit->second);
        continue;
      }
      found = ImportedPackage{};
      found->import_name = import_name;
      found->kind = hit->first;
      found->path = hit->second;
      found->site_dir = entry;
    }
    if (!found && !portions.empty()) {
      found = ImportedPackage{};
      found->import_name = import_name;
      found->kind = ImportKind::Namespace;
      found->path = portions.front().first;
      found->site_dir = portions.front().second;
      for (auto& [p, site] : portions) found->namespace_portions.push_back(p);
    }
    return found;
  }
};

// Splits walked files into the package's two lists, sorted.
void file_natives(ImportedPackage& pkg, std::vector<NativeFile>& files) {
  for (NativeFile& f : files)
    (f.kind == NativeKind::ExtensionModule ? pkg.extension_modules : pkg.libraries)
        .push_back(std::move(f));
  auto by_path = [](const NativeFile& a, const NativeFile& b) { return a.path < b.path; };
  std::sort(pkg.extension_modules.begin(), pkg.extension_modules.end(), by_path);
  std::sort(pkg.libraries.begin(), pkg.libraries.end(), by_path);
}

// The distribution that installed `pkg`: one naming it (top_level.txt, or a
// known distribution name) in the package's own site directory, else the
// first elsewhere. Two in the same directory claiming one import name (a
// renamed fork installed over the original: opencv-python and
// opencv-python-headless) are noted: they overwrite each other's files.
const Distribution* owning_distribution(const std::vector<Distribution>& dists,
                                        const ImportedPackage& pkg, const KnownPackage* known,
                                        std::vector<ScanProblem>& problems) {
  const Distribution* best = nullptr;
  const Distribution* same_dir = nullptr;
  for (const Distribution& d : dists) {
    if (d.shadowed_by) continue;
    bool named =
        std::find(d.top_level.begin(), d.top_level.end(), pkg.import_name) != d.top_level.end();
    if (!named && known)
      for (std::string_view k : known->distributions)
        if (d.normalized_name == k) named = true;
    if (!named) continue;
    if (d.site_dir == pkg.site_dir) {
      if (!same_dir) {
        same_dir = &d;
      } else {
        problems.push_back({pkg.path, "import name " + pkg.import_name +
                                          " is claimed by two distributions, " + same_dir->name +
                                          " " + same_dir->version + " and " + d.name + " " +
                                          d.version + ": their files overwrite each other; " +
                                          same_dir->name + " is named as the owner"});
      }
    }
    if (!best) best = &d;
  }
  return same_dir ? same_dir : best;
}

// The file names of OpenMP, BLAS, TBB and CUDA runtimes: what makes an
// unknown package worth replaying by default. Vendored copies carry
// auditwheel's hash ("libgomp-a34b3233.so.1").
bool names_a_runtime(std::string_view file) {
  static constexpr std::string_view kRuntimes[] = {
      "libgomp", "libomp",    "libiomp5",  "libopenblas", "libmkl_", "libblis",
      "libtbb",  "libcudart", "libcublas", "libcudnn",    "libnccl"};
  if (!named_like_shared_object(file)) return false;
  for (std::string_view r : kRuntimes)
    if (file.starts_with(r)) return true;
  return false;
}

// What a distribution's RECORD says about the package it installed, checked
// against the tree the import system reads. RECORD never decides what is
// loaded (an editable install, `build_ext --inplace` or a hand copy leaves
// extension modules it does not list, and import loads them all the same);
// its entries are read as text and noted when they name nothing, climb out
// of the site directory with "..", or leave out an extension module. Nothing
// is read through a ".." entry.
void check_record(const host::Host& host, const Distribution& d, const ImportedPackage& pkg,
                  std::vector<ScanProblem>& problems) {
  std::vector<std::string> entries = record_entries(host, d);
  if (entries.empty()) return;
  const std::string record = d.metadata_path + "/RECORD";
  std::set<std::string> listed;
  std::vector<std::string> missing;
  size_t checked = 0;
  for (const std::string& e : entries) {
    const bool climbs = e == ".." || e.starts_with("../") || e.find("/../") != std::string::npos ||
                        e.ends_with("/..");
    if (climbs || e.front() == '/') {
      // Library-only distributions (mkl, intel-openmp) place theirs in
      // <prefix>/lib on purpose; a package's own RECORD has no business there.
      problems.push_back(
          {record, "lists " + e + (climbs ? ", a path with \"..\"" : ", an absolute path") + " (" +
                       host::normalize_path(e.front() == '/' ? e : host::join_path(d.site_dir, e)) +
                       "): not read; only what the import system finds under " + pkg.path +
                       " is replayed"});
      continue;
    }
    std::string p = host::normalize_path(host::join_path(d.site_dir, e));
    listed.insert(p);
    // Only the package's own files are looked at: one stat each, bounded.
    if (!p.starts_with(pkg.path + "/") || ++checked > 100000) continue;
    if (host.stat(p).kind == host::FileKind::Missing && !p.ends_with(".pyc")) missing.push_back(p);
  }
  for (size_t i = 0; i < missing.size() && i < 20; i++)
    problems.push_back({missing[i], "listed in " + d.name + "'s RECORD but missing"});
  if (missing.size() > 20)
    problems.push_back({record, std::to_string(missing.size() - 20) +
                                    " more files listed but missing under " + pkg.path});
  for (const NativeFile& f : pkg.extension_modules)
    if (!listed.count(f.path) && !(f.link_target && listed.count(*f.link_target)))
      problems.push_back({f.path, "extension module " + f.module + " is not in " + d.name +
                                      "'s RECORD (an editable or in-place build, or a copy): " +
                                      "replayed as the import system finds it"});
}

}  // namespace

const Distribution* Environment::find_distribution(std::string_view name) const {
  std::string want = normalize_distribution_name(name);
  for (const Distribution& d : distributions)
    if (!d.shadowed_by && d.normalized_name == want) return &d;
  return nullptr;
}

const ImportedPackage* Environment::find_package(std::string_view import_name) const {
  for (const ImportedPackage& p : packages)
    if (p.import_name == import_name) return &p;
  return nullptr;
}

Environment scan_with_facts(const host::Host& host, InterpreterChoice interpreter,
                            PythonFacts python, const std::vector<std::string>& packages) {
  Environment env;
  env.interpreter = std::move(interpreter);
  env.python = std::move(python);
  env.problems = env.python.unexecuted_pth_imports;
  for (ScanProblem& p : env.problems)
    p.what = ".pth import line not executed (layout inference): " + p.what;
  env.distributions = find_distributions(host, env.python.sys_path, env.problems);

  PackageScanner scanner(host, env.python, env.problems);
  scanner.expected_machine = machine_for(env.python.machine);
  std::set<std::string> attributed_libs_dirs;
  std::vector<std::string> wanted = packages;
  if (wanted.empty())
    for (const KnownPackage& k : known_packages()) wanted.emplace_back(k.import_name);
  // Distributions that vendor a runtime (by RECORD): their packages are
  // examined too, since they are part of check's default import set.
  for (Distribution& d : env.distributions) {
    if (d.shadowed_by || d.format != MetadataFormat::DistInfo) continue;
    std::vector<ScanProblem> ignored;  // read again, and noted, if examined
    for (const std::string& p : record_paths(host, d, ignored))
      if (names_a_runtime(base_name(p))) d.runtime_files.push_back(p);
    if (d.runtime_files.empty()) continue;
    for (const std::string& top : d.top_level)
      if (std::find(wanted.begin(), wanted.end(), top) == wanted.end()) wanted.push_back(top);
  }

  // The standard library's own directories: its packages are not followed
  // (their native code is CPython's lib-dynload, loaded by the interpreter).
  auto stdlib_dir = [&](const std::string& dir) {
    if (dir.find("-packages") != std::string::npos) return false;
    for (const std::string& prefix : {env.python.base_prefix, env.python.prefix})
      if (!prefix.empty() &&
          (dir.starts_with(prefix + "/lib/python") || dir.starts_with(prefix + "/lib64/python")))
        return true;
    return false;
  };
  auto scan_one = [&](const std::string& name) -> std::optional<ImportedPackage> {
    const KnownPackage* known = nullptr;
    for (const KnownPackage& k : known_packages())
      if (k.import_name == name) known = &k;
    std::optional<ImportedPackage> pkg = scanner.resolve(name);
    if (!pkg || stdlib_dir(pkg->site_dir)) return std::nullopt;
    scanner.entries_seen = 0;
    const Distribution* owner = owning_distribution(env.distributions, *pkg, known, env.problems);
    if (owner) {
      pkg->distribution = owner->name;
      pkg->version = owner->version;
    }
    // The files as the import system sees them: the package's tree.
    std::vector<NativeFile> files;
    std::set<host::FileId> visited;
    if (pkg->kind == ImportKind::Module) {
      if (named_like_shared_object(pkg->path))
        if (std::optional<NativeFile> f = scanner.classify(pkg->path, false, ""))
          files.push_back(std::move(*f));
    } else {
      std::vector<std::string> roots =
          pkg->kind == ImportKind::Namespace ? pkg->namespace_portions : std::vector{pkg->path};
      for (const std::string& root : roots) scanner.walk(root, name, 0, false, visited, files);
    }
    // auditwheel's <dist>.libs beside the package.
    if (pkg->distribution) {
      std::string want = normalize_distribution_name(*pkg->distribution);
      if (const std::vector<std::string>* names = scanner.list(pkg->site_dir))
        for (const std::string& n : *names)
          if (n.ends_with(".libs") &&
              normalize_distribution_name(n.substr(0, n.size() - 5)) == want) {
            std::string dir = host::join_path(pkg->site_dir, n);
            attributed_libs_dirs.insert(dir);
            scanner.walk(dir, "", 0, true, visited, files);
          }
    }
    for (NativeFile& f : files) {
      f.import_name = name;
      if (pkg->distribution) f.distribution = *pkg->distribution;
      // nvidia/<component>/lib: name the component and its wheel.
      if (name == "nvidia") {
        size_t at = f.path.find("/nvidia/");
        if (at != std::string::npos) {
          std::string component = f.path.substr(at + 8, f.path.find('/', at + 8) - at - 8);
          f.import_name = "nvidia." + component;
          std::string prefix = "nvidia-" + normalize_distribution_name(component);
          for (const Distribution& d : env.distributions)
            if (!d.shadowed_by &&
                (d.normalized_name == prefix || d.normalized_name.starts_with(prefix + "-cu")))
              f.distribution = d.name;
        }
      }
    }
    file_natives(*pkg, files);
    if (owner && pkg->kind == ImportKind::Package) check_record(host, *owner, *pkg, env.problems);
    return pkg;
  };

  // The packages asked for, then every other package their imports reach
  // (sklearn → scipy → numpy, deepspeed → torch), found by running their
  // import statements the way Python would: scanned on first reach.
  std::deque<ImportedPackage> scanned;
  std::map<std::string, const ImportedPackage*> by_name;
  std::set<std::string> tried;
  auto package = [&](const std::string& top) -> const ImportedPackage* {
    if (auto it = by_name.find(top); it != by_name.end()) return it->second;
    if (!tried.insert(top).second) return nullptr;
    std::optional<ImportedPackage> pkg = scan_one(top);
    if (!pkg) return nullptr;
    scanned.push_back(std::move(*pkg));
    return by_name[top] = &scanned.back();
  };
  for (const std::string& name : wanted) package(name);
  const size_t asked = scanned.size();
  ImportWalker walker(host, package, env.problems);
  for (const std::string& name : wanted)
    if (by_name.count(name)) walker.import(name, {}, name);
  for (size_t i = asked; i < scanned.size(); i++) scanned[i].reached_by_imports = true;
  for (ImportedPackage& p : scanned) env.packages.push_back(std::move(p));

  // Other auditwheel directories on sys.path.
  std::set<std::string> seen;
  for (const std::string& entry : env.python.sys_path) {
    if (entry.empty() || entry.front() != '/' || !seen.insert(entry).second) continue;
    const std::vector<std::string>* names = scanner.list(entry);
    if (!names) continue;
    for (const std::string& n : *names) {
      if (!n.ends_with(".libs") || n.size() <= 5) continue;
      std::string dir = host::join_path(entry, n);
      if (attributed_libs_dirs.count(dir)) continue;
      std::vector<NativeFile> files;
      std::set<host::FileId> visited;
      scanner.entries_seen = 0;
      scanner.walk(dir, "", 0, true, visited, files);
      const Distribution* d = env.find_distribution(n.substr(0, n.size() - 5));
      for (NativeFile& f : files) {
        if (d) {
          f.distribution = d->name;
          if (!d->top_level.empty()) f.import_name = d->top_level.front();
        }
        env.other_libraries.push_back(std::move(f));
      }
    }
  }
  // Libraries that RECORD places outside site-packages.
  for (const Distribution& d : env.distributions) {
    if (d.shadowed_by) continue;
    bool library_only = false;
    for (std::string_view k : kLibraryOnlyDistributions) library_only |= d.normalized_name == k;
    if (!library_only) continue;
    for (const std::string& p : record_paths(host, d, env.problems)) {
      std::string name = p.substr(p.rfind('/') + 1);
      if (!named_like_shared_object(name) || p.starts_with(d.site_dir + "/")) continue;
      if (std::optional<NativeFile> f = scanner.classify(p, true, "")) {
        f->distribution = d.name;
        env.other_libraries.push_back(std::move(*f));
      }
    }
  }
  return env;
}

Environment scan_environment(const host::Host& host, const ScanOptions& options) {
  InterpreterChoice choice = choose_interpreter(host, options.python);
  // A snapshot holds the answer the interpreter gave when it was taken:
  // that, not the layout, is what the live check saw.
  if (std::optional<std::string> recorded = host.recorded_fact(probe_fact_name(choice.path))) {
    PythonFacts facts = parse_probe_answer(*recorded, choice.path + " (recorded): ");
    return scan_with_facts(host, std::move(choice), std::move(facts), options.packages);
  }
  std::string timed_out;
  if (options.run_interpreter && host.is_live_root()) {
    // A live shim is simply run: pyenv makes its own choice.
    try {
      PythonFacts facts = probe_interpreter(host, choice.path, options.probe);
      return scan_with_facts(host, std::move(choice), std::move(facts), options.packages);
    } catch (const ProbeTimeout& e) {
      // What does not need the interpreter to answer is still there to
      // read: its layout, as under --root.
      timed_out = e.what();
    }
  }
  // A pyenv shim has no layout of its own: the layout is that of the
  // interpreter pyenv would run.
  std::string layout_of = choice.path;
  try {
    if (std::optional<PyenvShim> shim = read_pyenv_shim(host, choice.path)) {
      if (!shim->target) throw PyenvError(choice.path + ": a pyenv shim; " + shim->error);
      layout_of = *shim->target;
      choice.reason +=
          ", a pyenv shim for " + shim->version +
          (shim->version_origin.empty() ? " (no version set)" : " set by " + shim->version_origin);
    }
    PythonFacts facts = infer_from_layout(host, layout_of);
    facts.probe_error = timed_out;
    return scan_with_facts(host, std::move(choice), std::move(facts), options.packages);
  } catch (const PyenvError& e) {
    if (timed_out.empty()) throw;
    throw ProbeTimeout(timed_out + "; nor does its layout describe it: " + e.what());
  }
}

std::vector<FoundPackage> find_known_packages(const host::Host& host, const PythonFacts& python,
                                              std::vector<ScanProblem>& problems) {
  // Import resolution needs only directory listings; the metadata (every
  // distribution's, a few hundred files in Debian's dist-packages) is read
  // only when a known package is there to be owned.
  PackageScanner scanner(host, python, problems);
  std::vector<std::pair<const KnownPackage*, ImportedPackage>> resolved;
  for (const KnownPackage& k : known_packages())
    if (std::optional<ImportedPackage> pkg = scanner.resolve(std::string(k.import_name)))
      resolved.emplace_back(&k, std::move(*pkg));
  if (resolved.empty()) return {};
  std::vector<Distribution> dists = find_distributions(host, python.sys_path, problems);
  std::vector<FoundPackage> out;
  for (const auto& [known, pkg] : resolved) {
    FoundPackage f;
    f.import_name = pkg.import_name;
    if (const Distribution* owner = owning_distribution(dists, pkg, known, problems)) {
      f.distribution = owner->name;
      f.version = owner->version;
    }
    out.push_back(std::move(f));
  }
  return out;
}

namespace {

// "#define AT_MKL_ENABLED() 1" / "#define AT_PARALLEL_OPENMP 1".
std::optional<bool> config_switch(std::string_view text, std::string_view macro) {
  const std::string key = "#define " + std::string(macro);
  size_t pos = text.find(key);
  while (pos != std::string_view::npos) {
    size_t after = pos + key.size();
    if (after < text.size() && (text[after] == ' ' || text[after] == '\t')) {
      std::string_view v = trim(text.substr(after, text.find('\n', after) - after));
      if (v == "1") return true;
      if (v == "0") return false;
      return std::nullopt;
    }
    pos = text.find(key, after);
  }
  return std::nullopt;
}

}  // namespace

// torch/version.py holds `__version__ = '2.1.0+cu121'` and `cuda = '12.1'`
// (or `cuda = None` for a CPU build), written by torch's build; read as
// text, never imported.
TorchBuild torch_build(const host::Host& host, const Environment& env) {
  TorchBuild b;
  const ImportedPackage* t = env.find_package("torch");
  if (!t) return b;
  std::optional<std::string> cuda, version;
  if (std::optional<std::string> text =
          host.read_file(host::join_path(t->path, "version.py"), 1 << 16)) {
    cuda = line_field(*text, "cuda", '=');
    version = line_field(*text, "__version__", '=');
  }
  b.known = cuda || version;
  if (cuda && !cuda->empty() && *cuda != "None") b.cuda = *cuda;
  // Without version.py or its __version__ (hand-made builds): the
  // distribution's version.
  if (!version || version->empty() || *version == "None") version = t->version;
  if (version) {
    b.version = *version;
    int major = 0, minor = 0;
    size_t i = 0;
    auto number = [&](int& out) {
      size_t start = i;
      while (i < b.version.size() && b.version[i] >= '0' && b.version[i] <= '9' && i - start < 6)
        out = out * 10 + (b.version[i++] - '0');
      return i > start;
    };
    if (number(major) && i < b.version.size() && b.version[i] == '.' && (++i, number(minor))) {
      b.major = major;
      b.minor = minor;
    }
  }
  const std::string config = host::join_path(t->path, "include/ATen/Config.h");
  if (std::optional<std::string> h = host.read_file(config, 1 << 16)) {
    b.config_h = config;
    b.parallel_openmp = config_switch(*h, "AT_PARALLEL_OPENMP");
    b.parallel_native = config_switch(*h, "AT_PARALLEL_NATIVE");
    b.mkl_enabled = config_switch(*h, "AT_MKL_ENABLED()");
    b.mkl_sequential = config_switch(*h, "AT_MKL_SEQUENTIAL()");
  }
  return b;
}

}  // namespace mld::pyenv
