// snapshot-command.cc — `mldoctor snapshot OUT.tar.gz`: runs the checks of
// `mldoctor check` on this machine with the host layer recording what it
// reads, then writes those /proc, /sys and /etc files and the (masked)
// environment into a new archive, for a bug report: anyone can unpack it and
// run `mldoctor check --root DIR` on it.
#include <sys/stat.h>

#include <cstdio>
#include <stdexcept>

#include "check/check.h"
#include "cli/cli.h"
#include "hostfacts/hostfacts.h"
#include "snapshot/snapshot.h"

namespace mld::cli {

host::Host analysed_host(const CommonOptions& common) {
  host::Host live = host::Host::live();
  if (common.root == "/") return live;
  // A tree with none of what the checks read would give "no findings" for
  // a machine nobody looked at: refuse it.
  struct stat st;
  if (stat(common.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw std::runtime_error("--root " + common.root + ": not a directory");
  bool tree = false;
  for (const char* part : {"/proc", "/sys", "/etc", "/usr", "/.mldoctor"})
    tree = tree || stat((common.root + part).c_str(), &st) == 0;
  if (!tree)
    throw std::runtime_error("--root " + common.root +
                             " holds neither a snapshot nor a root filesystem (no proc/, sys/, "
                             "etc/, usr/ or .mldoctor/): unpack a snapshot there first (tar -xzf "
                             "SNAP.tar.gz -C DIR)");
  host::Host probe(common.root, {});
  if (!probe.read_file(snapshot::kEnvironFile, 1))
    std::fprintf(stderr,
                 "mldoctor: note: %s records no environment (not a snapshot): the variables of "
                 "this shell stand in for that machine's\n",
                 common.root.c_str());
  return snapshot::host_at_root(common.root, live.environment());
}

int run_snapshot(const CommonOptions& common, const SnapshotOptions& opts) {
  if (common.root != "/") {
    print_error("snapshot records this machine; --root does not apply");
    return 2;
  }
  host::Host host = host::Host::live();
  auto log = std::make_shared<host::AccessLog>();
  host.record_to(log);
  check::CheckOptions co;
  co.python = opts.python;
  co.imports = opts.imports;
  check::CheckReport r = check::run_check(host, co);
  if (opts.python && !r.python) {
    // The interpreter asked for could not be examined: a snapshot without
    // it would reproduce nothing of the Python side.
    print_error(r.python_error);
    return 2;
  }
  // What the live checks learn from system calls or CPUID, as files that
  // `check --root` reads instead: resource limits, and the CPUID leaves the
  // cpuinfo and OpenMP models used (host::kCpuidFile, in `cpuid -r` form).
  host.read_file("/proc/self/limits");
  std::map<std::string, std::string> facts;
  if (r.facts.host.glibc_version)
    facts[std::string(base_name(host::kGlibcReleaseFile))] = *r.facts.host.glibc_version;
  if (std::optional<host::CpuidDump> cpuid = host.cpuid(nullptr)) {
    std::string dump = host::format_cpuid_dump(*cpuid);
    // The other CPUs of this process's mask, topology leaves only: what
    // the OpenMP models number cores from (hostfacts/openmp-topology.cc).
    const hostfacts::CpuFacts& cpu = r.facts.host.cpu;
    if (const std::optional<std::vector<u32>>& cpus = cpu.affinity ? cpu.affinity : cpu.online)
      for (const auto& [c, d] : host.cpuid_per_cpu(*cpus, nullptr))
        if (c != cpuid->cpu) dump += host::format_cpuid_dump(d);
    if (!dump.empty() && dump.back() == '\n') dump.pop_back();  // write_snapshot adds the newline
    facts[std::string(base_name(host::kCpuidFile))] = dump;
  }
  snapshot::Written w = snapshot::write_snapshot(*log, host.environment(), facts, opts.out);
  std::printf(
      "wrote %s: %zu files, %zu directories, %zu links (of %zu libraries, only the %s the "
      "loader model read), %zu variable%s masked (%s)\n",
      opts.out.c_str(), w.files, w.directories, w.links, w.sparse_files,
      hostfacts::human_bytes(w.sparse_bytes).c_str(), w.masked, w.masked == 1 ? "" : "s",
      hostfacts::human_bytes(w.bytes).c_str());
  std::printf("it holds what check read here: list it with tar -tzvf %s before you share it\n",
              opts.out.c_str());
  std::printf(
      "analyse it anywhere: mkdir snap && tar -xzf %s -C snap && mldoctor check --root snap\n",
      opts.out.c_str());
  return 0;
}

}  // namespace mld::cli
