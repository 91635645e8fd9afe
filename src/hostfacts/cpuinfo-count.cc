// cpuinfo-count.cc — the processor and core counts of PyTorch's cpuinfo
// library (github.com/pytorch/cpuinfo) on Linux, computed the way its code
// computes them, quirks included. torch >= 2.0 sizes its intra-op thread pool
// from them (c10::TaskThreadPoolBase::defaultNumThreads: cores when fewer
// than processors, else processors), so a neighbour of the algorithm — the
// kernel's sysfs core ids, lscpu's "Thread(s) per core" — gives the wrong
// count on exactly the machines where the two disagree (VMs above all).
//
// x86 (src/x86/linux/init.c, src/x86/topology.c, src/x86/cache/init.c):
//   1. Processor slots: kernel_max + 1 from /sys/devices/system/cpu/kernel_max
//      (else CPU_SETSIZE), cut to 1 + the highest CPU of the `present` and
//      `possible` lists. A list that cannot be parsed counts as 0 (cpuinfo's
//      1 + UINT32_MAX wraps), and then its flag is not required.
//   2. A slot is valid when it is in present and possible (or, without a
//      present list, listed in /proc/cpuinfo). Offline CPUs are present and
//      possible but absent from /proc/cpuinfo: they are valid with APIC ID 0.
//   3. APIC IDs come from the "apicid" lines of /proc/cpuinfo, read through a
//      2048-byte line buffer: a longer line ends the parse there (cpuinfo's
//      multiline reader treats the full buffer as the last line), so every
//      later processor keeps APIC ID 0.
//   4. The APIC-ID bit fields come from CPUID on the calling CPU: leaf 1 HTT
//      with AMD's CmpLegacy (leaf 0x80000008 ECX[7:0] + 1 cores) or the
//      logical-processor count EBX[23:16] minus the core bits of the last
//      leaf 4 sub-leaf (non-AMD vendors), then, with x2APIC and leaf 0xB,
//      the SMT and core levels of leaf 0xB (cpuinfo adds each level's shift,
//      already cumulative, to a running total: reproduced as written).
//   5. Valid processors sorted by APIC ID; a core is a run of equal
//      APIC ID & ~(SMT bits) in that order.
// ARM64 (src/arm/linux/init.c): every valid processor is a processor and a
// core; since commit 20bd32c (torch >= 2.5) only those /proc/cpuinfo lists
// (1024-byte line buffer).
//
// cpuinfo_initialize() fails (torch then uses hardware_concurrency()) when
// /proc/cpuinfo cannot be opened, and on ARM64 when neither list parses.
#include <algorithm>

#include "hostfacts/hostfacts-internal.h"
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

