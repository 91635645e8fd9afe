// MKL001 — the threading layer MKL would pick beside GNU OpenMP. libmkl_rt
// defaults to its INTEL layer, i.e. libiomp5 beside libgomp. mkl-service's
// _mklinit (research/threading.md §2) looks at `import mkl` for an OpenMP
// runtime already global in the process; anything that is not libiomp5
// counts as GNU. MKL_THREADING_LAYER=INTEL with such a runtime present
// prints the "incompatible with libgomp.so.1" error and exits. Unset, it
// picks GNU when a GNU runtime is already loaded and INTEL otherwise — and
// exports MKL_THREADING_LAYER=INTEL to every child process, which then dies
// if it imports torch before numpy.
#include "detect/detect.h"

namespace {

std::string upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}

std::string file_name(const std::string& path) { return std::string(mld::base_name(path)); }

// "import torch (torch._C)" of a runtime's "loaded by import torch (torch._C)".
std::string_view importer(std::string_view how) {
  constexpr std::string_view kLoadedBy = "loaded by ";
  return how.starts_with(kLoadedBy) ? how.substr(kLoadedBy.size()) : how;
}

}  // namespace

MLD_DETECTOR(MKL001) {
  using namespace mld;
  for (const detect::OpenMpProcess& p : facts.openmp) {
    if (!p.mkl) continue;
    const detect::MklLoad& mkl = *p.mkl;
    const detect::OpenMpRuntime* gnu_before = nullptr;
    const detect::OpenMpRuntime* gnu_after = nullptr;
    for (const detect::OpenMpRuntime& r : p.runtimes) {
      if (file_name(r.path).find("libiomp5.so") != std::string::npos &&
          r.kind != loader::OpenMpKind::Gnu)
        continue;
      if (r.position < mkl.position && !gnu_before) gnu_before = &r;
      if (r.position > mkl.position && !gnu_after) gnu_after = &r;
    }
    if (!gnu_before && !gnu_after) continue;
    const std::string layer = upper(mkl.threading_layer.value_or(""));
    if (!layer.empty() && layer != "INTEL") continue;  // GNU, SEQUENTIAL, TBB: no clash

    Detection d;
    d.rule = "MKL001";
    d.subject = "MKL_THREADING_LAYER";
    if (layer == "INTEL" && gnu_before) {
      d.escalated = true;
      // Without mkl-service (or with MKL_SERVICE_FORCE_INTEL) the process
      // goes on: libmkl_intel_thread forks through libiomp5 while its omp_*
      // queries bind to the GNU runtime already global (seen with Debian's
      // MKL 2020.4 beside torch: a 2-thread dgemm computes wrong values).
      const std::string goes_on =
          "MKL's Intel layer starts libiomp5 beside it at its first call, and its omp_* calls "
          "can bind to " +
          file_name(gnu_before->path) +
          " while its parallel regions run on libiomp5: wrong results";
      d.message = "MKL_THREADING_LAYER=" + *mkl.threading_layer + " is incompatible with " +
                  file_name(gnu_before->path) + ", loaded before MKL: " +
                  (!mkl.mkl_service  ? goes_on
                   : mkl.force_intel ? "mkl-service prints this at `import mkl` and goes on "
                                       "(MKL_SERVICE_FORCE_INTEL); " +
                                           goes_on
                                     : "mkl-service prints this and exits at `import mkl`");
    } else if (gnu_before) {
      // mkl-service would see the GNU runtime and pick GNU; plain libmkl_rt
      // keeps its INTEL default.
      if (mkl.mkl_service) continue;
      d.message =
          "MKL_THREADING_LAYER is not set: libmkl_rt would run its default INTEL layer on "
          "libiomp5 beside " +
          file_name(gnu_before->path) +
          ", loaded before it — two OpenMP thread pools in one process";
    } else {
      d.message =
          "libmkl_rt is loaded before " + file_name(gnu_after->path) + " (" +
          std::string(importer(gnu_after->how)) + "): MKL picks its INTEL layer (libiomp5)" +
          (mkl.mkl_service
               ? ", and mkl-service exports MKL_THREADING_LAYER=INTEL to child processes, which "
                 "exit with \"MKL_THREADING_LAYER=INTEL is incompatible with " +
                     file_name(gnu_after->path) + "\" if they import it first"
               : std::string(", beside GNU OpenMP: two thread pools in one process"));
    }
    d.evidence.push_back(
        {"MKL_THREADING_LAYER " +
             (mkl.threading_layer ? "= " + *mkl.threading_layer : std::string("is unset")),
         "", std::nullopt});
    d.evidence.push_back(
        {file_name(mkl.path) + " => " + mkl.path + ", " + mkl.how, "", std::nullopt});
    const detect::OpenMpRuntime* g = gnu_before ? gnu_before : gnu_after;
    d.evidence.push_back({std::string(loader::openmp_kind_name(g->kind)) + " " + g->soname +
                              " => " + g->path + ", " + g->how,
                          "", std::nullopt});
    d.fix =
        "use MKL's GNU threading layer, which runs on the libgomp the other packages load: "
        "export MKL_THREADING_LAYER=GNU (and leave MKL_SERVICE_FORCE_INTEL unset)";
    d.env_fix.push_back("MKL_THREADING_LAYER=GNU");
    out.push_back(std::move(d));
  }
}
