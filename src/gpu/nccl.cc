// nccl.cc — how NCCL reads its variables, for the NCCL rules' detectors
// (src/detect/rules/NCCL00*.cc). The list syntax of
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

#include "gpu/gpu.h"

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

NcclSocketChoice nccl_socket_choice(const std::vector<NetInterface>& interfaces,
                                    const NcclIfList& list) {
  NcclSocketChoice c;
  for (const NetInterface& n : interfaces) {
    if (n.running) c.up.push_back(n.name);
    if (!nccl_if_list_keeps(list, n.name)) continue;
    if (n.running) {
      c.kept_up.push_back(n.name);
      if (!is_loopback(n)) c.only_loopback = false;
    } else {
      c.kept_down.push_back(n.name + " (" + (n.operstate.empty() ? "not running" : n.operstate) +
                            ")");
    }
  }
  for (const NetInterface& n : interfaces)
    if (n.running && n.name.starts_with("ib")) c.candidates.push_back(n.name);
  for (const NetInterface& n : interfaces)
    if (n.running && !n.name.starts_with("ib") && !is_loopback(n) &&
        !n.name.starts_with("docker") && !n.name.starts_with("virbr"))
      c.candidates.push_back(n.name);
  return c;
}

}  // namespace mld::gpu
