// cpuid.cc — the CPUID answers of one logical CPU as data. Models of what
// other software derives from CPUID (PyTorch's cpuinfo counting cores, glibc
// choosing an ISA level) must run on any machine's answers, not only on the
// CPU mldoctor happens to run on: a snapshot records them and `check --root`
// replays them, and test fixtures hold dumps of real CPUs.
//
// The text form is that of Todd Allen's `cpuid -r` ("raw") because public
// CPU dumps are published in it:
//   CPU 0:
//      0x00000000 0x00: eax=0x00000010 ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65
// The live capture asks the leaves `cpuid -r` asks: every basic and extended
// leaf up to the maximum the CPU reports, with the sub-leaves of the leaves
// that have them (cache and topology enumerations until their terminator).
// OpenMP runtimes number cores from the answers of every CPU (LLVM's libomp
// moves its thread to each CPU in turn and reads its APIC ID), so the
// topology leaves are also captured per CPU the same way, and a snapshot
// records them as further "CPU n:" sections after the first CPU's full dump.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "host/host.h"

namespace mld::host {

CpuidRegs CpuidDump::query(u32 leaf, u32 subleaf) const {
  auto it = leaves.find({leaf, subleaf});
  return it == leaves.end() ? CpuidRegs{} : it->second;
}

bool CpuidDump::has(u32 leaf, u32 subleaf) const { return leaves.count({leaf, subleaf}) != 0; }

std::string CpuidDump::vendor() const {
  const CpuidRegs r = query(0);
  char v[13] = {};
  std::memcpy(v, &r.ebx, 4);
  std::memcpy(v + 4, &r.edx, 4);
  std::memcpy(v + 8, &r.ecx, 4);
  std::string s(v);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) c = '?';
  return s;
}

namespace {

std::optional<u32> parse_hex32(std::string_view s) {
  if (s.starts_with("0x") || s.starts_with("0X")) s.remove_prefix(2);
  if (s.empty() || s.size() > 8) return std::nullopt;
  u32 v = 0;
  for (char c : s) {
    u32 d;
    if (c >= '0' && c <= '9')
      d = static_cast<u32>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<u32>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = static_cast<u32>(c - 'A' + 10);
    else
      return std::nullopt;
    v = v << 4 | d;
  }
  return v;
}

// "   0x00000001 0x00: eax=0x00a10f11 ebx=0x00020800 ecx=0x7ef8320b edx=0x178bfbff"
std::optional<std::pair<std::pair<u32, u32>, CpuidRegs>> parse_leaf_line(std::string_view line) {
  line = trim(line);
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  std::string_view head = trim(line.substr(0, colon));
  size_t space = head.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::optional<u32> leaf = parse_hex32(trim(head.substr(0, space)));
  std::optional<u32> subleaf = parse_hex32(trim(head.substr(space + 1)));
  if (!leaf || !subleaf) return std::nullopt;
  CpuidRegs r;
  int seen = 0;
  std::string_view rest = line.substr(colon + 1);
  while (!rest.empty()) {
    rest = trim(rest);
    size_t end = rest.find(' ');
    std::string_view item = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    std::optional<u32> v = parse_hex32(item.substr(eq + 1));
    if (!v) return std::nullopt;
    std::string_view reg = item.substr(0, eq);
    if (reg == "eax")
      r.eax = *v, seen |= 1;
    else if (reg == "ebx")
      r.ebx = *v, seen |= 2;
    else if (reg == "ecx")
      r.ecx = *v, seen |= 4;
    else if (reg == "edx")
      r.edx = *v, seen |= 8;
    else
      return std::nullopt;
  }
  if (seen != 15) return std::nullopt;
  return std::make_pair(std::make_pair(*leaf, *subleaf), r);
}

}  // namespace

namespace {

// Calls leaf(section, key, regs) for every leaf line of `text`, the section
// being the CPU of the last "CPU n:" line (0 before any). False with *error
// set on a malformed line.
template <typename F>
bool scan_cpuid_text(std::string_view text, std::string* error, F&& leaf) {
  u32 cpu = 0;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    line_no++;
    std::string_view t = trim(line);
    if (t.empty()) continue;
    if (t.starts_with("CPU ") && t.ends_with(":")) {
      std::string_view n = trim(t.substr(4, t.size() - 5));
      u32 v = 0;
      bool ok = !n.empty() && n.size() <= 6;
      for (char c : n) ok &= c >= '0' && c <= '9', v = v * 10 + static_cast<u32>(c - '0');
      if (!ok) {
        if (error)
          *error = "line " + std::to_string(line_no) + ": not a CPU number: " + std::string(t);
        return false;
      }
      cpu = v;
      continue;
    }
    if (!t.starts_with("0x")) continue;  // headers and comments of other tools' dumps
    std::optional<std::pair<std::pair<u32, u32>, CpuidRegs>> l = parse_leaf_line(t);
    if (!l) {
      if (error)
        *error = "line " + std::to_string(line_no) +
                 ": not a CPUID leaf: " + std::string(t.substr(0, 80));
      return false;
    }
    leaf(cpu, l->first, l->second);
  }
  return true;
}

}  // namespace