namespace {

constexpr u32 kFlagPossible = 1, kFlagPresent = 2, kFlagProcCpuinfo = 4, kFlagApicId = 8;
constexpr u32 kCpuSetSize = 1024;           // glibc's CPU_SETSIZE: cpuinfo's default slot count
constexpr u32 kMaxModelledSlots = 1 << 16;  // far above Linux's NR_CPUS limit of 8192

// x86 shifts use the low five bits of the count; cpuinfo's masks are
// computed at run time with 32-bit shifts, so (1 << 32) - 1 is 0 there.
u32 shl(u32 v, u32 n) { return v << (n & 31); }
u32 bit_mask(u32 bits) { return shl(1, bits) - 1; }
// cpuinfo/utils.h: bits needed to number n items; 0 for one, 32 for zero.
u32 bit_length(u32 n) { return n - 1 == 0 ? 0 : 32 - static_cast<u32>(__builtin_clz(n - 1)); }

// src/linux/smallfile.c + processors.c uint32_parser: the file must be
// shorter than 32 bytes and start with a digit; what follows is ignored.
std::optional<u32> small_uint32(const std::optional<std::string>& text) {
  if (!text || text->size() >= 32 || text->empty()) return std::nullopt;
  u32 v = 0;
  size_t i = 0;
  for (; i < text->size() && (*text)[i] >= '0' && (*text)[i] <= '9'; i++)
    v = v * 10 + static_cast<u32>((*text)[i] - '0');
  if (i == 0) return std::nullopt;
  return v;
}

bool cpulist_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// src/linux/cpulist.c: comma-separated entries "N" or "A-B"; whitespace
// around an entry is dropped; an empty or malformed entry makes the parse
// fail but the entries before and after it still reach the callback;
// trailing junk after B is ignored.
template <typename F>
bool parse_cpulist(std::string_view text, F&& range) {
  bool ok = true;
  size_t start = 0;
  for (;;) {
    size_t comma = text.find(',', start);
    std::string_view e = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!e.empty() && cpulist_space(e.front())) e.remove_prefix(1);
    while (!e.empty() && cpulist_space(e.back())) e.remove_suffix(1);
    auto number = [](std::string_view s, size_t& i) {
      u32 v = 0;
      for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; i++)
        v = v * 10 + static_cast<u32>(s[i] - '0');
      return v;
    };
    size_t i = 0;
    const u32 first = number(e, i);
    if (e.empty() || i == 0) {
      ok = false;
    } else if (i == e.size()) {
      range(first, first + 1);
    } else if (e[i] != '-') {
      ok = false;
    } else {
      size_t j = ++i;
      const u32 last = number(e, j);
      if (j == i || last < first)
        ok = false;
      else
        range(first, last + 1);
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ok;
}

// cpuinfo_linux_get_max_{possible,present}_processor + 1, with its wrap:
// 0 when the list is missing or does not parse.
u32 list_slots(const std::optional<std::string>& text, u32 max_slots) {
  if (!text) return 0;
  u32 highest = 0;
  if (!parse_cpulist(*text, [&](u32, u32 end) { highest = std::max(highest, end - 1); })) return 0;
  if (highest >= max_slots) highest = max_slots - 1;
  return highest + 1;
}

// Lines as cpuinfo's multiline reader hands them over: split at '\n'; a line
// of `buffer` bytes or more is cut there and ends the file.
template <typename F>
void multiline(std::string_view text, size_t buffer, F&& line) {
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    size_t len = (end == std::string_view::npos ? text.size() : end) - pos;
    if (len >= buffer) {
      line(text.substr(pos, buffer));
      return;
    }
    line(text.substr(pos, len));
    if (end == std::string_view::npos) return;
    pos = end + 1;
  }
}

// "key<blanks>: value" as cpuinfo splits it: blanks (space, tab) before the
// colon and spaces after it are dropped; lines without ':' or with an empty
// key or value are skipped.
bool split_key_value(std::string_view line, std::string_view& key, std::string_view& value) {
  size_t colon = line.find(':');
  if (colon == std::string_view::npos) return false;
  key = line.substr(0, colon);
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.remove_suffix(1);
  value = line.substr(colon + 1);
  while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
  return !key.empty() && !value.empty();
}

// parse_processor_number: digits, stopping at the first character whose
// value minus '0' exceeds 10 (':' passes as 10, as in cpuinfo).
u32 processor_number(std::string_view v) {
  u32 n = 0;
  for (char c : v) {
    const u32 d = static_cast<u32>(static_cast<unsigned char>(c)) - '0';
    if (d > 10) break;
    n = n * 10 + d;
  }
  return n;
}

struct Slot {
  u32 flags = 0;
  u32 apic_id = 0;
  u32 linux_id = 0;
};

std::string hex(u32 v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", v);
  return buf;
}

// The APIC-ID bit fields of cpuinfo_x86_init_processor (cache detection's
// core bits, then cpuinfo_x86_detect_topology).
struct X86Topology {
  u32 thread_bits_offset = 0, thread_bits_length = 0, core_bits_offset = 0, core_bits_length = 0;
  std::string how;
};

