// JIT006 — the CUDA toolkit the next extension build would use (CUDA_HOME,
// as torch finds it; its version from the toolkit's cuda.h) has another
// major release than the CUDA torch was built with: cpp_extension refuses
// to build CUDA extensions. An error only where an extension build is in
// sight (the scan found extension build directories); a warning on a node
// that builds none.
#include "detect/jit-locks.h"

MLD_DETECTOR(JIT006) {
  using namespace mld;
  if (!facts.jit) return;
  const jit::JitReport& r = *facts.jit;
  const jit::Toolchain& t = r.toolchain;
  if (!r.torch_cuda || !t.cuda_version) return;
  const std::string torch_major = r.torch_cuda->substr(0, r.torch_cuda->find('.'));
  const std::string nvcc_major = t.cuda_version->substr(0, t.cuda_version->find('.'));
  if (torch_major == nvcc_major) return;
  Detection d;
  d.rule = "JIT006";
  d.subject = t.cuda_home.value_or("CUDA_HOME");
  d.message = "the CUDA toolkit at " + *t.cuda_home + " is " + *t.cuda_version +
              " but torch was built with CUDA " + *r.torch_cuda +
              ": building CUDA extensions fails (\"The detected CUDA version (" + *t.cuda_version +
              ") mismatches the version that was used to compile PyTorch (" + *r.torch_cuda +
              ")\")";
  d.evidence.push_back(
      {"CUDA_HOME " + *t.cuda_home + " (" + t.cuda_home_source + ")", "", std::nullopt});
  if (std::optional<Evidence> e = detect::builds_in_sight(r)) {
    d.escalated = true;
    d.evidence.push_back(std::move(*e));
  }
  d.fix = "point CUDA_HOME at a CUDA " + torch_major +
          ".x toolkit, or install the torch build for CUDA " + nvcc_major;
  out.push_back(std::move(d));
}
