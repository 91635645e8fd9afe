// env-facts.cc — the environment variables that steer the native layer of a
// Python training process, read the way the consuming runtime reads them.
//
// A malformed value rarely fails loudly: GNU libgomp prints "Invalid value for
// environment variable OMP_NUM_THREADS" once and runs one thread per CPU;
// MKL and NCCL ignore an unknown level; glibc drops an unknown tunable
// silently; CUDA stops reading CUDA_VISIBLE_DEVICES at the first bad entry and
// hides every GPU when one is repeated (torch/cuda/__init__.py
// `_parse_visible_devices` mirrors that); torch's cpp_extension raises
// "Unknown CUDA arch ()" for an empty TORCH_CUDA_ARCH_LIST element, which a
// trailing blank produces. Each accepted syntax below follows the consumer's
// parser (libgomp env.c, LLVM kmp_settings.cpp, mkl-service, numba
// parallel.py, glibc dl-tunables and dl-load.c, NCCL debug.cc), so a value
// is flagged exactly when the runtime would not do what it says.
#include <algorithm>
#include <set>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

using namespace detail;

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Variables worth reporting even when valid: prefixes and exact names.
// Name tables, laid out by hand (clang-format would put one name per line).
// clang-format off
constexpr std::string_view kPrefixes[] = {"OMP_",   "GOMP_",  "KMP_",    "MKL_",     "OPENBLAS_", "GOTO_",
                                          "NUMBA_", "TORCH_", "PYTORCH_", "CUDA_",   "NCCL_",     "MALLOC_"};
constexpr std::string_view kNames[] = {
    "LD_PRELOAD",       "LD_LIBRARY_PATH",       "LD_BIND_NOW",           "GLIBC_TUNABLES",
    "LOCAL_WORLD_SIZE", "LOCAL_RANK",            "WORLD_SIZE",            "RANK",
    "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NODEID",      "SLURM_CPUS_PER_TASK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE",
    "KUBERNETES_SERVICE_HOST"};
// clang-format on