std::optional<CpuidDump> parse_cpuid_dump(std::string_view text, std::string* error,
                                          std::optional<u32> want_cpu) {
  CpuidDump dump;
  std::optional<u32> chosen;  // the section kept
  const bool ok =
      scan_cpuid_text(text, error, [&](u32 section, std::pair<u32, u32> key, const CpuidRegs& r) {
        if (want_cpu ? section != *want_cpu : (chosen && section != *chosen)) return;
        chosen = section;
        dump.leaves[key] = r;
      });
  if (!ok) return std::nullopt;
  if (dump.leaves.empty()) {
    if (error)
      *error = want_cpu ? "no CPUID leaves for CPU " + std::to_string(*want_cpu)
                        : std::string("no CPUID leaves");
    return std::nullopt;
  }
  dump.cpu = chosen.value_or(0);
  return dump;
}

std::optional<std::map<u32, CpuidDump>> parse_cpuid_dumps(std::string_view text,
                                                          std::string* error) {
  std::map<u32, CpuidDump> dumps;
  const bool ok =
      scan_cpuid_text(text, error, [&](u32 section, std::pair<u32, u32> key, const CpuidRegs& r) {
        CpuidDump& d = dumps[section];
        d.cpu = section;
        d.leaves[key] = r;
      });
  if (!ok) return std::nullopt;
  if (dumps.empty()) {
    if (error) *error = "no CPUID leaves";
    return std::nullopt;
  }
  return dumps;
}

std::string format_cpuid_dump(const CpuidDump& dump) {
  std::string out = "CPU " + std::to_string(dump.cpu) + ":\n";
  char line[96];
  for (const auto& [key, r] : dump.leaves) {
    std::snprintf(line, sizeof line,
                  "   0x%08x 0x%02x: eax=0x%08x ebx=0x%08x ecx=0x%08x edx=0x%08x\n", key.first,
                  key.second, r.eax, r.ebx, r.ecx, r.edx);
    out += line;
  }
  return out;
}

namespace {

#if defined(__x86_64__) || defined(__i386__)
// Runs CPUID on this CPU and records the answer in `dump`.
CpuidRegs ask_cpu(CpuidDump& dump, u32 leaf, u32 subleaf) {
  CpuidRegs r;
  __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
  dump.leaves[{leaf, subleaf}] = r;
  return r;
}

CpuidDump capture_cpuid() {
  CpuidDump dump;
  auto ask = [&dump](u32 leaf, u32 subleaf) { return ask_cpu(dump, leaf, subleaf); };
  // Sub-leaves: enumerations ended by a zero type field (cache leaves 4 and
  // 0x8000001D: EAX[4:0]; topology leaves 0xB, 0x1F and AMD's 0x80000026:
  // ECX[15:8], the terminating sub-leaf kept), a count in sub-leaf 0 (7, 0x14,
  // 0x17, 0x18, 0x1D, 0x20: EAX), or a fixed range (0xD, 0xF, 0x10, 0x12).
  auto leaf_range = [&](u32 first, u32 last) {
    for (u32 leaf = first; leaf <= last; leaf++) {
      const CpuidRegs r0 = ask(leaf, 0);
      switch (leaf) {
        case 0x4:
        case 0x8000001D:
          for (u32 s = 1; s < 16 && (dump.query(leaf, s - 1).eax & 0x1f) != 0; s++) ask(leaf, s);
          break;
        case 0xB:
        case 0x1F:
        case 0x80000026:
          for (u32 s = 1; s < 16 && ((dump.query(leaf, s - 1).ecx >> 8) & 0xff) != 0; s++)
            ask(leaf, s);
          break;
        case 0x7:
        case 0x14:
        case 0x17:
        case 0x18:
        case 0x1D:
        case 0x20:
          for (u32 s = 1; s <= r0.eax && s < 32; s++) ask(leaf, s);
          break;
        case 0xD:
          for (u32 s = 1; s < 64; s++) ask(leaf, s);
          break;
        case 0xF:
        case 0x10:
          for (u32 s = 1; s < 4; s++) ask(leaf, s);
          break;
        case 0x12:
          for (u32 s = 1; s < 8; s++) ask(leaf, s);
          break;
        default: break;
      }
    }
  };
  const u32 max_basic = ask(0, 0).eax;
  leaf_range(0, max_basic < 0x40 ? max_basic : 0x40);
  const u32 max_extended = ask(0x80000000, 0).eax;
  if (max_extended > 0x80000000)
    leaf_range(0x80000000, max_extended < 0x80000040 ? max_extended : 0x80000040);
  // Sub-leaf 0xD.n rows that are all zero say nothing: keep the dump small.
  for (u32 s = 2; s < 64; s++)
    if (const CpuidRegs r = dump.query(0xD, s);
        dump.has(0xD, s) && !r.eax && !r.ebx && !r.ecx && !r.edx)
      dump.leaves.erase({0xD, s});
  const int cpu = sched_getcpu();
  dump.cpu = cpu >= 0 ? static_cast<u32>(cpu) : 0;
  return dump;
}

// The leaves OpenMP runtimes read on each CPU to number it: 0, 1, the
// enumerations of 4, 0xB and 0x1F (the terminating sub-leaf kept), and the
// extended leaves up to 0x80000008 (AMD's core count).
CpuidDump capture_topology_leaves() {
  CpuidDump dump;
  auto ask = [&dump](u32 leaf, u32 subleaf) { return ask_cpu(dump, leaf, subleaf); };
  const u32 max_basic = ask(0, 0).eax;
  if (max_basic >= 1) ask(1, 0);
  if (max_basic >= 4)
    for (u32 s = 0; s < 16 && (ask(4, s).eax & 0x1f) != 0; s++) {
    }
  for (u32 leaf : {0xBu, 0x1Fu})
    if (max_basic >= leaf)
      for (u32 s = 0; s < 16 && ((ask(leaf, s).ecx >> 8) & 0xff) != 0; s++) {
      }
  const u32 max_extended = ask(0x80000000, 0).eax;
  for (u32 leaf = 0x80000001; leaf <= 0x80000008 && leaf <= max_extended; leaf++) ask(leaf, 0);
  const int cpu = sched_getcpu();
  dump.cpu = cpu >= 0 ? static_cast<u32>(cpu) : 0;
  return dump;
}
#endif

}  // namespace

