// version.cc — `mldoctor --version`: what a person pasting it into a bug
// report needs to know about this binary. The identity of the build (version,
// git revision, build type, compiler: cmake/build-info.cmake), the glibc it
// was built against, the oldest it runs on (read from the binary's own
// GLIBC_x.y version needs, so it cannot disagree with what the loader will
// ask), the optional parts compiled in, and where the companion objects that
// `run` and `fleet` load were found (a relocated install must still find
// them).
#include <gnu/libc-version.h>

#include "build-info.h"
#include "cli/command-line.h"
#include "loader/loader.h"
#include "run/run.h"

namespace mld::cli {

namespace {

std::string glibc_line(const host::Host& live) {
  std::string line =
      "built against " + std::to_string(__GLIBC__) + "." + std::to_string(__GLIBC_MINOR__);
  try {
    std::optional<std::string> self = live.read_link("/proc/self/exe");
    if (!self) throw IoError("/proc/self/exe is not readable");
    elf::ElfFile exe = elf::ElfFile::parse(live.open_sparse(*self));
    if (std::optional<loader::GlibcVersion> need = loader::oldest_glibc_needed(exe))
      line += ", needs >= " + std::to_string(need->major) + "." + std::to_string(need->minor);
  } catch (const std::exception& e) {
    line += std::string(", needs: unknown (") + e.what() + ")";
  }
  return line + ", running " + gnu_get_libc_version();
}

}  // namespace

bool mpi_plugin_built() { return MLD_MPI_PLUGIN_BUILT; }

std::string mpi_built_against() {
#ifdef MLD_MPI_BUILT_AGAINST
  return std::string(" (built against ") + MLD_MPI_BUILT_AGAINST + ")";
#else
  return "";
#endif
}

std::string version_text() {
  const host::Host live = host::Host::live();
  std::string out = std::string("mldoctor ") + MLD_VERSION + " (git " + MLD_GIT_REVISION + ", " +
                    MLD_BUILD_TYPE + ")\n";
  out += std::string("compiler   ") + MLD_COMPILER + "\n";
  out += "glibc      " + glibc_line(live) + "\n";
  out += std::string("libdw      ") +
         (run::native_stacks_available() ? "yes (native stacks of hung jobs)"
                                         : "no (run reports hangs without native stacks)") +
         "\n";
  std::string tried;
  const std::string plugin = find_mpi_plugin(&tried);
  out += "MPI        ";
  if (!MLD_MPI_PLUGIN_BUILT)
    out += "not built (fleet needs libmldoctor-mpi.so: apt-get install libopenmpi-dev, rebuild)\n";
  else if (plugin.empty())
    out += "plugin not installed (tried " + tried + "): install mldoctor-mpi for fleet\n";
  else
    out += "plugin " + plugin + mpi_built_against() + "\n";
  std::optional<std::string> shims = run::find_shim_dir(live);
  out += "shims      " +
         (shims ? host::join_path(*shims, "libmldoctor-{audit,preload}.so")
                : std::string("not found: run cannot trace (set MLDOCTOR_SHIM_DIR)")) +
         "\n";
  return out;
}

}  // namespace mld::cli
