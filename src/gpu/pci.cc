// pci.cc — what sysfs and procfs say about GPUs, HCAs, interfaces and the
// IOMMU, read the way NCCL's own topology code reads them (src/graph/xml.cc:
// the realpath of a device's sysfs directory lists its bridges; numa_node
// picks the CPU side), plus the PCI config space of the bridges for ACS,
// which NCCL does not check but which decides whether peer-to-peer traffic
// stays inside a PCIe switch. Only host::Host is used, never a GPU library.
#include <algorithm>
#include <cctype>
#include <set>

#include "gpu/gpu-internal.h"

namespace mld::gpu {
namespace {

std::optional<std::string> read_line(const host::Host& host, const std::string& path) {
  std::optional<std::string> text = host.read_file(path, 4096);
  if (!text) return std::nullopt;
  return std::string(trim(*text));
}

// "0x10de" / "0x030200" / "12": sysfs numbers.
std::optional<u64> parse_number(std::string_view s) {
  s = trim(s);
  int base = 10;
  if (s.starts_with("0x") || s.starts_with("0X")) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty() || s.size() > 16) return std::nullopt;
  u64 v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (base == 16 && c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (base == 16 && c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      return std::nullopt;
    v = v * base + d;
  }
  return v;
}

int parse_numa(std::optional<std::string> s) {
  if (!s) return -1;
  std::string_view t = trim(*s);
  if (t.starts_with("-")) return -1;
  std::optional<u64> n = parse_number(t);
  return n && *n < 4096 ? static_cast<int>(*n) : -1;
}

// "0000:1a:00.0": domain, bus, device, function in hex.
bool is_bdf(std::string_view s) {
  if (s.size() != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11})
    if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

std::vector<std::string_view> components(std::string_view path) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < path.size()) {
    while (i < path.size() && path[i] == '/') i++;
    size_t start = i;
    while (i < path.size() && path[i] != '/') i++;
    if (i > start) out.push_back(path.substr(start, i - start));
  }
  return out;
}

// realpath(3) inside the analysed root, through Host::lstat/read_link: every
// symlink on the way is replaced by its target (relative to its directory).
std::optional<std::string> real_path(const host::Host& host, std::string_view path) {
  std::vector<std::string> pending;
  for (std::string_view c : components(path)) pending.emplace_back(c);
  std::reverse(pending.begin(), pending.end());  // a stack: next component last
  std::vector<std::string> done;
  int links = 0;
  while (!pending.empty()) {
    std::string c = std::move(pending.back());
    pending.pop_back();
    if (c == ".") continue;
    if (c == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    std::string here;
    for (const std::string& d : done) here += "/" + d;
    here += "/" + c;
    host::FileStat st = host.lstat(here);
    if (st.kind == host::FileKind::Missing || st.kind == host::FileKind::Error) return std::nullopt;
    if (st.symlink) {
      if (++links > 40) return std::nullopt;
      std::optional<std::string> target = host.read_link(here);
      if (!target) return std::nullopt;
      if (target->starts_with("/")) done.clear();
      std::vector<std::string_view> t = components(*target);
      for (auto it = t.rbegin(); it != t.rend(); ++it) pending.emplace_back(*it);
      continue;
    }
    done.push_back(std::move(c));
  }
  std::string out;
  for (const std::string& d : done) out += "/" + d;
  return out.empty() ? "/" : out;
}

// Fills host bridge and bridges from a realpath under /sys/devices.
void locate(const host::Host& host, PciLocation& loc, const std::string& device_dir) {
  std::optional<std::string> real = real_path(host, device_dir);
  if (!real) return;
  loc.sysfs_path = *real;
  std::vector<std::string_view> parts = components(*real);
  // Bridges are the BDFs between the host bridge and the device itself.
  for (std::string_view p : parts) {
    if (p.starts_with("pci") && p.size() > 3 && p.find(':') != std::string_view::npos) {
      loc.host_bridge = std::string(p);
      loc.bridges.clear();
      continue;
    }
    if (!is_bdf(p) || loc.host_bridge.empty()) continue;
    if (p == loc.address) break;
    loc.bridges.emplace_back(p);
  }
  std::string dir = "/sys/bus/pci/devices/" + loc.address;
  loc.numa_node = parse_numa(host.read_file(dir + "/numa_node", 64));
  if (std::optional<std::string> cpus = read_line(host, dir + "/local_cpulist"))
    loc.local_cpulist = *cpus;
}

u16 le16(std::string_view b, size_t off) {
  return static_cast<u16>(static_cast<u8>(b[off]) | static_cast<u8>(b[off + 1]) << 8);
}
u32 le32(std::string_view b, size_t off) {
  return static_cast<u32>(le16(b, off)) | static_cast<u32>(le16(b, off + 2)) << 16;
}

void read_driver_info(const host::Host& host, Gpu& g) {
  std::optional<std::string> text =
      host.read_file("/proc/driver/nvidia/gpus/" + g.pci.address + "/information");
  if (!text) return;
  size_t start = 0;
  while (start < text->size()) {
    size_t end = text->find('\n', start);
    if (end == std::string::npos) end = text->size();
    std::string_view line(text->data() + start, end - start);
    start = end + 1;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "Model")
      g.model = std::string(value);
    else if (key == "GPU UUID")
      g.uuid = std::string(value);
    else if (key == "Device Minor") {
      if (std::optional<u64> n = parse_number(value); n && *n < 1u << 20)
        g.minor = static_cast<u32>(*n);
    }
  }
}

