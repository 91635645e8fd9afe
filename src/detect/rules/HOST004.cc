// HOST004 — /dev/shm is a plain directory of a disk filesystem (a chroot, an
// image run without it mounted), not a tmpfs. shm_open() still works there,
// so DataLoader workers and NCCL's shared-memory transport run, but every
// segment is a file of that disk bounded by its free space
// (rules/HOST004.toml); the disk's size is no shared-memory size, and the
// facts keep none (hostfacts' ShmFacts::disk_backed).
#include "detect/detect.h"

MLD_DETECTOR(HOST004) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::ShmFacts& shm = facts.host->host.shm;
  if (!shm.present || !shm.disk_backed) return;
  const std::string where =
      shm.fstype + (shm.mount_point.empty() ? std::string() : " at " + shm.mount_point);
  Detection d;
  d.rule = "HOST004";
  d.subject = "/dev/shm";
  d.message = "/dev/shm is not a tmpfs but a directory on " + where +
              ": PyTorch DataLoader workers' batches, torch.multiprocessing queues and NCCL's "
              "shared-memory buffers become files of that disk, bounded by its free space";
  d.evidence.push_back({"/dev/shm is on " + where +
                            (shm.mount_point.empty() ? " (this root's mount table lists no "
                                                       "mount of it: a chroot)"
                                                     : ""),
                        shm.source, std::nullopt});
  d.fix =
      "Mount a tmpfs at /dev/shm where the job runs: in a chroot `mount -t tmpfs -o size=16g "
      "tmpfs CHROOT/dev/shm` (or bind-mount the host's /dev/shm there); Docker "
      "`--shm-size=16g` or `--ipc=host`; Kubernetes an emptyDir with `medium: Memory`.";
  out.push_back(std::move(d));
}
