// versions.cc — GNU symbol-version satisfaction as glibc checks it when an
// object is loaded (elf/dl-version.c): each Verneed names a file (vn_file)
// and the versions expected from it; the provider is whichever loaded object
// answers to that name, and each needed version must appear among the
// provider's Verdef entries. A missing non-weak version is the classic
// "version `GLIBCXX_3.4.30' not found (required by ...)" that stops a load
// when an old libstdc++ (often a conda one) is found first.
#include <algorithm>
#include <map>
#include <set>

#include "loader/loader.h"

namespace mld::loader {

namespace {

// find_needed: the first object in link-map order answering to `name`.
std::optional<size_t> find_provider(const Process& p, std::string_view name) {
  for (size_t i = 0; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    if (o.removed) continue;
    if (o.path == name) return i;
    if (std::find(o.names.begin(), o.names.end(), name) != o.names.end()) return i;
  }
  return std::nullopt;
}

}  // namespace

std::vector<VersionProblem> check_versions(const Process& p) {
  std::vector<VersionProblem> out;
  // Each provider's Verdef names, decoded once per process (libc is the
  // provider of nearly every object: decoding it per need dominated `libs`).
  std::map<size_t, std::optional<std::vector<elf::VersionDef>>> defs_of;
  std::set<size_t> unreadable;
  for (size_t i = 0; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    std::vector<elf::VersionNeed> needs;
    try {
      needs = o.elf->version_needs();
    } catch (const ParseError&) {
      continue;  // reported as a malformed object elsewhere
    }
    for (const elf::VersionNeed& need : needs) {
      std::optional<size_t> prov = find_provider(p, need.file);
      // Trace mode skips stub entries of missing dependencies.
      if (!prov || p.objects[*prov].faked || !p.objects[*prov].elf) continue;
      std::optional<std::vector<elf::VersionDef>>& cached = defs_of[*prov];
      if (!cached) {
        try {
          cached = p.objects[*prov].elf->version_defs();
        } catch (const ParseError&) {
          cached = std::vector<elf::VersionDef>();
          unreadable.insert(*prov);
        }
      }
      if (unreadable.count(*prov)) continue;  // reported as malformed elsewhere
      const std::vector<elf::VersionDef>& defs = *cached;
      for (const elf::VersionNeedEntry& e : need.entries) {
        VersionProblem vp;
        vp.requirer = i;
        vp.file = std::string(need.file);
        vp.version = std::string(e.name);
        vp.provider = *prov;
        if (defs.empty()) {
          vp.kind = VersionProblem::NoVersionInfo;
          out.push_back(vp);
          break;  // glibc reports this once per file and moves on
        }
        bool found = std::any_of(defs.begin(), defs.end(),
                                 [&](const elf::VersionDef& d) { return d.name == e.name; });
        if (found) continue;
        vp.kind = (e.flags & elf::VER_FLG_WEAK) ? VersionProblem::WeakNotFound
                                                 : VersionProblem::NotFound;
        out.push_back(vp);
      }
    }
  }
  return out;
}

std::string version_problem_text(const Process& p, const VersionProblem& vp) {
  const std::string& prov = p.objects[vp.provider].path;
  const std::string& req = p.objects[vp.requirer].path;
  switch (vp.kind) {
    case VersionProblem::NotFound:
      return prov + ": version `" + vp.version + "' not found (required by " + req + ")";
    case VersionProblem::WeakNotFound:
      return prov + ": weak version `" + vp.version + "' not found (required by " + req + ")";
    case VersionProblem::NoVersionInfo:
      return prov + ": no version information available (required by " + req + ")";
  }
  return "";
}

}  // namespace mld::loader
