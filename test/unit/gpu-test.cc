// gpu-test.cc — gpu::collect and the GPU/NCCL detectors (GPU001–GPU009,
// NCCL001–NCCL009) over its facts, on the fixture trees of
// test/fixtures/hosts/gpu-* (built by make-gpu-hosts.py; every number asserted
// here is written there), and the NCCL list and PCI config parsers.
#include "gpu/gpu.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "detect/detect.h"

using namespace mld;
using namespace mld::gpu;
namespace fs = std::filesystem;

namespace {

using Env = std::map<std::string, std::string>;

host::Host fixture(const std::string& name, Env env = {}) {
  std::string root;
  if (const char* src = std::getenv("MLD_SOURCE_DIR"))
    root = std::string(src) + "/test/fixtures/hosts/" + name;
  else
    root = (fs::path(__FILE__).parent_path().parent_path() / "fixtures" / "hosts" / name).string();
  EXPECT_TRUE(fs::is_directory(root)) << root;
  return host::Host(root, std::move(env));
}

// The findings of the GPU and NCCL rules on facts gathered before: detection
// reads only `f` (its environment included), never the machine.
std::vector<Finding> findings_of(const GpuFacts& f) {
  detect::Facts facts;
  facts.gpu = &f;
  return detect::findings(detect::run_detectors(facts), rules::RuleSet());
}

std::vector<Finding> findings(const std::string& tree, Env env) {
  return findings_of(collect(fixture(tree, std::move(env))));
}

const Finding* find(const std::vector<Finding>& v, std::string_view rule) {
  for (const Finding& f : v)
    if (f.rule == rule) return &f;
  return nullptr;
}

std::vector<std::string> rules_of(const std::vector<Finding>& v) {
  std::vector<std::string> out;
  for (const Finding& f : v) out.push_back(f.rule);
  return out;
}

bool has(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace

TEST(GpuDiscovery, EightGpusTwoSockets) {
  host::Host h = fixture("gpu-8x-two-socket");
  GpuFacts f = collect(h);
  EXPECT_TRUE(f.pci_readable);
  ASSERT_EQ(f.gpus.size(), 8u);
  std::vector<std::string> addrs;
  for (const Gpu& g : f.gpus) addrs.push_back(g.pci.address);
  EXPECT_EQ(addrs, (std::vector<std::string>{"0000:1a:00.0", "0000:1b:00.0", "0000:3d:00.0",
                                             "0000:3e:00.0", "0000:b1:00.0", "0000:b2:00.0",
                                             "0000:b5:00.0", "0000:b6:00.0"}));
  const Gpu& g0 = f.gpus[0];
  EXPECT_EQ(g0.index, 0u);
  EXPECT_EQ(g0.device_id, 0x2330u);
  EXPECT_EQ(g0.class_code, 0x030200u);
  EXPECT_EQ(g0.model, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g0.uuid, "GPU-6f0e4b1a-1000-4c2d-9e3f-a1b2c3d4e5f0");
  EXPECT_EQ(g0.minor, 0u);
  EXPECT_EQ(g0.pci.host_bridge, "pci0000:17");
  EXPECT_EQ(g0.pci.bridges,
            (std::vector<std::string>{"0000:17:00.0", "0000:18:00.0", "0000:19:00.0"}));
  EXPECT_EQ(g0.pci.numa_node, 0);
  EXPECT_EQ(g0.pci.local_cpulist, "0-27,56-83");
  EXPECT_EQ(g0.pci.sysfs_path,
            "/sys/devices/pci0000:17/0000:17:00.0/0000:18:00.0/0000:19:00.0/0000:1a:00.0");
  const Gpu& g6 = f.gpus[6];
  EXPECT_EQ(g6.pci.host_bridge, "pci0000:ae");
  EXPECT_EQ(g6.pci.bridges,
            (std::vector<std::string>{"0000:ae:00.0", "0000:af:00.0", "0000:b0:02.0",
                                      "0000:b3:00.0", "0000:b4:00.0"}));
  EXPECT_EQ(g6.pci.numa_node, 1);
  EXPECT_EQ(g6.pci.local_cpulist, "28-55,84-111");
  EXPECT_EQ(g6.minor, 6u);
  EXPECT_EQ(f.driver_version, "535.104.05");

  ASSERT_EQ(f.hcas.size(), 2u);
  EXPECT_EQ(f.hcas[0].name, "mlx5_0");
  EXPECT_EQ(f.hcas[0].pci.address, "0000:1c:00.0");
  EXPECT_EQ(f.hcas[0].pci.bridges, (std::vector<std::string>{"0000:17:02.0"}));
  EXPECT_EQ(f.hcas[0].pci.numa_node, 0);
  ASSERT_EQ(f.hcas[0].ports.size(), 1u);
  EXPECT_EQ(f.hcas[0].ports[0].number, 1u);
  EXPECT_EQ(f.hcas[0].ports[0].state, "4: ACTIVE");
  EXPECT_EQ(f.hcas[0].ports[0].link_layer, "InfiniBand");
  EXPECT_EQ(f.hcas[1].name, "mlx5_1");
  EXPECT_EQ(f.hcas[1].pci.address, "0000:b7:00.0");
  EXPECT_EQ(f.hcas[1].pci.numa_node, 1);

  ASSERT_EQ(f.interfaces.size(), 3u);
  EXPECT_EQ(f.interfaces[0].name, "eth0");
  EXPECT_EQ(f.interfaces[0].pci_address, "0000:00:1f.6");
  EXPECT_EQ(f.interfaces[1].name, "ib0");
  EXPECT_EQ(f.interfaces[1].pci_address, "0000:1c:00.0");
  EXPECT_EQ(f.interfaces[2].name, "lo");
  EXPECT_EQ(f.interfaces[2].operstate, "unknown");
  EXPECT_EQ(f.interfaces[2].flags, 0x9u);
  for (const NetInterface& n : f.interfaces) EXPECT_TRUE(n.running) << n.name;

  EXPECT_EQ(f.iommu.units, (std::vector<std::string>{"dmar0"}));
  EXPECT_EQ(f.iommu.cmdline_flags, (std::vector<std::string>{"intel_iommu=on", "iommu=pt"}));
  EXPECT_TRUE(f.iommu.passthrough);

  // Bridges: root ports carry ACS (as Linux sets it with an IOMMU), switch ports do not.
  ASSERT_TRUE(f.bridges.count("0000:17:00.0"));
  const Bridge& rp = f.bridges.at("0000:17:00.0");
  EXPECT_EQ(rp.port_type, 4);
  EXPECT_EQ(rp.config_bytes, 0x150u);
  ASSERT_TRUE(rp.acs);
  EXPECT_EQ(rp.acs->offset, 0x148);
  EXPECT_EQ(rp.acs->capability, 0x005f);
  EXPECT_EQ(rp.acs->control, 0x001d);
  EXPECT_EQ(f.bridges.at("0000:18:00.0").port_type, 5);
  EXPECT_EQ(f.bridges.at("0000:19:01.0").port_type, 6);
  EXPECT_EQ(f.bridges.at("0000:19:01.0").acs->control, 0);
  EXPECT_TRUE(f.acs_blocks.empty());
  EXPECT_TRUE(f.acs_unreadable.empty());
  EXPECT_EQ(f.bridges.size(), 18u);  // 4 root ports, 4 upstream, 10 downstream ports
}

TEST(GpuTopology, MatrixOfTheEightGpuBox) {
  GpuFacts f = collect(fixture("gpu-8x-two-socket"));
  const std::vector<std::vector<std::string>> want = {
      // GPU0   GPU1   GPU2    GPU3    GPU4   GPU5   GPU6   GPU7
      {"X", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"},
      {"PIX", "X", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"},
      {"NODE", "NODE", "X", "PIX", "SYS", "SYS", "SYS", "SYS"},
      {"NODE", "NODE", "PIX", "X", "SYS", "SYS", "SYS", "SYS"},
      {"SYS", "SYS", "SYS", "SYS", "X", "PIX", "PXB", "PXB"},
      {"SYS", "SYS", "SYS", "SYS", "PIX", "X", "PXB", "PXB"},
      {"SYS", "SYS", "SYS", "SYS", "PXB", "PXB", "X", "PIX"},
      {"SYS", "SYS", "SYS", "SYS", "PXB", "PXB", "PIX", "X"},
  };
  ASSERT_EQ(f.gpu_matrix.size(), 8u);
  for (size_t i = 0; i < 8; i++)
    for (size_t j = 0; j < 8; j++)
      if (i != j) {
        EXPECT_EQ(level_name(f.gpu_matrix[i][j]), want[i][j]) << "GPU" << i << " GPU" << j;
      }
  const std::vector<std::vector<std::string>> hca = {
      {"PHB", "SYS"}, {"PHB", "SYS"}, {"NODE", "SYS"}, {"NODE", "SYS"},
      {"SYS", "PIX"}, {"SYS", "PIX"}, {"SYS", "PXB"},  {"SYS", "PXB"},
  };
  for (size_t i = 0; i < 8; i++)
    for (size_t k = 0; k < 2; k++)
      EXPECT_EQ(level_name(f.gpu_hca_matrix[i][k]), hca[i][k]) << "GPU" << i << " NIC" << k;

  // The ports P2P between GPU4 and GPU6 crosses: below switch C's upstream port.
  EXPECT_EQ(
      bridges_between(f.gpus[4].pci, f.gpus[6].pci),
      (std::vector<std::string>{"0000:b0:00.0", "0000:b0:02.0", "0000:b3:00.0", "0000:b4:00.0"}));
  EXPECT_TRUE(bridges_between(f.gpus[0].pci, f.gpus[2].pci).empty());

  std::string text = topology_matrix_text(f);
  std::istringstream in(text);
  std::map<std::string, std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> w = words(line);
    if (!w.empty()) rows[w[0]] = w;
  }
  EXPECT_EQ(rows["GPU0"],
            (std::vector<std::string>{"GPU0", "X", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS",
                                      "SYS", "PHB", "SYS", "0-27,56-83", "0"}));
  EXPECT_EQ(rows["GPU6"],
            (std::vector<std::string>{"GPU6", "SYS", "SYS", "SYS", "SYS", "PXB", "PXB", "X", "PIX",
                                      "SYS", "PXB", "28-55,84-111", "1"}));
  EXPECT_EQ(rows["NIC1"],
            (std::vector<std::string>{"NIC1", "SYS", "SYS", "SYS", "SYS", "PIX", "PIX", "PXB",
                                      "PXB", "SYS", "X", "28-55,84-111", "1"}));
  EXPECT_TRUE(has(text, "NIC1: mlx5_1"));
  EXPECT_TRUE(has(text, "NV#  = not known"));

  nlohmann::json j;
  to_json(j, f);
  EXPECT_EQ(j["gpus"].size(), 8u);
  EXPECT_EQ(j["gpus"][0]["device_id"], "0x2330");
  EXPECT_EQ(j["gpu_matrix"][4][6], "PXB");
  EXPECT_EQ(j["gpu_hca_matrix"][0][0], "PHB");
  EXPECT_EQ(j["bridges"]["0000:17:00.0"]["acs_control"],
            "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-");
}

TEST(GpuFindings, EightGpuBoxWithoutVariables) {
  std::vector<Finding> v = findings("gpu-8x-two-socket", {});
  EXPECT_EQ(rules_of(v), (std::vector<std::string>{"GPU007", "NCCL009"}));
  EXPECT_TRUE(has(v[0].message, "8 GPUs are visible"));
  EXPECT_TRUE(has(v[0].message, "rank % 8"));
  EXPECT_TRUE(has(v[0].fix, "torch.cuda.set_device(local_rank)"));
  // A debugging setting, not a fix: `mldoctor fix` must not export it.
  EXPECT_TRUE(v[1].env_fix.empty());
  EXPECT_TRUE(has(v[1].fix, "NCCL_DEBUG=INFO"));
  // NCCL_DEBUG set: no NCCL009.
  EXPECT_EQ(rules_of(findings("gpu-8x-two-socket", {{"NCCL_DEBUG", "WARN"}})),
            (std::vector<std::string>{"GPU007"}));
  // More local ranks than GPUs.
  std::vector<Finding> many =
      findings("gpu-8x-two-socket", {{"LOCAL_WORLD_SIZE", "16"}, {"NCCL_DEBUG", "INFO"}});
  ASSERT_TRUE(find(many, "GPU008"));
  EXPECT_TRUE(
      has(find(many, "GPU008")->message, "LOCAL_WORLD_SIZE=16 ranks on this node but 8 GPUs"));
}

TEST(GpuAcs, RedirectOnOneDownstreamPort) {
  host::Host h = fixture("gpu-acs-enabled", {{"NCCL_DEBUG", "INFO"}});
  GpuFacts f = collect(h);
  ASSERT_EQ(f.acs_blocks.size(), 1u);
  EXPECT_EQ(f.acs_blocks[0].bridge, "0000:19:01.0");
  EXPECT_EQ(f.acs_blocks[0].control, 0x001d);
  EXPECT_EQ(f.acs_blocks[0].a, "0000:1a:00.0");
  EXPECT_EQ(f.acs_blocks[0].b, "0000:1b:00.0");
  EXPECT_FALSE(f.iommu.passthrough);
  std::vector<Finding> v = findings_of(f);
  EXPECT_EQ(rules_of(v), (std::vector<std::string>{"GPU001", "GPU003", "GPU007"}));
  const Finding& acs = v[0];
  EXPECT_EQ(acs.severity, Severity::Warning);
  EXPECT_EQ(acs.subject, "0000:19:01.0");
  EXPECT_TRUE(has(acs.message, "switch downstream port 0000:19:01.0")) << acs.message;
  EXPECT_TRUE(has(acs.message, "GPU0 0000:1a:00.0 ↔ GPU1 0000:1b:00.0")) << acs.message;
  EXPECT_TRUE(has(acs.message, "ReqRedir+ CmpltRedir+"));
  EXPECT_TRUE(has(acs.fix, "setpci -s 0000:19:01.0 ECAP_ACS+0x6.w=0000"));
  EXPECT_EQ(acs.evidence[0].file, "/sys/bus/pci/devices/0000:19:01.0/config");
  EXPECT_TRUE(has(acs.evidence[0].text, "offset 0x148, control 0x001d")) << acs.evidence[0].text;
  EXPECT_TRUE(has(v[1].message, "dmar0")) << v[1].message;
  EXPECT_TRUE(has(v[1].message, "intel_iommu=on")) << v[1].message;
  EXPECT_TRUE(has(topology_matrix_text(f), "0000:19:01.0: SrcValid+"));
  // NCCL_P2P_DISABLE=1 as the workaround: NCCL007 says what it works around.
  h.setenv("NCCL_P2P_DISABLE", "1");
  std::vector<Finding> with_p2p = findings_of(collect(h));
  const Finding* p2p = find(with_p2p, "NCCL007");
  ASSERT_TRUE(p2p);
  EXPECT_EQ(p2p->severity, Severity::Info);
  EXPECT_TRUE(has(p2p->message, "ACS redirection at 0000:19:01.0"));
}

TEST(GpuAcs, ConfigSpaceWalk) {
  std::string cfg(0x150, '\0');
  auto put32 = [&](size_t off, u32 v) {
    for (int i = 0; i < 4; i++) cfg[off + i] = static_cast<char>(v >> (8 * i));
  };
  put32(0x100, 0x0001 | (1u << 16) | (0x148u << 20));
  put32(0x148, 0x000D | (1u << 16));
  put32(0x14C, 0x005F | (0x0004u << 16));
  std::optional<AcsCapability> acs = find_acs(cfg);
  ASSERT_TRUE(acs);
  EXPECT_EQ(acs->offset, 0x148);
  EXPECT_TRUE(acs->request_redirect());
  EXPECT_FALSE(acs->completion_redirect());
  EXPECT_TRUE(acs->redirects_p2p());
  EXPECT_FALSE(find_acs(cfg.substr(0, 64)));           // an unprivileged read
  EXPECT_FALSE(find_acs(cfg.substr(0, 0x14C)));        // stops inside the capability
  put32(0x100, 0x0001 | (1u << 16) | (0x100u << 20));  // AER pointing at itself
  EXPECT_FALSE(find_acs(cfg));
  put32(0x100, 0xffffffffu);
  EXPECT_FALSE(find_acs(cfg));
  EXPECT_FALSE(pcie_port_type(cfg));  // no capability list bit
  EXPECT_EQ(acs_control_text(0x1d),
            "SrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-");
}

TEST(GpuAcs, UnreadableWithoutRoot) {
  // The same bridges seen as an unprivileged user: 64 bytes of config.
  GpuFacts f = collect(fixture("gpu-8x-two-socket"));
  for (auto& [addr, b] : f.bridges) b.config_bytes = 64;
  f.acs_unreadable.clear();
  for (size_t i = 0; i < f.gpus.size(); i++)
    for (size_t j = i + 1; j < f.gpus.size(); j++)
      for (const std::string& p : bridges_between(f.gpus[i].pci, f.gpus[j].pci))
        if (std::find(f.acs_unreadable.begin(), f.acs_unreadable.end(), p) ==
            f.acs_unreadable.end())
          f.acs_unreadable.push_back(p);
  EXPECT_EQ(f.acs_unreadable.size(), 10u);  // 8 GPU downstream ports + b0:02.0 + b3:00.0
  f.env.nccl_debug = "INFO";
  std::vector<Finding> v = findings_of(f);
  const Finding* g = find(v, "GPU002");
  ASSERT_TRUE(g);
  EXPECT_TRUE(has(g->message, "10 PCIe port(s)")) << g->message;
}

TEST(NcclIfList, Syntax) {
  NcclIfList l = parse_nccl_if_list("^=mlx5_0:1,,mlx5_1");
  EXPECT_TRUE(l.exclude);
  EXPECT_TRUE(l.exact);
  ASSERT_EQ(l.entries.size(), 2u);
  EXPECT_EQ(l.entries[0].prefix, "mlx5_0");
  EXPECT_EQ(l.entries[0].port, 1);
  EXPECT_EQ(l.entries[1].prefix, "mlx5_1");
  EXPECT_EQ(l.entries[1].port, -1);
  // '=' before '^' is no exclusion: the name is "^eth".
  l = parse_nccl_if_list("=^eth");
  EXPECT_FALSE(l.exclude);
  EXPECT_TRUE(l.exact);
  ASSERT_EQ(l.entries.size(), 1u);
  EXPECT_EQ(l.entries[0].prefix, "^eth");
  // An empty name before ':' is skipped; the port runs to the next ','.
  l = parse_nccl_if_list(":1,eth0:2x,ib");
  ASSERT_EQ(l.entries.size(), 2u);
  EXPECT_EQ(l.entries[0].prefix, "eth0");
  EXPECT_EQ(l.entries[0].port, 2);
  EXPECT_EQ(l.entries[1].prefix, "ib");
  EXPECT_EQ(parse_nccl_if_list("a,b,c,d", 3).entries.size(), 3u);

  EXPECT_TRUE(nccl_if_list_keeps(parse_nccl_if_list("eth"), "eth0"));
  EXPECT_FALSE(nccl_if_list_keeps(parse_nccl_if_list("=eth"), "eth0"));
  EXPECT_TRUE(nccl_if_list_keeps(parse_nccl_if_list("=eth0"), "eth0"));
  EXPECT_FALSE(nccl_if_list_keeps(parse_nccl_if_list("^docker,lo"), "lo"));
  EXPECT_TRUE(nccl_if_list_keeps(parse_nccl_if_list("^docker,lo"), "eth0"));
  EXPECT_TRUE(nccl_if_list_keeps(parse_nccl_if_list("^=docker"), "docker0"));
  EXPECT_TRUE(nccl_if_list_keeps(parse_nccl_if_list("mlx5_1"), "mlx5_10", 1));
  EXPECT_FALSE(nccl_if_list_keeps(parse_nccl_if_list("mlx5_0:2"), "mlx5_0", 1));
  EXPECT_TRUE(nccl_if_list_keeps(parse_nccl_if_list("mlx5_0:2"), "mlx5_0", 2));
  EXPECT_TRUE(nccl_if_list_keeps(parse_nccl_if_list("mlx5_0"), "mlx5_0", 2));
}

TEST(NcclIfList, SocketIfnameAgainstInterfacesUp) {
  const std::string tree = "gpu-nccl-ifname-none";
  auto run = [&](const std::string& value) {
    return findings(tree, {{"NCCL_SOCKET_IFNAME", value}, {"NCCL_DEBUG", "INFO"}});
  };
  std::vector<Finding> v = run("ib");
  const Finding* f = find(v, "NCCL001");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::Error);
  EXPECT_TRUE(has(f->message, "NCCL_SOCKET_IFNAME=ib matches no interface that is up"))
      << f->message;
  EXPECT_EQ(f->evidence[0].text, "interfaces up: eth0, lo");
  EXPECT_EQ(f->env_fix, (std::vector<std::string>{"NCCL_SOCKET_IFNAME=eth0"}));
  EXPECT_TRUE(has(f->fix, "(here: eth0)"));

  f = find(v = run("=eth1"), "NCCL001");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->message, "(it matches eth1 (down))")) << f->message;
  f = find(v = run("^eth,lo"), "NCCL001");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->message, "(it matches docker0 (down))")) << f->message;
  f = find(v = run("=eth"), "NCCL001");
  ASSERT_TRUE(f);
  f = find(v = run("lo"), "NCCL002");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->message, "only the loopback interface lo"));
  f = find(v = run("e"), "NCCL003");
  ASSERT_TRUE(f);
  for (const char* ok : {"eth", "=eth0", "^docker", "docker,eth0", "^=eth", "eth0:1"}) {
    v = run(ok);
    EXPECT_FALSE(find(v, "NCCL001")) << ok;
    EXPECT_FALSE(find(v, "NCCL002")) << ok;
  }
  // Two GPUs here, interfaces as collected.
  GpuFacts facts = collect(fixture(tree));
  EXPECT_EQ(facts.gpus.size(), 2u);
  EXPECT_EQ(level_name(facts.gpu_matrix[0][1]), "PHB");
  ASSERT_EQ(facts.interfaces.size(), 4u);
  EXPECT_EQ(facts.interfaces[0].name, "docker0");
  EXPECT_FALSE(facts.interfaces[0].running);
  EXPECT_FALSE(facts.interfaces[2].running);  // eth1
  EXPECT_TRUE(facts.hcas.empty());
}

