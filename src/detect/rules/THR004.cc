// THR004 — every rank of a node pins its OpenMP threads to the same CPUs.
// With binding on, an OpenMP runtime builds its places from the process's
// affinity mask and puts thread i on place i. When the launcher starts
// several ranks on a node without binding each to its own CPUs, every
// rank's mask is the whole node, so thread 0 of every rank lands on the
// first place, thread 1 on the second, and the ranks share those cores while
// the others idle. libgomp's GOMP_CPU_AFFINITY names absolute CPUs and
// ignores the mask, so it pins the ranks together even when the launcher
// bound them.
//
// Whether threads are pinned at all depends on the runtime: GNU libgomp and
// LLVM libomp read different variables, and build their places from
// different views of the machine (hostfacts/openmp-places.cc and
// openmp-topology.cc). On a CPU without CPUID leaf 0xB, libomp sees one core
// per package, so OMP_PROC_BIND's default places (cores) are one place, the
// whole mask: it binds nothing, while libgomp pins one thread per CPU. So the
// rule judges each runtime the job would load (check's import replay, the
// same facts as OMP001); when no Python environment was examined it is
// present when either runtime pins, and says which does. Seen on this
// project's machines with gcc's and clang's OpenMP, each thread's mask read
// back with pthread_getaffinity_np (test/e2e/scenario-thr004-binding.py).
#include <algorithm>

#include "detect/detect.h"

namespace {

using mld::hostfacts::OmpPlaces;
using mld::hostfacts::OmpRuntime;

// The runtimes judged: those the job loads, or both when that is unknown.
struct Runtime {
  OmpRuntime kind;
  std::string how;  // "loaded by import torch (torch._C)"; "" when unknown
  OmpPlaces places;
  bool together = false;  // it pins this rank's threads where the others' go
};

std::string plural(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// What LLVM libomp sees of this host, for a message: "it sees 1 core in 1
// package (CPUID leaf 0xb not supported: ...; legacy APIC IDs ...)".
std::string llvm_sees(const mld::hostfacts::LlvmOmpTopology& t) {
  std::string why = t.method;
  if (t.legacy_apic && !t.skipped.empty())
    why = t.skipped.back() + ", so it decodes " + t.method + ", which give " +
          plural(t.cores / std::max<mld::u32>(1, t.packages), "core", "cores") + " per package";
  return "it sees " + plural(t.cores, "core", "cores") + " in " +
         plural(t.packages, "package", "packages") + " here (" + why + ")";
}

// Why a runtime does not pin, in words.
std::string why_not(const Runtime& r, const mld::hostfacts::HostFacts& h,
                    const std::vector<mld::u32>& mask) {
  const OmpPlaces& p = r.places;
  if (!p.binds) {
    std::string s = "it does not bind";
    if (!p.decided_by.empty()) s += " (" + p.decided_by + ")";
    for (const std::string& n : p.notes) s += "; " + n;
    return s;
  }
  if (p.places && !p.places->empty() && !mask.empty()) {
    std::string s = "it binds each thread to {" + mld::hostfacts::format_cpu_list(mask) +
                    "}, the whole mask (" + p.decided_by + ": " + p.kind + ")";
    if (r.kind == OmpRuntime::Llvm && h.openmp_topology.llvm.unknown.empty() &&
        p.kind.find("threads") == std::string::npos)
      s += ": " + llvm_sees(h.openmp_topology.llvm);
    return s;
  }
  return "its threads are not pinned to CPUs the other ranks use";
}

std::string pins_text(const Runtime& r) {
  const OmpPlaces& p = r.places;
  // The notes say what the user set that this runtime ignores
  // (OMP_PROC_BIND=false beside OMP_PLACES in libomp, KMP_AFFINITY in
  // libgomp): the reason a setting meant to stop binding did not.
  std::string notes;
  for (const std::string& n : p.notes) notes += "; " + n;
  if (!p.places)
    return "binds them (" + p.decided_by + "; places not modelled: " + p.unknown + notes + ")";
  return "binds them to " + plural(p.places->size(), "place", "places") + " (" + p.decided_by +
         ": " + p.kind + " " + mld::hostfacts::format_places(*p.places) + notes + ")";
}

}  // namespace

MLD_DETECTOR(THR004) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::HostFacts& h = facts.host->host;
  const hostfacts::EnvFacts& e = facts.host->env;
  if (!h.ranks_per_node.count || *h.ranks_per_node.count < 2) return;
  const u32 ranks = *h.ranks_per_node.count;

