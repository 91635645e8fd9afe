// torch-threads.cc — torch's intra-op thread count right after `import
// torch`, as the installed build computes it. It is not one formula: the
// rule is chosen when torch is built, and changed across releases
// (research: pytorch/pytorch PRs #107339, #125963, #194605; Debian's 1.13
// disassembled on a project machine):
//
//   OpenMP + MKL (not sequential) builds — pip x86-64 wheels, conda's MKL
//   variants: at::init_num_threads() calls omp_set_num_threads(
//   mkl_get_max_threads()); torch's own rule is never consulted.
//
//   every other build: at::intraop_default_num_threads() — OMP_NUM_THREADS,
//   then a valid MKL_NUM_THREADS over it (both read with std::stoi: "4,2" is
//   4, a value <= 0 or not a number is ignored), else
//   c10::TaskThreadPoolBase::defaultNumThreads():
//     torch < 2.2    std::thread::hardware_concurrency(), halved on x86-64
//                    (the inline header version; libc10 exports no symbol)
//     torch 2.2-2.3  cpuinfo's processors
//     torch 2.4-2.13 cpuinfo's cores when fewer than its processors, else
//                    its processors
//     torch >= 2.14  the 2.4 rule capped by the affinity mask, as Debian's
//                    libc10.so.2.14.1 does it (disassembled; the PR #194605
//                    text did not say): sched_getaffinity(0, 128 bytes), so
//                    no cap when the kernel has more than 1024 CPU ids (the
//                    call fails with EINVAL), and a mask of 0 CPUs caps
//                    nothing; on the hardware_concurrency() path a count of
//                    0 takes the mask's
//   with hardware_concurrency() (glibc's get_nprocs(): the online CPUs) when
//   cpuinfo fails or reports nothing; a 0 becomes 1 in the OpenMP runtime.
//
// The build is recognised from its files only: torch/version.py, ATen's
// Config.h, the string "MKL not found" that MKL-less builds carry in
// libtorch_cpu's .rodata, and whether libc10 exports defaultNumThreads.
#include <cstring>

#include "check/check.h"

namespace mld::check {

namespace {

// std::stoi as torch's get_env_num_threads uses it: leading blanks, a sign,
// digits, anything after them ignored; a value <= 0, no digits or an
// overflow throws and torch keeps its default (with a warning).
std::optional<u32> torch_env_count(const std::optional<std::string>& raw) {
  if (!raw) return std::nullopt;
  std::string_view s(*raw);
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ||
                          s[i] == '\f' || s[i] == '\v'))
    i++;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const size_t digits = i;
  i64 v = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; i++) {
    v = v * 10 + (s[i] - '0');
    if (v > 2147483647) return std::nullopt;  // out_of_range
  }
  if (i == digits || negative || v <= 0) return std::nullopt;
  return static_cast<u32>(v);
}

std::optional<std::string> env_value(const hostfacts::EnvFacts& env, const char* name) {
  for (const hostfacts::EnvVar& v : env.variables)
    if (v.name == name) return v.value;
  return std::nullopt;
}

const loader::Object* loaded(const ImportSimulation* sim, std::string_view prefix) {
  if (!sim) return nullptr;
  for (const loader::Object& o : sim->process.objects)
    if (!o.faked && !o.removed && o.elf && base_name(o.path).starts_with(prefix)) return &o;
  return nullptr;
}

std::string plural(u32 n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// glibc's get_nprocs(), which libstdc++'s hardware_concurrency() returns:
// /sys/devices/system/cpu/online on every release but the 2.34 tag, which
// counted the affinity mask (BZ #27645, reverted by BZ #28310).
struct Nprocs {
  std::optional<u32> count;
  std::string basis;
};

Nprocs hardware_concurrency(const CheckReport& r) {
  const hostfacts::CpuFacts& cpu = r.facts.host.cpu;
  Nprocs n;
  if (!cpu.online) {
    n.basis = "the online CPUs are unknown (/sys/devices/system/cpu/online unreadable)";
    return n;
  }
  const u32 online = static_cast<u32>(cpu.online->size());
  if (r.glibc && r.glibc->major == 2 && r.glibc->minor == 34 && cpu.affinity &&
      cpu.affinity->size() != online) {
    n.basis = "glibc 2.34's get_nprocs() counted either the " +
              plural(online, "online CPU", "online CPUs") +
              " or, before its stable branch reverted BZ #27645, the affinity mask (" +
              std::to_string(cpu.affinity->size()) + ")";
    return n;
  }
  n.count = online;
  n.basis = plural(online, "online CPU", "online CPUs") +
            " (get_nprocs(): /sys/devices/system/cpu/online)";
  return n;
}

}  // namespace

