// nccl.cc — NCCL's variables checked against this host. The list syntax of
// NCCL_SOCKET_IFNAME and NCCL_IB_HCA is modelled on NCCL's own code
// (src/misc/utils.cc parseStringList/matchIfList, src/misc/socket.cc
// ncclFindInterfaces, src/transport/net_ib.cc): '^' then '=' at the start of
// the whole value, ',' between entries, ":port" after a name, prefix match
// unless '='. A value that keeps no interface that is up is the classic hang
// or "Bootstrap : no socket interface found" of seed 004; numeric parameters
// go through strtoll, so "true" silently reads as 0.
#include <algorithm>
#include <cctype>
#include <climits>

#include "gpu/gpu-internal.h"

namespace mld::gpu {
namespace {

// atoi(3) without its undefined overflow: clamps to int.
int c_atoi(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) i++;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  long long v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    v = std::min<long long>(v * 10 + (s[i] - '0'), static_cast<long long>(INT_MAX) + 1);
    i++;
  }
  if (neg) v = -v;
  return static_cast<int>(std::clamp<long long>(v, INT_MIN, INT_MAX));
}

bool is_loopback(const NetInterface& n) { return n.name == "lo" || (n.flags && (*n.flags & 0x8)); }

void check_socket_ifname(const GpuFacts& facts, const host::Host& host, FindingSink& sink) {
  std::optional<std::string> v = host.getenv("NCCL_SOCKET_IFNAME");
  if (!v || v->empty()) return;
  const std::string var = "NCCL_SOCKET_IFNAME=" + *v;
  if (v->size() == 1) {
    Finding f =
        make("NCCL003", Severity::Warning, "NCCL_SOCKET_IFNAME",
             var +
                 " is ignored: NCCL reads the variable only when it is longer than one character, "
                 "and then picks an interface itself (ib* first, then any but docker*, lo, virbr*)",
             "Write the full interface name or a longer prefix, e.g. NCCL_SOCKET_IFNAME=eth0.");
    f.evidence.push_back({"src/misc/socket.cc: if (env && strlen(env) > 1)", "", std::nullopt});
    sink.add(std::move(f));
    return;
  }
  if (facts.interfaces.empty()) return;  // /sys/class/net unreadable: nothing to compare with
  NcclIfList list = parse_nccl_if_list(*v, 16);
  std::vector<std::string> kept_up, kept_down, up;
  bool only_loopback = true;
  for (const NetInterface& n : facts.interfaces) {
    if (n.running) up.push_back(n.name);
    if (!nccl_if_list_keeps(list, n.name)) continue;
    if (n.running) {
      kept_up.push_back(n.name);
      if (!is_loopback(n)) only_loopback = false;
    } else {
      kept_down.push_back(n.name + " (" + (n.operstate.empty() ? "not running" : n.operstate) +
                          ")");
    }
  }
  // What NCCL would pick by itself: ib* first, then anything but docker/lo/virbr.
  std::vector<std::string> candidates;
  for (const NetInterface& n : facts.interfaces)
    if (n.running && n.name.starts_with("ib")) candidates.push_back(n.name);
  for (const NetInterface& n : facts.interfaces)
    if (n.running && !n.name.starts_with("ib") && !is_loopback(n) &&
        !n.name.starts_with("docker") && !n.name.starts_with("virbr"))
      candidates.push_back(n.name);
  Evidence seen{"interfaces up: " + (up.empty() ? std::string("none") : join(up)), "/sys/class/net",
                std::nullopt};
  if (kept_up.empty()) {
    std::string msg = var + " matches no interface that is up";
    if (!kept_down.empty()) msg += " (it matches " + join(kept_down) + ")";
    msg +=
        ": NCCL stops with \"Bootstrap : no socket interface found\" or the ranks hang at the "
        "first collective";
    std::string fix = "Name an interface that is up and reaches the other nodes";
    if (!candidates.empty()) fix += " (here: " + join(candidates) + ")";
    fix +=
        ", or unset NCCL_SOCKET_IFNAME and let NCCL choose (ib* first, then any but docker*, lo, "
        "virbr*). "
        "Run with NCCL_DEBUG=INFO to see \"NET/Socket : Using ...\".";
    Finding f = make("NCCL001", Severity::Error, "NCCL_SOCKET_IFNAME", msg, fix);
    f.evidence.push_back(seen);
    if (!candidates.empty())
      f.env_fix.push_back("NCCL_SOCKET_IFNAME=" + candidates.front());
    else
      f.env_fix.push_back("-NCCL_SOCKET_IFNAME");
    sink.add(std::move(f));
  } else if (only_loopback) {
    Finding f =
        make("NCCL002", Severity::Warning, "NCCL_SOCKET_IFNAME",
             var + " keeps only the loopback interface " + join(kept_up) +
                 ": ranks on other nodes cannot connect (a single-node job still works)",
             "Name the interface that carries the nodes' network" +
                 (candidates.empty() ? std::string() : " (here: " + join(candidates) + ")") + ".");
    f.evidence.push_back(seen);
    if (!candidates.empty()) f.env_fix.push_back("NCCL_SOCKET_IFNAME=" + candidates.front());
    sink.add(std::move(f));
  }
}