TEST(NcclIbHca, AgainstInfiniband) {
  const std::string tree = "gpu-8x-two-socket";
  auto run = [&](Env env) {
    env["NCCL_DEBUG"] = "INFO";
    return findings(tree, env);
  };
  EXPECT_FALSE(find(run({{"NCCL_IB_HCA", "mlx5_0:1"}}), "NCCL004"));
  EXPECT_FALSE(find(run({{"NCCL_IB_HCA", "=mlx5_0,mlx5_1"}}), "NCCL004"));
  std::vector<Finding> v = run({{"NCCL_IB_HCA", "mlx5_4"}});
  const Finding* f = find(v, "NCCL004");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::Error);
  EXPECT_TRUE(
      has(f->message,
          "NCCL_IB_HCA=mlx5_4 keeps no active InfiniBand port; this host has mlx5_0, mlx5_1"))
      << f->message;
  EXPECT_EQ(f->evidence[0].text, "ports: mlx5_0:1 4: ACTIVE, mlx5_1:1 4: ACTIVE");
  EXPECT_TRUE(find(run({{"NCCL_IB_HCA", "^mlx5"}}), "NCCL004"));
  EXPECT_TRUE(find(run({{"NCCL_IB_HCA", "=mlx5_0:2"}}), "NCCL004"));
  // IB disabled: the list does not matter, NCCL005 says IB is off.
  v = run({{"NCCL_IB_HCA", "mlx5_4"}, {"NCCL_IB_DISABLE", "1"}});
  EXPECT_FALSE(find(v, "NCCL004"));
  f = find(v, "NCCL005");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->message, "NCCL_IB_DISABLE=1 while mlx5_0, mlx5_1 are present"));
  // No InfiniBand at all on this tree.
  v = findings("gpu-nccl-ifname-none", {{"NCCL_IB_HCA", "mlx5_0"}});
  f = find(v, "NCCL004");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::Warning);
}