void read_bridge(const host::Host& host, GpuFacts& f, const std::string& addr) {
  if (f.bridges.count(addr)) return;
  Bridge b;
  b.address = addr;
  if (std::optional<std::string> config =
          host.read_file("/sys/bus/pci/devices/" + addr + "/config", 4096)) {
    b.config_bytes = config->size();
    b.port_type = pcie_port_type(*config);
    b.acs = find_acs(*config);
  }
  f.bridges[addr] = std::move(b);
}

std::string_view iommu_flag(std::string_view word) {
  for (std::string_view p :
       {"iommu=", "intel_iommu=", "amd_iommu=", "iommu.passthrough=", "iommu.strict="})
    if (word.starts_with(p)) return word;
  return {};
}

}  // namespace

std::string acs_control_text(u16 c) {
  static const char* names[] = {"SrcValid",    "TransBlk",   "ReqRedir",   "CmpltRedir",
                                "UpstreamFwd", "EgressCtrl", "DirectTrans"};
  std::string out;
  for (int i = 0; i < 7; i++)
    out += std::string(i ? " " : "") + names[i] + ((c >> i) & 1 ? "+" : "-");
  return out;
}

std::optional<AcsCapability> find_acs(std::string_view config) {
  size_t offset = 0x100;
  // Each capability header is at least 4 bytes after 0x100: no list can be
  // longer than (4096 - 256) / 4 entries; more means a loop.
  for (int steps = 0; steps < 960; steps++) {
    if (offset < 0x100 || offset + 4 > config.size()) return std::nullopt;
    u32 header = le32(config, offset);
    if (header == 0 || header == 0xffffffffu) return std::nullopt;
    u16 id = header & 0xffff;
    if (id == 0x000d) {
      AcsCapability acs;
      acs.offset = static_cast<u16>(offset);
      if (offset + 8 > config.size()) return std::nullopt;
      acs.capability = le16(config, offset + 4);
      acs.control = le16(config, offset + 6);
      return acs;
    }
    size_t next = (header >> 20) & 0xffc;
    if (next == 0) return std::nullopt;
    offset = next;
  }
  return std::nullopt;
}