void check_ib_hca(const GpuFacts& facts, const host::Host& host, FindingSink& sink) {
  std::optional<std::string> v = host.getenv("NCCL_IB_HCA");
  if (!v || v->empty()) return;
  if (std::optional<std::string> d = host.getenv("NCCL_IB_DISABLE"))
    if (auto n = parse_nccl_int(*d); n && n->value != 0) return;  // IB is off anyway
  const std::string var = "NCCL_IB_HCA=" + *v;
  std::vector<std::string> names;
  for (const Hca& h : facts.hcas) names.push_back(h.name);
  if (facts.hcas.empty()) {
    sink.add(make(
        "NCCL004", Severity::Warning, "NCCL_IB_HCA",
        var +
            " but /sys/class/infiniband lists no device: NCCL finds no IB device and falls back to "
            "TCP sockets (\"NET/IB : No device found\")",
        "Load the HCA's driver (mlx5_core, mlx5_ib) or, on a node without InfiniBand/RoCE, unset "
        "NCCL_IB_HCA."));
    return;
  }
  NcclIfList list = parse_nccl_if_list(*v, 32);
  std::vector<std::string> active, inactive, all_ports;
  for (const Hca& h : facts.hcas) {
    std::vector<IbPort> ports = h.ports;
    if (ports.empty()) ports.push_back({1, "", ""});
    for (const IbPort& p : ports) {
      std::string name = h.name + ":" + std::to_string(p.number);
      all_ports.push_back(name + (p.state.empty() ? "" : " " + p.state));
      if (!nccl_if_list_keeps(list, h.name, static_cast<int>(p.number))) continue;
      if (p.state.find("ACTIVE") != std::string::npos)
        active.push_back(name);
      else
        inactive.push_back(name + " (" + (p.state.empty() ? "state unknown" : p.state) + ")");
    }
  }
  if (!active.empty()) return;
  std::string msg = var + " keeps no active InfiniBand port";
  if (!inactive.empty()) msg += " (it matches " + join(inactive) + ")";
  msg += "; this host has " + join(names) + ": NCCL falls back to TCP sockets or fails to connect";
  Finding f = make(
      "NCCL004", Severity::Error, "NCCL_IB_HCA", msg,
      "List HCAs that exist and are ACTIVE (`ibv_devinfo`, /sys/class/infiniband/*/ports/*/state), "
      "e.g. NCCL_IB_HCA=" +
          (names.empty() ? std::string("mlx5_0") : "=" + join(names, ",")) +
          "; '=' asks for exact names (mlx5_1 alone also matches mlx5_10).");
  f.evidence.push_back({"ports: " + join(all_ports), "/sys/class/infiniband", std::nullopt});
  sink.add(std::move(f));
}