TEST(NcclVariables, NumbersAndLevels) {
  EXPECT_EQ(parse_nccl_int("0x10")->value, 16);
  EXPECT_TRUE(parse_nccl_int("0x10")->whole);
  EXPECT_EQ(parse_nccl_int("010")->value, 8);
  EXPECT_EQ(parse_nccl_int("1x")->value, 1);
  EXPECT_FALSE(parse_nccl_int("1x")->whole);
  EXPECT_EQ(parse_nccl_int("true")->value, 0);
  EXPECT_FALSE(parse_nccl_int("true")->whole);
  EXPECT_EQ(parse_nccl_int("-3")->value, -3);
  EXPECT_FALSE(parse_nccl_int(""));
  EXPECT_FALSE(parse_nccl_int("99999999999999999999"));
  for (const char* ok : {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "0", "4", "7"})
    EXPECT_TRUE(valid_p2p_level(ok)) << ok;
  for (const char* bad : {"NODE", "pix", "", "X"}) EXPECT_FALSE(valid_p2p_level(bad)) << bad;

  Env env = {{"NCCL_DEBUG", "INFO"}, {"NCCL_P2P_LEVEL", "NODE"}, {"NCCL_P2P_DISABLE", "true"}};
  std::vector<Finding> v = findings("gpu-8x-two-socket", env);
  const Finding* level = find(v, "NCCL006");
  ASSERT_TRUE(level);
  EXPECT_EQ(level->env_fix, (std::vector<std::string>{"NCCL_P2P_LEVEL=PHB"}));
  const Finding* t = find(v, "NCCL008");
  ASSERT_TRUE(t);
  EXPECT_TRUE(has(t->message, "NCCL_P2P_DISABLE=true is read by NCCL as 0"));
  EXPECT_EQ(t->env_fix, (std::vector<std::string>{"NCCL_P2P_DISABLE=1"}));
  EXPECT_FALSE(find(v, "NCCL007"));  // read as 0: P2P stays on
  v = findings("gpu-8x-two-socket", {{"NCCL_DEBUG", "INFO"}, {"NCCL_P2P_LEVEL", "pix"}});
  EXPECT_EQ(find(v, "NCCL006")->env_fix, (std::vector<std::string>{"NCCL_P2P_LEVEL=PIX"}));
  v = findings("gpu-8x-two-socket",
               {{"NCCL_DEBUG", "INFO"}, {"NCCL_P2P_DISABLE", "1"}, {"NCCL_SHM_DISABLE", "1"}});
  const Finding* both = find(v, "NCCL007");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->severity, Severity::Warning);
  EXPECT_TRUE(
      has(both->message, "the 8 GPUs of this node exchange data through the network transport"));
}