  // The variables that can turn binding on, as `NAME=value` for the report
  // and the fix (OMP_PROC_BIND=false, or a value both runtimes ignore,
  // binds nothing and is not listed).
  // KMP_AFFINITY is listed when it names a binding type.
  std::vector<std::string> binding;
  for (const char* name : {"OMP_PROC_BIND", "OMP_PLACES", "KMP_AFFINITY", "GOMP_CPU_AFFINITY"}) {
    const std::string* v = e.value_of(name);
    if (!v) continue;
    const std::string_view n(name);
    if (n == "OMP_PROC_BIND" && (e.rejects(name) || hostfacts::omp_proc_bind_on(*v) != true))
      continue;
    if (n == "KMP_AFFINITY") {
      const std::string type = hostfacts::kmp_affinity_type(*v);
      if (type.empty() || type == "none" || type == "disabled") continue;
    }
    binding.push_back(std::string(name) + "=" + *v);
  }
  if (binding.empty()) return;

  // The runtimes: those check's import replay loads (known, possibly
  // none), else both.
  std::vector<Runtime> runtimes;
  const detect::OpenMpProcess* job = nullptr;
  for (const detect::OpenMpProcess& p : facts.openmp)
    if (!p.observed) job = &p;
  if (job) {
    for (const detect::OpenMpRuntime& r : job->runtimes) {
      const OmpRuntime k = r.kind == loader::OpenMpKind::Gnu ? OmpRuntime::Gnu : OmpRuntime::Llvm;
      if (std::none_of(runtimes.begin(), runtimes.end(),
                       [&](const Runtime& x) { return x.kind == k; }))
        runtimes.push_back({k, r.how, {}, false});
    }
    if (runtimes.empty()) return;  // the job loads no OpenMP runtime: nothing binds
  } else {
    runtimes = {{OmpRuntime::Gnu, "", {}, false}, {OmpRuntime::Llvm, "", {}, false}};
  }

  // One rank sees only its own mask. Ranks given disjoint shares of the node
  // each hold at most 1/ranks of it; a mask larger than that (the whole
  // node, when the launcher binds nothing) overlaps the others', and equal
  // masks mean equal places.
  const std::optional<std::vector<u32>>& mask = h.cpu.affinity;
  const std::optional<std::vector<u32>>& online = h.cpu.online;
  const bool shared_mask =
      mask && online && mask->size() >= 2 && mask->size() * ranks > online->size();
  const std::vector<u32> own = mask.value_or(std::vector<u32>{});
  bool any = false, by_mask = false;
  for (Runtime& r : runtimes) {
    r.places = hostfacts::omp_places(r.kind, e, h.openmp_topology, h.numa_nodes);
    if (r.places.absolute)
      r.together = r.places.binds;
    else
      r.together = shared_mask && r.places.pins(own);
    any |= r.together;
    by_mask |= r.together && !r.places.absolute;
  }
  if (!any) return;

