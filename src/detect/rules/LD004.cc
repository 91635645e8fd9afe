// LD004 — one library in one process as several copies under different
// sonames. auditwheel renames each vendored copy with a hash of its contents
// ("libgomp-a34b3233.so.1"), and wheels differ in the name they keep
// (torch's "libgomp-a34b3233.so.1", scikit-learn's
// "libgomp-a34b3233.so.1.0.0" for the same build), so the loader never
// matches one to the other and each keeps its own state.
//
// Copies are recognised by build, not by name: objects with equal
// NT_GNU_BUILD_ID are one build whatever their names. Only an object without
// a build-id is matched by name (the soname without the vendor hash, cut to
// its major version: "libgomp.so.1"). Two different builds of one library
// (opencv's libgomp beside torch's) are not duplicates of each other: for
// runtimes that is OMP001's finding. A group whose members all share one
// soname is LD003's.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "detect/detect.h"

namespace {

// "libgomp-a34b3233.so.1.0.0" -> "libgomp.so.1".
std::string library_key(std::string_view soname) {
  std::string s = mld::loader::strip_vendor_hash(soname);
  size_t so = s.find(".so.");
  if (so == std::string::npos) return s;
  size_t end = s.find('.', so + 4);
  return end == std::string::npos ? s : s.substr(0, end);
}

struct Groups {
  std::vector<size_t> parent;
  explicit Groups(size_t n) : parent(n) { std::iota(parent.begin(), parent.end(), 0); }
  size_t find(size_t i) { return parent[i] == i ? i : parent[i] = find(parent[i]); }
  void join(size_t a, size_t b) { parent[find(a)] = find(b); }
};

}  // namespace

MLD_DETECTOR(LD004) {
  using namespace mld;
  for (const detect::SimulatedProcess& sp : facts.simulated) {
    const loader::Process& p = *sp.process;
    std::vector<size_t> live;
    std::vector<std::string> build;  // per live object: its build-id, or ""
    for (size_t i = 0; i < p.objects.size(); i++) {
      const loader::Object& o = p.objects[i];
      if (o.faked || o.removed || !o.elf) continue;
      live.push_back(i);
      std::optional<std::string> id;
      try {
        id = o.elf->build_id();
      } catch (const std::exception&) {
        id.reset();  // a malformed note is no build-id
      }
      build.push_back(id.value_or(""));
    }
    Groups groups(live.size());
    std::map<std::string, size_t> by_build;
    std::map<std::string, std::vector<size_t>> named;
    for (size_t k = 0; k < live.size(); k++) {
      named[library_key(loader::object_soname(p.objects[live[k]]))].push_back(k);
      if (build[k].empty()) continue;
      auto [b, fresh_build] = by_build.emplace(build[k], k);
      if (!fresh_build) groups.join(k, b->second);
    }
    // Matching by name joins an object without a build-id to the others of
    // its name (there is nothing better to tell them apart by).
    for (const auto& [key, ks] : named)
      for (size_t k : ks)
        if (build[k].empty())
          for (size_t other : ks) groups.join(k, other);
    std::map<size_t, std::vector<size_t>> members;  // root -> positions in `live`
    for (size_t k = 0; k < live.size(); k++) members[groups.find(k)].push_back(k);
    for (const auto& [root, group] : members) {
      std::set<std::string_view> sonames;
      for (size_t k : group) sonames.insert(loader::object_soname(p.objects[live[k]]));
      if (group.size() < 2 || sonames.size() < 2) continue;
      const std::string base = library_key(loader::object_soname(p.objects[live[group[0]]]));
      std::map<std::string, size_t> per_build;
      for (size_t k : group)
        if (!build[k].empty()) per_build[build[k]]++;
      size_t same_build = 0;
      for (const auto& [id, count] : per_build)
        if (count >= 2) same_build += count;
      Detection d;
      d.rule = "LD004";
      d.subject = base;
      d.message = std::to_string(group.size()) + " copies of " + base + " under different sonames" +
                  (same_build == group.size() ? " (one build)"
                   : same_build               ? " (" + std::to_string(same_build) + " of one build)"
                                              : "") +
                  ": each keeps its own state";
      for (size_t k : group) {
        const size_t i = live[k];
        const loader::Object& o = p.objects[i];
        d.evidence.push_back(
            {std::string(loader::object_soname(o)) + " => " + o.path, "", std::nullopt});
        std::string about = std::string(base_name(o.path)) + ": " +
                            (build[k].empty() ? "no build-id" : "build-id " + build[k]);
        if (sp.loaded_by) about += ", loaded by " + (*sp.loaded_by)[i];
        if (std::optional<std::string> owner = detect::owner_of(sp, o.path))
          about += ", from " + *owner;
        d.evidence.push_back({about, "", std::nullopt});
      }
      d.fix = "make the packages share one " + base +
              " (install builds linked against one copy, e.g. all from one channel or index)";
      out.push_back(std::move(d));
    }
  }
}
