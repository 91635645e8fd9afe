// checks.cc — the GPU findings (GPU001–GPU009) and the JSON form of the
// facts. Hardware: ACS redirection on a switch port between two devices
// (NCCL's troubleshooting guide: P2P is sent to the root complex, slow or a
// hang), ACS that cannot be read without root, an IOMMU in translation mode,
// GPUs without a loaded driver. Environment against the hardware:
// CUDA_VISIBLE_DEVICES indices beyond the GPUs present, UUIDs no GPU has,
// duplicates; more local ranks than GPUs; and seed 004's advice — each rank
// binds its own GPU before its first collective, or ProcessGroupNCCL's
// barrier guesses rank % GPUs.
#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "gpu/gpu-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::gpu {
namespace {

std::string hex(unsigned v, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%0*x", digits, v);
  return buf;
}

std::string gpu_name(const Gpu& g) { return "GPU" + std::to_string(g.index) + " " + g.pci.address; }

std::string describe(const GpuFacts& facts, const std::string& device) {
  for (const Gpu& g : facts.gpus)
    if (g.pci.address == device) return gpu_name(g);
  return device;  // an HCA name
}

void check_acs(const GpuFacts& facts, FindingSink& sink) {
  // One finding per port, naming every pair it sits between.
  std::map<std::string, std::vector<const AcsBlock*>> by_port;
  for (const AcsBlock& b : facts.acs_blocks) by_port[b.bridge].push_back(&b);
  for (const auto& [port, blocks] : by_port) {
    const Bridge& br = facts.bridges.at(port);
    std::vector<std::string> pairs;
    for (const AcsBlock* b : blocks)
      pairs.push_back(describe(facts, b->a) + " ↔ " + describe(facts, b->b));
    std::string kind = br.port_type ? std::string(port_type_name(*br.port_type)) : "PCIe bridge";
    Finding f = make(
        "GPU001", Severity::Warning, port,
        "ACS P2P redirection is enabled on " + kind + " " + port +
            " (ACSCtl: " + acs_control_text(blocks.front()->control) + ") between " + join(pairs) +
            ": their peer-to-peer traffic is sent up to the root complex, so NCCL is slow or hangs",
        "As root: setpci -s " + port +
            " ECAP_ACS+0x6.w=0000 (lost at reboot; repeat for every port "
            "GPU001 names), or turn off ACS/VT-d in the BIOS. Until then NCCL_P2P_DISABLE=1 avoids "
            "the hang "
            "at the cost of bandwidth.");
    f.evidence.push_back({"ACS capability at config offset " + hex(br.acs->offset, 3) +
                              ", control " + hex(blocks.front()->control, 4),
                          "/sys/bus/pci/devices/" + port + "/config", std::nullopt});
    f.evidence.push_back(
        {"NCCL troubleshooting: \"sudo lspci -vvv | grep ACSCtl\"; SrcValid+ means ACS may be on",
         "", std::nullopt});
    sink.add(std::move(f));
  }
  if (!facts.acs_unreadable.empty()) {
    Finding f = make("GPU002", Severity::Info, "ACS",
                     "ACS on the " + std::to_string(facts.acs_unreadable.size()) +
                         " PCIe port(s) between GPUs (" + join(facts.acs_unreadable) +
                         ") cannot be read: config space beyond 64 bytes needs root",
                     "Run mldoctor check as root, or: sudo lspci -vvv | grep ACSCtl (look for "
                     "ReqRedir+ or CmpltRedir+).");
    f.evidence.push_back(
        {"/sys/bus/pci/devices/" + facts.acs_unreadable.front() + "/config: " +
             std::to_string(facts.bridges.at(facts.acs_unreadable.front()).config_bytes) +
             " bytes readable",
         "", std::nullopt});
    sink.add(std::move(f));
  }
}

void check_iommu(const GpuFacts& facts, FindingSink& sink) {
  if (facts.gpus.size() < 2 || facts.iommu.passthrough) return;
  bool on_cmdline = false;
  for (const std::string& flag : facts.iommu.cmdline_flags)
    if (flag == "intel_iommu=on" || flag == "amd_iommu=on" || flag == "iommu=force" ||
        flag == "iommu.passthrough=0")
      on_cmdline = true;
  if (facts.iommu.units.empty() && !on_cmdline) return;
  std::string why =
      !facts.iommu.units.empty() ? "IOMMU units " + join(facts.iommu.units) + " are active" : "";
  if (on_cmdline)
    why += std::string(why.empty() ? "" : " and ") + "the kernel command line has " +
           join(facts.iommu.cmdline_flags, " ");
  Finding f = make("GPU003", Severity::Info, "IOMMU",
                   why + " without iommu=pt: DMA between the " + std::to_string(facts.gpus.size()) +
                       " GPUs is translated, and NCCL's guide warns that IO virtualization can "
                       "send PCI peer-to-peer "
                       "traffic to the root complex (slow, or a hang)",
                   "On bare metal add iommu=pt to the kernel command line (or disable VT-d/IOMMU "
                   "in the BIOS) and "
                   "reboot; inside a VM this is expected.");
  if (facts.iommu.cmdline)
    f.evidence.push_back({*facts.iommu.cmdline, "/proc/cmdline", std::nullopt});
  sink.add(std::move(f));
}

// Returns how many GPUs CUDA would show.
size_t check_visible_devices(const GpuFacts& facts, const host::Host& host, FindingSink& sink) {
  std::optional<std::string> v = host.getenv("CUDA_VISIBLE_DEVICES");
  size_t n = facts.gpus.size();
  if (!v || n == 0) return n;
  hostfacts::CudaVisibleDevices d = hostfacts::parse_cuda_visible_devices(*v);
  std::string present =
      std::to_string(n) + " GPU" + (n == 1 ? "" : "s") + " here (0-" + std::to_string(n - 1) + ")";
  Evidence ev{"GPUs: " +
                  [&] {
                    std::vector<std::string> s;
                    for (const Gpu& g : facts.gpus)
                      s.push_back(std::to_string(g.index) + "=" + g.pci.address);
                    return join(s, " ");
                  }(),
              "/sys/bus/pci/devices", std::nullopt};
  if (d.duplicate) {
    Finding f = make(
        "GPU006", Severity::Error, "CUDA_VISIBLE_DEVICES",
        "CUDA_VISIBLE_DEVICES=" + *v + " lists " + *d.duplicate +
            " twice: CUDA then shows none of the " + present,
        "List each GPU once, e.g. CUDA_VISIBLE_DEVICES=" +
            [&] {
              std::vector<std::string> s;
              for (const Gpu& g : facts.gpus) s.push_back(std::to_string(g.index));
              return join(s, ",");
            }() +
            "; a launcher that gives each rank its own GPU sets one index per rank.");
    f.evidence.push_back(ev);
    sink.add(std::move(f));
    return 0;
  }
  bool uuids_known = std::any_of(facts.gpus.begin(), facts.gpus.end(),
                                 [](const Gpu& g) { return !g.uuid.empty(); });
  size_t visible = 0;
  std::vector<std::string> before;
  for (const std::string& e : d.devices) {
    std::string stays = before.empty() ? "no GPU" : "only " + join(before, ",");
    if (e.starts_with("GPU-")) {
      const Gpu* match = nullptr;
      for (const Gpu& g : facts.gpus)
        if (!g.uuid.empty() && g.uuid.starts_with(e)) match = &g;
      if (uuids_known && !match) {
        Finding f = make("GPU005", Severity::Error, "CUDA_VISIBLE_DEVICES",
                         "CUDA_VISIBLE_DEVICES names " + e +
                             ", which no GPU here has: CUDA stops at it and shows " + stays,
                         "Use the UUIDs of this node (nvidia-smi -L, or \"GPU UUID\" in "
                         "/proc/driver/nvidia/gpus/*/information), or indices.");
        for (const Gpu& g : facts.gpus)
          if (!g.uuid.empty())
            f.evidence.push_back({gpu_name(g) + " " + g.uuid,
                                  "/proc/driver/nvidia/gpus/" + g.pci.address + "/information",
                                  std::nullopt});
        sink.add(std::move(f));
        return visible;
      }
    } else if (!e.starts_with("MIG-")) {
      u64 index = std::stoull(e);
      if (index >= n) {
        Finding f = make("GPU004", before.empty() ? Severity::Error : Severity::Warning,
                         "CUDA_VISIBLE_DEVICES",
                         "CUDA_VISIBLE_DEVICES=" + *v + ": index " + e + " is beyond the " +
                             present + ": CUDA stops at it and shows " + stays,
                         "Use indices below " + std::to_string(n) +
                             " (nvidia-smi -L lists them), or GPU UUIDs.");
        f.evidence.push_back(ev);
        sink.add(std::move(f));
        return visible;
      }
    }
    before.push_back(e);
    visible++;
  }
  return visible;
}

void check_binding(const GpuFacts& facts, const host::Host& host, size_t visible,
                   FindingSink& sink) {
  std::optional<std::string> lws = host.getenv("LOCAL_WORLD_SIZE");
  std::optional<u64> ranks;
  if (lws) {
    try {
      size_t pos = 0;
      u64 r = std::stoull(*lws, &pos);
      if (pos == lws->size()) ranks = r;
    } catch (const std::exception&) {
    }
  }
  if (ranks && !host.getenv("CUDA_VISIBLE_DEVICES") && !facts.gpus.empty() &&
      *ranks > facts.gpus.size()) {
    Finding f = make(
        "GPU008", Severity::Error, "LOCAL_WORLD_SIZE",
        "LOCAL_WORLD_SIZE=" + *lws + " ranks on this node but " +
            std::to_string(facts.gpus.size()) +
            " GPUs: at least two ranks share a GPU and NCCL stops with \"Duplicate GPU detected\"",
        "Start at most one rank per GPU: torchrun --nproc-per-node=" +
            std::to_string(facts.gpus.size()) + ".");
    sink.add(std::move(f));
  }
  if (visible < 2) return;
  std::string n = std::to_string(visible);
  Finding f = make(
      "GPU007", Severity::Info, "rank binding",
      n +
          " GPUs are visible to each process: every local rank must select its own GPU before its "
          "first "
          "collective, or ProcessGroupNCCL guesses GPU rank % " +
          n +
          " for barrier() (\"devices used by this process are currently unknown\") and can hang",
      "In each rank, before init_process_group: torch.cuda.set_device(local_rank) with "
      "local_rank = int(os.environ[\"LOCAL_RANK\"]); or init_process_group(..., "
      "device_id=torch.device(\"cuda\", local_rank)); or dist.barrier(device_ids=[local_rank]).");
  if (std::optional<std::string> lr = host.getenv("LOCAL_RANK"))
    f.evidence.push_back({"LOCAL_RANK=" + *lr, "", std::nullopt});
  sink.add(std::move(f));
}

}  // namespace

void emit_findings(const GpuFacts& facts, const host::Host& host, FindingSink& sink) {
  check_acs(facts, sink);
  check_iommu(facts, sink);
  if (!facts.gpus.empty() && !facts.driver_version && !host.list_dir("/proc/driver/nvidia")) {
    Finding f =
        make("GPU009", Severity::Warning, "NVIDIA driver",
             std::to_string(facts.gpus.size()) + " NVIDIA GPU(s) (" +
                 facts.gpus.front().pci.address + (facts.gpus.size() > 1 ? ", ..." : "") +
                 ") but no /proc/driver/nvidia: the nvidia kernel module is not loaded, CUDA sees "
                 "no device",
             "Load the driver (modprobe nvidia, or install it: nvidia-smi must list the GPUs).");
    sink.add(std::move(f));
  }
  size_t visible = check_visible_devices(facts, host, sink);
  check_binding(facts, host, visible, sink);
  emit_nccl_findings(facts, host, sink);
}

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