  std::string settings;
  for (size_t i = 0; i < binding.size(); i++) settings += (i ? " " : "") + binding[i];
  Detection d;
  d.rule = "THR004";
  d.subject = binding.front().substr(0, binding.front().find('='));
  const std::string head = " pins the OpenMP threads of each of the " + std::to_string(ranks) +
                           " ranks on this node to the same CPUs: ";
  if (by_mask && *mask == *online)
    d.message = settings + head + "every rank's affinity mask is the whole node (" +
                hostfacts::format_cpu_list(*mask) +
                "), so thread 0 of every rank runs on the first place, thread 1 on the second, and "
                "the other CPUs idle";
  else if (by_mask)
    d.message = settings + head + "this rank's affinity mask (" +
                hostfacts::format_cpu_list(*mask) + ") holds " + std::to_string(mask->size()) +
                " of the node's " + std::to_string(online->size()) +
                " online CPUs, more than a 1/" + std::to_string(ranks) +
                " share, so the ranks' masks overlap and their threads are placed on the same CPUs";
  else  // only libgomp's absolute GOMP_CPU_AFFINITY pins them together
    d.message = "GOMP_CPU_AFFINITY=" + *e.value_of("GOMP_CPU_AFFINITY") + head +
                "libgomp binds to the CPUs it names whatever the rank's affinity mask" +
                (mask ? " (" + hostfacts::format_cpu_list(*mask) + ")" : std::string());

  // Which runtime pins, and which does not and why.
  std::string clause;
  for (const Runtime& r : runtimes) {
    const std::string name(hostfacts::omp_runtime_name(r.kind));
    const std::string who = job ? name + " (" + r.how + ")" : name;
    clause +=
        "; " + who + " " + (r.together ? pins_text(r) : "does not pin: " + why_not(r, h, own));
  }
  if (!job)
    clause +=
        "; which of them the job loads is not known here (no Python environment was examined)";
  d.message += clause;

  d.evidence.push_back({std::to_string(ranks) + " ranks per node (" + h.ranks_per_node.source +
                            (h.ranks_per_node.raw.empty() ? "" : "=" + h.ranks_per_node.raw) + ")",
                        "", std::nullopt});
  if (mask)
    d.evidence.push_back(
        {"this rank's affinity mask: " + hostfacts::format_cpu_list(*mask) + " (" +
             h.cpu.affinity_source + ")" +
             (online ? ", online CPUs: " + hostfacts::format_cpu_list(*online) : ""),
         "", std::nullopt});
  for (const Runtime& r : runtimes) {
    const std::string name(hostfacts::omp_runtime_name(r.kind));
    const OmpPlaces& p = r.places;
    std::string line = name + ": ";
    if (!p.binds)
      line += "no binding" + (p.decided_by.empty() ? std::string() : " (" + p.decided_by + ")");
    else if (p.places)
      line += p.decided_by + " gives " + plural(p.places->size(), "place", "places") + " of " +
              p.kind + ": " + hostfacts::format_places(*p.places, 16);
    else
      line += p.decided_by + " binds; places not modelled: " + p.unknown;
    for (const std::string& n : p.notes) line += "; " + n;
    d.evidence.push_back({line, "", std::nullopt});
  }
  const hostfacts::LlvmOmpTopology& lt = h.openmp_topology.llvm;
  if (std::any_of(runtimes.begin(), runtimes.end(),
                  [](const Runtime& r) { return r.kind == OmpRuntime::Llvm; })) {
    if (!lt.unknown.empty()) {
      d.evidence.push_back({"LLVM libomp's topology: " + lt.unknown, "", std::nullopt});
    } else {
      std::string line = "LLVM libomp's topology: " + plural(lt.cores, "core", "cores") + " in " +
                         plural(lt.packages, "package", "packages") + " from " + lt.method;
      for (const std::string& s : lt.skipped) line += "; " + s;
      d.evidence.push_back({line, "", std::nullopt});
      for (const std::string& s : lt.steps) d.evidence.push_back({"  " + s, "", std::nullopt});
    }
  }
  for (const std::string& b : binding) d.env_fix.push_back("-" + b.substr(0, b.find('=')));
  out.push_back(std::move(d));
}
