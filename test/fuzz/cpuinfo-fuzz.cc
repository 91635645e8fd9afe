// cpuinfo-fuzz.cc — the CPUID dump parser and the model of PyTorch's
// cpuinfo counts on arbitrary bytes. The first byte picks what the rest is:
//   0  a `cpuid -r` dump: what parses must survive a round trip;
//   1  /proc/cpuinfo of an x86 machine (fixed CPUID, lists and kernel_max);
//   2  /proc/cpuinfo of an ARM64 machine;
//   3  kernel_max, possible, present and /proc/cpuinfo, NUL-separated (x86);
//   4  a `cpuid -r` dump answering the topology leaves of a fixed machine.
// Nothing may crash or loop; cpuinfo never counts more cores than
// processors.
//
// Corpus (test/fuzz/corpus/cpuinfo/): real dumps and /proc/cpuinfo excerpts
// of the CPU fixtures, and damaged near misses.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "hostfacts/hostfacts.h"

using namespace mld;

namespace {

const char kDump[] =
    "CPU 0:\n"
    "   0x00000000 0x00: eax=0x00000010 ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
    "   0x00000001 0x00: eax=0x00a10f11 ebx=0x00020800 ecx=0xfef83203 edx=0x178bfbff\n"
    "   0x0000000b 0x00: eax=0x00000001 ebx=0x00000002 ecx=0x00000100 edx=0x00000000\n"
    "   0x0000000b 0x01: eax=0x00000005 ebx=0x00000004 ecx=0x00000201 edx=0x00000000\n"
    "   0x0000000b 0x02: eax=0x00000000 ebx=0x00000000 ecx=0x00000002 edx=0x00000000\n"
    "   0x80000000 0x00: eax=0x80000028 ebx=0x68747541 ecx=0x444d4163 edx=0x69746e65\n"
    "   0x80000001 0x00: eax=0x00a10f11 ebx=0x40000000 ecx=0x444031fb edx=0x25d3fbff\n"
    "   0x80000008 0x00: eax=0x00003030 ebx=0x791ef257 ecx=0x00007003 edx=0x00000000\n";

const char kProcCpuinfo[] =
    "processor\t: 0\nvendor_id\t: AuthenticAMD\napicid\t\t: 0\n\n"
    "processor\t: 1\nvendor_id\t: AuthenticAMD\napicid\t\t: 1\n\n"
    "processor\t: 2\nvendor_id\t: AuthenticAMD\napicid\t\t: 2\n\n"
    "processor\t: 3\nvendor_id\t: AuthenticAMD\napicid\t\t: 3\n";

void check_counts(const hostfacts::CpuinfoCounts& c) {
  if (c.cores && c.processors && *c.cores > *c.processors) abort();
  if (!c.unknown.empty() && (c.cores || c.processors)) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string error;
  hostfacts::CpuinfoInputs in;
  in.arch = "x86_64";
  in.cpuid = host::parse_cpuid_dump(kDump, &error);
  in.kernel_max = "7\n";
  in.possible = "0-3\n";
  in.present = "0-3\n";
  in.proc_cpuinfo = kProcCpuinfo;
  switch (data[0] % 5) {
    case 0: {
      std::optional<host::CpuidDump> d = host::parse_cpuid_dump(text, &error);
      if (!d) break;
      std::optional<host::CpuidDump> again =
          host::parse_cpuid_dump(host::format_cpuid_dump(*d), &error);
      if (!again || again->leaves.size() != d->leaves.size() || again->cpu != d->cpu) abort();
      break;
    }
    case 1:
      in.proc_cpuinfo = std::string(text);
      check_counts(hostfacts::count_cpuinfo(in));
      break;
    case 2:
      in.arch = "aarch64";
      in.cpuid.reset();
      in.proc_cpuinfo = std::string(text);
      check_counts(hostfacts::count_cpuinfo(in));
      break;
    case 3: {
      std::optional<std::string>* parts[] = {&in.kernel_max, &in.possible, &in.present,
                                             &in.proc_cpuinfo};
      size_t start = 0;
      for (size_t i = 0; i < 4; i++) {
        size_t nul = i < 3 ? text.find('\0', start) : std::string_view::npos;
        if (nul == std::string_view::npos && i < 3) {
          for (size_t j = i; j < 4; j++) parts[j]->reset();
          break;
        }
        *parts[i] = std::string(text.substr(
            start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
        start = nul + 1;
      }
      check_counts(hostfacts::count_cpuinfo(in));
      break;
    }
    case 4:
      in.cpuid = host::parse_cpuid_dump(text, &error);
      check_counts(hostfacts::count_cpuinfo(in));
      break;
  }
  return 0;
}
