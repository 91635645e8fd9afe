// gpu.h — GPUs, the PCIe topology between them, and NCCL's readiness, read
// without any GPU library: NVIDIA devices from /sys/bus/pci/devices (vendor
// 0x10de, class 0x0300xx/0x0302xx), the bridge chain of each from the sysfs
// path of the device, PCI ACS from the bridges' config space, InfiniBand HCAs
// from /sys/class/infiniband, interfaces from /sys/class/net, IOMMU from
// /sys/class/iommu and /proc/cmdline, models and UUIDs from
// /proc/driver/nvidia/gpus/*/information. Everything goes through
// host::Host, so `--root DIR` analyses a fixture tree or a mounted image.
//
// The failure this exists for (seed 004): a multi-GPU job hangs at its first
// barrier. The host-side causes are NCCL variables that match nothing on the
// machine (NCCL_SOCKET_IFNAME, NCCL_IB_HCA), CUDA_VISIBLE_DEVICES naming GPUs
// that are not there, ACS redirecting peer-to-peer traffic through the root
// complex, and ranks that never bound their own GPU.
//
// collect() also reads the variables the GPU and NCCL rules judge (GpuEnv);
// their detectors (src/detect/rules/GPU00*.cc, NCCL00*.cc) read only these
// facts, with the models of CUDA and NCCL below (cuda_visibility, the NCCL
// list and number parsers).
//
// NVLink (nvidia-smi's NV#) is not visible in sysfs: the matrix shows the PCIe
// path only, and says so.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/host.h"

