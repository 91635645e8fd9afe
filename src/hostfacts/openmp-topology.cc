// openmp-topology.cc — the cores and packages each OpenMP runtime sees among
// the CPUs of this process's mask, computed as each runtime computes them,
// because their places (OMP_PLACES=cores, OMP_PROC_BIND without OMP_PLACES,
// KMP_AFFINITY's default granularity) are built from them and the two
// runtimes can disagree on one machine.
//
// GNU libgomp (libgomp/config/linux/affinity.c, gomp_affinity_init_level)
// reads the kernel's topology files of each CPU: core_cpus_list (older GCC:
// thread_siblings_list) for cores, package_cpus_list (core_siblings_list)
// for sockets. What the kernel says, libgomp sees.
//
// LLVM's libomp (and Intel's libiomp5, built from the same code) does not
// ask the kernel on x86: openmp/runtime/src/kmp_affinity.cpp,
// __kmp_aux_affinity_initialize_topology, tries in order (no
// KMP_TOPOLOGY_METHOD, no KMP_CPUINFO_FILE; hwloc only with
// KMP_TOPOLOGY_METHOD=hwloc, and Debian's libomp is built without it):
//   1. __kmp_affinity_create_x2apicid_map: CPUID leaf 0x1F, then 0xB, each
//      only when the highest basic leaf reaches it and its sub-leaf 0 has
//      EBX != 0. __kmp_x2apicid_get_levels walks the sub-leaves until level
//      type 0 (the package), failing on a typed level with no logical
//      processors; level types 1-5 are known, others widen the level below
//      them; LLVM 17+ also fails when the first level is the package. The
//      runtime then moves its thread to every CPU of the mask, reads the
//      x2APIC ID (EDX) and splits it with the levels' shift widths; a CPU
//      with another level count, or two CPUs with one ID, fail the method.
//   2. __kmp_affinity_create_apicid_map (legacy APIC IDs): needs leaf 4 to
//      exist; on every CPU the 8-bit APIC ID of CPUID 1 EBX[31:24] (EDX bit
//      9 must be set), EBX[23:16] logical processors per package (0 read as
//      1) and CPUID 4 EAX[31:26]+1 cores per package. The package is the
//      APIC ID above the logical-processor bits, the core the next widthC
//      bits, the thread the rest. AMD leaves leaf 4 zero (reserved), so
//      every CPU of a package is a thread of its one core: a CPU whose
//      hypervisor hides leaf 0xB (this project's AMD EPYC test VMs) is one
//      core to libomp while the kernel and libgomp see one core per CPU.
//      Duplicate IDs, or packages whose CPUs disagree on the counts, fail it.
//   3. __kmp_affinity_create_cpuinfo_map: /proc/cpuinfo's "physical id",
//      "core id" (and "thread id"); no physical id fails it.
//   4. __kmp_affinity_create_flat_map: every CPU a package of its own.
// On other Linux architectures step 3 reads sysfs physical_package_id and
// core_id instead (LLVM 20+ falls back to core_siblings_list; not modelled).
//
// Read: kmp_affinity.cpp of LLVM 14 (Debian 12's libomp 14.0.6; the
// version with the global __kmp_affinity_verbose) and of LLVM 17/18 (with
// kmp_affinity_t; stored commit 0217024481ad) through the project's code
// search; LLVM 19's rework of the leaf 0x1F path (llvm-project#91012:
// logical ids, cache layers, per-CPU level sets) changes neither which
// method is chosen nor the core and package counts modelled here. No
// release has an AMD-specific path (leaf 0x80000026, 0x8000001E).
//
// What one machine's data can and cannot say: the choice of method, the
// widths and the core count of the legacy path follow from one CPU's
// leaves (every CPU of a homogeneous machine answers them alike), but the
// package split and the uniqueness checks need each CPU's own APIC ID.
// Live, this thread visits every CPU as libomp does (Host::cpuid_per_cpu);
// a snapshot records those leaves; a tree recorded without them falls back
// to /proc/cpuinfo's apicid (x2APIC) and initial apicid (legacy), which the
// kernel took from the same leaves on real hardware. Under a hypervisor
// they may differ: on the EPYC test VM, CPUID 1 gives each vCPU a legacy
// APIC ID that changes with the host CPU it runs on (43, then 207 or 7)
// while /proc/cpuinfo says 0 and 1; the core count (one) is the same
// either way, and two vCPUs that happened to answer the same ID would make
// libomp fall back to /proc/cpuinfo and see two cores.
#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

