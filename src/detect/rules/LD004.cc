// LD004 — one library under two sonames: auditwheel renames each vendored
// copy with a hash of its contents ("libgomp-a34b3233.so.1"), so two wheels'
// copies, or a wheel's and the system's, never match by name and both load.
// Grouped by the name without the hash; a group whose members all share one
// soname is LD003's.
#include <algorithm>
#include <set>

#include "detect/detect.h"

MLD_DETECTOR(LD004) {
  using namespace mld;
  for (const detect::SimulatedProcess& sp : facts.simulated) {
    const loader::Process& p = *sp.process;
    std::vector<std::pair<std::string, size_t>> by_base;
    for (size_t i = 0; i < p.objects.size(); i++) {
      const loader::Object& o = p.objects[i];
      if (o.faked || o.removed || !o.elf) continue;
      by_base.emplace_back(loader::strip_vendor_hash(loader::object_soname(o)), i);
    }
    std::sort(by_base.begin(), by_base.end());
    for (size_t a = 0; a < by_base.size();) {
      size_t b = a + 1;
      while (b < by_base.size() && by_base[b].first == by_base[a].first) b++;
      std::set<std::string_view> sonames;
      for (size_t k = a; k < b; k++)
        sonames.insert(loader::object_soname(p.objects[by_base[k].second]));
      if (b - a >= 2 && sonames.size() >= 2) {
        const std::string& base = by_base[a].first;
        Detection d;
        d.rule = "LD004";
        d.subject = base;
        d.message = "two copies of " + base + " under different sonames: each keeps its own state";
        for (size_t k = a; k < b; k++) {
          const loader::Object& o = p.objects[by_base[k].second];
          d.evidence.push_back(
              {std::string(loader::object_soname(o)) + " => " + o.path, "", std::nullopt});
        }
        d.fix =
            "make the packages share one " + base + " (use builds linked against the system copy)";
        detect::add_loaded_by(sp, d);
        out.push_back(std::move(d));
      }
      a = b;
    }
  }
}
