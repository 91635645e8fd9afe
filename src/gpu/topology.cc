// topology.cc — nvidia-smi topo -m's PCIe levels from sysfs paths alone.
// nvidia-smi asks NVML (nvmlDeviceGetTopologyCommonAncestor); NCCL walks the
// realpath of each device's sysfs directory. Here: the deepest bridge two
// devices share decides the level — both at most two hops below it (through
// one switch: upstream port, then one downstream port each) is PIX, deeper is
// PXB, only the host bridge (pciDDDD:BB) in common is PHB, different host
// bridges on one NUMA node is NODE, different NUMA nodes is SYS. NVLink is
// invisible in sysfs, so NV# is never produced, and the table says so.
#include <algorithm>

#include "gpu/gpu.h"

namespace mld::gpu {
namespace {

size_t common_bridges(const PciLocation& a, const PciLocation& b) {
  if (a.host_bridge.empty() || a.host_bridge != b.host_bridge) return 0;
  size_t c = 0;
  while (c < a.bridges.size() && c < b.bridges.size() && a.bridges[c] == b.bridges[c]) c++;
  return c;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width)
    s.append(width - s.size(), ' ');
  else
    s += ' ';
  return s;
}

}  // namespace

std::string_view level_name(Level l) {
  switch (l) {
    case Level::PIX: return "PIX";
    case Level::PXB: return "PXB";
    case Level::PHB: return "PHB";
    case Level::NODE: return "NODE";
    case Level::SYS: return "SYS";
  }
  return "SYS";
}

Level pci_level(const PciLocation& a, const PciLocation& b) {
  if (!a.host_bridge.empty() && a.host_bridge == b.host_bridge) {
    size_t c = common_bridges(a, b);
    if (c == 0) return Level::PHB;
    // Hops from the shared bridge down to each device.
    size_t da = a.bridges.size() - c + 1, db = b.bridges.size() - c + 1;
    return da <= 2 && db <= 2 ? Level::PIX : Level::PXB;
  }
  // A node of -1 (not reported) matches only another -1.
  return a.numa_node == b.numa_node ? Level::NODE : Level::SYS;
}

std::vector<std::string> bridges_between(const PciLocation& a, const PciLocation& b) {
  size_t c = common_bridges(a, b);
  std::vector<std::string> out;
  if (c == 0) return out;
  out.insert(out.end(), a.bridges.begin() + c, a.bridges.end());
  out.insert(out.end(), b.bridges.begin() + c, b.bridges.end());
  return out;
}

std::string topology_matrix_text(const GpuFacts& f) {
  std::string out;
  if (f.gpus.empty()) {
    out += f.pci_readable ? "No NVIDIA GPU in /sys/bus/pci/devices.\n"
                          : "/sys/bus/pci/devices is not readable: no GPU facts.\n";
    return out;
  }
  const size_t w = 8;
  std::vector<std::string> names;
  for (const Gpu& g : f.gpus) names.push_back("GPU" + std::to_string(g.index));
  for (size_t k = 0; k < f.hcas.size(); k++) names.push_back("NIC" + std::to_string(k));
  out += pad("", w);
  for (const std::string& n : names) out += pad(n, w);
  out += pad("CPU Affinity", 16) + "NUMA Affinity\n";
  auto row = [&](const std::string& name, auto cell, const PciLocation& loc) {
    out += pad(name, w);
    for (size_t j = 0; j < names.size(); j++) out += pad(cell(j), w);
    out += pad(loc.local_cpulist.empty() ? "N/A" : loc.local_cpulist, 16);
    out += loc.numa_node >= 0 ? std::to_string(loc.numa_node) : "N/A";
    out += "\n";
  };
  size_t n = f.gpus.size();
  for (size_t i = 0; i < n; i++) {
    row(
        names[i],
        [&](size_t j) -> std::string {
          if (j == i) return " X";
          if (j < n) return std::string(level_name(f.gpu_matrix[i][j]));
          const Hca& h = f.hcas[j - n];
          return h.pci.address.empty() ? "N/A"
                                       : std::string(level_name(f.gpu_hca_matrix[i][j - n]));
        },
        f.gpus[i].pci);
  }
  for (size_t k = 0; k < f.hcas.size(); k++) {
    const Hca& h = f.hcas[k];
    row(
        names[n + k],
        [&](size_t j) -> std::string {
          if (j == n + k) return " X";
          if (h.pci.address.empty()) return "N/A";
          if (j < n) return std::string(level_name(f.gpu_hca_matrix[j][k]));
          const Hca& o = f.hcas[j - n];
          return o.pci.address.empty() ? "N/A" : std::string(level_name(pci_level(h.pci, o.pci)));
        },
        h.pci);
  }
  out +=
      "\nLegend:\n\n"
      "  X    = Self\n"
      "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
      "(e.g., QPI/UPI)\n"
      "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges "
      "within a NUMA node\n"
      "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
      "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
      "Bridge)\n"
      "  PIX  = Connection traversing at most a single PCIe bridge\n"
      "  NV#  = not known: NVLink is invisible in sysfs (needs NVML); the levels above are the "
      "PCIe path only\n";
  if (!f.hcas.empty()) {
    out += "\nNIC Legend:\n\n";
    for (size_t k = 0; k < f.hcas.size(); k++)
      out += "  NIC" + std::to_string(k) + ": " + f.hcas[k].name + "\n";
  }
  if (!f.acs_blocks.empty()) {
    out += "\nACS P2P redirection (peer traffic forced through the root complex):\n";
    std::vector<std::string> seen;
    for (const AcsBlock& b : f.acs_blocks) {
      if (std::find(seen.begin(), seen.end(), b.bridge) != seen.end()) continue;
      seen.push_back(b.bridge);
      out += "  " + b.bridge + ": " + acs_control_text(b.control) + "\n";
    }
  }
  return out;
}

}  // namespace mld::gpu
