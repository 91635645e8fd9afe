// openmp-places.cc — the places GNU libgomp and LLVM libomp bind a process's
// OpenMP threads to, from the binding variables and the topology each
// runtime sees (openmp-topology.cc). Whether the threads are pinned to less
// than the process's mask is what decides THR004: ranks that share a mask
// and are pinned share their CPUs; a runtime whose one place is the whole
// mask pins nothing, whatever OMP_PROC_BIND says.
//
// Which setting wins, per runtime (each rule measured on this project's
// machines with Debian's libgomp 12 and LLVM libomp 14, threads' masks read
// back with pthread_getaffinity_np; test/e2e/scenario-thr004-binding.py):
//   libgomp (libgomp/env.c, config/linux/affinity.c): OMP_PROC_BIND=false
//     turns binding off whatever else is set; else OMP_PLACES (threads,
//     cores, sockets, numa_domains from sysfs; explicit lists cut to the
//     mask); else GOMP_CPU_AFFINITY, absolute CPU numbers whatever the mask;
//     else OMP_PROC_BIND on means one place per CPU of the mask (level 1 of
//     gomp_affinity_init_level). KMP_AFFINITY is not read.
//   libomp (kmp_settings.cpp: KMP_AFFINITY, GOMP_CPU_AFFINITY, OMP_PLACES
//     and OMP_PROC_BIND are rivals, the first set wins with "OMP: Warning
//     #182: X: ignored because Y has been defined"): a KMP_AFFINITY that
//     names a type (LLVM looks for the words none, physical, logical,
//     compact, scatter, explicit, balanced, disabled anywhere in it) wins;
//     its granularity defaults to core (__kmp_env_initialize, non-MIC), so
//     even proclist CPUs bind to their whole core. Then GOMP_CPU_AFFINITY,
//     read as explicit CPUs of granularity fine with the CPUs outside the
//     mask dropped (Warning #124; none left: no binding, #125). Then
//     OMP_PLACES, which binds even beside OMP_PROC_BIND=false in libomp 14
//     (an invalid value falls back to cores, Warning #250; numa_domains
//     without hwloc to cores, #192; explicit lists are granularity fine).
//     Then OMP_PROC_BIND true/close/spread/primary: granularity core.
// ll_caches and KMP_AFFINITY granularities other than fine/thread, core and
// package/socket are not modelled (their places are reported unknown).
#include <algorithm>
#include <set>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

using namespace detail;