void check_numeric(const GpuFacts& facts, const host::Host& host, FindingSink& sink) {
  size_t gpus = facts.gpus.size();
  std::optional<i64> p2p_disable, shm_disable, ib_disable;
  for (const char* name : {"NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"}) {
    std::optional<std::string> v = host.getenv(name);
    if (!v || v->empty()) continue;
    std::optional<NcclInt> n = parse_nccl_int(*v);
    if (!n) continue;
    if (!n->whole) {
      std::string lower;
      for (char c : *v) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      bool truthy = lower == "true" || lower == "yes" || lower == "on" || lower == "y";
      Finding f =
          make("NCCL008", Severity::Warning, name,
               std::string(name) + "=" + *v + " is read by NCCL as " + std::to_string(n->value) +
                   " (strtoll stops at the first character that is not a digit)" +
                   (n->value == 0 ? ": the transport stays enabled" : ""),
               "Write 1 to disable, 0 (or nothing) to keep it.");
      f.env_fix.push_back(std::string(name) + "=" + (truthy ? "1" : std::to_string(n->value)));
      sink.add(std::move(f));
    }
    if (std::string_view(name) == "NCCL_P2P_DISABLE") p2p_disable = n->value;
    if (std::string_view(name) == "NCCL_SHM_DISABLE") shm_disable = n->value;
    if (std::string_view(name) == "NCCL_IB_DISABLE") ib_disable = n->value;
  }
  if (ib_disable.value_or(0) != 0 && !facts.hcas.empty()) {
    std::vector<std::string> names;
    for (const Hca& h : facts.hcas) names.push_back(h.name);
    Finding f =
        make("NCCL005", Severity::Info, "NCCL_IB_DISABLE",
             "NCCL_IB_DISABLE=" + *host.getenv("NCCL_IB_DISABLE") + " while " + join(names) +
                 " are present: NCCL talks between nodes over TCP sockets, not InfiniBand/RoCE",
             "Unset NCCL_IB_DISABLE unless IB is broken on purpose (then expect lower bandwidth).");
    f.env_fix.push_back("-NCCL_IB_DISABLE");
    sink.add(std::move(f));
  }
  bool p2p_off = p2p_disable.value_or(0) != 0, shm_off = shm_disable.value_or(0) != 0;
  if ((p2p_off || shm_off) && gpus >= 2) {
    std::string what = p2p_off && shm_off ? "NCCL_P2P_DISABLE and NCCL_SHM_DISABLE are both set"
                       : p2p_off          ? "NCCL_P2P_DISABLE=" + *host.getenv("NCCL_P2P_DISABLE")
                                          : "NCCL_SHM_DISABLE=" + *host.getenv("NCCL_SHM_DISABLE");
    std::string effect =
        p2p_off && shm_off ? ": the " + std::to_string(gpus) +
                                 " GPUs of this node exchange data through the network transport"
        : p2p_off
            ? ": the " + std::to_string(gpus) +
                  " GPUs of this node exchange data through host shared memory, not PCIe/NVLink "
                  "peer-to-peer"
            : ": GPUs without peer-to-peer access exchange data through the network transport";
    if (p2p_off && !facts.acs_blocks.empty())
      effect += " (the usual workaround for the ACS redirection at " +
                facts.acs_blocks.front().bridge + ")";
    Finding f = make(
        "NCCL007", p2p_off && shm_off ? Severity::Warning : Severity::Info,
        p2p_off ? "NCCL_P2P_DISABLE" : "NCCL_SHM_DISABLE", what + effect,
        "Unset the variable once the cause it works around (ACS, IOMMU, a driver bug) is fixed.");
    sink.add(std::move(f));
  }
  if (std::optional<std::string> level = host.getenv("NCCL_P2P_LEVEL");
      level && !valid_p2p_level(*level)) {
    std::string upper;
    for (char c : *level) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    std::string suggestion = upper == "NODE" ? "PHB" : valid_p2p_level(upper) ? upper : "";
    Finding f = make("NCCL006", Severity::Warning, "NCCL_P2P_LEVEL",
                     "NCCL_P2P_LEVEL=" + *level +
                         " is not a level NCCL knows (LOC, NVL, PIX, PXB, PHB, SYS or a number; "
                         "names are case-sensitive): NCCL ignores it and uses its default" +
                         (upper == "NODE" ? "; nvidia-smi's NODE is NCCL's PHB" : ""),
                     suggestion.empty() ? "Use one of LOC, NVL, PIX, PXB, PHB, SYS, or unset it."
                                        : "Write NCCL_P2P_LEVEL=" + suggestion + ".");
    f.env_fix.push_back(suggestion.empty() ? "-NCCL_P2P_LEVEL" : "NCCL_P2P_LEVEL=" + suggestion);
    sink.add(std::move(f));
  }
}

}  // namespace

