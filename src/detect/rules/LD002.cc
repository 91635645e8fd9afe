// LD002 — a symbol version an object needs that the file answering to its
// vn_file does not define (glibc elf/dl-version.c, match_symbol: "version
// `GLIBCXX_3.4.32' not found (required by ...)"), with how the loader found
// that older copy: the usual cause is a conda or system libstdc++ ahead of
// the one a wheel was built against.
#include "detect/detect.h"

namespace {

// The GCC release whose libstdc++ first defines a GLIBCXX version (GCC's
// libstdc++-v3/config/abi/pre/gnu.ver): what conda's libstdcxx-ng must be.
std::optional<std::string> gcc_release_for(std::string_view glibcxx) {
  static constexpr std::pair<std::string_view, std::string_view> kFirst[] = {
      {"GLIBCXX_3.4.26", "9"},    {"GLIBCXX_3.4.27", "9.2"}, {"GLIBCXX_3.4.28", "9.3"},
      {"GLIBCXX_3.4.29", "11"},   {"GLIBCXX_3.4.30", "12"},  {"GLIBCXX_3.4.31", "13"},
      {"GLIBCXX_3.4.32", "13.2"}, {"GLIBCXX_3.4.33", "14"}};
  for (const auto& [version, gcc] : kFirst)
    if (version == glibcxx) return std::string(gcc);
  return std::nullopt;
}

}  // namespace

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
      // In a conda environment the usual cure is the environment's own
      // libstdc++ (libstdcxx-ng), new enough for the version.
      if (!sp.conda_prefix.empty() && vp.version.starts_with("GLIBCXX_")) {
        std::optional<std::string> gcc = gcc_release_for(vp.version);
        d.fix = "install a libstdc++ new enough for " + vp.version +
                " into the conda environment " + sp.conda_prefix +
                ": conda install -c conda-forge 'libstdcxx-ng" + (gcc ? ">=" + *gcc : "") + "'" +
                (prov.path.starts_with(sp.conda_prefix + "/")
                     ? ""
                     : " (the environment's lib/ is searched before the system's only when the "
                       "module's RUNPATH or LD_LIBRARY_PATH names it)");
      }
      detect::add_loaded_by(sp, d);
      out.push_back(std::move(d));
    }
  }
}
