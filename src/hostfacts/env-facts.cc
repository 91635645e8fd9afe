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
// is recorded as rejected exactly when the runtime would not do what it
// says. The LD_* paths are looked up under the analysed root here, so that
// the ENV rules (src/detect/rules/ENV0*.cc) judge these facts alone.
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
    "KUBERNETES_SERVICE_HOST", "USE_LIBUV"};
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

class EnvReader {
 public:
  EnvReader(const host::Host& host, EnvFacts& out) : host_(host), out_(out) {}

  void run();

 private:
  std::optional<std::string> get(std::string_view name) const { return host_.getenv(name); }
  void reject(std::string name) { out_.rejected.push_back(std::move(name)); }

  void read_thread_counts();
  void read_openmp_settings();
  void read_mkl();
  void read_numba();
  void read_openblas();
  void read_torch();
  void read_cuda_visible_devices();
  void read_loader_paths();
  void read_glibc_tunables();
  void read_nccl();

  const host::Host& host_;
  EnvFacts& out_;
};

std::optional<u32> single_count(std::string_view v) {
  std::optional<std::vector<u32>> l = parse_thread_count_list(v);
  if (!l || l->size() != 1) return std::nullopt;
  return (*l)[0];
}

void EnvReader::read_thread_counts() {
  if (std::optional<std::string> v = get("OMP_NUM_THREADS")) {
    out_.threads.omp_num_threads = parse_thread_count_list(*v);
    if (!out_.threads.omp_num_threads) reject("OMP_NUM_THREADS");
  }
  struct Single {
    const char* name;
    std::optional<u32> ThreadSettings::*field;
  };
  for (const Single& s : {
           Single{"MKL_NUM_THREADS", &ThreadSettings::mkl_num_threads},
           Single{"OPENBLAS_NUM_THREADS", &ThreadSettings::openblas_num_threads},
           Single{"GOTO_NUM_THREADS", &ThreadSettings::openblas_num_threads},
           Single{"NUMBA_NUM_THREADS", &ThreadSettings::numba_num_threads},
       }) {
    std::optional<std::string> v = get(s.name);
    if (!v) continue;
    std::optional<u32> n = single_count(*v);
    if (n) {
      if (!(out_.threads.*s.field)) out_.threads.*s.field = n;
    } else {
      reject(s.name);
    }
  }
}

bool is_bool_word(std::string_view v) {
  std::string l = lower(trim(v));
  return l == "true" || l == "false";
}

// OMP_PROC_BIND: a boolean, or a list of policies.
bool valid_omp_proc_bind(std::string_view v) {
  if (is_bool_word(v)) return true;
  for (std::string_view item : split(v, ',')) {
    std::string l = lower(trim(item));
    if (l != "primary" && l != "master" && l != "close" && l != "spread") return false;
  }
  return true;
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

}  // namespace

