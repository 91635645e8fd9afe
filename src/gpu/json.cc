// json.cc — the JSON form of the GPU facts (the "gpu" object of check's
// document, which fleet compares): devices, HCAs, interfaces, bridges with
// their ACS state, the IOMMU, and the PCIe levels as nvidia-smi topo -m names them.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "gpu/gpu.h"

namespace mld::gpu {
namespace {

std::string hex(unsigned v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return buf;
}

}  // namespace

void to_json(nlohmann::json& j, const GpuFacts& f) {
  auto loc = [](const PciLocation& p) {
    nlohmann::json l = {{"address", p.address},
                        {"host_bridge", p.host_bridge},
                        {"bridges", p.bridges},
                        {"numa_node", p.numa_node},
                        {"sysfs_path", p.sysfs_path}};
    if (!p.local_cpulist.empty()) l["local_cpulist"] = p.local_cpulist;
    return l;
  };
  j = nlohmann::json::object();
  j["pci_readable"] = f.pci_readable;
  if (f.driver_version) j["driver_version"] = *f.driver_version;
  nlohmann::json gpus = nlohmann::json::array();
  for (const Gpu& g : f.gpus) {
    nlohmann::json o = {
        {"index", g.index}, {"pci", loc(g.pci)}, {"device_id", hex(g.device_id, 4)}};
    if (!g.model.empty()) o["model"] = g.model;
    if (!g.uuid.empty()) o["uuid"] = g.uuid;
    if (g.minor) o["minor"] = *g.minor;
    gpus.push_back(std::move(o));
  }
  j["gpus"] = std::move(gpus);
  nlohmann::json hcas = nlohmann::json::array();
  for (const Hca& h : f.hcas) {
    nlohmann::json ports = nlohmann::json::array();
    for (const IbPort& p : h.ports)
      ports.push_back({{"port", p.number}, {"state", p.state}, {"link_layer", p.link_layer}});
    hcas.push_back({{"name", h.name}, {"pci", loc(h.pci)}, {"ports", std::move(ports)}});
  }
  j["hcas"] = std::move(hcas);
  nlohmann::json nets = nlohmann::json::array();
  for (const NetInterface& n : f.interfaces) {
    nlohmann::json o = {{"name", n.name}, {"operstate", n.operstate}, {"running", n.running}};
    if (!n.pci_address.empty()) o["pci_address"] = n.pci_address;
    nets.push_back(std::move(o));
  }
  j["interfaces"] = std::move(nets);
  nlohmann::json bridges = nlohmann::json::object();
  for (const auto& [addr, b] : f.bridges) {
    nlohmann::json o = {{"config_bytes", b.config_bytes}};
    if (b.port_type) o["port_type"] = std::string(port_type_name(*b.port_type));
    if (b.acs) o["acs_control"] = acs_control_text(b.acs->control);
    bridges[addr] = std::move(o);
  }
  j["bridges"] = std::move(bridges);
  j["iommu"] = {{"units", f.iommu.units},
                {"cmdline_flags", f.iommu.cmdline_flags},
                {"passthrough", f.iommu.passthrough}};
  nlohmann::json m = nlohmann::json::array();
  for (size_t i = 0; i < f.gpu_matrix.size(); i++) {
    nlohmann::json row = nlohmann::json::array();
    for (size_t k = 0; k < f.gpu_matrix[i].size(); k++)
      row.push_back(i == k ? "X" : std::string(level_name(f.gpu_matrix[i][k])));
    m.push_back(std::move(row));
  }
  j["gpu_matrix"] = std::move(m);
  nlohmann::json h = nlohmann::json::array();
  for (const auto& r : f.gpu_hca_matrix) {
    nlohmann::json row = nlohmann::json::array();
    for (Level l : r) row.push_back(std::string(level_name(l)));
    h.push_back(std::move(row));
  }
  j["gpu_hca_matrix"] = std::move(h);
  j["nvlink"] = "unknown without NVML";
  nlohmann::json acs = nlohmann::json::array();
  for (const AcsBlock& b : f.acs_blocks)
    acs.push_back({{"bridge", b.bridge}, {"between", {b.a, b.b}}});
  j["acs_blocks"] = std::move(acs);
  j["acs_unreadable"] = f.acs_unreadable;
}

}  // namespace mld::gpu
