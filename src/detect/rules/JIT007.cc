// JIT007 — gcc on PATH is newer than the CUDA toolkit's nvcc accepts (the
// limit is the "__GNUC__ > N" guard of its crt/host_config.h), so CUDA
// extension builds for a CUDA torch stop with "unsupported GNU version!".
#include "detect/detect.h"

MLD_DETECTOR(JIT007) {
  using namespace mld;
  if (!facts.jit) return;
  const jit::JitReport& r = *facts.jit;
  const jit::Toolchain& t = r.toolchain;
  if (!t.nvcc || !t.nvcc_max_gcc || !t.gcc_major || *t.gcc_major <= *t.nvcc_max_gcc ||
      !r.torch_cuda)
    return;
  Detection d;
  d.rule = "JIT007";
  d.subject = *t.gcc;
  d.message = "gcc " + std::to_string(*t.gcc_major) + " is newer than nvcc " +
              t.cuda_version.value_or("") + " accepts (up to " + std::to_string(*t.nvcc_max_gcc) +
              "): CUDA extension builds stop with \"unsupported GNU version!\"";
  d.evidence.push_back({"gcc on PATH: " + *t.gcc, "", std::nullopt});
  d.evidence.push_back(
      {"limit from " + *t.cuda_home + "/include/crt/host_config.h", "", std::nullopt});
  d.fix = "build with a supported host compiler: export CC=gcc-" + std::to_string(*t.nvcc_max_gcc) +
          " CXX=g++-" + std::to_string(*t.nvcc_max_gcc) +
          " (and NVCC_CCBIN to the same), or use a newer CUDA";
  out.push_back(std::move(d));
}