TEST(CudaVisibleDevices, AgainstTheGpusPresent) {
  const std::string tree = "gpu-visible-devices-bad";
  GpuFacts facts = collect(fixture(tree));
  ASSERT_EQ(facts.gpus.size(), 4u);  // the NVSwitch (class 0x0680) and the Intel NIC are not GPUs
  EXPECT_EQ(facts.gpus[3].pci.address, "0000:08:00.0");
  EXPECT_EQ(level_name(facts.gpu_matrix[0][1]), "PIX");
  EXPECT_EQ(level_name(facts.gpu_matrix[0][2]), "PHB");
  auto run = [&](const std::string& cvd) {
    return findings(tree, {{"CUDA_VISIBLE_DEVICES", cvd}, {"NCCL_DEBUG", "INFO"}});
  };
  std::vector<Finding> v = run("0,1,4,2");
  const Finding* f = find(v, "GPU004");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::Warning);
  EXPECT_TRUE(has(f->message,
                  "index 4 is beyond the 4 GPUs here (0-3): CUDA stops at it and shows only 0,1"))
      << f->message;
  EXPECT_TRUE(find(v, "GPU007"));  // still two GPUs per process
  EXPECT_TRUE(has(find(v, "GPU007")->message, "2 GPUs are visible"));
  v = run("7");
  f = find(v, "GPU004");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->severity, Severity::Error);
  EXPECT_TRUE(has(f->message, "shows no GPU"));
  EXPECT_FALSE(find(v, "GPU007"));
  v = run("0,1,1");
  f = find(v, "GPU006");
  ASSERT_TRUE(f);
  EXPECT_TRUE(has(f->message, "lists 1 twice: CUDA then shows none of the 4 GPUs here (0-3)"));
  EXPECT_TRUE(has(f->fix, "CUDA_VISIBLE_DEVICES=0,1,2,3"));
  v = run("GPU-deadbeef");
  f = find(v, "GPU005");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->evidence.size(), 4u);
  EXPECT_TRUE(
      has(f->evidence[2].text, "GPU2 0000:07:00.0 GPU-6f0e4b1a-1002-4c2d-9e3f-a1b2c3d4e5f2"));
  // A UUID (or a unique prefix of one) that exists.
  EXPECT_TRUE(run("GPU-6f0e4b1a-1002-4c2d-9e3f-a1b2c3d4e5f2").empty());
  EXPECT_TRUE(run("GPU-6f0e4b1a-1003").empty());
  EXPECT_EQ(rules_of(run("0,3")), (std::vector<std::string>{"GPU007"}));
  EXPECT_TRUE(run("2").empty());
}

