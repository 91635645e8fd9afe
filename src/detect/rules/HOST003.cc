// HOST003 — a soft open-file limit below 4096. With PyTorch's default
// file_descriptor sharing strategy every tensor a DataLoader worker sends
// holds a descriptor open, so workers fail with "Too many open files" or
// "received 0 items of ancdata" (rules/HOST003.toml).
#include "detect/detect.h"

namespace {

// A soft RLIMIT_NOFILE below this is reported (the 4096 of rules/HOST003.toml).
constexpr mld::u64 kLowNofile = 4096;

}  // namespace

MLD_DETECTOR(HOST003) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::ResourceLimit& nf = facts.host->host.limits.nofile;
  if (!nf.known || nf.soft >= kLowNofile) return;
  auto limit_text = [](u64 v) {
    return v == hostfacts::kUnlimited ? std::string("unlimited") : std::to_string(v);
  };
  Detection d;
  d.rule = "HOST003";
  d.subject = "RLIMIT_NOFILE";
  d.message = "open-file limit is " + limit_text(nf.soft) +
              ": DataLoader workers passing tensors by file descriptor can fail with \"Too many "
              "open files\" or \"received 0 items of ancdata\"";
  d.evidence.push_back({"nofile soft " + limit_text(nf.soft) + ", hard " + limit_text(nf.hard),
                        nf.source, std::nullopt});
  d.fix =
      nf.hard > nf.soft
          ? "Raise the soft limit up to the hard limit: `ulimit -n " + limit_text(nf.hard) + "`."
          : "Raise the hard limit (/etc/security/limits.conf, `docker --ulimit nofile=65536`), "
            "or use torch.multiprocessing.set_sharing_strategy('file_system').";
  out.push_back(std::move(d));
}