namespace mld::gpu {

// nvidia-smi topo -m's PCIe levels, nearest first (NVML's
// nvmlGpuTopologyLevel_t SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM).
enum class Level { PIX, PXB, PHB, NODE, SYS };
std::string_view level_name(Level l);  // "PIX", ...

// PCI config space (pci.cc) ///////////////////////////////////////////////////

// The ACS extended capability (ID 0x000D) of a port.
struct AcsCapability {
  u16 offset = 0;      // of the extended capability header, >= 0x100
  u16 capability = 0;  // ACS Capability register (cap + 4)
  u16 control = 0;     // ACS Control register (cap + 6)
  bool source_validation() const { return control & 0x01; }
  bool translation_blocking() const { return control & 0x02; }
  bool request_redirect() const { return control & 0x04; }     // P2P Request Redirect
  bool completion_redirect() const { return control & 0x08; }  // P2P Completion Redirect
  bool upstream_forwarding() const { return control & 0x10; }
  bool egress_control() const { return control & 0x20; }
  bool direct_translated() const { return control & 0x40; }
  // P2P traffic is sent up to the root complex instead of across the switch.
  bool redirects_p2p() const {
    return request_redirect() || completion_redirect() || egress_control();
  }
};
// lspci's words for the control bits: "SrcValid+ TransBlk- ReqRedir+ ...".
std::string acs_control_text(u16 control);

// Walks the extended capability list of a config space image (bytes as read
// from /sys/bus/pci/devices/<addr>/config) from 0x100. nullopt when the image
// stops before 0x104 (an unprivileged read gives 64 bytes), the list is empty,
// or has no ACS capability. Never reads outside `config`; stops on loops.
std::optional<AcsCapability> find_acs(std::string_view config);
// The PCI Express capability's device/port type (4 root port, 5 switch
// upstream port, 6 switch downstream port, 0 endpoint, ...), from the
// standard capability list; nullopt when absent or unreadable.
std::optional<u8> pcie_port_type(std::string_view config);
std::string_view port_type_name(u8 type);  // "root port", "upstream port", ...

// Facts ///////////////////////////////////////////////////////////////////////

// Where a PCI device sits: the realpath of its sysfs directory is
// /sys/devices/pciDDDD:BB/<bridge>/.../<address>; every BDF before the
// device's own is a bridge or switch port, pciDDDD:BB is the host bridge.
struct PciLocation {
  std::string address;               // "0000:1a:00.0"
  std::string sysfs_path;            // "/sys/devices/pci0000:17/0000:17:00.0/.../0000:1a:00.0"
  std::string host_bridge;           // "pci0000:17"; "" when the path has none
  std::vector<std::string> bridges;  // root port first, the device's parent last
  int numa_node = -1;                // -1: not reported
  std::string local_cpulist;         // "0-27,56-83"
};

struct Gpu {
  u32 index = 0;  // in PCI bus order (nvidia-smi's; CUDA's unless GPUs differ and
                  // CUDA_DEVICE_ORDER is not PCI_BUS_ID)
  PciLocation pci;
  u32 device_id = 0;         // 0x2330
  u32 class_code = 0;        // 0x030200
  std::string model;         // "NVIDIA H100 80GB HBM3" from /proc/driver/nvidia, or ""
  std::string uuid;          // "GPU-..." from /proc/driver/nvidia, or ""
  std::optional<u32> minor;  // Device Minor: /dev/nvidia<N>
};

// A bridge or switch port on the path of a GPU or HCA.
struct Bridge {
  std::string address;
  std::optional<u8> port_type;
  size_t config_bytes = 0;  // how much of the config space could be read
  std::optional<AcsCapability> acs;
  bool acs_readable() const { return config_bytes >= 0x104; }
};

struct IbPort {
  u32 number = 0;
  std::string state;       // "4: ACTIVE"
  std::string link_layer;  // "InfiniBand", "Ethernet"
};

struct Hca {
  std::string name;  // "mlx5_0"
  PciLocation pci;   // address "" when the device link is missing
  std::vector<IbPort> ports;
};

struct NetInterface {
  std::string name;
  std::string operstate;     // "up", "down", "unknown", ...
  std::optional<u32> flags;  // /sys/class/net/<if>/flags (IFF_UP = 0x1)
  // IFF_UP and an operational state of up or unknown (the kernel's
  // IFF_RUNNING, which NCCL requires).
  bool running = false;
  std::string pci_address;  // "" for virtual interfaces
};

struct Iommu {
  std::vector<std::string> units;          // /sys/class/iommu entries ("dmar0", "ivhd0")
  std::optional<std::string> cmdline;      // /proc/cmdline
  std::vector<std::string> cmdline_flags;  // "intel_iommu=on", "iommu=pt", "amd_iommu=..."
  bool passthrough = false;                // iommu=pt or iommu.passthrough=1
};

// A port below the nearest common bridge of two devices, with ACS P2P
// redirection enabled: their traffic goes up to the root complex.
struct AcsBlock {
  std::string bridge;
  u16 control = 0;
  std::string a, b;  // the two devices ("0000:1a:00.0", "mlx5_0")
};

// The variables the GPU and NCCL rules read, as the process would see them
// (nullopt: unset). Not in to_json: check's report lists the environment
// with the host's facts.
struct GpuEnv {
  std::optional<std::string> cuda_visible_devices;
  std::optional<std::string> local_world_size, local_rank;
  std::optional<std::string> nccl_socket_ifname, nccl_ib_hca, nccl_ib_disable;
  std::optional<std::string> nccl_p2p_disable, nccl_shm_disable, nccl_p2p_level, nccl_debug;
};

struct GpuFacts {
  bool pci_readable = false;              // /sys/bus/pci/devices could be listed
  std::vector<Gpu> gpus;                  // by PCI address
  std::vector<Hca> hcas;                  // by name
  std::vector<NetInterface> interfaces;   // by name
  std::map<std::string, Bridge> bridges;  // every bridge on a GPU's or HCA's path
  Iommu iommu;
  std::optional<std::string> driver_version;  // "535.104.05" from /proc/driver/nvidia/version
  bool driver_loaded = false;  // /proc/driver/nvidia can be listed: the nvidia module is loaded
  // level(i, j) between gpus[i] and gpus[j] (the diagonal is unused), and
  // between gpus[i] and hcas[k].
  std::vector<std::vector<Level>> gpu_matrix;
  std::vector<std::vector<Level>> gpu_hca_matrix;
  std::vector<AcsBlock> acs_blocks;
  // Bridges between two devices whose ACS state could not be read (config
  // space beyond 64 bytes needs root).
  std::vector<std::string> acs_unreadable;
  GpuEnv env;
};

GpuFacts collect(const host::Host& host);

// What CUDA makes of CUDA_VISIBLE_DEVICES on these GPUs (environment.cc): it
// reads the entries in order and stops at the first it cannot use, keeping
// those before it; a repeated entry hides every GPU. A UUID is checked only
// when the driver reported the GPUs' UUIDs; MIG entries are taken as they are.
struct CudaVisibility {
  enum class Stop {
    None,         // every entry is used (or the variable is unset)
    Duplicate,    // `entry` is listed twice: no GPU is visible
    UnknownUuid,  // `entry` is a UUID no GPU here has
    IndexBeyond,  // `entry` is an index beyond the GPUs present
  };
  Stop stop = Stop::None;
  std::string entry;
  std::vector<std::string> before;  // the entries before `entry`, which stay visible
  size_t visible = 0;               // how many GPUs a process sees
};
CudaVisibility cuda_visibility(const GpuFacts& facts);

// The level between two located devices (topology.cc).
Level pci_level(const PciLocation& a, const PciLocation& b);

// The bridges strictly below the nearest common bridge of a and b (the ports
// P2P traffic between them crosses); empty when they share no bridge.
std::vector<std::string> bridges_between(const PciLocation& a, const PciLocation& b);

// nvidia-smi topo -m-like table: GPUs and HCAs, PCIe levels, CPU and NUMA
// affinity, the legend, and a line saying NV# needs NVML.
std::string topology_matrix_text(const GpuFacts& facts);

// NCCL's interface and HCA lists (nccl.cc) ////////////////////////////////////

// NCCL_SOCKET_IFNAME / NCCL_IB_HCA as NCCL's parseStringList and matchIfList
// read them: a leading '^' excludes, then a leading '=' asks for exact names;
// entries are separated by ',', "name:port" carries a port (atoi), empty
// entries are skipped, at most `max_entries` are kept.
struct NcclIfEntry {
  std::string prefix;
  int port = -1;  // -1: any
};
struct NcclIfList {
  bool exclude = false;
  bool exact = false;
  std::vector<NcclIfEntry> entries;
};
NcclIfList parse_nccl_if_list(std::string_view text, size_t max_entries = 32);
// Whether NCCL would keep an interface (or HCA port; port -1 for sockets).
bool nccl_if_list_keeps(const NcclIfList& list, std::string_view name, int port = -1);
// A numeric NCCL parameter as ncclParam reads it: strtoll(str, NULL, 0) of a
// non-empty value, so "true" reads as 0 and "1x" as 1 (`whole` is false for
// both). nullopt when NCCL keeps its default (empty value, out of range).
struct NcclInt {
  i64 value = 0;
  bool whole = true;  // the entire value is one number
};
std::optional<NcclInt> parse_nccl_int(std::string_view text);
// NCCL_P2P_LEVEL: a path name NCCL knows ("PIX", "NVL", ...) or a legacy
// integer; false for anything NCCL ignores (nvidia-smi's "NODE" included).
bool valid_p2p_level(std::string_view text);

// What NCCL's socket transport makes of an NCCL_SOCKET_IFNAME list on these
// interfaces (ncclFindInterfaces): it keeps the listed interfaces that are
// running.
struct NcclSocketChoice {
  std::vector<std::string> kept_up;    // kept and running
  std::vector<std::string> kept_down;  // kept but not running: "eth1 (down)"
  std::vector<std::string> up;         // every running interface
  bool only_loopback = true;           // kept_up holds loopback interfaces only
  // What NCCL picks without the variable: running ib* first, then any
  // running interface but docker*, loopback and virbr*.
  std::vector<std::string> candidates;
};
NcclSocketChoice nccl_socket_choice(const std::vector<NetInterface>& interfaces,
                                    const NcclIfList& list);

void to_json(nlohmann::json& j, const GpuFacts& facts);

}  // namespace mld::gpu
