// ld-cache-fuzz.cc — LdCache::parse on arbitrary bytes, then lookup() of
// every key under several architectures, glibc releases and CPUs. Malformed
// input may only end in ParseError; every answer must lie inside the input.
//
// Corpus (test/fuzz/corpus/ld-cache/): caches the real ldconfig 2.36 wrote
// with `ldconfig -X -i -r ROOT -c new|compat|old -C /etc/x.cache` for a tree
// of a few empty libraries (glibc-hwcaps x86-64-v2/v3, a tls/ legacy
// directory in the new one, a 32-bit library, one soname in two
// directories), some of them cut short or with one header field changed,
// and the inputs libFuzzer found interesting.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "loader/loader.h"

using namespace mld;
using mld::loader::GlibcVersion;
using mld::loader::LdCache;
using mld::loader::LdCacheCpu;
using mld::loader::LdCacheEntry;

namespace {

void check_inside(std::string_view s, const uint8_t* data, size_t size) {
  const char* begin = reinterpret_cast<const char*>(data);
  if (s.data() < begin || s.data() + s.size() > begin + size) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> kLists[] = {
      {}, {"x86-64-v4", "x86-64-v3", "x86-64-v2"}, {"x86-64-v2"}, {"x86-64-v3", "", "x86-64-v3"}};
  static const i32 kFlags[] = {0x0303, 0x0003, 0x0a03};
  static const GlibcVersion kGlibc[] = {{2, 32}, {2, 36}, {2, 40}};
  static const LdCacheCpu kCpu{3, (1u << 1) | (1u << 2), "haswell"};
  try {
    LdCache cache = LdCache::parse(ByteView(data, size));
    size_t i = 0;
    for (const LdCacheEntry& e : cache.entries()) {
      check_inside(e.key, data, size);
      check_inside(e.value, data, size);
      if (e.hwcaps_subdir) check_inside(*e.hwcaps_subdir, data, size);
      for (i32 flags : kFlags) {
        for (const GlibcVersion& g : kGlibc) {
          const std::vector<std::string>& list = kLists[i++ % 4];
          std::optional<std::string_view> r =
              cache.lookup(e.key, list, flags, g, (i & 1) ? &kCpu : nullptr);
          if (r) check_inside(*r, data, size);
        }
      }
    }
    if (cache.generator()) check_inside(*cache.generator(), data, size);
    for (const char* absent : {"", "libc.so.6", "libfoo.so.1", "lib9999999999999.so.1"})
      cache.lookup(absent, kLists[1], 0x0303, {2, 36});
  } catch (const ParseError&) {
  }
  return 0;
}
