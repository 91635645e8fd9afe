// launcher.cc — who started this rank, read from the environment before
// MPI_Init, and whether the MPI library can reach it.
//
// MPI_Init learns its rank and peers from the launcher through a process
// management interface. Open MPI 4.1 as Debian builds it has PMIx components
// only (`ompi_info`: MCA pmix ext3x, flux, isolated): under `srun` with
// Slurm's default `MpiDefault=none`, or with `--mpi=pmi2`, it finds no PMIx
// server, prints "OPAL ERROR: Unreachable" and exits 1, which `fleet`
// documents as "differences found". And a process started with no launcher
// at all (`salloc -n2 mldoctor fleet`, a batch script's own line) initialises
// as a world of one and would report "1 rank, no differences" for a job of
// many. Both are told apart here, so fleet can refuse before MPI_Init, and
// compare the world MPI built with the size the launcher announced after.
#include <algorithm>

#include "fleet/fleet.h"

namespace mld::fleet {

namespace {

std::optional<u32> count_of(const host::Host& h, const char* name, std::string* source) {
  std::optional<std::string> v = h.getenv(name);
  if (!v) return std::nullopt;
  const std::string_view t = trim(*v);
  if (t.empty() || t.size() > 7 || t.find_first_not_of("0123456789") != std::string_view::npos)
    return std::nullopt;
  const u32 n = static_cast<u32>(std::stoul(std::string(t)));
  if (n == 0) return std::nullopt;
  *source = std::string(name) + "=" + std::string(t);
  return n;
}

bool set(const host::Host& h, const char* name) { return h.getenv(name).has_value(); }

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string launcher_advice() {
  return "under Slurm start fleet with `srun --mpi=pmix mldoctor fleet` (or set MpiDefault=pmix in "
         "slurm.conf so plain srun does), or with `mpirun mldoctor fleet` inside the allocation "
         "(salloc or sbatch); Open MPI as Debian builds it speaks only PMIx to srun, never PMI-1 "
         "or "
         "PMI-2";
}

std::optional<std::vector<std::string>> open_mpi_pmi_components(const host::Host& host,
                                                                std::string_view libmpi) {
  const size_t slash = libmpi.rfind('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const std::string dir(libmpi.substr(0, slash));
  // Open MPI installs its components in $pkglibdir: <libdir>/openmpi, which
  // Debian moves to <libdir>/openmpi/lib/openmpi3 beside a libmpi symlinked
  // into the multiarch directory.
  for (const char* sub :
       {"/openmpi/lib/openmpi3", "/openmpi/lib/openmpi", "/openmpi3", "/openmpi"}) {
    std::optional<std::vector<std::string>> files = host.list_dir(dir + sub);
    if (!files) continue;
    std::vector<std::string> pmi;
    for (const std::string& f : *files)
      if (f.starts_with("mca_pmix_") && f.ends_with(".so"))
        pmi.push_back(f.substr(9, f.size() - 12));
    if (pmi.empty()) continue;
    std::sort(pmi.begin(), pmi.end());
    return pmi;
  }
  return std::nullopt;
}

Launcher detect_launcher(const host::Host& h,
                         const std::optional<std::vector<std::string>>& pmi_components) {
  Launcher l;
  // The first of `names` that holds a count is the world the launcher announced.
  auto size_from = [&](std::initializer_list<const char*> names) {
    for (const char* name : names) {
      std::string src;
      if (std::optional<u32> n = count_of(h, name, &src)) {
        l.world_size = n;
        l.world_size_source = src;
        return true;
      }
    }
    return false;
  };
  const bool slurm_step = set(h, "SLURM_STEP_ID") || set(h, "SLURM_STEPID");
  if (set(h, "OMPI_COMM_WORLD_RANK")) {
    l.kind = LauncherKind::Mpirun;
    l.name = "mpirun (Open MPI)";
    size_from({"OMPI_COMM_WORLD_SIZE"});
    return l;
  }
  if (set(h, "PMIX_RANK") || set(h, "PMIX_NAMESPACE")) {
    l.kind = LauncherKind::Pmix;
    l.name = slurm_step ? "srun with PMIx" : "a PMIx launcher";
    if (slurm_step) size_from({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
    return l;
  }
  if (slurm_step) {
    l.kind = LauncherKind::SrunWithoutPmix;
    size_from({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"});
    if (!set(h, "PMI_FD") && !set(h, "PMI_RANK")) {
      l.name = "srun without a PMI (MpiDefault=none or --mpi=none)";
      l.problem =
          "srun started this task without PMIx (--mpi=pmix) or any other process "
          "management interface, so MPI_Init cannot find the other ranks";
      return l;
    }
    l.name = "srun with PMI-1/PMI-2 (--mpi=pmi2)";
    auto has = [&](const char* c) {
      return std::find(pmi_components->begin(), pmi_components->end(), c) != pmi_components->end();
    };
    if (pmi_components && !has("s1") && !has("s2"))
      l.problem =
          "srun offers this task PMI-2, but this Open MPI has no PMI-1/PMI-2 component "
          "(its pmix components: " +
          joined(*pmi_components) + "), so MPI_Init would abort";
    return l;
  }
  if (set(h, "SLURM_JOB_ID") || set(h, "SLURM_JOBID")) {
    l.kind = LauncherKind::NoLauncher;
    l.name = "a Slurm allocation without a launcher (salloc or a batch script's own line)";
    size_from({"SLURM_NTASKS"});
    return l;
  }
  if (size_from({"WORLD_SIZE"})) {
    l.kind = LauncherKind::NoLauncher;
    l.name = "a launcher without MPI (WORLD_SIZE is set: torchrun?)";
    return l;
  }
  l.name = "no launcher";
  return l;
}

std::optional<std::string> world_size_problem(const Launcher& l, u32 size) {
  if (!l.world_size || *l.world_size == size) return std::nullopt;
  return "MPI made a world of " + std::to_string(size) + " rank(s), but " + l.world_size_source +
         " says the job has " + std::to_string(*l.world_size) + " (started by " + l.name +
         "): fleet would compare " + (size == 1 ? "this process alone" : "a part of the job") +
         "; " + launcher_advice();
}

bool under_launcher(const host::Host& h) {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_STEP_ID"})
    if (set(h, v)) return true;
  return false;
}

}  // namespace mld::fleet