namespace {

using Places = std::vector<std::vector<u32>>;

enum class Bind { Off, On, Ignored };

// OMP_PROC_BIND as both runtimes read it; `primary` is set when the first
// policy is primary/master.
Bind proc_bind(const std::string* v) {
  if (!v) return Bind::Ignored;
  const std::string l = lower(trim(*v));
  if (l == "false") return Bind::Off;
  if (l == "true") return Bind::On;
  for (std::string_view item : split(l, ',')) {
    const std::string_view i = trim(item);
    if (i != "primary" && i != "master" && i != "close" && i != "spread") return Bind::Ignored;
  }
  return Bind::On;
}

std::string setting(const char* name, const std::string& value) { return name + ("=" + value); }

// Places of `topology` at a level: each CPU, each core, each package, in
// the order of their lowest CPU.
std::optional<Places> level_places(OmpRuntime rt, const OpenMpTopology& t, const std::string& kind,
                                   std::string* unknown) {
  Places out;
  if (t.mask.empty()) {
    *unknown = "this process's CPUs are unknown";
    return std::nullopt;
  }
  if (kind == "threads") {
    for (u32 c : t.mask) out.push_back({c});
    return out;
  }
  if (rt == OmpRuntime::Gnu) {
    if (!t.gomp.unknown.empty()) {
      *unknown = t.gomp.unknown;
      return std::nullopt;
    }
    const auto& by_cpu = kind == "cores" ? t.gomp.core_cpus : t.gomp.package_cpus;
    std::set<u32> placed;
    const std::set<u32> mask(t.mask.begin(), t.mask.end());
    for (u32 c : t.mask) {
      if (placed.count(c)) continue;
      std::vector<u32> place;
      for (u32 s : by_cpu.at(c))
        if (mask.count(s) && placed.insert(s).second) place.push_back(s);
      if (placed.insert(c).second) place.push_back(c);
      std::sort(place.begin(), place.end());
      out.push_back(place);
    }
    return out;
  }
  if (!t.llvm.unknown.empty()) {
    *unknown = t.llvm.unknown;
    return std::nullopt;
  }
  std::map<std::pair<u64, u64>, std::vector<u32>> units;
  std::vector<std::pair<u64, u64>> order;
  for (const LlvmOmpCpu& c : t.llvm.cpus) {
    const std::pair<u64, u64> key =
        kind == "cores" ? std::make_pair(c.package, c.core) : std::make_pair(c.package, u64{0});
    auto [it, fresh] = units.try_emplace(key);
    if (fresh) order.push_back(key);
    it->second.push_back(c.cpu);
  }
  for (const auto& key : order) {
    std::vector<u32> place = units[key];
    std::sort(place.begin(), place.end());
    out.push_back(place);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The numbers of an OMP_PLACES explicit list, as the grammar reads them:
// places "{res,res,...}" or a number, each "place[:count[:stride]]", a
// resource "num[:count[:stride]]". nullopt for what is not modelled ("!").
std::optional<Places> explicit_places(std::string_view v) {
  size_t i = 0;
  auto ws = [&] {
    while (i < v.size() && (v[i] == ' ' || v[i] == '\t')) i++;
  };
  auto number = [&](long long& out, bool sign_ok) {
    ws();
    long long s = 1;
    if (sign_ok)
      while (i < v.size() && (v[i] == '+' || v[i] == '-')) s = v[i++] == '-' ? -s : s, ws();
    if (i >= v.size() || v[i] < '0' || v[i] > '9') return false;
    long long n = 0;
    while (i < v.size() && v[i] >= '0' && v[i] <= '9' && n < (1 << 20)) n = n * 10 + (v[i++] - '0');
    out = n * s;
    return true;
  };
  // ":count[:stride]" after a resource or a place; defaults 1 and 1.
  auto count_stride = [&](long long& count, long long& stride) {
    count = 1, stride = 1;
    ws();
    if (i < v.size() && v[i] == ':') {
      i++;
      if (!number(count, false)) return false;
      ws();
      if (i < v.size() && v[i] == ':') {
        i++;
        if (!number(stride, true)) return false;
      }
    }
    return count >= 0 && count <= 4096;
  };
  Places out;
  for (;;) {
    ws();
    std::vector<long long> place;
    if (i < v.size() && v[i] == '{') {
      i++;
      for (;;) {
        long long start, count, stride;
        if (!number(start, false) || !count_stride(count, stride)) return std::nullopt;
        for (long long k = 0; k < count; k++) place.push_back(start + k * stride);
        ws();
        if (i < v.size() && v[i] == ',') {
          i++;
          continue;
        }
        if (i < v.size() && v[i] == '}') {
          i++;
          break;
        }
        return std::nullopt;
      }
    } else {
      long long n;
      if (!number(n, false)) return std::nullopt;
      place.push_back(n);
    }
    long long count, stride;
    if (!count_stride(count, stride)) return std::nullopt;
    for (long long k = 0; k < count; k++) {
      std::vector<u32> p;
      for (long long c : place)
        if (c + k * stride >= 0 && c + k * stride < (1 << 20))
          p.push_back(static_cast<u32>(c + k * stride));
      std::sort(p.begin(), p.end());
      p.erase(std::unique(p.begin(), p.end()), p.end());
      out.push_back(p);
    }
    ws();
    if (i >= v.size()) return out;
    if (v[i] != ',') return std::nullopt;
    i++;
  }
}

// Places cut to the mask; empty ones dropped (both runtimes drop them). An
// unknown (empty) mask cuts nothing.
Places within(const Places& places, const std::vector<u32>& mask) {
  if (mask.empty()) return places;
  const std::set<u32> m(mask.begin(), mask.end());
  Places out;
  for (const std::vector<u32>& p : places) {
    std::vector<u32> q;
    for (u32 c : p)
      if (m.count(c)) q.push_back(c);
    if (!q.empty()) out.push_back(q);
  }
  return out;
}

// GOMP_CPU_AFFINITY's CPUs in the order listed.
std::optional<std::vector<u32>> gomp_cpu_list(const std::string& v) {
  std::string s = v;
  std::replace(s.begin(), s.end(), ',', ' ');
  std::vector<u32> out;
  for (std::string_view item : split_words(s)) {
    std::optional<std::vector<u32>> l = parse_cpu_list(item);
    if (!l) return std::nullopt;
    out.insert(out.end(), l->begin(), l->end());
  }
  return out;
}

// OMP_PLACES=<name>[(<count>)] → ("cores", count) ; explicit lists → "".
std::pair<std::string, std::optional<u64>> abstract_name(std::string_view v) {
  v = trim(v);
  if (v.empty() || !((v[0] >= 'a' && v[0] <= 'z') || (v[0] >= 'A' && v[0] <= 'Z'))) return {};
  std::optional<u64> count;
  size_t paren = v.find('(');
  std::string_view name = v;
  if (paren != std::string_view::npos) {
    name = trim(v.substr(0, paren));
    if (v.back() == ')') count = parse_u64(trim(v.substr(paren + 1, v.size() - paren - 2)));
  }
  return {lower(name), count};
}

void limit(OmpPlaces& p, std::optional<u64> count) {
  if (p.places && count && *count < p.places->size()) p.places->resize(*count);
}

// OMP_PLACES for either runtime (an invalid value already replaced).
void from_omp_places(OmpRuntime rt, const std::string& value, const OpenMpTopology& t,
                     const std::vector<NumaNode>& numa, OmpPlaces& p) {
  p.binds = true;
  auto [name, count] = abstract_name(value);
  if (name.empty()) {
    p.kind = "explicit";
    std::optional<Places> e = explicit_places(value);
    if (!e) {
      p.unknown = "the explicit place list \"" + value + "\" is not modelled";
      return;
    }
    p.places = within(*e, t.mask);
    if (p.places->empty()) p.binds = false;  // no usable CPU in any place
    return;
  }
  p.kind = name;
  if (name == "numa_domains") {
    if (rt == OmpRuntime::Llvm) {
      // Without hwloc libomp has no NUMA layer: "OMP: Warning #192 ...
      // Using granularity=core instead."
      p.kind = "cores";
      p.notes.push_back("LLVM libomp without hwloc has no NUMA layer: it uses cores instead");
      p.places = level_places(rt, t, "cores", &p.unknown);
    } else {
      Places nodes;
      for (const NumaNode& n : numa)
        if (n.cpus) nodes.push_back(*n.cpus);
      if (nodes.empty()) {
        p.unknown = "the NUMA nodes' CPUs are unknown";
        return;
      }
      p.places = within(nodes, t.mask);
    }
    limit(p, count);
    return;
  }
  if (name != "threads" && name != "cores" && name != "sockets") {
    p.unknown = "OMP_PLACES=" + name + " is not modelled";
    return;
  }
  p.places = level_places(rt, t, name, &p.unknown);
  limit(p, count);
}

// KMP_AFFINITY as libomp parses it: the type word, granularity=, proclist=.
struct KmpAffinity {
  bool typed = false;  // LLVM's substring test for a type name
  std::string type, granularity;
  std::optional<std::string> proclist;
};
KmpAffinity parse_kmp_affinity(const std::string& v) {
  KmpAffinity k;
  const std::string l = lower(v);
  for (const char* t :
       {"none", "physical", "logical", "compact", "scatter", "explicit", "balanced", "disabled"})
    if (l.find(t) != std::string::npos) k.typed = true;
  k.type = kmp_affinity_type(l);
  for (const std::string& raw : kmp_affinity_items(l).value_or(std::vector<std::string>{})) {
    const std::string i(trim(raw));
    if (i.starts_with("granularity="))
      k.granularity = std::string(trim(std::string_view(i).substr(12)));
    else if (i.starts_with("gran="))
      k.granularity = std::string(trim(std::string_view(i).substr(5)));
    else if (i.starts_with("proclist=[") && i.ends_with("]"))
      k.proclist = i.substr(10, i.size() - 11);
  }
  return k;
}

// Granularity words to the level they name; "" when not modelled.
std::string granularity_level(const std::string& g) {
  if (g.empty() || g == "core") return "cores";
  if (g == "fine" || g == "thread") return "threads";
  if (g == "package" || g == "socket") return "sockets";
  return "";
}

// The places of an explicit CPU list at a granularity: each listed CPU of
// the mask replaced by its unit, units kept once.
std::optional<Places> cpus_at_level(OmpRuntime rt, const std::vector<u32>& cpus,
                                    const std::string& level, const OpenMpTopology& t,
                                    std::string* unknown) {
  std::optional<Places> units = level_places(rt, t, level, unknown);
  if (!units) return std::nullopt;
  Places out;
  for (u32 c : cpus)
    for (const std::vector<u32>& u : *units)
      if (std::find(u.begin(), u.end(), c) != u.end() &&
          std::find(out.begin(), out.end(), u) == out.end())
        out.push_back(u);
  return out;
}

// The binding variables as both runtimes find them.
struct Vars {
  const EnvFacts& env;
  const std::string* bind = env.value_of("OMP_PROC_BIND");
  const std::string* places = env.value_of("OMP_PLACES");
  const std::string* gomp = env.value_of("GOMP_CPU_AFFINITY");
  const std::string* kmp = env.value_of("KMP_AFFINITY");
  Bind b = env.rejects("OMP_PROC_BIND") ? Bind::Ignored : proc_bind(bind);
};

OmpPlaces gnu_places(const Vars& v, const OpenMpTopology& t, const std::vector<NumaNode>& numa) {
  OmpPlaces p;
  const EnvFacts& env = v.env;
  const std::string *bind = v.bind, *places = v.places, *gomp = v.gomp;
  const Bind b = v.b;
  if (v.kmp) p.notes.push_back("KMP_AFFINITY is LLVM's: libgomp ignores it");
  if (b == Bind::Off) {
    p.decided_by = setting("OMP_PROC_BIND", *bind);
    return p;
  }
  if (places && !env.rejects("OMP_PLACES")) {
    p.decided_by = setting("OMP_PLACES", *places);
    if (gomp) p.notes.push_back("GOMP_CPU_AFFINITY is ignored: OMP_PLACES takes precedence");
    from_omp_places(OmpRuntime::Gnu, *places, t, numa, p);
    return p;
  }
  if (gomp && !env.rejects("GOMP_CPU_AFFINITY")) {
    p.decided_by = setting("GOMP_CPU_AFFINITY", *gomp);
    p.binds = true;
    p.absolute = true;
    p.kind = "explicit CPUs";
    if (std::optional<std::vector<u32>> cpus = gomp_cpu_list(*gomp)) {
      p.places.emplace();
      for (u32 c : *cpus) p.places->push_back({c});
    }
    return p;
  }
  if (b == Bind::On) {
    p.decided_by = setting("OMP_PROC_BIND", *bind);
    p.binds = true;
    p.kind = "threads";
    p.places = level_places(OmpRuntime::Gnu, t, "threads", &p.unknown);
  }
  return p;
}

OmpPlaces llvm_places(const Vars& v, const OpenMpTopology& t, const std::vector<NumaNode>& numa) {
  OmpPlaces p;
  const EnvFacts& env = v.env;
  const std::string *bind = v.bind, *places = v.places, *gomp = v.gomp, *kmp = v.kmp;
  const Bind b = v.b;
  auto ignored = [&](const char* by, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (env.value_of(n))
        p.notes.push_back(std::string(n) + " is ignored because " + by + " has been defined");
  };
  if (kmp) {
    const KmpAffinity k = parse_kmp_affinity(*kmp);
    if (k.typed) {
      p.decided_by = setting("KMP_AFFINITY", *kmp);
      ignored("KMP_AFFINITY", {"GOMP_CPU_AFFINITY", "OMP_PLACES", "OMP_PROC_BIND"});
      if (k.type == "none" || k.type == "disabled") return p;
      p.binds = true;
      if (env.rejects("KMP_AFFINITY") || k.type.empty()) {
        p.unknown = "KMP_AFFINITY=" + *kmp + " is not modelled as written";
        return p;
      }
      const std::string level = granularity_level(k.granularity);
      if (level.empty()) {
        p.unknown = "granularity=" + k.granularity + " is not modelled";
        return p;
      }
      p.kind =
          level == "cores" && k.granularity.empty() ? "cores (the default granularity)" : level;
      if (k.type == "explicit") {
        std::optional<std::vector<u32>> cpus =
            k.proclist ? parse_cpu_list(*k.proclist) : std::nullopt;
        if (!cpus) {
          p.unknown = "the proclist of KMP_AFFINITY=" + *kmp + " is not modelled";
          return p;
        }
        std::vector<u32> in;
        for (u32 c : *cpus)
          if (t.mask.empty() || std::find(t.mask.begin(), t.mask.end(), c) != t.mask.end())
            in.push_back(c);
        if (in.empty()) {
          p.binds = false;  // "No valid OS proc IDs specified - not using affinity"
          return p;
        }
        p.places = cpus_at_level(OmpRuntime::Llvm, in, level, t, &p.unknown);
      } else {
        p.places = level_places(OmpRuntime::Llvm, t, level, &p.unknown);
      }
      return p;
    }
  }
  if (gomp && !env.rejects("GOMP_CPU_AFFINITY")) {
    p.decided_by = setting("GOMP_CPU_AFFINITY", *gomp);
    ignored("GOMP_CPU_AFFINITY", {"OMP_PLACES", "OMP_PROC_BIND"});
    p.kind = "explicit CPUs, granularity fine";
    std::optional<std::vector<u32>> cpus = gomp_cpu_list(*gomp);
    if (!cpus) {
      p.binds = true;
      p.unknown = "GOMP_CPU_AFFINITY=" + *gomp + " is not modelled";
      return p;
    }
    Places each;
    for (u32 c : *cpus) each.push_back({c});
    p.places = within(each, t.mask);
    p.binds = !p.places->empty();
    if (!p.binds) p.notes.push_back("none of its CPUs is in the mask: libomp does not bind");
    return p;
  }
  if (places) {
    p.decided_by = setting("OMP_PLACES", *places);
    if (b == Bind::Off)
      p.notes.push_back("OMP_PROC_BIND=false does not stop libomp 14 from binding to OMP_PLACES");
    std::string value = *places;
    if (env.rejects("OMP_PLACES")) {
      value = "cores";  // "OMP: Warning #250: OMP_PLACES: syntax error, using "cores"."
      p.notes.push_back("libomp reads the invalid OMP_PLACES as cores");
    }
    from_omp_places(OmpRuntime::Llvm, value, t, numa, p);
    return p;
  }
  if (b == Bind::On) {
    p.decided_by = setting("OMP_PROC_BIND", *bind);
    p.binds = true;
    p.kind = "cores (the default granularity)";
    p.places = level_places(OmpRuntime::Llvm, t, "cores", &p.unknown);
  } else if (b == Bind::Off) {
    p.decided_by = setting("OMP_PROC_BIND", *bind);
  }
  return p;
}

}  // namespace

std::optional<bool> omp_proc_bind_on(std::string_view value) {
  const std::string v(value);
  switch (proc_bind(&v)) {
    case Bind::On: return true;
    case Bind::Off: return false;
    case Bind::Ignored: break;
  }
  return std::nullopt;
}

std::string_view omp_runtime_name(OmpRuntime r) {
  return r == OmpRuntime::Gnu ? "GNU libgomp" : "LLVM libomp";
}

bool OmpPlaces::pins(const std::vector<u32>& mask) const {
  if (!binds) return false;
  if (!places) return true;  // bound somewhere not modelled
  for (const std::vector<u32>& p : *places)
    if (p != mask) return true;
  return false;
}

OmpPlaces omp_places(OmpRuntime runtime, const EnvFacts& env, const OpenMpTopology& topology,
                     const std::vector<NumaNode>& numa_nodes) {
  const Vars v{env};
  OmpPlaces p = runtime == OmpRuntime::Gnu ? gnu_places(v, topology, numa_nodes)
                                           : llvm_places(v, topology, numa_nodes);
  if (p.binds && p.places && p.places->empty()) p.binds = false;
  if (p.binds && !p.places && p.unknown.empty()) p.unknown = "the places are not modelled";
  if (p.places) p.unknown.clear();
  return p;
}

std::string format_places(const std::vector<std::vector<u32>>& places, size_t max) {
  std::string out;
  for (size_t i = 0; i < places.size() && i < max; i++)
    out += (i ? "," : "") + ("{" + format_cpu_list(places[i]) + "}");
  if (places.size() > max) out += ",… (" + std::to_string(places.size()) + " places)";
  return out;
}

}  // namespace mld::hostfacts