TEST(GpuFindings, DetectionReadsOnlyTheFacts) {
  // Facts gathered with no variable set, then changed: the detectors see the
  // change, not the machine.
  GpuFacts f = collect(fixture("gpu-visible-devices-bad"));
  EXPECT_TRUE(f.driver_loaded);
  f.env.nccl_debug = "INFO";
  f.env.cuda_visible_devices = "9";
  std::vector<Finding> v = findings_of(f);
  ASSERT_EQ(rules_of(v), (std::vector<std::string>{"GPU004"}));
  EXPECT_EQ(v[0].severity, Severity::Error);
  // No nvidia kernel module.
  f.env.cuda_visible_devices.reset();
  f.driver_version.reset();
  f.driver_loaded = false;
  v = findings_of(f);
  const Finding* d = find(v, "GPU009");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->severity, Severity::Warning);
  EXPECT_EQ(d->message,
            "4 NVIDIA GPU(s) (0000:03:00.0, ...) but no /proc/driver/nvidia: the nvidia kernel "
            "module is not loaded, CUDA sees no device");
}

TEST(GpuDiscovery, TreesWithoutGpus) {
  // An existing fixture with no /sys/bus/pci at all.
  host::Host h = fixture("small-shm");
  GpuFacts f;
  EXPECT_NO_THROW(f = collect(h));
  EXPECT_FALSE(f.pci_readable);
  EXPECT_TRUE(f.gpus.empty());
  EXPECT_TRUE(f.gpu_matrix.empty());
  EXPECT_TRUE(has(topology_matrix_text(f), "not readable"));
  h.setenv("CUDA_VISIBLE_DEVICES", "0,1");
  h.setenv("NCCL_SOCKET_IFNAME", "eth0");
  f = collect(h);
  EXPECT_EQ(f.env.cuda_visible_devices, "0,1");
  EXPECT_TRUE(findings_of(f).empty());
  // An empty directory as the root.
  char tmpl[] = "/tmp/mld-gpu-XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  host::Host empty(tmpl, {});
  EXPECT_NO_THROW(f = collect(empty));
  EXPECT_TRUE(f.gpus.empty());
  EXPECT_TRUE(f.interfaces.empty());
  nlohmann::json j;
  to_json(j, f);
  EXPECT_EQ(j["gpus"].size(), 0u);
  fs::remove_all(tmpl);
}