X86Topology x86_topology(const host::CpuidDump& cpu) {
  X86Topology t;
  const host::CpuidRegs leaf0 = cpu.query(0);
  const u32 max_base = leaf0.eax;
  const u32 ext = cpu.query(0x80000000).eax;
  const u32 max_extended = ext >= 0x80000000 ? ext : 0;
  if (max_base < 1) {
    t.how = "CPUID leaf 1 unavailable: no topology bits";
    return t;
  }
  const std::string vendor = cpu.vendor();
  const host::CpuidRegs leaf1 = cpu.query(1);
  // src/x86/cache/init.c: on vendors other than AMD and Hygon, the last
  // valid leaf 4 sub-leaf's EAX[31:26] + 1 = cores per package.
  if (max_base >= 4 && vendor != "AuthenticAMD" && vendor != "HygonGenuine") {
    u32 package_cores = 0;
    for (u32 s = 0; s < 64; s++) {
      const host::CpuidRegs r = cpu.query(4, s);
      if ((r.eax & 0x1f) == 0) break;
      package_cores = 1 + (r.eax >> 26);
    }
    if (package_cores != 0) t.core_bits_length = bit_length(package_cores);
  }
  const bool htt = leaf1.edx & 0x10000000;
  if (htt) {
    const bool cmp_legacy = max_extended >= 0x80000001 && (cpu.query(0x80000001).ecx & 0x2);
    if (cmp_legacy) {
      if (max_extended >= 0x80000008) {
        const u32 cores = 1 + (cpu.query(0x80000008).ecx & 0xff);
        t.core_bits_length = bit_length(cores);
        t.how = "HTT with AMD CmpLegacy: " + std::to_string(cores) +
                " cores per package (CPUID 0x80000008 ECX[7:0]+1)";
      } else if (const u32 cores = (leaf1.ebx >> 16) & 0xff; cores != 0) {
        t.core_bits_length = bit_length(cores);
        t.how = "HTT with AMD CmpLegacy: " + std::to_string(cores) +
                " cores per package (CPUID 1 EBX[23:16])";
      } else {
        t.how = "HTT with AMD CmpLegacy, no core count";
      }
    } else if (const u32 logical = (leaf1.ebx >> 16) & 0xff; logical != 0) {
      const u32 threads_bits = bit_length(logical) - t.core_bits_length;
      t.core_bits_offset = threads_bits;
      t.thread_bits_length = threads_bits;
      t.how = "HTT: " + std::to_string(logical) +
              " addressable logical processor IDs (CPUID 1 EBX[23:16])";
    } else {
      t.how = "HTT without a logical processor count";
    }
  } else {
    t.how = "no HTT: one thread per core";
  }
  const bool x2apic = leaf1.ecx & 0x00200000;
  if (x2apic && max_base >= 0xB) {
    t.thread_bits_offset = t.thread_bits_length = t.core_bits_offset = t.core_bits_length = 0;
    u32 total_shift = 0, type = 0;
    std::string levels;
    // cpuinfo loops until a level of type 0; a dump without one ends at the
    // last recorded sub-leaf (query() answers zeros past it).
    for (u32 level = 0; level < 256; level++) {
      const host::CpuidRegs b = cpu.query(0xB, level);
      type = (b.ecx >> 8) & 0xff;
      const u32 shift = b.eax & 0x1f;
      if (type == 1) {
        t.thread_bits_offset = total_shift;
        t.thread_bits_length = shift;
      } else if (type == 2) {
        t.core_bits_offset = total_shift;
        t.core_bits_length = shift;
      }
      if (type != 0)
        levels += std::string(levels.empty() ? "" : ", ") +
                  (type == 1   ? "SMT"
                   : type == 2 ? "core"
                               : "type " + std::to_string(type)) +
                  " shift " + std::to_string(shift);
      total_shift += shift;
      if (type == 0) break;
    }
    t.how = "x2APIC leaf 0xB: " + (levels.empty() ? std::string("no levels") : levels);
  }
  return t;
}

// /proc/cpuinfo keys on ARM that mark a processor as listed
// (src/arm/linux/cpuinfo.c sets CPUINFO_ARM_LINUX_VALID_PROCESSOR with them).
bool arm_processor_key(std::string_view key) {
  return key == "Features" || key == "CPU implementer" || key == "CPU architecture" ||
         key == "CPU variant" || key == "CPU part" || key == "CPU revision";
}

}  // namespace

