// NCCL009 — NCCL_DEBUG unset on a node with several GPUs or an HCA: if the
// job hangs at its first collective, NCCL says nothing about the interfaces,
// HCAs and transports it picked. The fix is a debugging setting, not a fix,
// so it carries no env_fix (`mldoctor fix` must not export it).
#include "detect/detect.h"

MLD_DETECTOR(NCCL009) {
  using namespace mld;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  if (f.env.nccl_debug || (f.gpus.size() < 2 && f.hcas.empty())) return;
  Detection d;
  d.rule = "NCCL009";
  d.subject = "NCCL_DEBUG";
  d.message =
      "NCCL_DEBUG is not set: if the job hangs at its first collective, NCCL says nothing about "
      "the interfaces, HCAs and transports it picked";
  d.fix =
      "For a hang, run once with NCCL_DEBUG=INFO (NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log keeps one "
      "file per process): the lines \"NET/Socket : Using\", \"NET/IB\" and \"Channel\" show what "
      "NCCL chose.";
  out.push_back(std::move(d));
}
