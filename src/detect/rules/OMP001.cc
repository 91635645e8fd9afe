// OMP001 — more than one OpenMP runtime in one process. The facts come from
// the loader's simulation (check's import set, libs' load order) or from
// run's trace of a real process; GNU libgomp, LLVM libomp and Intel libiomp5
// each keep their own thread pool, and a second LLVM/Intel runtime aborts
// with "OMP: Error #15" when it initialises (rules/OMP001.toml).
#include "detect/detect.h"

namespace {

using mld::detect::Installer;

// The fix a user can apply where the runtimes come from: pip cannot make two
// wheels share one vendored copy, conda can (one channel), Debian's packages
// already do. Empty: the rule's general fix (a mixture, or unknown origins).
std::string fix_for_installers(const mld::detect::OpenMpProcess& p, bool aborts) {
  std::optional<Installer> all;
  std::string owners;
  for (const mld::detect::OpenMpRuntime& r : p.runtimes) {
    if (r.installer == Installer::Unknown) return "";
    if (all && *all != r.installer) all = Installer::Unknown;
    if (!all) all = r.installer;
    if (!r.owner.empty() && owners.find(r.owner) == std::string::npos)
      owners += (owners.empty() ? "" : ", ") + r.owner;
  }
  const std::string dont = "; do not set KMP_DUPLICATE_LIB_OK=TRUE, which only hides the clash";
  switch (all.value_or(Installer::Unknown)) {
    case Installer::Wheel:
      if (aborts)
        return "these wheels" + (owners.empty() ? "" : " (" + owners + ")") +
               " each vendor an LLVM/Intel OpenMP, and pip cannot make them share one: install "
               "the packages from one source that links a single runtime (all conda-forge, or "
               "the distribution's packages), or replace one with a build that uses GNU "
               "libgomp" +
               dont;
      return "these wheels" + (owners.empty() ? "" : " (" + owners + ")") +
             " each vendor their own OpenMP runtime, and pip cannot make them share one: size "
             "the pools together (OMP_NUM_THREADS applies to every copy at its start; "
             "threadpoolctl.threadpool_limits(n) limits each copy at run time), or install the "
             "packages from one source that links a single runtime (all conda-forge, or the "
             "distribution's packages)" +
             dont;
    case Installer::Conda:
      return "install these packages from one channel so they link one OpenMP runtime (e.g. "
             "`conda install -c conda-forge <packages>`; `conda list openmp` shows the "
             "runtimes, and `_openmp_mutex` chooses GNU or LLVM OpenMP for the environment)" +
             dont;
    case Installer::System: {
      // "libgomp1 12.2.0-14 (dpkg)" -> "libgomp1 12.2.0-14".
      std::string packages;
      for (const mld::detect::OpenMpRuntime& r : p.runtimes) {
        std::string name =
            r.owner.ends_with(" (dpkg)") ? r.owner.substr(0, r.owner.size() - 7) : r.owner;
        if (!name.empty() && packages.find(name) == std::string::npos)
          packages += (packages.empty() ? "" : ", ") + name;
      }
      return "these runtimes are all the distribution's" +
             (packages.empty() ? std::string() : " (packages " + packages + ")") +
             ": rebuild or reinstall the package that links a second runtime so that all link "
             "the system libgomp.so.1" +
             dont;
    }
    case Installer::Unknown: break;
  }
  return "";
}

// The runtime's own words when the LLVM/Intel copies are known by the
// names they print: "OMP: Error #15: Initializing libomp.so.5, but found
// libomp.so.5 already initialized." The copy loaded second is taken to
// start second.
std::string error15(const mld::detect::OpenMpProcess& p) {
  std::vector<const mld::detect::OpenMpRuntime*> kmp;
  for (const mld::detect::OpenMpRuntime& r : p.runtimes)
    if (r.kind != mld::loader::OpenMpKind::Gnu) kmp.push_back(&r);
  if (kmp.size() < 2 || kmp[0]->announces.empty() || kmp[1]->announces.empty())
    return "OMP: Error #15";
  return "OMP: Error #15: Initializing " + kmp[1]->announces + ", but found " + kmp[0]->announces +
         " already initialized.";
}

}  // namespace

MLD_DETECTOR(OMP001) {
  using namespace mld;
  for (const detect::OpenMpProcess& p : facts.openmp) {
    if (p.runtimes.size() < 2) continue;
    int kmp = 0;  // LLVM/Intel runtimes: the ones that abort on a second copy
    for (const detect::OpenMpRuntime& r : p.runtimes) kmp += r.kind != loader::OpenMpKind::Gnu;
    Detection d;
    d.rule = "OMP001";
    d.escalated = kmp >= 2;
    d.subject = p.process;
    const std::string count = std::to_string(p.runtimes.size()) + " OpenMP runtimes ";
    if (p.observed)
      d.message = count + "were loaded in " + p.process;
    else
      d.message = count + "would be loaded" + (p.process.empty() ? "" : " by `" + p.process + "`");
    if (kmp < 2)
      d.message += ": each keeps its own thread pool and thread count";
    else if (p.aborted)
      d.message += ": the second LLVM/Intel copy aborted it (\"OMP: Error #15\")";
    else
      d.message += std::string(": the second LLVM/Intel copy aborts with \"") + error15(p) + "\"" +
                   (p.observed ? " when it starts" : "");
    for (const detect::OpenMpRuntime& r : p.runtimes)
      d.evidence.push_back({std::string(loader::openmp_kind_name(r.kind)) + " " + r.soname +
                                " => " + r.path +
                                (r.interface.empty() ? "" : " (" + r.interface + ")") +
                                (r.how.empty() ? "" : ", " + r.how),
                            "", std::nullopt});
    if (!p.has_mkl) d.fix = fix_for_installers(p, kmp >= 2);
    if (p.has_mkl) {
      d.fix =
          "let MKL use the GNU runtime the others already load: MKL_THREADING_LAYER=GNU (then "
          "libiomp5 "
          "is not needed); do not set KMP_DUPLICATE_LIB_OK=TRUE, which hides the clash";
      d.env_fix.push_back("MKL_THREADING_LAYER=GNU");
    }
    out.push_back(std::move(d));
  }
}