std::string analysed_architecture(const host::Host& host) {
  if (host.is_live_root()) {
#if defined(__x86_64__)
    return "x86_64";
#elif defined(__aarch64__)
    return "aarch64";
#else
    return "";
#endif
  }
  if (std::optional<std::string> info = host.read_file("/proc/cpuinfo", 4 << 20)) {
    if (info->find("\nvendor_id") != std::string::npos || info->starts_with("vendor_id") ||
        info->find("\nflags\t") != std::string::npos)
      return "x86_64";
    if (info->find("\nCPU implementer") != std::string::npos ||
        info->find("\nFeatures") != std::string::npos)
      return "aarch64";
  }
  // Without a telling /proc/cpuinfo: CPUID leaves exist only on x86, and a
  // tree with programs says what they were built for (e_machine).
  if (host.stat(host::kCpuidFile).kind == host::FileKind::Regular) return "x86_64";
  for (const char* program : {"/bin/sh", "/usr/bin/sh", "/usr/bin/env"}) {
    std::optional<std::string> head = host.read_file(program, 20);
    if (!head || head->size() < 20 ||
        head->compare(0, 4,
                      "\x7f"
                      "ELF") != 0 ||
        (*head)[5] != 1)
      continue;
    const u16 machine = static_cast<u16>(static_cast<unsigned char>((*head)[18]) |
                                         static_cast<unsigned char>((*head)[19]) << 8);
    if (machine == 62) return "x86_64";    // EM_X86_64
    if (machine == 183) return "aarch64";  // EM_AARCH64
    return "";
  }
  return "";
}

CpuinfoInputs read_cpuinfo_inputs(const host::Host& host, const std::string& arch) {
  CpuinfoInputs in;
  in.arch = arch;
  if (arch == "x86_64") in.cpuid = host.cpuid(&in.cpuid_missing);
  const std::string sys = "/sys/devices/system/cpu/";
  in.kernel_max = host.read_file(sys + "kernel_max", 64);
  in.possible = host.read_file(sys + "possible", 4096);
  in.present = host.read_file(sys + "present", 4096);
  in.proc_cpuinfo = host.read_file("/proc/cpuinfo", 64 << 20);
  return in;
}

CpuinfoCounts count_cpuinfo(const host::Host& host, const std::string& arch) {
  return count_cpuinfo(read_cpuinfo_inputs(host, arch));
}

