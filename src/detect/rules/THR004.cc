// THR004 — every rank of a node pins its OpenMP threads to the same CPUs.
// With binding on (OMP_PROC_BIND, OMP_PLACES, KMP_AFFINITY's compact/scatter/
// balanced/explicit types), GNU and LLVM OpenMP build their places from the
// process's affinity mask and put thread i on place i. When the launcher
// starts several ranks on a node without binding each to its own CPUs,
// every rank's mask is the whole node, so thread 0 of every rank lands on
// the first place, thread 1 on the second, and the ranks share those cores
// while the others idle. libgomp's GOMP_CPU_AFFINITY names absolute CPUs and
// ignores the mask, so it pins the ranks together even when the launcher
// bound them. Seen on this machine with gcc's and clang's OpenMP, each
// thread's mask read back with pthread_getaffinity_np
// (test/e2e/scenario-thr004-binding.py).
#include <algorithm>

#include "detect/detect.h"

namespace {

const std::string* env(const mld::hostfacts::EnvFacts& e, std::string_view name) {
  for (const mld::hostfacts::EnvVar& v : e.variables)
    if (v.name == name) return &v.value;
  return nullptr;
}

// OMP_PROC_BIND as the runtimes read it: "false" turns binding off, "true"
// or a list of policies (primary, master, close, spread) on; anything else
// is ignored (ENV002 reports it).
enum class ProcBind { Off, On, Ignored };
ProcBind proc_bind_of(const std::string& v) {
  const std::string l = mld::ascii_lower(mld::trim(v));
  if (l == "false") return ProcBind::Off;
  if (l == "true") return ProcBind::On;
  size_t i = 0;
  while (i <= l.size()) {
    size_t comma = std::min(l.find(',', i), l.size());
    const std::string_view item = mld::trim(std::string_view(l).substr(i, comma - i));
    if (item != "primary" && item != "master" && item != "close" && item != "spread")
      return ProcBind::Ignored;
    i = comma + 1;
  }
  return ProcBind::On;
}

// KMP_AFFINITY's type (the one word that is not a modifier): binding types
// place threads; none/disabled do not.
bool kmp_affinity_binds(const std::string& v) {
  std::string l = mld::ascii_lower(v);
  // proclist=[...] holds commas of its own.
  if (size_t open = l.find('['); open != std::string::npos) {
    size_t close = l.find(']', open);
    l.erase(open, close == std::string::npos ? std::string::npos : close - open + 1);
  }
  size_t i = 0;
  while (i <= l.size()) {
    size_t comma = l.find(',', i);
    if (comma == std::string::npos) comma = l.size();
    const std::string_view item = mld::trim(std::string_view(l).substr(i, comma - i));
    if (item == "compact" || item == "scatter" || item == "balanced" || item == "explicit" ||
        item == "logical" || item == "physical")
      return true;
    i = comma + 1;
  }
  return false;
}

}  // namespace

MLD_DETECTOR(THR004) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::HostFacts& h = facts.host->host;
  const hostfacts::EnvFacts& e = facts.host->env;
  if (!h.ranks_per_node.count || *h.ranks_per_node.count < 2) return;
  const u32 ranks = *h.ranks_per_node.count;

  const std::string* proc_bind = env(e, "OMP_PROC_BIND");
  const std::string* places = env(e, "OMP_PLACES");
  const std::string* gomp = env(e, "GOMP_CPU_AFFINITY");
  const std::string* kmp = env(e, "KMP_AFFINITY");
  const ProcBind bind = proc_bind ? proc_bind_of(*proc_bind) : ProcBind::Ignored;
  if (bind == ProcBind::Off) return;  // binding off, whatever else is set

  // What turns binding on, as `NAME=value` for the report.
  std::vector<std::string> binding;
  if (bind == ProcBind::On) binding.push_back("OMP_PROC_BIND=" + *proc_bind);
  if (places) binding.push_back("OMP_PLACES=" + *places);
  if (kmp && kmp_affinity_binds(*kmp)) binding.push_back("KMP_AFFINITY=" + *kmp);
  const bool absolute = gomp && !places;  // OMP_PLACES takes precedence over it
  if (absolute) binding.push_back("GOMP_CPU_AFFINITY=" + *gomp);
  if (binding.empty()) return;

  // One rank sees only its own mask. Ranks given disjoint shares of the node
  // each hold at most 1/ranks of it; a mask larger than that (the whole
  // node, when the launcher binds nothing) overlaps the others', and equal
  // masks mean equal places.
  const std::optional<std::vector<u32>>& mask = h.cpu.affinity;
  const std::optional<std::vector<u32>>& online = h.cpu.online;
  const bool shared_mask =
      mask && online && mask->size() >= 2 && mask->size() * ranks > online->size();
  if (!shared_mask && !absolute) return;

  std::string settings;
  for (size_t i = 0; i < binding.size(); i++) settings += (i ? " " : "") + binding[i];
  Detection d;
  d.rule = "THR004";
  d.subject = binding.front().substr(0, binding.front().find('='));
  const std::string head = " pins the OpenMP threads of each of the " + std::to_string(ranks) +
                           " ranks on this node to the same CPUs: ";
  if (shared_mask && *mask == *online)
    d.message = settings + head + "every rank's affinity mask is the whole node (" +
                hostfacts::format_cpu_list(*mask) +
                "), so thread 0 of every rank runs on the first place, thread 1 on the second, and "
                "the other CPUs idle";
  else if (shared_mask)
    d.message = settings + head + "this rank's affinity mask (" +
                hostfacts::format_cpu_list(*mask) + ") holds " + std::to_string(mask->size()) +
                " of the node's " + std::to_string(online->size()) +
                " online CPUs, more than a 1/" + std::to_string(ranks) +
                " share, so the ranks' masks overlap and their threads are placed on the same CPUs";
  else
    d.message = "GOMP_CPU_AFFINITY=" + *gomp + head +
                "libgomp binds to the CPUs it names whatever the rank's affinity mask" +
                (mask ? " (" + hostfacts::format_cpu_list(*mask) + ")" : std::string());
  d.evidence.push_back({std::to_string(ranks) + " ranks per node (" + h.ranks_per_node.source +
                            (h.ranks_per_node.raw.empty() ? "" : "=" + h.ranks_per_node.raw) + ")",
                        "", std::nullopt});
  if (mask)
    d.evidence.push_back(
        {"this rank's affinity mask: " + hostfacts::format_cpu_list(*mask) + " (" +
             h.cpu.affinity_source + ")" +
             (online ? ", online CPUs: " + hostfacts::format_cpu_list(*online) : ""),
         "", std::nullopt});
  for (const std::string& b : binding) {
    const std::string name = b.substr(0, b.find('='));
    d.env_fix.push_back("-" + name);
  }
  out.push_back(std::move(d));
}
