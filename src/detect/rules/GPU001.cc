// GPU001 — ACS P2P redirection on a PCIe port between two GPUs (or a GPU and
// an HCA): the port sends their peer-to-peer traffic up to the root complex,
// which NCCL's troubleshooting guide names as a cause of slow or hung
// collectives. One finding per port, naming every pair it sits between; the
// ports and their ACS control registers come from gpu::collect.
#include <map>

#include "detect/detect.h"
#include "detect/gpu-text.h"

namespace {

std::string describe(const mld::gpu::GpuFacts& facts, const std::string& device) {
  for (const mld::gpu::Gpu& g : facts.gpus)
    if (g.pci.address == device) return mld::detect::gpu_text::gpu_name(g);
  return device;  // an HCA name
}

}  // namespace

MLD_DETECTOR(GPU001) {
  using namespace mld;
  using namespace mld::detect::gpu_text;
  if (!facts.gpu) return;
  const gpu::GpuFacts& f = *facts.gpu;
  std::map<std::string, std::vector<const gpu::AcsBlock*>> by_port;
  for (const gpu::AcsBlock& b : f.acs_blocks) by_port[b.bridge].push_back(&b);
  for (const auto& [port, blocks] : by_port) {
    const gpu::Bridge& br = f.bridges.at(port);
    std::vector<std::string> pairs;
    for (const gpu::AcsBlock* b : blocks)
      pairs.push_back(describe(f, b->a) + " ↔ " + describe(f, b->b));
    std::string kind =
        br.port_type ? std::string(gpu::port_type_name(*br.port_type)) : "PCIe bridge";
    Detection d;
    d.rule = "GPU001";
    d.subject = port;
    d.message = "ACS P2P redirection is enabled on " + kind + " " + port +
                " (ACSCtl: " + gpu::acs_control_text(blocks.front()->control) + ") between " +
                join(pairs) +
                ": their peer-to-peer traffic is sent up to the root complex, so NCCL is slow or "
                "hangs";
    d.fix = "As root: setpci -s " + port +
            " ECAP_ACS+0x6.w=0000 (lost at reboot; repeat for every port GPU001 names), or turn "
            "off ACS/VT-d in the BIOS. Until then NCCL_P2P_DISABLE=1 avoids the hang at the cost "
            "of bandwidth.";
    d.evidence.push_back({"ACS capability at config offset " + hex(br.acs->offset, 3) +
                              ", control " + hex(blocks.front()->control, 4),
                          "/sys/bus/pci/devices/" + port + "/config", std::nullopt});
    d.evidence.push_back(
        {"NCCL troubleshooting: \"sudo lspci -vvv | grep ACSCtl\"; SrcValid+ means ACS may be on",
         "", std::nullopt});
    out.push_back(std::move(d));
  }
}
