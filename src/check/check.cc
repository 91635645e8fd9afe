// check.cc — the preflight's orchestration: collect the host and environment
// facts, describe the Python environment without importing it, and replay the
// usual import set through the loader model as one process: the interpreter
// loaded as the program, then one dlopen() per extension module in the order
// `import torch, numpy, ...` performs them. That replay is what makes the
// order-dependent failures predictable — which OpenMP runtime is first, which
// import runs out of static TLS, which libstdc++ answers a GLIBCXX need.
#include "check/check.h"

#include <algorithm>
#include <future>
#include <map>
#include <set>

namespace mld::check {

namespace {

u16 machine_of(const std::string& python_machine) {
  if (python_machine == "aarch64") return elf::EM_AARCH64;
  return elf::EM_X86_64;
}

bool is_numba_layer(const pyenv::ImportStep& s) {
  return s.when == pyenv::LoadTime::FirstParallelUse && s.module.starts_with("numba.np.ufunc.");
}

std::string layer_name(const std::string& module) {
  if (module.ends_with("tbbpool")) return "tbb";
  if (module.ends_with("omppool")) return "omp";
  return "workqueue";
}

// Replays `steps` into the interpreter's process. numba lists every
// threading-layer candidate; the first whose dlopen succeeds wins and the
// others never load.
ImportSimulation simulate(loader::Loader& loader, const std::string& program, loader::Process start,
                          pyenv::ImportPlan plan, const loader::StaticTlsParams& params) {
  ImportSimulation sim;
  sim.program = program;
  sim.unresolved = std::move(plan.unresolved);
  std::vector<pyenv::ImportStep> steps = std::move(plan.steps);

  std::vector<size_t> candidates;
  for (size_t i = 0; i < steps.size(); i++)
    if (is_numba_layer(steps[i])) candidates.push_back(i);
  if (candidates.size() > 1) {
    // A candidate fails to load when its dependencies are missing (static
    // TLS could fail it too, but none of numba's layers uses initial-exec
    // TLS): resolve each on a copy of the start process, without replaying
    // the static TLS of the whole sequence.
    std::optional<size_t> winner;
    for (size_t i : candidates) {
      loader::Process trial = start;
      std::string error;
      loader.dlopen(trial, steps[i].path, std::nullopt, &error);
      bool missing = !error.empty();
      for (const loader::Object& o : trial.objects) missing |= o.faked;
      if (!missing) {
        winner = i;
        break;
      }
    }
    std::vector<pyenv::ImportStep> kept;
    for (size_t i = 0; i < steps.size(); i++)
      if (!is_numba_layer(steps[i]) || (winner && i == *winner)) kept.push_back(steps[i]);
    steps = std::move(kept);
  }
  for (const pyenv::ImportStep& s : steps)
    if (is_numba_layer(s)) sim.numba_layer = layer_name(s.module);

  std::vector<std::string> paths;
  for (const pyenv::ImportStep& s : steps) paths.push_back(s.path);
  sim.process = std::move(start);
  sim.sequence = loader::simulate_dlopen_sequence(loader, sim.process, paths, params);
  sim.steps = std::move(steps);
  append_mkl_first_call(loader, sim, params);

  // Who brought each object: the interpreter, or the first step whose
  // dlopen() added it.
  std::map<std::string, std::string> by_path;
  for (size_t i = 0; i < sim.sequence.steps.size() && i < sim.steps.size(); i++)
    for (const std::string& p : sim.sequence.steps[i].loaded)
      by_path.emplace(p, describe_step(sim.steps[i]));
  const std::string interp = "the interpreter (" + program + ")";
  for (size_t i = 0; i < sim.process.objects.size(); i++) {
    const loader::Object& o = sim.process.objects[i];
    auto it = by_path.find(o.path);
    sim.loaded_by.push_back(it != by_path.end() ? it->second : interp);
    if (o.faked || o.removed || !o.elf) continue;
    loader::OpenMpKind k = loader::openmp_kind(o);
    if (k == loader::OpenMpKind::None) continue;
    OpenMpRuntime r;
    r.path = o.path;
    r.soname = o.names.empty() ? o.path : o.names.back();
    if (std::optional<std::string_view> so = o.elf->soname()) r.soname = std::string(*so);
    r.kind = k;
    r.brought_by = sim.loaded_by.back();
    r.load_index = i;
    sim.openmp.push_back(std::move(r));
  }
  return sim;
}

// Who installed each native file: what a user can act on ("upgrade
// opencv-python-headless"), where a path alone says little.
std::map<std::string, std::string> native_file_owners(const pyenv::Environment& env) {
  std::map<std::string, std::string> owners;
  auto add = [&](const pyenv::NativeFile& f) {
    if (f.distribution.empty()) return;
    const pyenv::Distribution* d = env.find_distribution(f.distribution);
    std::string owner = f.distribution + (d ? " " + d->version : "");
    owners.emplace(host::normalize_path(f.path), owner);
    if (f.link_target) owners.emplace(host::normalize_path(*f.link_target), owner);
  };
  for (const pyenv::ImportedPackage& p : env.packages) {
    for (const pyenv::NativeFile& f : p.extension_modules) add(f);
    for (const pyenv::NativeFile& f : p.libraries) add(f);
  }
  for (const pyenv::NativeFile& f : env.other_libraries) add(f);
  return owners;
}

int severity_rank(Severity s) { return s == Severity::Error ? 0 : s == Severity::Warning ? 1 : 2; }

}  // namespace

namespace {

u16 native_machine() {
#if defined(__aarch64__)
  return elf::EM_AARCH64;
#else
  return elf::EM_X86_64;
#endif
}

struct ScanResult {
  std::optional<pyenv::Environment> env;
  std::string error;
  bool timed_out = false;
};

// The files the check did not read because they are not regular files: the
// `.pth` files the probe skipped (with what site.py does to them), then
// every other refusal of the host, by path.
std::vector<pyenv::ScanProblem> files_not_read(const host::Host& host, const CheckReport& r) {
  std::vector<pyenv::ScanProblem> out;
  if (r.python) out = r.python->python.unread_pth;
  for (const host::RefusedFile& f : host.refused_files())
    if (std::none_of(out.begin(), out.end(),
                     [&](const pyenv::ScanProblem& p) { return p.path == f.path; }))
      out.push_back({f.path, f.why + ": not read"});
  return out;
}

}  // namespace

std::string describe_step(const pyenv::ImportStep& s) {
  std::string d = "import " + s.import_name;
  std::string what = s.module.empty() ? s.path.substr(s.path.rfind('/') + 1) : s.module;
  if (s.when == pyenv::LoadTime::FirstParallelUse) d = s.import_name + "'s first parallel call";
  if (s.when == pyenv::LoadTime::MklFirstCall) d = s.import_name + "'s first MKL call";
  return d + " (" + what + ")";
}

const std::vector<std::string>& stack_library_sonames() {
  static const std::vector<std::string> names = {
      "libcuda.so.1",  "libnvidia-ml.so.1", "libcudart.so.12", "libcudart.so.11.0",
      "libnccl.so.2",  "libcudnn.so.9",     "libcudnn.so.8",   "libibverbs.so.1",
      "libmlx5.so.1",  "librdmacm.so.1",    "libgomp.so.1",    "libomp.so.5",
      "libstdc++.so.6"};
  return names;
}

namespace {

// Each library is opened into a process of its own, so one library's
// dependencies never answer for another's name; the loader (and the files
// it has read) is shared.
std::vector<StackLibrary> find_stack_libraries(loader::Loader& loader) {
  std::vector<StackLibrary> out;
  for (const std::string& soname : stack_library_sonames()) {
    loader::Process process;
    StackLibrary lib{soname, std::nullopt, std::nullopt, std::nullopt};
    std::string error;
    std::vector<size_t> added;
    try {
      added = loader.dlopen(process, soname, std::nullopt, &error);
    } catch (const std::exception&) {
      added.clear();
    }
    if (!added.empty() && error.empty()) {
      lib.path = process.objects[added.front()].path;
      if (std::optional<std::string> real = loader.host().real_path(*lib.path)) {
        lib.file = std::string(base_name(*real));
        host::FileStat st = loader.host().stat(*real);
        if (st.kind == host::FileKind::Regular) lib.size = st.size;
      }
    }
    out.push_back(std::move(lib));
  }
  return out;
}

}  // namespace

CheckReport run_check(const host::Host& host, const CheckOptions& options) {
  CheckReport r;
  const std::vector<std::string>& imports =
      options.imports.empty() ? pyenv::usual_imports() : options.imports;

  // The probe is a Python start-up (tens of milliseconds, mostly waiting):
  // it runs on its own thread while this one reads the host and loads the
  // interpreter's own dependencies, which do not depend on its answer.
  pyenv::ScanOptions so;
  so.python = options.python;
  so.run_interpreter = host.is_live_root();
  so.probe.timeout = options.python_timeout;
  for (const pyenv::KnownPackage& k : pyenv::known_packages())
    so.packages.emplace_back(k.import_name);
  for (const std::string& name : imports)
    if (std::find(so.packages.begin(), so.packages.end(), name) == so.packages.end())
      so.packages.push_back(name);
  std::future<ScanResult> scan = std::async(std::launch::async, [&host, so] {
    ScanResult out;
    try {
      out.env = pyenv::scan_environment(host, so);
    } catch (const pyenv::ProbeTimeout& e) {
      out.error = e.what();
      out.timed_out = true;
    } catch (const pyenv::PyenvError& e) {
      out.error = e.what();
    }
    return out;
  });

  hostfacts::CollectOptions co;
  co.ranks_per_node = options.ranks_per_node;
  co.node_masks = options.node_masks;
  r.facts = hostfacts::collect(host, co);

  u16 machine = native_machine();
  loader::SearchConfig config =
      loader::SearchConfig::for_host(host, machine, true, loader::GlibcVersion{});
  if (!options.glibc.empty()) {
    r.glibc = loader::parse_glibc_version(options.glibc);
    if (!r.glibc) {
      scan.wait();
      throw std::runtime_error("--glibc " + options.glibc + ": expected a release like 2.36");
    }
  } else {
    r.glibc = loader::detect_glibc_version(host, config.system_dirs);
  }
  if (r.glibc) r.facts.host.glibc_version = loader::to_string(*r.glibc);

  std::optional<loader::Loader> loader;
  std::optional<loader::Process> start;
  std::string program;
  if (r.glibc) {
    loader.emplace(host, loader::SearchConfig::for_host(host, machine, true, *r.glibc));
    r.libraries = find_stack_libraries(*loader);
    try {
      program = pyenv::choose_interpreter(host, options.python).path;
      start = loader->load_program(program);
    } catch (const std::exception&) {
      // The scan reports why there is no interpreter.
    }
  }

  ScanResult scanned = scan.get();
  r.python = std::move(scanned.env);
  r.python_error = std::move(scanned.error);
  r.python_timed_out = scanned.timed_out || (r.python && !r.python->python.probe_error.empty());
  // None of the known packages (or no interpreter to look at): where are
  // they? Not asked for an interpreter named with --python that cannot be
  // read (that is an error, and no report follows), nor in the usual case
  // of an environment with packages, which this would only slow.
  const bool no_known_packages =
      !r.python || std::none_of(pyenv::known_packages().begin(), pyenv::known_packages().end(),
                                [&](const pyenv::KnownPackage& k) {
                                  return r.python->find_package(k.import_name);
                                });
  // It reads only other environments: on its own thread while this one
  // replays the imports and reads the caches and GPUs.
  std::future<pyenv::InterpreterSurvey> survey;
  if (no_known_packages && (r.python || !options.python))
    survey =
        std::async(std::launch::async,
                   [&host, checked = r.python ? std::optional(r.python->python) : std::nullopt] {
                     return pyenv::survey_interpreters(host, checked ? &*checked : nullptr);
                   });

  if (r.python && r.glibc) {
    // The program is what the interpreter says it is (sys.executable): the
    // path that chose it may be a launcher script (pyenv's and asdf's shims).
    std::string actual = r.python->python.executable;
    if (actual.empty() || host.stat(actual).kind != host::FileKind::Regular)
      actual = r.python->interpreter.path;
    if (actual != program || machine_of(r.python->python.machine) != machine) {
      // Another interpreter or architecture than guessed: start again.
      machine = machine_of(r.python->python.machine);
      program = actual;
      loader.emplace(host, loader::SearchConfig::for_host(host, machine, true, *r.glibc));
      start.reset();
    }
    std::optional<loader::StaticTlsParams> params =
        loader::StaticTlsParams::for_process(host, machine, *r.glibc, nullptr);
    if (!params) {
      r.imports_error = "static TLS is not modelled for this architecture";
    } else {
      try {
        if (!start) start = loader->load_program(program);
        // Without --import: the usual five, the table's other packages and
        // every package that vendors a runtime, as far as installed; a name
        // of that set that is not installed is no news.
        pyenv::ImportPlan plan = pyenv::plan_imports(
            *r.python, host, options.imports.empty() ? pyenv::default_imports(*r.python) : imports);
        if (options.imports.empty())
          std::erase_if(plan.unresolved, [&](const pyenv::UnresolvedImport& u) {
            return !r.python->find_package(u.import_name);
          });
        r.imports = simulate(*loader, program, std::move(*start), std::move(plan), *params);
        r.imports->owners = native_file_owners(*r.python);
      } catch (const std::exception& e) {
        r.imports_error = program + ": " + e.what();
      }
    }
  } else if (r.python) {
    r.imports_error = "the C library's release could not be read (pass --glibc)";
  }

  if (r.python) {
    r.torch_build = describe_torch_build(host, *r.python, r.imports ? &*r.imports : nullptr);
    r.torch_threads = torch_default_threads(r.torch_build, r);
  }

  jit::JitOptions jo;
  jo.cwd = options.cwd;
  if (r.python) jit::describe_environment(jo, host, *r.python);
  jo.gpu_models = r.facts.host.gpus;
  r.jit = jit::scan(host, jo);

  r.gpu = gpu::collect(host);

  if (survey.valid()) r.other_interpreters = OtherInterpreters{survey.get(), {}};

  // Every fact is gathered: detection reads only them.
  detect::Facts facts;
  facts.host = &r.facts;
  facts.gpu = &r.gpu;
  facts.jit = &r.jit;
  gather_native_facts(r, host, facts);
  r.findings = detect::findings(detect::run_detectors(facts),
                                options.rules ? *options.rules : rules::RuleSet());
  // One finding that explains another hides it (`replaces` in the rule
  // files: GPU006 names the GPUs ENV009's repeated CUDA_VISIBLE_DEVICES
  // entry hides).
  std::vector<std::string> ids;
  for (const Finding& f : r.findings) ids.push_back(f.rule);
  rules::drop_replaced(r.findings, rules::RuleSet::builtin_subset(ids));
  std::stable_sort(r.findings.begin(), r.findings.end(), [](const Finding& a, const Finding& b) {
    if (severity_rank(a.severity) != severity_rank(b.severity))
      return severity_rank(a.severity) < severity_rank(b.severity);
    return a.rule < b.rule;
  });
  r.not_read = files_not_read(host, r);
  return r;
}

std::vector<FixSetting> fix_settings(const std::vector<Finding>& findings) {
  std::vector<FixSetting> out;
  for (const Finding& f : findings) {
    for (const std::string& setting : f.env_fix) {
      // "NAME=value" or "-NAME" (unset).
      std::string name;
      std::optional<std::string> value;
      if (!setting.empty() && setting[0] == '-') {
        name = setting.substr(1);
      } else {
        size_t eq = setting.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        name = setting.substr(0, eq);
        value = setting.substr(eq + 1);
      }
      if (name.empty()) continue;
      auto it =
          std::find_if(out.begin(), out.end(), [&](const FixSetting& s) { return s.name == name; });
      if (it == out.end()) {
        out.push_back({name, value, {f.rule}});
      } else if (std::find(it->rules.begin(), it->rules.end(), f.rule) == it->rules.end() &&
                 it->value == value) {
        it->rules.push_back(f.rule);
      }
    }
  }
  return out;
}

}  // namespace mld::check
