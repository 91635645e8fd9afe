// LD001 — a DT_NEEDED library that ld.so would not find: every object that
// needs it names it once, with each path the search tried in glibc's order
// (DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH, ld.so.cache, the system
// directories; research/glibc-tls-audit.md §1) and what it found there.
#include <set>

#include "detect/detect.h"

MLD_DETECTOR(LD001) {
  using namespace mld;
  for (const detect::SimulatedProcess& sp : facts.simulated) {
    const loader::Process& p = *sp.process;
    std::set<std::string> reported;
    for (const loader::Object& o : p.objects) {
      for (const loader::Resolution& r : o.needed) {
        if (r.how != loader::How::NotFound || !r.object || !p.objects[*r.object].faked) continue;
        if (!reported.insert(r.name + "\n" + o.path).second) continue;
        Detection d;
        d.rule = "LD001";
        d.subject = r.name;
        d.message = r.name + " (needed by " + o.path + ") is not found";
        for (const loader::Attempt& a : r.tried)
          d.evidence.push_back(
              {a.source + ": " + a.path + " (" + a.outcome + ")", "", std::nullopt});
        d.fix = "install the package that ships " + r.name +
                ", or add its directory to the DT_RUNPATH of " + o.path +
                " (patchelf --add-rpath DIR) or to LD_LIBRARY_PATH";
        detect::add_loaded_by(sp, d);
        out.push_back(std::move(d));
      }
    }
  }
}
