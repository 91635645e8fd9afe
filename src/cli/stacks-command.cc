// stacks-command.cc — `mldoctor stacks PID... [--tree] [--native]`: what
// py-spy dump shows, for a job not started under `run`. The processes are
// read as `run`'s watchdog reads a hung job (src/run sample_processes):
// each thread's wait from /proc, its Python frames from the interpreter's
// memory (nothing stops), native frames only with --native (libdw stops
// each thread while it is unwound).
#include <algorithm>
#include <set>

#include "cli/cli.h"
#include "render/stacks-report.h"

namespace mld::cli {

int run_stacks(const CommonOptions& common, const StacksOptions& opts) {
  if (common.root != "/") {
    print_error("stacks reads running processes of this machine; --root does not apply");
    return 2;
  }
  const host::Host host = host::Host::live();
  std::vector<long> pids;
  std::set<long> seen;
  for (long pid : opts.pids) {
    const std::vector<long> these = opts.tree ? run::process_tree(host, pid) : std::vector{pid};
    for (long p : these)
      if (seen.insert(p).second) pids.push_back(p);
  }
  run::SampleOptions so;
  so.native_stacks = opts.native;
  const run::HangSample sample = run::sample_processes(host, pids, 0, so);
  // A tool failure when no process has stacks to show: gone, a zombie, a
  // kernel thread. Each says why, and no report stands beside the errors.
  const bool any = std::any_of(sample.processes.begin(), sample.processes.end(),
                               [](const detect::ProcessSample& p) {
                                 return !p.threads.empty() && p.without_stacks.empty();
                               });
  if (!any) {
    for (const detect::ProcessSample& p : sample.processes)
      print_error(p.without_stacks.empty() ? "pid " + std::to_string(p.pid) + ": no such process"
                                           : p.without_stacks);
    return 2;
  }
  if (common.format == OutputFormat::Json)
    std::printf("%s\n", render::stacks_json(sample).dump(2).c_str());
  else
    render::print_stacks(stdout, sample, common.color);
  return 0;
}

}  // namespace mld::cli