TorchBuildFacts describe_torch_build(const host::Host& host, const pyenv::Environment& env,
                                     const ImportSimulation* sim) {
  TorchBuildFacts f;
  const pyenv::ImportedPackage* torch = env.find_package("torch");
  if (!torch) return f;
  f.installed = true;
  f.build = pyenv::torch_build(host, env);
  const loader::Object* c10 = loaded(sim, "libc10.so");
  const loader::Object* cpu = loaded(sim, "libtorch_cpu.so");
  if (c10) {
    f.libc10 = c10->path;
    f.exports_default_num_threads =
        c10->elf->defines_symbol("_ZN3c1018TaskThreadPoolBase17defaultNumThreadsEv");
    for (std::string_view n : c10->elf->needed())
      f.libc10_needs_cpuinfo |= n.starts_with("libcpuinfo");
  }
  if (cpu) {
    f.libtorch_cpu = cpu->path;
    f.e_machine = cpu->elf->e_machine();
    // Strings compiled into libtorch_cpu only when a feature is absent:
    // at::get_mkl_version()'s "MKL not found" (no MKL), and the libuv
    // TCPStore factory's "LibUV TCPStore implementation missing" (built
    // without libuv, TCPStoreLibUvBackend.cpp's #else). The second matters
    // from torch 2.4, whose TCPStore asks for libuv by default (DIST023).
    const bool want_mkl = !f.build.mkl_enabled;
    const bool want_libuv = !f.build.major || *f.build.major > 2 ||
                            (*f.build.major == 2 && f.build.minor.value_or(0) >= 4);
    if (want_mkl || want_libuv) {
      try {
        if (std::optional<ByteView> rodata = cpu->elf->progbits_section(".rodata")) {
          static const char kNoMkl[] = "MKL not found";
          static const char kNoLibuv[] = "LibUV TCPStore implementation missing";
          const char* base = reinterpret_cast<const char*>(rodata->data());
          if (want_mkl && memmem(base, rodata->size(), kNoMkl, sizeof kNoMkl) != nullptr)
            f.no_mkl_string = true;
          if (want_libuv)
            f.no_libuv_string = memmem(base, rodata->size(), kNoLibuv, sizeof kNoLibuv) != nullptr;
          f.rodata_read = true;
        }
      } catch (const std::exception&) {
        // A damaged section table: the strings stay unknown.
      }
    }
  } else if (c10) {
    f.e_machine = c10->elf->e_machine();
  }
  return f;
}