using namespace detail;

namespace {

std::string hex(u32 v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

// kmp_affinity.cpp __kmp_cpuid_mask_width: bits to number `count` items.
u32 mask_width(u32 count) {
  u32 r = 0;
  while (r < 32 && (u64{1} << r) < count) ++r;
  return r;
}

// /proc/cpuinfo's records: processor number -> its "key: value" fields.
std::map<u32, std::map<std::string, std::string>> cpuinfo_records(std::string_view text) {
  std::map<u32, std::map<std::string, std::string>> out;
  std::map<std::string, std::string> cur;
  auto flush = [&] {
    auto it = cur.find("processor");
    if (it != cur.end())
      if (std::optional<u64> n = parse_u64(it->second); n && *n < (u64{1} << 31))
        out[static_cast<u32>(*n)] = cur;
    cur.clear();
  };
  for (std::string_view line : lines_of(text)) {
    if (trim(line).empty()) {
      flush();
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string key(trim(line.substr(0, colon)));
    if (cur.count(key) && key == "processor") flush();
    cur[key] = std::string(trim(line.substr(colon + 1)));
  }
  flush();
  return out;
}

std::optional<u32> record_u32(const std::map<u32, std::map<std::string, std::string>>& records,
                              u32 cpu, const char* key) {
  auto r = records.find(cpu);
  if (r == records.end()) return std::nullopt;
  auto f = r->second.find(key);
  if (f == r->second.end()) return std::nullopt;
  std::optional<u64> v = parse_u64(f->second);
  if (!v || *v > 0xffffffffu) return std::nullopt;
  return static_cast<u32>(*v);
}

// One CPU's answers as the model uses them: its own leaves, or another
// CPU's with its APIC IDs from /proc/cpuinfo.
struct CpuAnswers {
  const host::CpuidDump* dump = nullptr;
  std::optional<u32> x2apic_id;  // /proc/cpuinfo apicid, for a borrowed dump
  std::optional<u32> legacy_id;  // /proc/cpuinfo initial apicid (else apicid)
  bool own = false;
};

struct Level {
  u32 type = 0, width = 0, nitems = 0;
};

// __kmp_x2apicid_get_levels; empty with *why set when it returns 0.
std::vector<Level> x2apic_levels(const host::CpuidDump& d, u32 leaf, std::string* why) {
  std::vector<Level> levels;
  for (u32 sub = 0; sub < 32; sub++) {
    const host::CpuidRegs r = d.query(leaf, sub);
    const Level l{(r.ecx >> 8) & 0xff, r.eax & 0x1f, r.ebx & 0xffff};
    if (l.type != 0 && l.nitems == 0) {
      if (why)
        *why = "sub-leaf " + std::to_string(sub) + " has level type " + std::to_string(l.type) +
               " but no logical processors";
      return {};
    }
    if (l.type <= 5) {
      levels.push_back(l);
    } else if (!levels.empty()) {
      levels.back().width = l.width;  // an unknown level widens the one below it
      levels.back().nitems = l.nitems;
    }
    if (l.type == 0) break;
  }
  if (levels.empty() || levels.front().type == 0) {
    if (why) *why = "its first level is the package";
    return {};
  }
  if (levels.back().type != 0) {
    if (why) *why = "no package level ends its sub-leaves";
    return {};
  }
  return levels;
}

std::string level_name(u32 type) {
  switch (type) {
    case 0: return "package";
    case 1: return "SMT";
    case 2: return "core";
    case 3: return "module";
    case 4: return "tile";
    case 5: return "die";
  }
  return "type " + std::to_string(type);
}

void count_units(LlvmOmpTopology& t) {
  std::set<u64> packages;
  std::set<std::pair<u64, u64>> cores;
  for (const LlvmOmpCpu& c : t.cpus) {
    packages.insert(c.package);
    cores.insert({c.package, c.core});
  }
  t.packages = static_cast<u32>(packages.size());
  t.cores = static_cast<u32>(cores.size());
}

// Step 1: false with *why set when libomp would not use it.
bool x2apic_map(const std::vector<u32>& mask, const std::map<u32, CpuAnswers>& answers,
                const host::CpuidDump& first, LlvmOmpTopology& t) {
  const u32 highest = first.query(0).eax;
  std::optional<u32> leaf;
  std::vector<Level> levels;
  for (u32 candidate : {0x1Fu, 0xBu}) {
    const std::string name = "CPUID leaf " + hex(candidate);
    if (highest < candidate) {
      t.skipped.push_back(name + " absent (highest basic leaf " + hex(highest) + ")");
      continue;
    }
    if (first.query(candidate, 0).ebx == 0) {
      t.skipped.push_back(name +
                          " not supported: sub-leaf 0 reports no logical processors (EBX=0)");
      continue;
    }
    leaf = candidate;
    std::string why;
    levels = x2apic_levels(first, candidate, &why);
    if (!levels.empty()) break;
    t.skipped.push_back(name + " not usable: " + why);
  }
  if (!leaf || levels.empty()) return false;
  const std::string name = "x2APIC IDs (CPUID leaf " + hex(*leaf) + ")";
  std::optional<size_t> core_level;
  for (size_t i = 0; i < levels.size(); i++)
    if (levels[i].type == 2) core_level = i;
  std::string shape;
  for (const Level& l : levels)
    shape += (shape.empty() ? "" : ", ") + level_name(l.type) +
             (l.type == 0 ? std::string() : " shift " + std::to_string(l.width));
  if (!core_level) {
    t.unknown = name + " has no core level (" + shape + "): not modelled";
    return true;
  }
  const u32 core_shift = *core_level == 0 ? 0 : levels[*core_level - 1].width;
  const u32 package_shift = levels[levels.size() - 2].width;
  std::set<u32> seen;
  for (u32 cpu : mask) {
    const CpuAnswers& a = answers.at(cpu);
    std::string why;
    if (a.own && x2apic_levels(*a.dump, *leaf, &why).size() != levels.size()) {
      t.skipped.push_back(name + " not usable: CPU " + std::to_string(cpu) +
                          " reports another number of levels");
      return false;
    }
    const u32 id = a.own ? a.dump->query(*leaf, 0).edx : a.x2apic_id.value_or(0);
    if (!seen.insert(id).second) {
      t.skipped.push_back(name + " not usable: two CPUs have x2APIC ID " + std::to_string(id));
      return false;
    }
    auto shr = [](u32 v, u32 n) { return n >= 32 ? 0u : v >> n; };
    t.cpus.push_back({cpu, shr(id, package_shift), shr(id, core_shift), id});
  }
  t.method = name;
  t.steps.push_back(name + ": " + shape + "; a core is the x2APIC ID without its low " +
                    std::to_string(core_shift) + " bits, a package without its low " +
                    std::to_string(package_shift));
  return true;
}

// Step 2.
bool legacy_apic_map(const std::vector<u32>& mask, const std::map<u32, CpuAnswers>& answers,
                     const host::CpuidDump& first, LlvmOmpTopology& t) {
  const std::string name = "legacy APIC IDs (CPUID leaves 1 and 4)";
  const u32 highest = first.query(0).eax;
  if (highest < 4) {
    t.skipped.push_back(name + ": CPUID leaf 4 absent (highest basic leaf " + hex(highest) + ")");
    return false;
  }
  struct Info {
    u32 cpu, apic, max_threads, max_cores, package, core, thread;
  };
  std::vector<Info> info;
  for (u32 cpu : mask) {
    const CpuAnswers& a = answers.at(cpu);
    const host::CpuidRegs r1 = a.dump->query(1);
    if (!((r1.edx >> 9) & 1)) {
      t.skipped.push_back(name + ": CPU " + std::to_string(cpu) +
                          " has no local APIC (CPUID 1 EDX bit 9)");
      return false;
    }
    Info i{};
    i.cpu = cpu;
    i.apic = a.own ? r1.ebx >> 24 : a.legacy_id.value_or(0) & 0xff;
    i.max_threads = (r1.ebx >> 16) & 0xff;
    if (i.max_threads == 0) i.max_threads = 1;
    i.max_cores = a.dump->query(0).eax >= 4 ? ((a.dump->query(4, 0).eax >> 26) & 0x3f) + 1 : 1;
    const u32 width_ct = mask_width(i.max_threads), width_c = mask_width(i.max_cores);
    if (width_c > width_ct) {
      t.skipped.push_back(name + ": CPU " + std::to_string(cpu) + " reports more cores (" +
                          std::to_string(i.max_cores) + ") than logical processors (" +
                          std::to_string(i.max_threads) + ") per package");
      return false;
    }
    const u32 width_t = width_ct - width_c;
    i.package = width_ct >= 32 ? 0 : i.apic >> width_ct;
    i.core = (i.apic >> width_t) & ((1u << width_c) - 1);
    i.thread = i.apic & ((1u << width_t) - 1);
    info.push_back(i);
  }
  std::stable_sort(info.begin(), info.end(), [](const Info& a, const Info& b) {
    return std::tie(a.package, a.core, a.thread) < std::tie(b.package, b.core, b.thread);
  });
  for (size_t k = 1; k < info.size(); k++) {
    const Info &p = info[k - 1], &c = info[k];
    if (c.package != p.package) continue;
    if (c.core == p.core && c.thread == p.thread) {
      t.skipped.push_back(name + ": CPUs " + std::to_string(p.cpu) + " and " +
                          std::to_string(c.cpu) + " have one APIC ID (" + std::to_string(c.apic) +
                          ")");
      return false;
    }
    if (c.max_cores != p.max_cores || c.max_threads != p.max_threads) {
      t.skipped.push_back(name + ": the CPUs of package " + std::to_string(c.package) +
                          " report different counts");
      return false;
    }
  }
  std::sort(info.begin(), info.end(), [](const Info& a, const Info& b) { return a.cpu < b.cpu; });
  for (const Info& i : info) t.cpus.push_back({i.cpu, i.package, i.core, i.thread});
  t.method = name;
  t.legacy_apic = true;
  const Info& i = info.front();
  const u32 leaf4 = first.query(4, 0).eax;
  t.steps.push_back(
      name + ": CPUID 1 EBX[23:16] = " + std::to_string(i.max_threads) +
      " logical processors per package (" + std::to_string(mask_width(i.max_threads)) +
      " APIC ID bits), CPUID 4 EAX[31:26]+1 = " + std::to_string(i.max_cores) +
      " core(s) per package (" + std::to_string(mask_width(i.max_cores)) + " bits" +
      (leaf4 == 0 ? std::string(", leaf 4 is all zero as on AMD") : std::string()) + ")");
  return true;
}

// Step 3 (x86): /proc/cpuinfo's physical id and core id.
bool cpuinfo_map(const std::vector<u32>& mask, const std::optional<std::string>& proc_cpuinfo,
                 LlvmOmpTopology& t) {
  const std::string name = "/proc/cpuinfo";
  if (!proc_cpuinfo) {
    t.skipped.push_back(name + " cannot be read");
    return false;
  }
  const auto records = cpuinfo_records(*proc_cpuinfo);
  if (records.empty()) {
    t.skipped.push_back(name + " has no processor records");
    return false;
  }
  if (!record_u32(records, records.begin()->first, "physical id")) {
    t.skipped.push_back(name + " has no \"physical id\" field");
    return false;
  }
  for (u32 cpu : mask) {
    std::optional<u32> package = record_u32(records, cpu, "physical id");
    std::optional<u32> core = record_u32(records, cpu, "core id");
    if (!package || !core) {
      t.unknown = name + " lacks the physical or core id of CPU " + std::to_string(cpu) +
                  ": how libomp numbers it is not modelled";
      return true;
    }
    t.cpus.push_back({cpu, *package, *core, cpu});
  }
  t.method = name;
  t.steps.push_back(name + ": a core is a (physical id, core id) pair");
  return true;
}

void flat_map(const std::vector<u32>& mask, LlvmOmpTopology& t) {
  for (u32 cpu : mask) t.cpus.push_back({cpu, cpu, 0, 0});
  t.method = "flat";
  t.steps.push_back("flat: every CPU is a package and a core of its own");
}

LlvmOmpTopology llvm_topology(const OpenMpTopologyInputs& in) {
  LlvmOmpTopology t;
  if (in.arch != "x86_64") {
    if (in.arch != "aarch64") {
      t.unknown = in.arch.empty() ? "the analysed machine's architecture is unknown"
                                  : "libomp's topology is not modelled on " + in.arch;
      return t;
    }
    // Non-x86 Linux: __kmp_affinity_create_cpuinfo_map with sysfs ids.
    for (u32 cpu : in.mask) {
      auto it = in.sysfs.find(cpu);
      std::optional<u64> package, core;
      if (it != in.sysfs.end()) {
        if (it->second.physical_package_id)
          package = parse_u64(trim(*it->second.physical_package_id));
        if (it->second.core_id) core = parse_u64(trim(*it->second.core_id));
      }
      if (!package || !core) {
        t.skipped.clear();
        t.cpus.clear();
        t.skipped.push_back("sysfs: CPU " + std::to_string(cpu) +
                            " has no topology/physical_package_id or core_id");
        flat_map(in.mask, t);
        count_units(t);
        return t;
      }
      t.cpus.push_back({cpu, *package, *core, cpu});
    }
    t.method = "sysfs (physical_package_id, core_id)";
    t.steps.push_back(t.method + ": a core is a (package, core id) pair");
    count_units(t);
    return t;
  }
  const host::CpuidDump* first = nullptr;
  if (!in.cpuid.empty())
    first = &in.cpuid.begin()->second;
  else if (in.any_cpuid)
    first = &*in.any_cpuid;
  if (!first) {
    t.unknown = "no CPUID data (" +
                (in.cpuid_missing.empty() ? std::string("none given") : in.cpuid_missing) +
                "), so the APIC IDs libomp numbers cores with are unknown";
    return t;
  }
  // Every CPU's answers: its own, else the first dump with its IDs from
  // /proc/cpuinfo.
  const auto records = in.proc_cpuinfo ? cpuinfo_records(*in.proc_cpuinfo)
                                       : std::map<u32, std::map<std::string, std::string>>{};
  std::map<u32, CpuAnswers> answers;
  size_t borrowed = 0;
  for (u32 cpu : in.mask) {
    CpuAnswers a;
    if (auto it = in.cpuid.find(cpu); it != in.cpuid.end()) {
      a.dump = &it->second;
      a.own = true;
    } else {
      a.dump = first;
      a.x2apic_id = record_u32(records, cpu, "apicid");
      a.legacy_id = record_u32(records, cpu, "initial apicid");
      if (!a.legacy_id) a.legacy_id = a.x2apic_id;
      if (!a.x2apic_id) {
        t.unknown = "neither CPUID answers of CPU " + std::to_string(cpu) +
                    " nor its apicid in /proc/cpuinfo are known, so its APIC ID is unknown";
        return t;
      }
      borrowed++;
    }
    answers.emplace(cpu, a);
  }
  t.ids_from = borrowed == 0 ? "the CPUID answers of each CPU"
                             : "the CPUID answers of CPU " + std::to_string(first->cpu) +
                                   " and the APIC IDs of /proc/cpuinfo for " +
                                   std::to_string(borrowed) + " CPU(s)";
  const std::string vendor = first->vendor();
  t.steps.push_back(vendor + ", highest basic leaf " + hex(first->query(0).eax) +
                    "; per-CPU IDs from " + t.ids_from);
  if (x2apic_map(in.mask, answers, *first, t) || legacy_apic_map(in.mask, answers, *first, t) ||
      cpuinfo_map(in.mask, in.proc_cpuinfo, t)) {
    if (!t.unknown.empty()) t.cpus.clear();
  } else {
    flat_map(in.mask, t);
  }
  if (t.unknown.empty()) count_units(t);
  return t;
}

GompTopology gomp_topology(const OpenMpTopologyInputs& in) {
  GompTopology g;
  for (u32 cpu : in.mask) {
    auto it = in.sysfs.find(cpu);
    const OpenMpTopologyInputs::SysfsCpu* s = it == in.sysfs.end() ? nullptr : &it->second;
    auto list = [](const std::optional<std::string>& a, const std::optional<std::string>& b) {
      const std::optional<std::string>& text = a ? a : b;
      return text ? parse_cpu_list(trim(*text)) : std::nullopt;
    };
    std::optional<std::vector<u32>> core =
        s ? list(s->core_cpus, s->thread_siblings) : std::nullopt;
    std::optional<std::vector<u32>> package =
        s ? list(s->package_cpus, s->core_siblings) : std::nullopt;
    if (!core || !package || core->empty() || package->empty()) {
      g.unknown = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                  "/topology has no readable core or package CPU list (libgomp: \"Error reading "
                  "core/socket topology\")";
      g.core_cpus.clear();
      g.package_cpus.clear();
      return g;
    }
    g.core_cpus[cpu] = *core;
    g.package_cpus[cpu] = *package;
  }
  return g;
}

}  // namespace

OpenMpTopologyInputs read_openmp_topology_inputs(const host::Host& host, const std::string& arch,
                                                 const std::vector<u32>& mask) {
  OpenMpTopologyInputs in;
  in.arch = arch;
  in.mask = mask;
  if (arch == "x86_64") {
    in.any_cpuid = host.cpuid(&in.cpuid_missing);
    in.cpuid = host.cpuid_per_cpu(mask, nullptr);
  }
  in.proc_cpuinfo = host.read_file("/proc/cpuinfo", 64 << 20);
  for (u32 cpu : mask) {
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    OpenMpTopologyInputs::SysfsCpu& s = in.sysfs[cpu];
    s.core_cpus = host.read_file(dir + "core_cpus_list", 64 << 10);
    if (!s.core_cpus) s.thread_siblings = host.read_file(dir + "thread_siblings_list", 64 << 10);
    s.package_cpus = host.read_file(dir + "package_cpus_list", 64 << 10);
    if (!s.package_cpus) s.core_siblings = host.read_file(dir + "core_siblings_list", 64 << 10);
    if (arch != "x86_64") {
      s.physical_package_id = host.read_file(dir + "physical_package_id", 64);
      s.core_id = host.read_file(dir + "core_id", 64);
    }
  }
  return in;
}

OpenMpTopology model_openmp_topology(const OpenMpTopologyInputs& in) {
  OpenMpTopology t;
  t.mask = in.mask;
  if (in.mask.empty()) {
    t.llvm.unknown = t.gomp.unknown = "this process's CPUs are unknown";
    return t;
  }
  t.llvm = llvm_topology(in);
  t.gomp = gomp_topology(in);
  return t;
}

}  // namespace mld::hostfacts
