// versions.cc — GNU symbol-version satisfaction as glibc checks it when an
// object is loaded (elf/dl-version.c): each Verneed names a file (vn_file)
// and the versions expected from it; the provider is whichever loaded object
// answers to that name, and each needed version must appear among the
// provider's Verdef entries. A missing non-weak version is the classic
// "version `GLIBCXX_3.4.30' not found (required by ...)" that stops a load
// when an old libstdc++ (often a conda one) is found first.
#include <algorithm>

#include "loader/loader.h"

namespace mld::loader {

namespace {

// find_needed: the first object in link-map order answering to a name (its
// l_name or any l_libname). A process asks for the same few names over and
// over (libc.so.6 by nearly every object), so answers are remembered for
// the rest of the check.
class Providers {
 public:
  explicit Providers(const Process& p) : p_(p) {}

  std::optional<size_t> find(std::string_view name) {
    for (const auto& [n, idx] : seen_)
      if (n == name) return idx;
    std::optional<size_t> idx;
    for (size_t i = 0; i < p_.objects.size() && !idx; i++) {
      const Object& o = p_.objects[i];
      if (o.removed) continue;
      if (o.path == name || std::find(o.names.begin(), o.names.end(), name) != o.names.end())
        idx = i;
    }
    seen_.emplace_back(name, idx);
    return idx;
  }

 private:
  const Process& p_;
  std::vector<std::pair<std::string_view, std::optional<size_t>>> seen_;
};

}  // namespace

std::vector<VersionProblem> check_versions(const Process& p, const std::vector<size_t>& objects) {
  std::vector<VersionProblem> out;
  Providers providers(p);
  // Each ElfFile keeps its decoded Verneed/Verdef tables, so libc's Verdef
  // (the provider of nearly every object) is decoded once per run, not once
  // per process or per need.
  for (size_t i : objects) {
    if (i >= p.objects.size()) continue;
    const Object& o = p.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    const std::vector<elf::VersionNeed>* needs;
    try {
      needs = &o.elf->cached_version_needs();
    } catch (const ParseError&) {
      continue;  // reported as a malformed object elsewhere
    }
    for (const elf::VersionNeed& need : *needs) {
      std::optional<size_t> prov = providers.find(need.file);
      // Trace mode skips stub entries of missing dependencies.
      if (!prov || p.objects[*prov].faked || !p.objects[*prov].elf) continue;
      const std::vector<elf::VersionDef>* defs;
      try {
        defs = &p.objects[*prov].elf->cached_version_defs();
      } catch (const ParseError&) {
        continue;  // reported as malformed elsewhere
      }
      auto problem = [&](VersionProblem::Kind kind, const elf::VersionNeedEntry& e) {
        VersionProblem vp;
        vp.kind = kind;
        vp.requirer = i;
        vp.file = std::string(need.file);
        vp.version = std::string(e.name);
        vp.provider = *prov;
        out.push_back(std::move(vp));
      };
      for (const elf::VersionNeedEntry& e : need.entries) {
        if (defs->empty()) {
          problem(VersionProblem::NoVersionInfo, e);
          break;  // glibc reports this once per file and moves on
        }
        // The ELF hash of the name (vna_hash, vd_hash) settles almost every
        // comparison; a match is by name, as the model always had it.
        bool found = std::any_of(defs->begin(), defs->end(), [&](const elf::VersionDef& d) {
          return d.hash == e.hash && d.name == e.name;
        });
        if (!found)
          found = std::any_of(defs->begin(), defs->end(),
                              [&](const elf::VersionDef& d) { return d.name == e.name; });
        if (found) continue;
        problem(
            (e.flags & elf::VER_FLG_WEAK) ? VersionProblem::WeakNotFound : VersionProblem::NotFound,
            e);
      }
    }
  }
  return out;
}

std::vector<VersionProblem> check_versions(const Process& p) {
  std::vector<size_t> all(p.objects.size());
  for (size_t i = 0; i < all.size(); i++) all[i] = i;
  return check_versions(p, all);
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

std::optional<GlibcVersion> oldest_glibc_needed(const elf::ElfFile& object) {
  std::optional<GlibcVersion> oldest;
  for (const elf::VersionNeed& need : object.version_needs())
    for (const elf::VersionNeedEntry& e : need.entries) {
      // GLIBC_2.34, never GLIBC_PRIVATE or GLIBC_ABI_DT_RELR (not releases).
      if (!e.name.starts_with("GLIBC_")) continue;
      std::optional<GlibcVersion> v = parse_glibc_version(e.name.substr(6));
      if (v && (!oldest || *v > *oldest)) oldest = v;
    }
  return oldest;
}

}  // namespace mld::loader