std::optional<std::vector<std::string>> detail::kmp_affinity_items(std::string_view v) {
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char c : v) {
    if (c == '[') depth++;
    if (c == ']') depth--;
    if (c == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  items.push_back(cur);
  if (depth != 0) return std::nullopt;
  return items;
}

std::string kmp_affinity_type(std::string_view v) {
  std::string type;
  if (std::optional<std::vector<std::string>> items = kmp_affinity_items(lower(v)))
    for (const std::string& raw : *items) {
      const std::string_view i = trim(raw);
      for (const char* t : {"none", "physical", "logical", "compact", "scatter", "explicit",
                            "balanced", "disabled"})
        if (i == t) type = t;
    }
  return type;
}

namespace {

// KMP_AFFINITY: comma-separated modifiers and one type; proclist=[...] may
// hold commas, so brackets are kept together.
bool valid_kmp_affinity(std::string_view v, std::string* bad) {
  static const std::set<std::string_view> words = {
      "none",       "compact",      "scatter",   "explicit", "balanced",   "disabled", "logical",
      "physical",   "verbose",      "noverbose", "warnings", "nowarnings", "respect",  "norespect",
      "duplicates", "noduplicates", "dups",      "nodups",   "reset",      "noreset"};
  std::optional<std::vector<std::string>> tokens = kmp_affinity_items(v);
  if (!tokens) {
    *bad = std::string(v);
    return false;
  }
  for (const std::string& t0 : *tokens) {
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

void EnvReader::read_openmp_settings() {
  struct Setting {
    const char* name;
    bool (*valid)(std::string_view);
  };
  for (const Setting& s : {
           Setting{"OMP_PROC_BIND", valid_omp_proc_bind},
           Setting{"OMP_PLACES", valid_omp_places},
           Setting{"OMP_DYNAMIC", is_bool_word},
           Setting{"OMP_WAIT_POLICY",
                   [](std::string_view v) {
                     std::string l = lower(trim(v));
                     return l == "active" || l == "passive";
                   }},
           Setting{"GOMP_SPINCOUNT", valid_gomp_spincount},
           Setting{"GOMP_CPU_AFFINITY", valid_gomp_cpu_affinity},
           Setting{"KMP_BLOCKTIME", valid_kmp_blocktime},
       }) {
    if (std::optional<std::string> v = get(s.name); v && !s.valid(*v)) reject(s.name);
  }
  if (std::optional<std::string> v = get("KMP_AFFINITY");
      v && !valid_kmp_affinity(*v, &out_.kmp_affinity_bad_item))
    reject("KMP_AFFINITY");
  if (std::optional<std::string> v = get("KMP_DUPLICATE_LIB_OK")) {
    // LLVM's __kmp_str_match_true: "1", and prefixes of "true"/"yes", "on",
    // ".true.", "enable", case-insensitive.
    std::string l = lower(trim(*v));
    out_.kmp_duplicate_lib_ok =
        !l.empty() &&
        (std::string_view("true").starts_with(l) || std::string_view("yes").starts_with(l) ||
         l == "1" || l == "on" || l == ".true." || l == ".t." || l == "enable");
  }
}

void EnvReader::read_mkl() {
  if (std::optional<std::string> v = get("MKL_THREADING_LAYER")) {
    std::string u = upper(trim(*v));
    if (u.empty()) {
      // mkl-service treats an empty value as unset.
    } else if (u == "INTEL" || u == "SEQUENTIAL" || u == "GNU" || u == "TBB") {
      out_.threads.mkl_threading_layer = u;
    } else {
      reject("MKL_THREADING_LAYER");
    }
  }
}

void EnvReader::read_numba() {
  if (std::optional<std::string> v = get("NUMBA_THREADING_LAYER")) {
    std::string l = lower(trim(*v));
    static const std::set<std::string_view> layers = {"default", "safe", "threadsafe", "forksafe",
                                                      "tbb",     "omp",  "workqueue"};
    if (layers.count(l))
      out_.threads.numba_threading_layer = l;
    else
      reject("NUMBA_THREADING_LAYER");
  }
}

void EnvReader::read_openblas() {
  if (std::optional<std::string> v = get("OPENBLAS_CORETYPE");
      v && !known_openblas_cores().count(lower(trim(*v))))
    reject("OPENBLAS_CORETYPE");
}

void EnvReader::read_torch() {
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
  for (std::string_view e : split(s, ';')) {
    if (named.count(e)) continue;
    std::string_view a = e;
    if (a.ends_with("+PTX")) a.remove_suffix(4);
    if (!a.empty() && (a.back() == 'a' || a.back() == 'f')) a.remove_suffix(1);
    size_t dot = a.find('.');
    bool ok = dot != std::string_view::npos && parse_u64(a.substr(0, dot)) &&
              parse_u64(a.substr(dot + 1));
    if (!ok) out_.torch_cuda_arch_bad.emplace_back(e);
  }
  if (!out_.torch_cuda_arch_bad.empty()) reject("TORCH_CUDA_ARCH_LIST");
}

void EnvReader::read_cuda_visible_devices() {
  if (std::optional<std::string> v = get("CUDA_VISIBLE_DEVICES"))
    out_.cuda_visible_devices = parse_cuda_visible_devices(*v);
}

void EnvReader::read_loader_paths() {
  if (std::optional<std::string> v = get("LD_LIBRARY_PATH")) {
    // glibc ignores an empty LD_LIBRARY_PATH; otherwise ':' and ';' separate,
    // and an empty element is the current directory (dl-load.c fillin_rpath).
    // $ORIGIN, $LIB, $PLATFORM are expanded by ld.so, not looked up here.
    if (!v->empty()) {
      std::string s = *v;
      std::replace(s.begin(), s.end(), ';', ':');
      for (std::string_view e : split(s, ':')) {
        bool missing = e.starts_with("/") && host_.stat(e).kind == host::FileKind::Missing;
        out_.ld_library_path.push_back({std::string(e), missing});
      }
    }
  }
  if (std::optional<std::string> v = get("LD_PRELOAD")) {
    // rtld.c: blanks and ':' separate; names without '/' are searched like
    // DT_NEEDED entries (not looked up here).
    std::string s = *v;
    std::replace(s.begin(), s.end(), ':', ' ');
    for (std::string_view e : split_words(s)) {
      bool missing = e.starts_with("/") && host_.stat(e).kind == host::FileKind::Missing;
      out_.ld_preload.push_back({std::string(e), missing});
    }
  }
}

void EnvReader::read_glibc_tunables() {
  std::optional<std::string> v = get("GLIBC_TUNABLES");
  if (!v) return;
  ParsedTunables p = parse_glibc_tunables(*v);
  out_.glibc_tunables = std::move(p.tunables);
  out_.glibc_tunables_malformed = std::move(p.malformed);
}

void EnvReader::read_nccl() {
  if (std::optional<std::string> v = get("NCCL_DEBUG")) {
    std::string u = upper(*v);
    if (u != "VERSION" && u != "WARN" && u != "INFO" && u != "ABORT" && u != "TRACE")
      reject("NCCL_DEBUG");
  }
}

void EnvReader::run() {
  for (const auto& [name, value] : host_.environment())
    if (steers_native_layer(name)) out_.variables.push_back({name, value});
  read_thread_counts();
  read_openmp_settings();
  read_mkl();
  read_numba();
  read_openblas();
  read_torch();
  read_cuda_visible_devices();
  read_loader_paths();
  read_glibc_tunables();
  read_nccl();
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
  if (d.stopped_at && d.devices.empty()) {
    // "-1", "" and Slurm's "NoDevFiles" are the usual ways to hide every GPU.
    std::string_view stop = trim(*d.stopped_at);
    d.hides_all = trim(text).empty() || stop == "NoDevFiles" ||
                  (stop.starts_with("-") && stop.size() > 1 && parse_u64(stop.substr(1)));
  }
  return d;
}

const std::string* EnvFacts::value_of(std::string_view name) const {
  for (const EnvVar& v : variables)
    if (v.name == name) return &v.value;
  return nullptr;
}

bool EnvFacts::rejects(std::string_view name) const {
  return std::find(rejected.begin(), rejected.end(), name) != rejected.end();
}

EnvFacts collect_env_facts(const host::Host& host) {
  EnvFacts facts;
  EnvReader(host, facts).run();
  return facts;
}

}  // namespace mld::hostfacts
