// CUDA001 — two major versions of one CUDA library in one process (e.g.
// libcublas.so.11 from a cu11 wheel beside libcublas.so.12 from torch's
// nvidia-* dependencies): each major is a separate ABI, so the process holds
// two CUDA stacks and whichever a symbol binds to first wins. Predicted for
// check's import set (each object with the import that loads it) and for
// libs' program (each with the objects that need it).
#include <algorithm>
#include <map>

#include "detect/detect.h"

namespace {

// libcudart.so.12 -> {"libcudart", "12"}; nullopt for names without a major.
std::optional<std::pair<std::string, std::string>> cuda_family(std::string_view soname) {
  static constexpr std::string_view kFamilies[] = {
      "libcudart",    "libcublas",   "libcublasLt",  "libcudnn", "libcufft",
      "libcurand",    "libcusparse", "libcusolver",  "libnccl",  "libnvrtc",
      "libnvJitLink", "libcupti",    "libnvToolsExt"};
  const size_t so = soname.find(".so.");
  if (so == std::string_view::npos) return std::nullopt;
  const std::string_view base = soname.substr(0, so);
  if (std::find(std::begin(kFamilies), std::end(kFamilies), base) == std::end(kFamilies))
    return std::nullopt;
  const std::string_view rest = soname.substr(so + 4);
  const std::string_view major = rest.substr(0, rest.find('.'));
  if (major.empty()) return std::nullopt;
  return std::make_pair(std::string(base), std::string(major));
}

}  // namespace

MLD_DETECTOR(CUDA001) {
  using namespace mld;
  for (const detect::SimulatedProcess& sp : facts.simulated) {
    const loader::Process& p = *sp.process;
    std::map<std::string, std::map<std::string, size_t>> seen;  // family -> major -> object
    for (size_t i = 0; i < p.objects.size(); i++) {
      const loader::Object& o = p.objects[i];
      if (o.faked || o.removed || !o.elf) continue;
      if (auto fam = cuda_family(loader::object_soname(o)))
        seen[fam->first].emplace(fam->second, i);
    }
    for (const auto& [family, majors] : seen) {
      if (majors.size() < 2) continue;
      Detection d;
      d.rule = "CUDA001";
      d.subject = family;
      d.message = std::to_string(majors.size()) + " major versions of " + family +
                  " would be loaded by `" + sp.subject + "`";
      for (const auto& [major, i] : majors)
        d.evidence.push_back({family + ".so." + major + " => " + p.objects[i].path +
                                  (sp.loaded_by ? ", loaded by " + (*sp.loaded_by)[i]
                                                : ", needed by " + loader::needed_by(p, i)),
                              "", std::nullopt});
      d.fix =
          "install the packages built for one CUDA major version (the nvidia-*-cu12 wheels with a "
          "cu12 torch, or all cu11)";
      out.push_back(std::move(d));
    }
  }
}
