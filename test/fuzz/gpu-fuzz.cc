// gpu-fuzz.cc — the gpu library's parsers on arbitrary bytes: NCCL's
// interface/HCA lists (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), its integer
// parameters and P2P levels, and the PCI config space walks (ACS extended
// capability from 0x100, PCIe capability from 0x34). The first byte picks
// the parser, the rest is the input. Nothing may crash or loop, and what
// parses must be consistent: no empty list entry, an ACS capability inside
// the image at or above 0x100.
//
// Corpus (test/fuzz/corpus/gpu/): values as users write them, config images
// of a switch port with and without ACS, and a looping capability list.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "gpu/gpu.h"

using namespace mld;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0: {
      gpu::NcclIfList l = gpu::parse_nccl_if_list(text, 16);
      if (l.entries.size() > 16) abort();
      for (const gpu::NcclIfEntry& e : l.entries) {
        if (e.prefix.empty() || e.prefix.find(',') != std::string::npos ||
            e.prefix.find(':') != std::string::npos)
          abort();
        // An entry keeps its own name unless the list excludes.
        if (gpu::nccl_if_list_keeps(l, e.prefix, e.port) == l.exclude) abort();
      }
      break;
    }
    case 1: {
      if (auto n = gpu::parse_nccl_int(text); n && n->whole && text.empty()) abort();
      (void)gpu::valid_p2p_level(text);
      break;
    }
    case 2: {
      if (auto acs = gpu::find_acs(text)) {
        if (acs->offset < 0x100 || static_cast<size_t>(acs->offset) + 8 > text.size()) abort();
        (void)gpu::acs_control_text(acs->control);
      }
      break;
    }
    case 3:
      if (auto t = gpu::pcie_port_type(text); t && *t > 15) abort();
      break;
  }
  return 0;
}
