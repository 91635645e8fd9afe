// NCCL005 — NCCL_IB_DISABLE turns InfiniBand off while HCAs are present: NCCL
// talks between nodes over TCP sockets. The value is read as ncclParam reads
// it (gpu::parse_nccl_int: strtoll, so "true" is 0 and changes nothing).
// The rule file's env unsets it.
#include "detect/detect.h"
#include "detect/gpu-text.h"

MLD_DETECTOR(NCCL005) {
  using namespace mld;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  const std::optional<std::string>& v = f.env.nccl_ib_disable;
  if (!v || f.hcas.empty()) return;
  const std::optional<gpu::NcclInt> n = gpu::parse_nccl_int(*v);
  if (!n || n->value == 0) return;
  std::vector<std::string> names;
  for (const gpu::Hca& h : f.hcas) names.push_back(h.name);
  Detection d;
  d.rule = "NCCL005";
  d.subject = "NCCL_IB_DISABLE";
  d.message = "NCCL_IB_DISABLE=" + *v + " while " + detect::gpu_text::join(names) +
              " are present: NCCL talks between nodes over TCP sockets, not InfiniBand/RoCE";
  d.fix = "Unset NCCL_IB_DISABLE unless IB is broken on purpose (then expect lower bandwidth).";
  out.push_back(std::move(d));
}