bool steers_native_layer(std::string_view name) {
  for (std::string_view p : kPrefixes)
    if (name.starts_with(p)) return true;
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

// Every glibc tunable of glibc 2.26-2.41 (elf/dl-tunables.list and the
// sysdeps lists). Names outside it are silently ignored by ld.so.
const std::set<std::string_view>& known_tunables() {
  // Laid out by hand (clang-format would put one name per line).
  // clang-format off
  static const std::set<std::string_view> names = {
      "glibc.cpu.aarch64_gcs", "glibc.cpu.aarch64_gcs_policy", "glibc.cpu.cached_memopt",
      "glibc.cpu.hwcap_mask", "glibc.cpu.hwcaps", "glibc.cpu.name", "glibc.cpu.plt_rewrite",
      "glibc.cpu.prefer_map_32bit_exec", "glibc.cpu.x86_data_cache_size", "glibc.cpu.x86_ibt",
      "glibc.cpu.x86_memset_non_temporal_threshold", "glibc.cpu.x86_non_temporal_threshold",
      "glibc.cpu.x86_rep_movsb_threshold", "glibc.cpu.x86_rep_stosb_threshold",
      "glibc.cpu.x86_shared_cache_size", "glibc.cpu.x86_shstk", "glibc.elision.enable",
      "glibc.elision.skip_lock_after_retries", "glibc.elision.skip_lock_busy",
      "glibc.elision.skip_lock_internal_abort", "glibc.elision.skip_trylock_internal_abort",
      "glibc.elision.tries", "glibc.gmon.maxarcs", "glibc.gmon.minarcs", "glibc.malloc.arena_max",
      "glibc.malloc.arena_test", "glibc.malloc.check", "glibc.malloc.hugetlb", "glibc.malloc.mmap_max",
      "glibc.malloc.mmap_threshold", "glibc.malloc.mxfast", "glibc.malloc.perturb",
      "glibc.malloc.tcache_count", "glibc.malloc.tcache_max", "glibc.malloc.tcache_unsorted_limit",
      "glibc.malloc.top_pad", "glibc.malloc.trim_threshold", "glibc.mem.decorate_maps",
      "glibc.mem.tagging", "glibc.pthread.mutex_spin_count", "glibc.pthread.rseq",
      "glibc.pthread.stack_cache_size", "glibc.pthread.stack_hugetlb", "glibc.rtld.dynamic_sort",
      "glibc.rtld.enable_secure", "glibc.rtld.execstack", "glibc.rtld.nns", "glibc.rtld.optional_static_tls",
  };
  // clang-format on
  return names;
}

// OpenBLAS DYNAMIC_ARCH core names (driver/others/dynamic*.c), lower-case;
// OpenBLAS compares them case-insensitively.
const std::set<std::string_view>& known_openblas_cores() {
  // Laid out by hand (clang-format would put one name per line).
  // clang-format off
  static const std::set<std::string_view> names = {
      // x86-64 (dynamic.c corename[])
      "katmai", "coppermine", "northwood", "prescott", "banias", "atom", "core2", "penryn", "dunnington",
      "nehalem", "athlon", "opteron", "opteron_sse3", "barcelona", "nano", "sandybridge", "bobcat",
      "bulldozer", "piledriver", "haswell", "steamroller", "excavator", "zen", "skylakex", "cooperlake",
      "sapphirerapids", "generic",
      // arm64 (dynamic_arm64.c)
      "armv8", "cortexa53", "cortexa55", "cortexa57", "cortexa72", "cortexa73", "cortexa510", "cortexa710",
      "cortexx1", "cortexx2", "falkor", "thunderx", "thunderx2t99", "thunderx3t110", "tsv110", "emag8180",
      "neoversen1", "neoversen2", "neoversev1", "neoversev2", "a64fx", "armv8sve", "armv9sve", "vortex",
      // power (dynamic_power.c)
      "power6", "power8", "power9", "power10",
  };
  // clang-format on
  return names;
}

class EnvChecker {
 public:
  EnvChecker(const host::Host& host, EnvFacts& out) : host_(host), out_(out) {}

  void run();

 private:
  std::optional<std::string> get(std::string_view name) const { return host_.getenv(name); }

  void add(std::string rule, Severity severity, const std::string& name, const std::string& value,
           std::string message, std::string fix, std::vector<std::string> env_fix = {}) {
    Finding f;
    f.rule = std::move(rule);
    f.severity = severity;
    f.subject = name;
    f.message = std::move(message);
    f.evidence.push_back({name + "=" + value, "environment", std::nullopt, false});
    f.fix = std::move(fix);
    f.env_fix = std::move(env_fix);
    out_.findings.push_back(std::move(f));
  }

  void check_thread_counts();
  void check_openmp_settings();
  void check_mkl();
  void check_numba();
  void check_openblas();
  void check_torch();
  void check_cuda_visible_devices();
  void check_loader_paths();
  void check_glibc_tunables();
  void check_nccl();

  const host::Host& host_;
  EnvFacts& out_;
};

std::optional<u32> single_count(std::string_view v) {
  std::optional<std::vector<u32>> l = parse_thread_count_list(v);
  if (!l || l->size() != 1) return std::nullopt;
  return (*l)[0];
}

void EnvChecker::check_thread_counts() {
  auto invalid = [&](const std::string& name, const std::string& value, std::string why) {
    add("ENV001", Severity::Warning, name, value,
        name + "=\"" + value + "\" is not a thread count: " + why,
        "Set " + name + " to a positive integer (threads per process), or unset it.");
  };
  if (std::optional<std::string> v = get("OMP_NUM_THREADS")) {
    out_.threads.omp_num_threads = parse_thread_count_list(*v);
    if (!out_.threads.omp_num_threads)
      invalid("OMP_NUM_THREADS", *v,
              "GNU libgomp prints \"Invalid value for environment variable OMP_NUM_THREADS\" and "
              "LLVM/Intel "
              "OpenMP a warning, and both run one thread per CPU instead");
  }
  struct Single {
    const char* name;
    std::optional<u32> ThreadSettings::*field;
    const char* consequence;
  };
  for (const Single& s : {
           Single{"MKL_NUM_THREADS", &ThreadSettings::mkl_num_threads,
                  "MKL ignores it and uses its default"},
           Single{"OPENBLAS_NUM_THREADS", &ThreadSettings::openblas_num_threads,
                  "OpenBLAS ignores it and starts one thread per CPU"},
           Single{"GOTO_NUM_THREADS", &ThreadSettings::openblas_num_threads,
                  "OpenBLAS ignores it and starts one thread per CPU"},
           Single{"NUMBA_NUM_THREADS", &ThreadSettings::numba_num_threads,
                  "numba rejects it (a warning for text, an error for values below 1)"},
       }) {
    std::optional<std::string> v = get(s.name);
    if (!v) continue;
    std::optional<u32> n = single_count(*v);
    if (n) {
      if (!(out_.threads.*s.field)) out_.threads.*s.field = n;
    } else {
      invalid(s.name, *v, s.consequence);
    }
  }
}

bool is_bool_word(std::string_view v) {
  std::string l = lower(trim(v));
  return l == "true" || l == "false";
}

// OMP_PLACES: an abstract name with an optional count ("cores(4)"), or
// explicit places "{0,1},{2:4},{8:4}:2:4" with "!" exclusions.
bool valid_omp_places(std::string_view v) {
  v = trim(v);
  if (v.empty()) return false;
  if ((v[0] >= 'a' && v[0] <= 'z') || (v[0] >= 'A' && v[0] <= 'Z')) {
    std::string_view name = v, count;
    size_t paren = v.find('(');
    if (paren != std::string_view::npos) {
      if (v.back() != ')') return false;
      name = trim(v.substr(0, paren));
      count = trim(v.substr(paren + 1, v.size() - paren - 2));
      std::optional<u64> n = parse_u64(count);
      if (!n || *n == 0) return false;
    }
    std::string l = lower(name);
    return l == "threads" || l == "cores" || l == "sockets" || l == "ll_caches" ||
           l == "numa_domains";
  }
  int depth = 0;
  bool saw_number = false;
  for (char c : v) {
    if (c == '{') {
      if (depth++ != 0) return false;
    } else if (c == '}') {
      if (depth-- != 1) return false;
    } else if (!(is_digit(c) || c == ',' || c == ':' || c == '!' || c == '-' || c == ' ' ||
                 c == '\t')) {
      return false;
    }
    if (is_digit(c)) saw_number = true;
  }
  return depth == 0 && saw_number;
}

// GOMP_CPU_AFFINITY: "0 3 1-2 4-15:2", blanks or commas between items.
bool valid_gomp_cpu_affinity(std::string_view v) {
  std::string s(v);
  std::replace(s.begin(), s.end(), ',', ' ');
  std::vector<std::string_view> items = split_words(s);
  if (items.empty()) return false;
  for (std::string_view item : items)
    if (!parse_cpu_list(item)) return false;
  return true;
}

// GOMP_SPINCOUNT: "infinite"/"infinity", or a count with a k/M/G/T suffix.
bool valid_gomp_spincount(std::string_view v) {
  v = trim(v);
  std::string l = lower(v);
  if (l == "infinite" || l == "infinity") return true;
  if (!v.empty() && std::string_view("kKmMgGtT").find(v.back()) != std::string_view::npos)
    v.remove_suffix(1);
  return parse_u64(trim(v)).has_value();
}

// KMP_BLOCKTIME: milliseconds (newer LLVM runtimes also accept "us"/"ms"
// suffixes) or "infinite".
bool valid_kmp_blocktime(std::string_view v) {
  v = trim(v);
  std::string l = lower(v);
  if (l == "infinite" || l == "infinity") return true;
  if (l.ends_with("ms") || l.ends_with("us")) v.remove_suffix(2);
  return parse_u64(trim(v)).has_value();
}

// KMP_AFFINITY: comma-separated modifiers and one type; proclist=[...] may
// hold commas, so brackets are kept together.
bool valid_kmp_affinity(std::string_view v, std::string* bad) {
  static const std::set<std::string_view> words = {
      "none",       "compact",      "scatter",   "explicit", "balanced",   "disabled", "logical",
      "physical",   "verbose",      "noverbose", "warnings", "nowarnings", "respect",  "norespect",
      "duplicates", "noduplicates", "dups",      "nodups",   "reset",      "noreset"};
  std::vector<std::string> tokens;
  std::string cur;
  int depth = 0;
  for (char c : v) {
    if (c == '[') depth++;
    if (c == ']') depth--;
    if (c == ',' && depth == 0) {
      tokens.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  tokens.push_back(cur);
  if (depth != 0) {
    *bad = std::string(v);
    return false;
  }
  for (const std::string& t0 : tokens) {
    std::string t = lower(trim(t0));
    bool ok = words.count(t) || parse_u64(t).has_value();
    if (!ok && t.starts_with("granularity=")) ok = t.size() > 12;
    if (!ok && t.starts_with("proclist=[")) ok = t.back() == ']';
    if (!ok) {
      *bad = std::string(trim(t0));
      return false;
    }
  }
  return true;
}

void EnvChecker::check_openmp_settings() {
  auto invalid = [&](const std::string& name, const std::string& value,
                     const std::string& expected) {
    add("ENV002", Severity::Warning, name, value,
        name + "=\"" + value +
            "\" is not a value the OpenMP runtime accepts; it is ignored (expected " + expected +
            ")",
        "Set " + name + " to " + expected + ", or unset it.");
  };
  if (std::optional<std::string> v = get("OMP_PROC_BIND")) {
    bool ok = is_bool_word(*v);
    if (!ok) {
      ok = true;
      for (std::string_view item : split(*v, ',')) {
        std::string l = lower(trim(item));
        if (l != "primary" && l != "master" && l != "close" && l != "spread") ok = false;
      }
    }
    if (!ok) invalid("OMP_PROC_BIND", *v, "true, false, or a list of primary, close, spread");
  }
  if (std::optional<std::string> v = get("OMP_PLACES"); v && !valid_omp_places(*v))
    invalid("OMP_PLACES", *v,
            "threads, cores, sockets, ll_caches, numa_domains (optionally \"(n)\") or {..} lists");
  if (std::optional<std::string> v = get("OMP_DYNAMIC"); v && !is_bool_word(*v))
    invalid("OMP_DYNAMIC", *v, "true or false");
  if (std::optional<std::string> v = get("OMP_WAIT_POLICY")) {
    std::string l = lower(trim(*v));
    if (l != "active" && l != "passive") invalid("OMP_WAIT_POLICY", *v, "active or passive");
  }
  if (std::optional<std::string> v = get("GOMP_SPINCOUNT"); v && !valid_gomp_spincount(*v))
    invalid("GOMP_SPINCOUNT", *v, "a count with an optional k/M/G/T suffix, or infinite");
  if (std::optional<std::string> v = get("GOMP_CPU_AFFINITY"); v && !valid_gomp_cpu_affinity(*v))
    invalid("GOMP_CPU_AFFINITY", *v, "CPU numbers and ranges such as \"0 2-5 8-15:2\"");
  if (std::optional<std::string> v = get("KMP_BLOCKTIME"); v && !valid_kmp_blocktime(*v))
    invalid("KMP_BLOCKTIME", *v, "milliseconds or infinite");
  if (std::optional<std::string> v = get("KMP_AFFINITY")) {
    std::string bad;
    if (!valid_kmp_affinity(*v, &bad))
      invalid("KMP_AFFINITY", *v,
              "a type (compact, scatter, balanced, explicit, none, disabled) with modifiers; \"" +
                  bad + "\" is not one");
  }
  if (std::optional<std::string> v = get("KMP_DUPLICATE_LIB_OK")) {
    // LLVM's __kmp_str_match_true: "1", and prefixes of "true"/"yes", "on",
    // ".true.", "enable", case-insensitive.
    std::string l = lower(trim(*v));
    bool is_true = !l.empty() && (std::string_view("true").starts_with(l) ||
                                  std::string_view("yes").starts_with(l) || l == "1" || l == "on" ||
                                  l == ".true." || l == ".t." || l == "enable");
    if (is_true)
      add("ENV003", Severity::Warning, "KMP_DUPLICATE_LIB_OK", *v,
          "KMP_DUPLICATE_LIB_OK=" + *v +
              " silences LLVM/Intel OpenMP's \"Error #15\" check, so two OpenMP runtimes may run "
              "in one process "
              "unnoticed",
          "Unset KMP_DUPLICATE_LIB_OK and make the packages share one OpenMP runtime (`mldoctor "
          "check` lists "
          "them); the variable hides the conflict, it does not resolve it.");
  }
}

void EnvChecker::check_mkl() {
  if (std::optional<std::string> v = get("MKL_THREADING_LAYER")) {
    std::string u = upper(trim(*v));
    if (u.empty()) {
      // mkl-service treats an empty value as unset.
    } else if (u == "INTEL" || u == "SEQUENTIAL" || u == "GNU" || u == "TBB") {
      out_.threads.mkl_threading_layer = u;
    } else {
      std::string why = u == "PGI" ? "PGI was removed in oneMKL 2025.0"
                                   : "MKL accepts INTEL, SEQUENTIAL, GNU or TBB (any case)";
      add("ENV004", Severity::Warning, "MKL_THREADING_LAYER", *v,
          "MKL_THREADING_LAYER=\"" + *v + "\" is not a threading layer MKL knows: " + why,
          "Set MKL_THREADING_LAYER to GNU when torch or another package brings libgomp, to INTEL "
          "with Intel's "
          "libiomp5 only, or SEQUENTIAL for no MKL threads.",
          {"MKL_THREADING_LAYER=GNU"});
    }
  }
  if (std::optional<std::string> v = get("MKL_SERVICE_FORCE_INTEL"))
    add("ENV005", Severity::Warning, "MKL_SERVICE_FORCE_INTEL", *v,
        "MKL_SERVICE_FORCE_INTEL is set: mkl-service keeps MKL's INTEL threading layer even when "
        "GNU libgomp is "
        "already loaded, instead of stopping the process",
        "Unset MKL_SERVICE_FORCE_INTEL and set MKL_THREADING_LAYER=GNU, so MKL uses the libgomp "
        "that is loaded.",
        {"MKL_THREADING_LAYER=GNU"});
}

void EnvChecker::check_numba() {
  if (std::optional<std::string> v = get("NUMBA_THREADING_LAYER")) {
    std::string l = lower(trim(*v));
    static const std::set<std::string_view> layers = {"default", "safe", "threadsafe", "forksafe",
                                                      "tbb",     "omp",  "workqueue"};
    if (layers.count(l))
      out_.threads.numba_threading_layer = l;
    else
      add("ENV006", Severity::Error, "NUMBA_THREADING_LAYER", *v,
          "NUMBA_THREADING_LAYER=\"" + *v +
              "\" is not a numba threading layer: the first parallel function raises ValueError",
          "Set NUMBA_THREADING_LAYER to one of default, safe, threadsafe, forksafe, tbb, omp, "
          "workqueue.");
  }
}

void EnvChecker::check_openblas() {
  if (std::optional<std::string> v = get("OPENBLAS_CORETYPE")) {
    std::string l = lower(trim(*v));
    if (!known_openblas_cores().count(l))
      add("ENV007", Severity::Warning, "OPENBLAS_CORETYPE", *v,
          "OPENBLAS_CORETYPE=\"" + *v +
              "\" names no OpenBLAS core: OpenBLAS prints \"Core not found\" and picks "
              "the kernels from CPU detection",
          "Set OPENBLAS_CORETYPE to a core name OpenBLAS knows (Haswell, SkylakeX, Zen, "
          "NeoverseN1, ...), or unset "
          "it to let OpenBLAS detect the CPU.");
  }
}

void EnvChecker::check_torch() {
  std::optional<std::string> v = get("TORCH_CUDA_ARCH_LIST");
  if (!v) return;
  // torch.utils.cpp_extension._get_cuda_arch_flags: blanks become ';', named
  // architectures are expanded, then every ';' element must be an arch.
  static const std::set<std::string_view> named = {
      "Kepler+Tesla", "Kepler", "Maxwell+Tegra",   "Maxwell",      "Pascal",
      "Volta+Tegra",  "Volta",  "Turing",          "Ampere+Tegra", "Ampere",
      "Ada",          "Hopper", "Blackwell+Tegra", "Blackwell"};
  if (v->empty()) return;  // torch treats an empty value as unset
  std::string s = *v;
  std::replace(s.begin(), s.end(), ' ', ';');
  std::vector<std::string> bad;
  for (std::string_view e : split(s, ';')) {
    if (named.count(e)) continue;
    std::string_view a = e;
    if (a.ends_with("+PTX")) a.remove_suffix(4);
    if (!a.empty() && (a.back() == 'a' || a.back() == 'f')) a.remove_suffix(1);
    size_t dot = a.find('.');
    bool ok = dot != std::string_view::npos && parse_u64(a.substr(0, dot)) &&
              parse_u64(a.substr(dot + 1));
    if (!ok) bad.push_back(e.empty() ? "(empty element)" : "\"" + std::string(e) + "\"");
  }
  if (bad.empty()) return;
  std::string list;
  for (const std::string& b : bad) list += (list.empty() ? "" : ", ") + b;
  add("ENV008", Severity::Error, "TORCH_CUDA_ARCH_LIST", *v,
      "TORCH_CUDA_ARCH_LIST=\"" + *v + "\" has elements torch cannot read: " + list +
          "; building a CUDA extension raises \"Unknown CUDA arch\"",
      "Write TORCH_CUDA_ARCH_LIST as capabilities separated by one ';' or one blank, each \"X.Y\" "
      "optionally "
      "followed by \"+PTX\" (\"8.0;9.0+PTX\"), with no leading, trailing or doubled separators.");
}

void EnvChecker::check_cuda_visible_devices() {
  std::optional<std::string> v = get("CUDA_VISIBLE_DEVICES");
  if (!v) return;
  CudaVisibleDevices d = parse_cuda_visible_devices(*v);
  out_.cuda_visible_devices = d;
  if (d.duplicate) {
    add("ENV009", Severity::Error, "CUDA_VISIBLE_DEVICES", *v,
        "CUDA_VISIBLE_DEVICES lists " + *d.duplicate + " twice: CUDA then shows no GPU at all",
        "List every device once, e.g. CUDA_VISIBLE_DEVICES=0,1,2,3.");
    return;
  }
  if (!d.stopped_at) return;
  std::string_view stop = trim(*d.stopped_at);
  // "-1", "" and Slurm's "NoDevFiles" are the usual ways to hide every GPU.
  bool deliberate_hide = d.devices.empty() &&
                         (trim(*v).empty() || stop == "NoDevFiles" ||
                          (stop.starts_with("-") && stop.size() > 1 && parse_u64(stop.substr(1))));
  if (deliberate_hide) return;
  std::string visible = d.devices.empty() ? std::string("no GPU") : "only ";
  for (size_t i = 0; i < d.devices.size(); i++) visible += (i ? "," : "") + d.devices[i];
  add("ENV010", Severity::Warning, "CUDA_VISIBLE_DEVICES", *v,
      "CUDA_VISIBLE_DEVICES stops at the invalid entry \"" + std::string(stop) + "\": " + visible +
          " stays visible",
      "Write CUDA_VISIBLE_DEVICES as comma-separated indices (0,1), or GPU UUIDs (GPU-...), or MIG "
      "UUIDs (MIG-...), "
      "one kind only, without blanks or empty entries.");
}

void EnvChecker::check_loader_paths() {
  if (std::optional<std::string> v = get("LD_LIBRARY_PATH")) {
    // glibc ignores an empty LD_LIBRARY_PATH; otherwise ':' and ';' separate,
    // and an empty element is the current directory (dl-load.c fillin_rpath).
    if (!v->empty()) {
      std::vector<std::string> relative, missing;
      std::string s = *v;
      std::replace(s.begin(), s.end(), ';', ':');
      for (std::string_view e : split(s, ':')) {
        out_.ld_library_path.emplace_back(e);
        if (e.empty()) {
          relative.push_back("(empty element = current directory)");
        } else if (e.starts_with("$")) {
          // $ORIGIN, $LIB, $PLATFORM: expanded by ld.so, not checked here.
        } else if (e[0] != '/') {
          relative.push_back("\"" + std::string(e) + "\"");
        } else if (host_.stat(e).kind == host::FileKind::Missing) {
          missing.emplace_back(e);
        }
      }
      if (!relative.empty()) {
        std::string list;
        for (const std::string& r : relative) list += (list.empty() ? "" : ", ") + r;
        add("ENV011", Severity::Warning, "LD_LIBRARY_PATH", *v,
            "LD_LIBRARY_PATH searches relative to the current directory: " + list +
                "; which libraries load then depends on where the job starts",
            "Remove empty elements (leading, trailing or doubled ':') and make every element an "
            "absolute path.");
      }
      if (!missing.empty()) {
        std::string list;
        for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
        add("ENV012", Severity::Info, "LD_LIBRARY_PATH", *v,
            "LD_LIBRARY_PATH names directories that do not exist: " + list,
            "Remove the directories that do not exist from LD_LIBRARY_PATH (often left from "
            "another CUDA or "
            "conda installation).");
      }
    }
  }
  if (std::optional<std::string> v = get("LD_PRELOAD")) {
    // rtld.c: blanks and ':' separate; names without '/' are searched like
    // DT_NEEDED entries (not checked here).
    std::string s = *v;
    std::replace(s.begin(), s.end(), ':', ' ');
    std::vector<std::string> relative, missing;
    for (std::string_view e : split_words(s)) {
      out_.ld_preload.emplace_back(e);
      if (e.find('/') == std::string_view::npos || e.starts_with("$")) continue;
      if (e[0] != '/')
        relative.push_back("\"" + std::string(e) + "\"");
      else if (host_.stat(e).kind == host::FileKind::Missing)
        missing.emplace_back(e);
    }
    if (!relative.empty()) {
      std::string list;
      for (const std::string& r : relative) list += (list.empty() ? "" : ", ") + r;
      add("ENV011", Severity::Warning, "LD_PRELOAD", *v,
          "LD_PRELOAD names libraries by a relative path: " + list +
              "; every process that starts in another directory fails to preload them",
          "Give LD_PRELOAD absolute paths.");
    }
    if (!missing.empty()) {
      std::string list;
      for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
      add("ENV013", Severity::Warning, "LD_PRELOAD", *v,
          "LD_PRELOAD names libraries that do not exist: " + list +
              "; ld.so prints \"cannot be preloaded ... ignored\" in every process",
          "Remove the missing libraries from LD_PRELOAD or correct their paths.");
    }
  }
}

void EnvChecker::check_glibc_tunables() {
  std::optional<std::string> v = get("GLIBC_TUNABLES");
  if (!v) return;
  ParsedTunables p = parse_glibc_tunables(*v);
  out_.glibc_tunables = p.tunables;
  std::vector<std::string> problems;
  for (const std::string& m : p.malformed) problems.push_back("\"" + m + "\" is not name=value");
  for (const GlibcTunable& t : p.tunables)
    if (!t.known) problems.push_back("\"" + t.key + "\" is not a glibc tunable");
  if (problems.empty()) return;
  std::string list;
  for (const std::string& pr : problems) list += (list.empty() ? "" : "; ") + pr;
  add("ENV014", Severity::Warning, "GLIBC_TUNABLES", *v,
      "GLIBC_TUNABLES has entries glibc ignores silently: " + list,
      "Write GLIBC_TUNABLES as colon-separated glibc.<namespace>.<name>=<value> items; `ld.so "
      "--list-tunables` "
      "(glibc 2.33 and later) prints the names this glibc knows.");
}

void EnvChecker::check_nccl() {
  if (std::optional<std::string> v = get("NCCL_DEBUG")) {
    std::string u = upper(*v);
    if (u != "VERSION" && u != "WARN" && u != "INFO" && u != "ABORT" && u != "TRACE")
      add("ENV015", Severity::Warning, "NCCL_DEBUG", *v,
          "NCCL_DEBUG=\"" + *v + "\" is not an NCCL debug level: NCCL prints nothing",
          "Set NCCL_DEBUG to VERSION, WARN, INFO, ABORT or TRACE (INFO for a hang or a failed "
          "init).",
          {"NCCL_DEBUG=INFO"});
  }
}

void EnvChecker::run() {
  for (const auto& [name, value] : host_.environment())
    if (steers_native_layer(name)) out_.variables.push_back({name, value});
  check_thread_counts();
  check_openmp_settings();
  check_mkl();
  check_numba();
  check_openblas();
  check_torch();
  check_cuda_visible_devices();
  check_loader_paths();
  check_glibc_tunables();
  check_nccl();
}

}  // namespace

std::optional<std::vector<u32>> parse_thread_count_list(std::string_view text) {
  // libgomp parse_unsigned_long_list: strtoul per element (leading blanks and
  // '+' accepted), each > 0, ',' between levels, nothing else.
  std::vector<u32> levels;
  for (std::string_view e : split(text, ',')) {
    e = trim(e);
    if (e.starts_with("+")) e.remove_prefix(1);
    std::optional<u64> n = parse_u64(e);
    if (!n || *n == 0 || *n > 0xffffffffu) return std::nullopt;
    levels.push_back(static_cast<u32>(*n));
  }
  return levels;
}

ParsedTunables parse_glibc_tunables(std::string_view text) {
  ParsedTunables p;
  for (std::string_view item : split(text, ':')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      p.malformed.emplace_back(item);
      continue;
    }
    GlibcTunable t;
    t.key = std::string(item.substr(0, eq));
    t.value = std::string(item.substr(eq + 1));
    t.known = known_tunables().count(t.key) > 0;
    p.tunables.push_back(std::move(t));
  }
  return p;
}

CudaVisibleDevices parse_cuda_visible_devices(std::string_view text) {
  CudaVisibleDevices d;
  d.raw = std::string(text);
  std::vector<std::string_view> items = split(text, ',');
  std::string_view prefix;
  if (text.starts_with("GPU-")) prefix = "GPU-";
  if (text.starts_with("MIG-")) prefix = "MIG-";
  for (std::string_view item : items) {
    std::string entry;
    if (!prefix.empty()) {
      if (!item.starts_with(prefix)) {
        d.stopped_at = std::string(item);
        break;
      }
      entry = std::string(item);
    } else {
      // strtoul-like: leading digits (an optional sign) count, the rest is
      // ignored; no digits or a negative value ends the list.
      std::string_view t = trim(item);
      size_t i = 0;
      bool negative = false;
      if (i < t.size() && (t[i] == '+' || t[i] == '-')) negative = t[i++] == '-';
      size_t start = i;
      while (i < t.size() && is_digit(t[i])) i++;
      std::optional<u64> n = i > start ? parse_u64(t.substr(start, i - start)) : std::nullopt;
      if (!n || (negative && *n != 0)) {
        d.stopped_at = std::string(item);
        break;
      }
      entry = std::to_string(*n);
    }
    if (std::find(d.devices.begin(), d.devices.end(), entry) != d.devices.end()) {
      d.duplicate = entry;
      d.devices.clear();
      return d;
    }
    d.devices.push_back(std::move(entry));
  }
  return d;
}

EnvFacts collect_env_facts(const host::Host& host) {
  EnvFacts facts;
  EnvChecker(host, facts).run();
  return facts;
}

}  // namespace mld::hostfacts
