// hostfacts-fuzz.cc — the parsers of host and environment values on
// arbitrary bytes: CPU lists (/sys, cpuset, Cpus_allowed_list), SLURM task
// counts, GLIBC_TUNABLES, OMP_NUM_THREADS-style lists,
// CUDA_VISIBLE_DEVICES, and srun's binding (SLURM_CPU_BIND_TYPE, a newline,
// SLURM_CPU_BIND_LIST: first byte 0xff). The first byte picks the parser,
// the rest is the text. Nothing may crash, and what parses must survive a round trip: a CPU
// list formatted and parsed again is the same list.
//
// Corpus (test/fuzz/corpus/hostfacts/): one value of each kind, as the
// kernel, Slurm and users write them, and malformed near misses.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hostfacts/hostfacts.h"

using namespace mld;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 0xff) {
    const size_t nl = text.find('\n');
    const std::string_view type = text.substr(0, nl);
    const std::string_view list = nl == std::string_view::npos ? "" : text.substr(nl + 1);
    if (auto masks = hostfacts::parse_slurm_cpu_bind_list(type, list)) {
      if (masks->empty()) abort();
      for (const std::vector<u32>& m : *masks) {
        if (m.empty()) abort();  // every task has a CPU
        for (size_t i = 1; i < m.size(); i++)
          if (m[i - 1] >= m[i]) abort();  // sorted, no duplicates
      }
    }
    return 0;
  }
  switch (data[0] % 5) {
    case 0: {
      std::optional<std::vector<u32>> cpus = hostfacts::parse_cpu_list(text);
      if (!cpus) break;
      for (size_t i = 1; i < cpus->size(); i++)
        if ((*cpus)[i - 1] >= (*cpus)[i]) abort();  // sorted, no duplicates
      std::optional<std::vector<u32>> again =
          hostfacts::parse_cpu_list(hostfacts::format_cpu_list(*cpus));
      if (!again || *again != *cpus) abort();
      break;
    }
    case 1:
      if (auto counts = hostfacts::parse_slurm_tasks_per_node(text))
        for (u32 c : *counts) (void)c;
      break;
    case 2: {
      hostfacts::ParsedTunables t = hostfacts::parse_glibc_tunables(text);
      for (const hostfacts::GlibcTunable& g : t.tunables)
        if (g.key.empty()) abort();
      break;
    }
    case 3:
      if (auto levels = hostfacts::parse_thread_count_list(text))
        for (u32 n : *levels)
          if (n == 0) abort();  // a runtime rejects 0 threads
      break;
    case 4: {
      hostfacts::CudaVisibleDevices d = hostfacts::parse_cuda_visible_devices(text);
      if (d.duplicate && !d.devices.empty()) abort();  // a repeat hides every device
      break;
    }
  }
  return 0;
}
