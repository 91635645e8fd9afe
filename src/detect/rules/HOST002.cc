// HOST002 — RDMA devices present and the soft locked-memory limit is not
// unlimited. NCCL's InfiniBand transport (and UCX, Open MPI) pins its
// buffers, which counts against RLIMIT_MEMLOCK; at the usual 64 KiB or
// 8 MiB registration fails ("ibv_reg_mr failed") or NCCL falls back to
// sockets (rules/HOST002.toml).
#include "detect/detect.h"

MLD_DETECTOR(HOST002) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::HostFacts& h = facts.host->host;
  const hostfacts::ResourceLimit& ml = h.limits.memlock;
  if (h.rdma_devices.empty() || !ml.known || ml.soft == hostfacts::kUnlimited) return;
  auto limit_text = [](u64 v) {
    return v == hostfacts::kUnlimited ? std::string("unlimited") : std::to_string(v);
  };
  std::string devices;
  for (const std::string& device : h.rdma_devices)
    devices += (devices.empty() ? "" : ", ") + device;
  Detection d;
  d.rule = "HOST002";
  d.subject = "RLIMIT_MEMLOCK";
  d.message = "locked-memory limit is " + hostfacts::human_bytes(ml.soft) +
              " while RDMA devices are present (" + devices +
              "): NCCL's InfiniBand transport cannot register its buffers";
  d.evidence.push_back(
      {"memlock soft " + limit_text(ml.soft) + ", hard " + limit_text(ml.hard) + " bytes",
       ml.source, std::nullopt});
  d.evidence.push_back({"RDMA devices: " + devices, "/sys/class/infiniband", std::nullopt});
  d.fix =
      "Raise the limit to unlimited for the job: `ulimit -l unlimited` (needs the hard limit: "
      "/etc/security/limits.conf `* - memlock unlimited`); Docker `--ulimit memlock=-1:-1`; Slurm "
      "propagates the submitting shell's limit.";
  out.push_back(std::move(d));
}