std::optional<CpuidDump> Host::cpuid(std::string* why) const {
  if (is_live_root()) {
#if defined(__x86_64__) || defined(__i386__)
    return capture_cpuid();
#else
    if (why) *why = "this machine is not x86: it has no CPUID instruction";
    return std::nullopt;
#endif
  }
  std::optional<std::string> text = read_file(kCpuidFile, 16 << 20);
  if (!text) {
    if (why) *why = "the tree has no CPUID dump at " + std::string(kCpuidFile);
    return std::nullopt;
  }
  std::string error;
  std::optional<CpuidDump> dump = parse_cpuid_dump(*text, &error);
  if (!dump && why) *why = std::string(kCpuidFile) + ": " + error;
  return dump;
}

std::map<u32, CpuidDump> Host::cpuid_per_cpu(const std::vector<u32>& cpus, std::string* why) const {
  std::map<u32, CpuidDump> out;
  if (is_live_root()) {
#if defined(__x86_64__) || defined(__i386__)
    // Moves only this thread (sched_setaffinity with pid 0), and puts it
    // back: the process's other threads and its children are not touched.
    cpu_set_t saved;
    CPU_ZERO(&saved);
    if (sched_getaffinity(0, sizeof saved, &saved) != 0) {
      if (why) *why = std::string("sched_getaffinity: ") + std::strerror(errno);
      return out;
    }
    for (u32 c : cpus) {
      if (c >= CPU_SETSIZE) continue;
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      if (sched_setaffinity(0, sizeof one, &one) != 0) continue;
      CpuidDump d = capture_topology_leaves();
      if (d.cpu == c) out.emplace(c, std::move(d));
    }
    sched_setaffinity(0, sizeof saved, &saved);
    if (out.empty() && why) *why = "this thread could run on none of the CPUs asked for";
#else
    if (why) *why = "this machine is not x86: it has no CPUID instruction";
#endif
    return out;
  }
  std::optional<std::string> text = read_file(kCpuidFile, 16 << 20);
  if (!text) {
    if (why) *why = "the tree has no CPUID dump at " + std::string(kCpuidFile);
    return out;
  }
  std::string error;
  std::optional<std::map<u32, CpuidDump>> all = parse_cpuid_dumps(*text, &error);
  if (!all) {
    if (why) *why = std::string(kCpuidFile) + ": " + error;
    return out;
  }
  for (u32 c : cpus)
    if (auto it = all->find(c); it != all->end()) out.emplace(c, it->second);
  if (out.empty() && why) *why = std::string(kCpuidFile) + " has no section of these CPUs";
  return out;
}

std::optional<std::string> Host::recorded_glibc_release() const {
  if (is_live_root()) return std::nullopt;
  std::optional<std::string> v = read_file(kGlibcReleaseFile, 64);
  if (!v) return std::nullopt;
  while (!v->empty() && (v->back() == '\n' || v->back() == ' ')) v->pop_back();
  return v;
}

}  // namespace mld::host
