// HOST001 — /dev/shm below 1 GiB (Docker's default is 64 MiB). DataLoader
// workers hand batches to the main process through it and NCCL's
// shared-memory transport keeps its buffers there; once it fills they fail
// with "Bus error" or "No space left on device" (rules/HOST001.toml).
#include "detect/detect.h"

namespace {

// Below this /dev/shm is reported (the 1 GiB of rules/HOST001.toml).
constexpr mld::u64 kSmallShmBytes = mld::u64{1} << 30;

}  // namespace

MLD_DETECTOR(HOST001) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::HostFacts& h = facts.host->host;
  const std::optional<u64>& size = h.shm.size_bytes;
  if (!size || *size == hostfacts::kUnlimited || *size >= kSmallShmBytes) return;
  Detection d;
  d.rule = "HOST001";
  d.subject = "/dev/shm";
  d.message = "/dev/shm holds only " + hostfacts::human_bytes(*size) +
              ": DataLoader workers and NCCL's shared-memory transport fail with \"Bus error\" or "
              "\"No space left on device\" once it fills";
  d.evidence.push_back(
      {"/dev/shm size " + hostfacts::human_bytes(*size) +
           (h.shm.free_bytes ? ", " + hostfacts::human_bytes(*h.shm.free_bytes) + " free"
                             : std::string()),
       h.shm.source, std::nullopt});
  if (h.container.detected)
    d.evidence.push_back({"running in a container (" + h.container.kind + ")", "", std::nullopt});
  d.fix =
      "Give /dev/shm several GiB: `docker run --shm-size=16g` (or `--ipc=host`); on Kubernetes "
      "mount an emptyDir with `medium: Memory` at /dev/shm; on a host `mount -o remount,size=16G "
      "/dev/shm`.";
  out.push_back(std::move(d));
}