NcclIfList parse_nccl_if_list(std::string_view text, size_t max_entries) {
  NcclIfList list;
  if (text.starts_with("^")) {
    list.exclude = true;
    text.remove_prefix(1);
  }
  if (text.starts_with("=")) {
    list.exact = true;
    text.remove_prefix(1);
  }
  // parseStringList: a name runs until ':' (then a port, up to the next ','),
  // ',' or the end; empty names are skipped.
  std::string name;
  size_t i = 0;
  while (list.entries.size() < max_entries) {
    char c = i < text.size() ? text[i] : '\0';
    if (c == ':') {
      size_t end = text.find(',', i);
      if (end == std::string_view::npos) end = text.size();
      if (!name.empty())
        list.entries.push_back({std::move(name), c_atoi(text.substr(i + 1, end - i - 1))});
      name.clear();
      i = end;
      if (i >= text.size()) break;
    } else if (c == ',' || c == '\0') {
      if (!name.empty()) list.entries.push_back({std::move(name), -1});
      name.clear();
      if (c == '\0') break;
    } else {
      name += c;
    }
    i++;
  }
  return list;
}

bool nccl_if_list_keeps(const NcclIfList& list, std::string_view name, int port) {
  bool match = false;
  for (const NcclIfEntry& e : list.entries) {
    bool name_ok = list.exact ? name == e.prefix : name.starts_with(e.prefix);
    bool port_ok = port == -1 || e.port == -1 || port == e.port;
    if (name_ok && port_ok) {
      match = true;
      break;
    }
  }
  return match != list.exclude;
}

std::optional<NcclInt> parse_nccl_int(std::string_view s) {
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) i++;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  int base = 10;
  if (i + 1 < s.size() && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X') && i + 2 < s.size() &&
      std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
    base = 16;
    i += 2;
  } else if (i < s.size() && s[i] == '0') {
    base = 8;
  }
  size_t start = i;
  unsigned long long v = 0;
  const unsigned long long limit = neg ? 1ULL << 63 : (1ULL << 63) - 1;
  for (; i < s.size(); i++) {
    int d;
    char c = s[i];
    if (c >= '0' && c <= '9')
      d = c - '0';
    else if (c >= 'a' && c <= 'f')
      d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F')
      d = c - 'A' + 10;
    else
      break;
    if (d >= base) break;
    if (v > (limit - d) / base) return std::nullopt;  // ERANGE: NCCL keeps its default
    v = v * base + d;
  }
  NcclInt n;
  n.whole = i > start && i == s.size();
  if (i == start) {
    // No digits: strtoll returns 0.
    n.value = 0;
    n.whole = false;
    return n;
  }
  n.value = neg ? static_cast<i64>(0 - v) : static_cast<i64>(v);
  return n;
}

bool valid_p2p_level(std::string_view s) {
  // topoPathTypeStr up to SYS (src/graph/paths.cc), then legacy integers.
  for (std::string_view name :
       {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"})
    if (s == name) return true;
  return !s.empty() && s[0] >= '0' && s[0] <= '9';
}

void emit_nccl_findings(const GpuFacts& facts, const host::Host& host, FindingSink& sink) {
  check_socket_ifname(facts, host, sink);
  check_ib_hca(facts, host, sink);
  check_numeric(facts, host, sink);
  if (!host.getenv("NCCL_DEBUG") && (facts.gpus.size() >= 2 || !facts.hcas.empty())) {
    Finding f = make("NCCL009", Severity::Info, "NCCL_DEBUG",
                     "NCCL_DEBUG is not set: if the job hangs at its first collective, NCCL says "
                     "nothing about the "
                     "interfaces, HCAs and transports it picked",
                     "For a hang, run once with NCCL_DEBUG=INFO "
                     "(NCCL_DEBUG_FILE=/tmp/nccl.%h.%p.log keeps one file per "
                     "process): the lines \"NET/Socket : Using\", \"NET/IB\" and \"Channel\" show "
                     "what NCCL chose.");
    sink.add(std::move(f));
  }
}

}  // namespace mld::gpu