TorchThreads torch_default_threads(const TorchBuildFacts& b, const CheckReport& r) {
  TorchThreads t;
  if (!b.installed) return t;
  t.torch = true;
  const std::string v = b.build.version.empty() ? std::string("torch") : "torch " + b.build.version;
  const hostfacts::HostFacts& host = r.facts.host;
  const hostfacts::EnvFacts& env = r.facts.env;

  // Which path: MKL or torch's own rule.
  std::optional<bool> mkl_path;
  if (b.build.mkl_enabled) {
    mkl_path = *b.build.mkl_enabled && !b.build.mkl_sequential.value_or(false) &&
               b.build.parallel_openmp.value_or(true);
    t.evidence.push_back(
        *b.build.config_h + ": AT_MKL_ENABLED() " + (*b.build.mkl_enabled ? "1" : "0") +
        (b.build.mkl_sequential
             ? std::string(", AT_MKL_SEQUENTIAL() ") + (*b.build.mkl_sequential ? "1" : "0")
             : ""));
  } else if (b.no_mkl_string) {
    mkl_path = false;
    t.evidence.push_back(std::string(base_name(b.libtorch_cpu)) +
                         std::string(" carries \"MKL not found\": a build without MKL"));
  }
  if (b.build.parallel_native && *b.build.parallel_native) {
    t.unknown =
        v + " uses the native thread pool (AT_PARALLEL_NATIVE), whose count is not modelled";
    t.rule = "native parallel backend";
    return t;
  }
  // What the environment pins on either path: torch's own rule reads
  // OMP_NUM_THREADS, then a valid MKL_NUM_THREADS over it (std::stoi);
  // mkl_get_max_threads() reads MKL_NUM_THREADS, then OMP_NUM_THREADS.
  const std::optional<u32> omp = torch_env_count(env_value(env, "OMP_NUM_THREADS"));
  const std::optional<u32> mkl = torch_env_count(env_value(env, "MKL_NUM_THREADS"));
  const std::optional<u32> own_env = mkl ? mkl : omp;
  std::optional<u32> mkl_env;
  if (env.threads.mkl_num_threads)
    mkl_env = *env.threads.mkl_num_threads;
  else if (env.threads.omp_num_threads && !env.threads.omp_num_threads->empty())
    mkl_env = env.threads.omp_num_threads->front();
  auto env_basis = [&](bool mkl_rule) {
    if (mkl_rule)
      return env.threads.mkl_num_threads
                 ? "MKL_NUM_THREADS=" + std::to_string(*mkl_env)
                 : "OMP_NUM_THREADS=" + std::to_string(*mkl_env) + " (read by MKL)";
    return mkl ? "MKL_NUM_THREADS=" + std::to_string(*mkl) +
                     (omp ? std::string(" (over OMP_NUM_THREADS)") : "")
               : "OMP_NUM_THREADS=" + std::to_string(*omp);
  };
  if (!mkl_path) {
    const std::string why = "whether " + v + " was built with MKL is unknown (no ATen/Config.h; " +
                            (b.libtorch_cpu.empty() ? std::string("libtorch_cpu was not loaded")
                                                    : std::string("no build string in ") +
                                                          std::string(base_name(b.libtorch_cpu))) +
                            ")";
    if (own_env && mkl_env && *own_env == *mkl_env) {
      t.rule = v + ": MKL or not, the environment decides";
      t.count = *own_env;
      t.basis = env_basis(false);
      t.evidence.push_back(why);
      return t;
    }
    t.unknown = why + ": MKL builds take mkl_get_max_threads(), others torch's own rule";
    t.rule = "unknown: MKL or torch's own rule";
    return t;
  }
  if (*mkl_path) {
    // mkl_get_max_threads(): MKL_NUM_THREADS, then OMP_NUM_THREADS, else
    // MKL's own default (physical cores as MKL counts them, under the
    // OpenMP runtime's affinity): known only when set.
    t.rule = v + " with MKL: omp_set_num_threads(mkl_get_max_threads())";
    if (mkl_env) {
      t.count = *mkl_env;
      t.basis = env_basis(true);
    } else {
      t.unknown =
          "MKL's default (mkl_get_max_threads() with MKL_DYNAMIC: its count of physical cores) is "
          "not modelled";
    }
    return t;
  }

  // torch's own rule: the environment first.
  if (own_env) {
    t.rule = v + ": at::intraop_default_num_threads()";
    t.count = *own_env;
    t.basis = env_basis(false);
    return t;
  }
  if (!b.build.major || !b.build.minor) {
    t.unknown = "the version of torch is unknown (" +
                (b.build.version.empty() ? std::string("no torch/version.py") : b.build.version) +
                ")";
    t.rule = "unknown";
    return t;
  }
  const int major = *b.build.major, minor = *b.build.minor;
  const bool x86 = b.e_machine ? *b.e_machine == elf::EM_X86_64 : host.architecture == "x86_64";
  const bool era_a = major < 2 || (major == 2 && minor < 2);
  if (b.exports_default_num_threads && *b.exports_default_num_threads == era_a) {
    t.unknown = v + "'s version and its libc10 disagree: " + std::string(base_name(b.libc10)) +
                (era_a ? " exports" : " does not export") +
                " c10::TaskThreadPoolBase::defaultNumThreads()";
    t.rule = "unknown";
    return t;
  }
  if (b.exports_default_num_threads)
    t.evidence.push_back(
        std::string(base_name(b.libc10)) +
        std::string(*b.exports_default_num_threads ? " exports" : " does not export") +
        " c10::TaskThreadPoolBase::defaultNumThreads()" +
        (*b.exports_default_num_threads ? "" : " (the inline header version of torch < 2.2)"));
  const Nprocs hc = hardware_concurrency(r);
  auto from_hc = [&](const std::string& prefix, bool halve) {
    if (!hc.count) {
      t.unknown = "std::thread::hardware_concurrency() is unknown: " + hc.basis;
      return;
    }
    u32 n = halve ? *hc.count / 2 : *hc.count;
    t.basis = prefix + "hardware_concurrency() = " + hc.basis;
    if (halve) t.basis += ", halved: " + std::to_string(n);
    if (n == 0) {
      n = 1;
      t.basis += " (0 becomes 1 in omp_set_num_threads)";
    }
    t.count = n;
  };
  if (era_a) {
    t.rule = x86 ? v + " (a release before 2.2, on x86-64): std::thread::hardware_concurrency() / 2"
                 : v + " (a release before 2.2): std::thread::hardware_concurrency()";
    from_hc("", x86);
    return t;
  }
  const bool processors_only = major == 2 && minor < 4;
  const bool affinity_cap = major > 2 || minor >= 14;
  t.rule =
      v +
      (processors_only ? " (2.2-2.3): cpuinfo's processors"
       : affinity_cap
           ? " (2.14 and later): cpuinfo's cores when fewer than its processors, capped by the "
             "affinity mask"
           : " (2.4-2.13): cpuinfo's cores when fewer than its processors, else its processors");
  const hostfacts::CpuinfoCounts& ci = host.cpuinfo;
  if (!ci.unknown.empty()) {
    t.unknown = "cpuinfo's counts are unknown: " + ci.unknown;
    return t;
  }
  // ARM64 cpuinfo before 20bd32c (pinned by torch <= 2.4) also counts
  // processors /proc/cpuinfo does not list.
  const std::optional<u32> processors = ci.arm_unlisted_processors && (major == 2 && minor <= 4)
                                            ? ci.arm_unlisted_processors
                                            : ci.processors;
  const std::optional<u32> cores =
      ci.arm_unlisted_processors && (major == 2 && minor <= 4) ? processors : ci.cores;
  u32 n = 0;
  bool hc_zero = false;
  if (ci.initialised && processors && *processors > 0) {
    n = *processors;
    t.basis = "cpuinfo: " + plural(*processors, "processor", "processors");
    if (!processors_only && cores && *cores > 0 && *cores < n) {
      n = *cores;
      t.basis += ", " + plural(*cores, "core", "cores");
    } else if (!processors_only && cores) {
      t.basis += " and " + plural(*cores, "core", "cores");
    }
  } else {
    from_hc(ci.initialised ? "cpuinfo reports no processors: " : "cpuinfo_initialize() fails: ",
            false);
    if (!t.count) return t;
    n = *t.count;
    hc_zero = hc.count && *hc.count == 0;
  }
  if (affinity_cap) {
    // c10's defaultNumThreads() asks sched_getaffinity(0, 128, &set): a
    // kernel whose CPU ids go beyond 1024 (nr_cpu_ids, the highest possible
    // CPU + 1) answers EINVAL and the count stays uncapped.
    if (host.cpu.possible && !host.cpu.possible->empty() && host.cpu.possible->back() >= 1024) {
      t.basis +=
          "; no affinity cap: sched_getaffinity() with torch's 1024-CPU mask fails on a "
          "kernel with " +
          std::to_string(host.cpu.possible->back() + 1) + " CPU ids";
      t.count = n;
      return t;
    }
    if (!host.cpu.affinity) {
      t.unknown = "the affinity mask is unknown";
      return t;
    }
    const u32 a = static_cast<u32>(host.cpu.affinity->size());
    // On the hardware_concurrency() path a 0 (turned into 1 above for the
    // OpenMP runtime) is replaced by the mask's count before that happens.
    if (a > 0 && (a < n || (hc_zero && a > n))) {
      n = a;
      t.basis += ", capped by the affinity mask (" + std::to_string(a) + ")";
    }
  }
  t.count = n;
  return t;
}

}  // namespace mld::check