CpuinfoCounts count_cpuinfo(const CpuinfoInputs& in) {
  CpuinfoCounts out;
  const std::string& arch = in.arch;
  const bool x86 = arch == "x86_64";
  if (!x86 && arch != "aarch64") {
    out.unknown = arch.empty() ? "the analysed machine's architecture is unknown"
                               : "cpuinfo's counts are not modelled on " + arch;
    return out;
  }
  if (x86 && !in.cpuid) {
    out.unknown = "no CPUID data (" +
                  (in.cpuid_missing.empty() ? std::string("none given") : in.cpuid_missing) +
                  "), so the APIC-ID bits that number SMT threads are unknown";
    return out;
  }
  const std::optional<host::CpuidDump>& cpuid = in.cpuid;
  const std::string sys = "/sys/devices/system/cpu/";
  const std::optional<u32> kernel_max = small_uint32(in.kernel_max);
  const u32 max_slots = kernel_max ? *kernel_max + 1 : kCpuSetSize;
  const std::optional<std::string>& possible_text = in.possible;
  const std::optional<std::string>& present_text = in.present;
  const u32 possible_slots = list_slots(possible_text, max_slots);
  const u32 present_slots = list_slots(present_text, max_slots);
  u32 slots = max_slots, valid_mask = 0;
  if (present_slots != 0) {
    slots = std::min(slots, present_slots);
    valid_mask = kFlagPresent;
  } else if (x86) {
    valid_mask = kFlagProcCpuinfo;
  }
  if (possible_slots != 0) {
    slots = std::min(slots, possible_slots);
    valid_mask |= kFlagPossible;
  }
  if (!x86 && valid_mask == 0) {
    out.initialised = false;
    out.steps.push_back("neither " + sys +
                        "possible nor present parses: cpuinfo_initialize() fails");
    return out;
  }
  if (slots > kMaxModelledSlots) {
    // Kernels allow at most 8192 CPUs; a larger kernel_max with no list
    // that cuts it is damage, and whether cpuinfo's calloc of that many
    // slots succeeds depends on the machine's memory.
    out.unknown = "kernel_max " + std::to_string(max_slots - 1) +
                  " with no usable possible/present list: cpuinfo would allocate " +
                  std::to_string(slots) + " processor slots, an outcome not modelled";
    return out;
  }
  std::vector<Slot> slot(slots);
  auto mark = [&](const std::optional<std::string>& text, u32 flag) {
    parse_cpulist(*text, [&](u32 first, u32 end) {
      for (u32 c = first; c < end && c < slots; c++) slot[c].flags |= flag;
    });
  };
  if (possible_slots != 0) mark(possible_text, kFlagPossible);
  if (present_slots != 0) mark(present_text, kFlagPresent);
  out.steps.push_back(
      std::to_string(slots) + " processor slots (kernel_max " +
      (kernel_max ? std::to_string(*kernel_max) : std::string("unreadable")) + ", possible " +
      (possible_slots ? std::string(trim(*possible_text)) : std::string("unparsed")) +
      ", present " + (present_slots ? std::string(trim(*present_text)) : std::string("unparsed")) +
      ")");

  const std::optional<std::string>& info = in.proc_cpuinfo;
  if (!info) {
    out.initialised = false;
    out.steps.push_back("/proc/cpuinfo cannot be read: cpuinfo_initialize() fails");
    return out;
  }
  u32 index = 0;
  bool cut = false;
  multiline(*info, x86 ? 2048 : 1024, [&](std::string_view line) {
    if (line.size() >= (x86 ? 2048u : 1024u)) cut = true;
    std::string_view key, value;
    if (!split_key_value(line, key, value)) return;
    Slot* s = index < slots ? &slot[index] : nullptr;
    if (key == "processor") {
      index = processor_number(value);
      if (index < slots) slot[index].flags |= kFlagProcCpuinfo;
    } else if (x86 && key == "apicid") {
      u32 v = 0;
      for (char c : value) {
        const u32 d = static_cast<u32>(static_cast<unsigned char>(c)) - '0';
        if (d >= 10) return;  // not a number: ignored, the earlier value stays
        v = v * 10 + d;
      }
      if (s) s->apic_id = v, s->flags |= kFlagApicId;
    } else if (!x86 && s && arm_processor_key(key)) {
      s->flags |= kFlagProcCpuinfo;
    }
  });
  if (cut)
    out.steps.push_back(std::string("/proc/cpuinfo has a line of ") + (x86 ? "2048" : "1024") +
                        " bytes or more: cpuinfo stops reading there");

  std::vector<Slot> valid;
  u32 unlisted = 0;
  for (u32 i = 0; i < slots; i++) {
    if ((slot[i].flags & valid_mask) != valid_mask) continue;
    // ARM, cpuinfo since 20bd32c: listed in /proc/cpuinfo too.
    if (!x86 && !(slot[i].flags & kFlagProcCpuinfo)) {
      unlisted++;
      continue;
    }
    slot[i].linux_id = i;
    valid.push_back(slot[i]);
  }
  out.initialised = true;
  out.processors = static_cast<u32>(valid.size());
  if (!x86) {
    out.cores = out.processors;
    out.arm_unlisted_processors = *out.processors + unlisted;
    out.steps.push_back(
        std::to_string(*out.processors) + " processors listed in /proc/cpuinfo" +
        (unlisted ? " and " + std::to_string(unlisted) + " present but unlisted (offline)"
                  : std::string()) +
        ": cpuinfo on ARM counts each processor as a core");
    return out;
  }

  const X86Topology t = x86_topology(*cpuid);
  out.steps.push_back("CPUID (" + cpuid->vendor() + ", CPU " + std::to_string(cpuid->cpu) +
                      "): " + t.how);
  const u32 core_mask = ~shl(bit_mask(t.thread_bits_length), t.thread_bits_offset);
  std::stable_sort(valid.begin(), valid.end(),
                   [](const Slot& a, const Slot& b) { return a.apic_id < b.apic_id; });
  u32 cores = 0, last = ~u32{0}, missing_apic = 0;
  std::string apics;
  for (const Slot& s : valid) {
    if (!(s.flags & kFlagApicId)) missing_apic++;
    const u32 core = s.apic_id & core_mask;
    if (core != last) cores++, last = core;
    if (apics.size() < 120) apics += (apics.empty() ? "" : ",") + std::to_string(s.apic_id);
  }
  out.cores = cores;
  out.steps.push_back("APIC IDs " + (apics.empty() ? std::string("none") : apics) + "; SMT bits " +
                      std::to_string(t.thread_bits_length) + " at " +
                      std::to_string(t.thread_bits_offset) + " (core mask " + hex(core_mask) + ")");
  if (missing_apic)
    out.steps.push_back(
        std::to_string(missing_apic) +
        " valid processor(s) without an apicid in /proc/cpuinfo count as APIC ID 0");
  return out;
}

}  // namespace mld::hostfacts
