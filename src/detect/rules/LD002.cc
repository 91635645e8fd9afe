// LD002 — a symbol version an object needs that the file answering to its
// vn_file does not define (glibc elf/dl-version.c, match_symbol: "version
// `GLIBCXX_3.4.32' not found (required by ...)"), with how the loader found
// that older copy: the usual cause is a conda or system libstdc++ ahead of
// the one a wheel was built against.
#include "detect/detect.h"

MLD_DETECTOR(LD002) {
  using namespace mld;
  for (const detect::SimulatedProcess& sp : facts.simulated) {
    const loader::Process& p = *sp.process;
    for (const loader::VersionProblem& vp : sp.version_problems) {
      if (vp.kind != loader::VersionProblem::NotFound) continue;
      const loader::Object& prov = p.objects[vp.provider];
      Detection d;
      d.rule = "LD002";
      d.subject = p.objects[vp.requirer].path;
      d.message = loader::version_problem_text(p, vp);
      std::string how;
      for (const loader::Object& o : p.objects)
        for (const loader::Resolution& r : o.needed)
          if (r.object == vp.provider && how.empty())
            how = std::string(loader::how_name(r.how)) + (r.via.empty() ? "" : " of " + r.via);
      d.evidence.push_back(
          {vp.file + " => " + prov.path + (how.empty() ? "" : " (found via " + how + ")"), "",
           std::nullopt});
      d.evidence.push_back({prov.path + " does not define " + vp.version, "", std::nullopt});
      d.fix = "make a " + vp.file + " that defines " + vp.version +
              " load first (put its directory first in LD_LIBRARY_PATH, or remove the older copy "
              "from the search path), or rebuild " +
              p.objects[vp.requirer].path + " against " + prov.path;
      detect::add_loaded_by(sp, d);
      out.push_back(std::move(d));
    }
  }
}
