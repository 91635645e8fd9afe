// threads.cc — the facts about the thread pools of the Python process that
// THR001 (the node's thread budget) and THR002 (seed 003: numba's OpenMP
// layer resetting torch's thread count) are detected from
// (src/detect/rules/).
//
// Whether numba's pool and torch's share one runtime is read from the
// replayed import set: numba's omppool and an object of `import torch` whose
// DT_NEEDED libgomp.so.1 resolves to the same object, with numba's OpenMP
// layer the one that would win. torch's default count comes from the rule
// of the installed build (torch-threads.cc).
#include "check/check.h"

namespace mld::check {

namespace {

// The libgomp object a loaded object's DT_NEEDED resolves to.
std::optional<size_t> gomp_of(const loader::Process& p, size_t i) {
  for (const loader::Resolution& r : p.objects[i].needed)
    if (r.name.starts_with("libgomp") && r.object && !p.objects[*r.object].faked) return r.object;
  return std::nullopt;
}

}  // namespace

detect::ThreadPools thread_pools(const CheckReport& report) {
  detect::ThreadPools out;
  out.numba = report.python && report.python->find_package("numba");
  out.torch = report.torch_threads;
  if (!report.imports || report.imports->numba_layer != "omp") return out;
  const ImportSimulation& sim = *report.imports;
  const loader::Process& p = sim.process;
  std::optional<size_t> numba_gomp, torch_gomp;
  std::string omppool;
  for (size_t i = 0; i < p.objects.size(); i++) {
    const loader::Object& o = p.objects[i];
    if (o.faked || o.removed) continue;
    if (!numba_gomp && o.path.find("omppool") != std::string::npos) {
      numba_gomp = gomp_of(p, i);
      omppool = o.path;
    }
    if (!torch_gomp && sim.loaded_by[i].starts_with("import torch")) torch_gomp = gomp_of(p, i);
  }
  if (numba_gomp && torch_gomp && *numba_gomp == *torch_gomp) {
    out.shared_gomp = p.objects[*numba_gomp].path;
    out.omppool = std::move(omppool);
  }
  return out;
}

}  // namespace mld::check
