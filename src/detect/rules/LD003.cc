// LD003 — one soname loaded from two files. ld.so matches a DT_NEEDED name
// against the sonames already loaded only when the search did not reach it
// by path first, so two packages each carrying their own copy (a wheel's
// RUNPATH, a conda lib/) can end up with both in one process; each copy then
// keeps its own globals.
#include <algorithm>

#include "detect/detect.h"

MLD_DETECTOR(LD003) {
  using namespace mld;
  for (const detect::SimulatedProcess& sp : facts.simulated) {
    const loader::Process& p = *sp.process;
    std::vector<std::pair<std::string_view, size_t>> by_soname;
    for (size_t i = 0; i < p.objects.size(); i++) {
      const loader::Object& o = p.objects[i];
      if (o.faked || o.removed || !o.elf) continue;
      by_soname.emplace_back(loader::object_soname(o), i);
    }
    std::sort(by_soname.begin(), by_soname.end());
    for (size_t a = 0; a < by_soname.size();) {
      size_t b = a + 1;
      while (b < by_soname.size() && by_soname[b].first == by_soname[a].first) b++;
      if (b - a >= 2) {
        const std::string so(by_soname[a].first);
        Detection d;
        d.rule = "LD003";
        d.subject = so;
        d.message = so + " is loaded from " + std::to_string(b - a) + " different files";
        for (size_t k = a; k < b; k++) {
          const size_t i = by_soname[k].second;
          d.evidence.push_back({p.objects[i].path + " (needed by " + loader::needed_by(p, i) + ")",
                                "", std::nullopt});
        }
        d.fix = "keep one copy of " + so + " on the search path so every user shares it";
        detect::add_loaded_by(sp, d);
        out.push_back(std::move(d));
      }
      a = b;
    }
  }
}