std::optional<u8> pcie_port_type(std::string_view config) {
  if (config.size() < 0x40) return std::nullopt;
  if (!(le16(config, 0x06) & 0x10)) return std::nullopt;  // no capability list
  size_t ptr = static_cast<u8>(config[0x34]) & 0xfc;
  for (int steps = 0; steps < 48 && ptr >= 0x40 && ptr + 4 <= config.size() && ptr < 0x100;
       steps++) {
    u8 id = static_cast<u8>(config[ptr]);
    if (id == 0x10) return static_cast<u8>((le16(config, ptr + 2) >> 4) & 0xf);
    ptr = static_cast<u8>(config[ptr + 1]) & 0xfc;
  }
  return std::nullopt;
}

std::string_view port_type_name(u8 type) {
  switch (type) {
    case 0: return "endpoint";
    case 1: return "legacy endpoint";
    case 4: return "root port";
    case 5: return "switch upstream port";
    case 6: return "switch downstream port";
    case 7: return "PCIe-to-PCI bridge";
    case 8: return "PCI-to-PCIe bridge";
    case 9: return "root complex integrated endpoint";
    case 10: return "root complex event collector";
    default: return "unknown port type";
  }
}

GpuFacts collect(const host::Host& host) {
  GpuFacts f;
  const std::string pci_dir = "/sys/bus/pci/devices";
  std::optional<std::vector<std::string>> devices = host.list_dir(pci_dir);
  f.pci_readable = devices.has_value();
  for (const std::string& addr : devices.value_or(std::vector<std::string>{})) {
    if (!is_bdf(addr)) continue;
    std::string dir = pci_dir + "/" + addr;
    std::optional<std::string> vendor = read_line(host, dir + "/vendor");
    if (!vendor || parse_number(*vendor) != 0x10de) continue;
    std::optional<u64> cls = parse_number(read_line(host, dir + "/class").value_or(""));
    if (!cls || ((*cls >> 8) != 0x0300 && (*cls >> 8) != 0x0302)) continue;
    Gpu g;
    g.pci.address = addr;
    g.class_code = static_cast<u32>(*cls);
    g.device_id =
        static_cast<u32>(parse_number(read_line(host, dir + "/device").value_or("")).value_or(0));
    locate(host, g.pci, dir);
    read_driver_info(host, g);
    f.gpus.push_back(std::move(g));
  }
  std::sort(f.gpus.begin(), f.gpus.end(),
            [](const Gpu& a, const Gpu& b) { return a.pci.address < b.pci.address; });
  for (size_t i = 0; i < f.gpus.size(); i++) f.gpus[i].index = static_cast<u32>(i);

  for (const std::string& name :
       host.list_dir("/sys/class/infiniband").value_or(std::vector<std::string>{})) {
    Hca h;
    h.name = name;
    std::string dir = "/sys/class/infiniband/" + name;
    if (std::optional<std::string> dev = real_path(host, dir + "/device")) {
      std::vector<std::string_view> parts = components(*dev);
      if (!parts.empty() && is_bdf(parts.back())) {
        h.pci.address = std::string(parts.back());
        locate(host, h.pci, pci_dir + "/" + h.pci.address);
      }
    }
    for (const std::string& p :
         host.list_dir(dir + "/ports").value_or(std::vector<std::string>{})) {
      std::optional<u64> n = parse_number(p);
      if (!n || *n > 1024) continue;
      IbPort port;
      port.number = static_cast<u32>(*n);
      port.state = read_line(host, dir + "/ports/" + p + "/state").value_or("");
      port.link_layer = read_line(host, dir + "/ports/" + p + "/link_layer").value_or("");
      h.ports.push_back(std::move(port));
    }
    std::sort(h.ports.begin(), h.ports.end(),
              [](const IbPort& a, const IbPort& b) { return a.number < b.number; });
    f.hcas.push_back(std::move(h));
  }

  for (const std::string& name :
       host.list_dir("/sys/class/net").value_or(std::vector<std::string>{})) {
    NetInterface n;
    n.name = name;
    std::string dir = "/sys/class/net/" + name;
    n.operstate = read_line(host, dir + "/operstate").value_or("");
    if (std::optional<std::string> flags = read_line(host, dir + "/flags")) {
      if (std::optional<u64> v = parse_number(*flags); v && *v <= 0xffffffffu)
        n.flags = static_cast<u32>(*v);
    }
    bool up_flag = !n.flags || (*n.flags & 0x1);
    n.running = up_flag && (n.operstate == "up" || n.operstate == "unknown");
    if (std::optional<std::string> dev = real_path(host, dir + "/device")) {
      std::vector<std::string_view> parts = components(*dev);
      if (!parts.empty() && is_bdf(parts.back())) n.pci_address = std::string(parts.back());
    }
    f.interfaces.push_back(std::move(n));
  }

  f.iommu.units = host.list_dir("/sys/class/iommu").value_or(std::vector<std::string>{});
  if (std::optional<std::string> cmdline = read_line(host, "/proc/cmdline")) {
    f.iommu.cmdline = *cmdline;
    std::string_view rest = *cmdline;
    while (!rest.empty()) {
      size_t sp = rest.find(' ');
      std::string_view word = rest.substr(0, sp);
      rest = sp == std::string_view::npos ? std::string_view() : rest.substr(sp + 1);
      if (!iommu_flag(word).empty()) {
        f.iommu.cmdline_flags.emplace_back(word);
        if (word == "iommu=pt" || word == "iommu.passthrough=1" || word == "amd_iommu=pt")
          f.iommu.passthrough = true;
      }
    }
  }

  if (std::optional<std::string> v = host.read_file("/proc/driver/nvidia/version", 4096)) {
    // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug ..."
    size_t k = v->find("Kernel Module");
    if (k != std::string::npos) {
      std::string_view rest = trim(std::string_view(*v).substr(k + 13));
      f.driver_version = std::string(rest.substr(0, rest.find(' ')));
    }
  }
  f.driver_loaded = host.list_dir("/proc/driver/nvidia").has_value();
  f.env = read_gpu_env(host);

  for (const Gpu& g : f.gpus)
    for (const std::string& b : g.pci.bridges) read_bridge(host, f, b);
  for (const Hca& h : f.hcas)
    for (const std::string& b : h.pci.bridges) read_bridge(host, f, b);

  // Levels and the ports between devices.
  size_t n = f.gpus.size();
  f.gpu_matrix.assign(n, std::vector<Level>(n, Level::PIX));
  f.gpu_hca_matrix.assign(n, std::vector<Level>(f.hcas.size(), Level::SYS));
  std::set<std::string> unreadable;
  auto check_ports = [&](const PciLocation& a, const PciLocation& b, const std::string& an,
                         const std::string& bn) {
    for (const std::string& port : bridges_between(a, b)) {
      auto it = f.bridges.find(port);
      if (it == f.bridges.end()) continue;
      if (!it->second.acs_readable()) {
        unreadable.insert(port);
      } else if (it->second.acs && it->second.acs->redirects_p2p()) {
        f.acs_blocks.push_back({port, it->second.acs->control, an, bn});
      }
    }
  };
  for (size_t i = 0; i < n; i++) {
    for (size_t j = 0; j < n; j++)
      if (i != j) f.gpu_matrix[i][j] = pci_level(f.gpus[i].pci, f.gpus[j].pci);
    for (size_t j = i + 1; j < n; j++)
      check_ports(f.gpus[i].pci, f.gpus[j].pci, f.gpus[i].pci.address, f.gpus[j].pci.address);
    for (size_t k = 0; k < f.hcas.size(); k++) {
      if (f.hcas[k].pci.address.empty()) continue;
      f.gpu_hca_matrix[i][k] = pci_level(f.gpus[i].pci, f.hcas[k].pci);
      check_ports(f.gpus[i].pci, f.hcas[k].pci, f.gpus[i].pci.address, f.hcas[k].name);
    }
  }
  f.acs_unreadable.assign(unreadable.begin(), unreadable.end());
  return f;
}

}  // namespace mld::gpu
