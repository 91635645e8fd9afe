// JIT005 — ninja is not on PATH while torch is installed:
// torch.utils.cpp_extension.load() refuses to build without it.
#include "detect/detect.h"

MLD_DETECTOR(JIT005) {
  using namespace mld;
  if (!facts.jit || !facts.jit->torch_installed || facts.jit->toolchain.ninja) return;
  Detection d;
  d.rule = "JIT005";
  d.subject = "ninja";
  d.message =
      "ninja is not on PATH: torch.utils.cpp_extension.load() fails with \"Ninja is required to "
      "load C++ extensions\"";
  d.fix = "install ninja (apt-get install ninja-build, or pip install ninja in this environment)";
  out.push_back(std::move(d));
}
