// ld-cache.cc — /etc/ld.so.cache as glibc's ld.so reads it, and the path
// _dl_load_cache_lookup takes from it for a DT_NEEDED name.
//
// The layouts come from sysdeps/generic/dl-cache.h; the reader's checks and
// the lookup from elf/dl-cache.c (_dl_load_cache_lookup, search_cache,
// _dl_cache_libcmp, glibc_hwcaps_priorities_init); the order the writer sorts
// entries in from elf/cache.c (compare, save_cache). Three layouts exist:
//
//   old     "ld.so-1.7.0", nlibs, 12-byte entries; string offsets are
//           relative to the end of the entry table.
//   new     "glibc-ld.so.cache" "1.1", a 48-byte header, 24-byte entries with
//           a 64-bit hwcap word; string offsets are relative to the header;
//           an extension directory (generator string, glibc-hwcaps names).
//   compat  an old table followed, at the next 8-byte boundary, by a whole
//           new-format block; ld.so then reads only the new block.
//
// Where glibc merely skips a bad entry at lookup time, this parser refuses
// the whole file with a ParseError: a diagnostic tool should say that the
// cache is corrupt rather than guess around it. Everything ld.so would use is
// checked here once, so lookup() never touches unchecked bytes.
//
// Behaviour the code preserves on purpose (each verified against the real
// ldconfig and ld.so of glibc 2.36 by test/unit/ld-cache-test.cc):
//   * glibc-hwcaps names are read at file offsets although ldconfig writes
//     them relative to the new header: in a compat cache they name garbage,
//     so ld.so ignores every glibc-hwcaps entry there.
//   * the old format keeps glibc-hwcaps entries as plain entries, so an
//     old-only cache hands out glibc-hwcaps/x86-64-v2/... (the first one).
//   * with the old format and a flags check that accepts two values (i386:
//     1 or 3), the last acceptable entry before the first exact match wins.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "loader/loader.h"

namespace mld::loader {
namespace {

constexpr std::string_view kOldMagic = "ld.so-1.7.0";           // CACHEMAGIC
constexpr std::string_view kNewMagic = "glibc-ld.so.cache1.1";  // CACHEMAGIC_VERSION_NEW
constexpr u64 kOldHeaderSize = 16;                              // sizeof (struct cache_file)
constexpr u64 kOldEntrySize = 12;                               // sizeof (struct file_entry)
constexpr u64 kNewHeaderSize = 48;                              // sizeof (struct cache_file_new)
constexpr u64 kNewEntrySize = 24;                               // sizeof (struct file_entry_new)
constexpr u64 kNewAlign = 8;  // __alignof__ (struct cache_file_new)

// struct cache_file_new field offsets.
constexpr u64 kNewNlibs = 20;
constexpr u64 kNewFlags = 28;
constexpr u64 kNewExtensionOffset = 32;

// cache_file_new_flags_endian_*.
constexpr u8 kEndianMask = 3;
constexpr u8 kEndianLittle = 2;
constexpr u8 kEndianBig = 3;

constexpr u32 kExtensionMagic = 0xEAA42174;  // cache_extension_magic
constexpr u32 kTagGenerator = 0;             // cache_extension_tag_generator
constexpr u32 kTagGlibcHwcaps = 1;           // cache_extension_tag_glibc_hwcaps
constexpr u64 kExtensionHeaderSize = 8;      // struct cache_extension
constexpr u64 kExtensionSectionSize = 16;    // struct cache_extension_section

constexpr u64 kHwcapExtension = 1ULL << 62;    // DL_CACHE_HWCAP_EXTENSION
constexpr u64 kIsaLevelMask = (1u << 10) - 1;  // DL_CACHE_HWCAP_ISA_LEVEL_MASK
constexpr u64 kHwcapTlsMask = 1ULL << 63;      // _DL_HWCAP_TLS_MASK

constexpr bool kLittle = false;  // ByteView's big_endian argument

[[noreturn]] void fail(const std::string& what, u64 offset) {
  throw ParseError("ld.so.cache: " + what, offset);
}

// dl_cache_hwcap_extension: only bit 62 set in the upper half, ignoring the
// ISA-level bits.
bool is_hwcap_extension(u64 hwcap) {
  return ((hwcap >> 32) & ~kIsaLevelMask) == (kHwcapExtension >> 32);
}

bool has_magic(ByteView bytes, u64 off, std::string_view magic) {
  return bytes.contains(off, magic.size()) &&
         std::memcmp(bytes.data() + off, magic.data(), magic.size()) == 0;
}

// Finds the NUL-terminated strings of the cache. Each string is looked up
// with memchr from its offset, which is all a well-formed cache ever needs
// (the offsets point at short, distinct names and paths). A hostile cache can
// instead aim many offsets into one long unterminated run, which would make
// those scans quadratic; so the bytes scanned are charged against a budget of
// a few times the file size, and past it every NUL of the file is indexed in
// one pass and each further string costs a binary search.
class StringFinder {
 public:
  static std::string label(const char* what, u64 index, const char* field) {
    std::string s = std::string(what) + " " + std::to_string(index);
    if (*field) s += std::string(" ") + field;
    return s;
  }

  explicit StringFinder(ByteView bytes) : bytes_(bytes), budget_(4 * bytes.size() + 4096) {}

  // The NUL-terminated string at file offset `table_start + off`, where the
  // table runs to the end of the file. Throws a ParseError naming the
  // string as "<what> <index> <field>" ("entry 3 key").
  std::string_view string_at(u64 table_start, u64 off, const char* what, u64 index,
                             const char* field) {
    std::optional<u64> at = checked_add(table_start, off);
    if (!at || *at >= bytes_.size())
      fail(label(what, index, field) + " offset " + std::to_string(off) +
               " is past the end of the file",
           at.value_or(bytes_.size()));
    const char* start = reinterpret_cast<const char*>(bytes_.data() + *at);
    u64 end;
    if (nuls_.empty() && budget_ > 0) {
      const void* nul = std::memchr(start, 0, static_cast<size_t>(bytes_.size() - *at));
      end = nul ? static_cast<u64>(static_cast<const u8*>(nul) - bytes_.data()) : bytes_.size();
      u64 scanned = end - *at + 1;
      budget_ = scanned >= budget_ ? 0 : budget_ - scanned;
    } else {
      if (nuls_.empty()) index_nuls();
      std::vector<u64>::const_iterator nul = std::lower_bound(nuls_.begin(), nuls_.end(), *at);
      end = nul == nuls_.end() ? bytes_.size() : *nul;
    }
    if (end == bytes_.size())
      fail(label(what, index, field) + " at offset " + std::to_string(off) +
               " is not NUL-terminated",
           *at);
    return std::string_view(start, end - *at);
  }

 private:
  void index_nuls() {
    const u8* p = bytes_.data();
    for (u64 i = 0; i < bytes_.size(); i++)
      if (p[i] == 0) nuls_.push_back(i);
    nuls_.push_back(bytes_.size());  // sentinel: never empty once built
  }

  ByteView bytes_;
  u64 budget_;             // bytes memchr may still scan before indexing
  std::vector<u64> nuls_;  // every NUL offset, then the file size
};

// What search_cache and _dl_cache_check_flags depend on, per architecture,
// chosen by _DL_CACHE_DEFAULT_ID (sysdeps/unix/sysv/linux/*/dl-cache.h,
// sysdeps/x86/dl-procinfo.h, sysdeps/x86/dl-hwcap.h).
struct ArchTraits {
  bool x86 = false;          // sysdeps/x86/dl-isa-level.h applies
  bool signed_char = false;  // `char` of the ABI (_dl_cache_libcmp)
  bool two_flags = false;    // generic check: flags == 1 || == DEFAULT_ID
  u64 platform_mask = 0;     // _DL_HWCAP_PLATFORM
  u64 default_hwcap = 0;     // GLRO(dl_hwcap) & HWCAP_IMPORTANT, baseline CPU
  std::string_view default_platform;
  // _dl_string_platform: name -> bit number.
  std::pair<std::string_view, int> platforms[2];
};

ArchTraits arch_traits(i32 default_flags) {
  ArchTraits a;
  switch (default_flags) {
    case 0x0303:  // x86_64 (FLAG_X8664_LIB64 | FLAG_ELF_LIBC6)
    case 0x0803:  // x32: still __x86_64__ for cpu-features.c
      // HWCAP_PLATFORMS_COUNT 4 from _DL_FIRST_PLATFORM 48, of which
      // x86_64 knows "haswell" (50) and "xeon_phi" (51); dl_hwcap always
      // has HWCAP_X86_64 (bit 1).
      a.x86 = true;
      a.signed_char = true;
      a.platform_mask = 0xFULL << 48;
      a.default_hwcap = 1u << 1;
      a.platforms[0] = {"haswell", 50};
      a.platforms[1] = {"xeon_phi", 51};
      break;
    case 0x0003:  // the generic _DL_CACHE_DEFAULT_ID: i386 (and 32-bit arm)
      // i386: platforms "i586" (48) and "i686" (49), hwcap SSE2 (bit 0).
      a.x86 = true;
      a.signed_char = true;
      a.two_flags = true;
      a.platform_mask = 0x3ULL << 48;
      a.default_hwcap = 1u << 0;
      a.default_platform = "i686";
      a.platforms[0] = {"i586", 48};
      a.platforms[1] = {"i686", 49};
      break;
    default:  // aarch64 (0x0a03) and the rest: unsigned char, no platforms
      break;
  }
  return a;
}

// One byte of a C string as the ABI's `char` sees it; 0 past the end.
inline int char_at(std::string_view s, size_t i, bool signed_char) {
  if (i >= s.size()) return 0;
  return signed_char ? static_cast<int>(static_cast<signed char>(s[i]))
                     : static_cast<int>(static_cast<unsigned char>(s[i]));
}

inline bool is_digit(int c) { return c >= '0' && c <= '9'; }

// _dl_cache_libcmp: like strcmp, but runs of digits compare as numbers
// ("libfoo.so.10" after "libfoo.so.9"), and a digit sorts after any other
// character. The int arithmetic wraps as it does on the hardware.
int cache_libcmp(std::string_view p1, std::string_view p2, bool signed_char) {
  size_t i = 0, j = 0;
  while (char_at(p1, i, signed_char) != 0) {
    int c1 = char_at(p1, i, signed_char);
    int c2 = char_at(p2, j, signed_char);
    if (is_digit(c1)) {
      if (!is_digit(c2)) return 1;
      u32 val1 = static_cast<u32>(c1 - '0');
      u32 val2 = static_cast<u32>(c2 - '0');
      ++i;
      ++j;
      while (is_digit(char_at(p1, i, signed_char)))
        val1 = val1 * 10 + static_cast<u32>(char_at(p1, i++, signed_char) - '0');
      while (is_digit(char_at(p2, j, signed_char)))
        val2 = val2 * 10 + static_cast<u32>(char_at(p2, j++, signed_char) - '0');
      if (val1 != val2) return static_cast<i32>(val1 - val2);
    } else if (is_digit(c2)) {
      return -1;
    } else if (c1 != c2) {
      return c1 - c2;
    } else {
      ++i;
      ++j;
    }
  }
  return char_at(p1, i, signed_char) - char_at(p2, j, signed_char);
}

// glibc_hwcaps_priorities_init: merge the cache's names (which ldconfig
// sorts by strcmp) with the loader's list sorted by name. Element i is the
// priority of cache name i: 1 + its position in `subdirs`, 0 = not active.
// The merge is reproduced step by step, so an unsorted section in a
// hand-made cache gives the same (partly zero) answers as in glibc.
std::vector<u32> hwcaps_priorities(const std::vector<std::string_view>& names,
                                   const std::vector<std::string>& subdirs) {
  std::vector<std::pair<std::string_view, u32>> right;
  for (const std::string& s : subdirs) {
    // _dl_hwcaps_split skips empty segments, which get no priority number.
    if (!s.empty()) right.emplace_back(s, static_cast<u32>(right.size() + 1));
  }
  // sort_priorities_by_name: a stable insertion sort by (memcmp, length).
  std::stable_sort(right.begin(), right.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<u32> result(names.size(), 0);
  size_t l = 0, r = 0;
  while (l < names.size() && r < right.size()) {
    int cmp = names[l].compare(right[r].first);
    if (cmp == 0) {
      result[l++] = right[r++].second;
    } else if (cmp < 0) {
      result[l++] = 0;
    } else {
      ++r;
    }
  }
  return result;
}

// The priority glibc_hwcaps_priorities_init gives `name` when the cache's
// names are strictly sorted: 1 + its first place among the non-empty names.
u32 first_priority(std::string_view name, const std::vector<std::string>& subdirs) {
  u32 n = 0;
  for (const std::string& s : subdirs) {
    if (s.empty()) continue;
    ++n;
    if (s == name) return n;
  }
  return 0;
}

// cpu_features->isa_1 for an ISA level (1 baseline .. 4 x86-64-v4).
u32 isa_1_of_level(int level) {
  if (level <= 0) return 0;
  if (level >= 32) return ~0u;
  return (1u << level) - 1;
}

// The highest "x86-64-vN" in the glibc-hwcaps list, 1 when none.
int level_from_subdirs(const std::vector<std::string>& subdirs) {
  int level = 1;
  for (const std::string& s : subdirs) {
    if (s.size() == 9 && s.compare(0, 8, "x86-64-v") == 0 && s[8] >= '2' && s[8] <= '4')
      level = std::max(level, s[8] - '0');
  }
  return level;
}

}  // namespace

std::optional<GlibcVersion> parse_glibc_version(std::string_view s) {
  size_t i = 0;
  // One run of 1..9 digits (no sign, no overflow).
  auto number = [&](int* out) {
    size_t start = i;
    long v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (i - start >= 9) return false;
      v = v * 10 + (s[i] - '0');
      ++i;
    }
    if (i == start) return false;
    *out = static_cast<int>(v);
    return true;
  };
  GlibcVersion g;
  if (!number(&g.major) || i >= s.size() || s[i] != '.') return std::nullopt;
  ++i;
  if (!number(&g.minor)) return std::nullopt;
  // Further components ("2.36.9000" on development snapshots) are ignored.
  while (i < s.size()) {
    if (s[i] != '.') return std::nullopt;
    ++i;
    int ignored = 0;
    if (!number(&ignored)) return std::nullopt;
  }
  return g;
}

LdCache LdCache::parse(ByteView bytes) {
  LdCache c;
  const u64 size = bytes.size();
  StringFinder strings(bytes);
  auto string_at = [&](u64 table_start, u64 off, const char* what, u64 index, const char* field) {
    return strings.string_at(table_start, off, what, index, field);
  };

  // The new-format block at `base` (0, or the compat offset). Its string
  // offsets are relative to `base`; the extension directory and the
  // glibc-hwcaps name offsets are relative to the start of the file (glibc
  // adds them to `cache`, not `cache_new`).
  auto parse_new = [&](u64 base) {
    u32 nlibs = bytes.u32_at(base + kNewNlibs, kLittle);
    if ((size - base - kNewHeaderSize) / kNewEntrySize < nlibs)
      fail("nlibs " + std::to_string(nlibs) + " does not fit in the file (" + std::to_string(size) +
               " bytes)",
           base + kNewNlibs);
    // cache_file_new_matches_endian: 0 means unknown; otherwise the two
    // low bits must say little-endian. ld.so ignores the file if not.
    u8 flags = bytes.u8_at(base + kNewFlags);
    if (flags != 0 && (flags & kEndianMask) != kEndianLittle) {
      u8 e = flags & kEndianMask;
      fail(e == kEndianBig ? std::string("the cache is big-endian; ld.so of a little-endian "
                                         "machine ignores it")
                           : "endianness flags 0x" + to_hex(bytes.sub(base + kNewFlags, 1)) +
                                 " mark the cache invalid; ld.so ignores it",
           base + kNewFlags);
    }

    // The extension directory (cache_extension_load).
    std::optional<std::pair<u64, u64>> hwcaps_section;  // offset, size
    u64 ext = bytes.u32_at(base + kNewExtensionOffset, kLittle);
    if (ext != 0) {
      if (ext % 4 != 0)
        fail("extension offset " + std::to_string(ext) + " is not a multiple of 4",
             base + kNewExtensionOffset);
      if (!bytes.contains(ext, kExtensionHeaderSize))
        fail("extension offset " + std::to_string(ext) + " is past the end of the file",
             base + kNewExtensionOffset);
      if (bytes.u32_at(ext, kLittle) != kExtensionMagic) fail("bad extension directory magic", ext);
      u64 count = bytes.u32_at(ext + 4, kLittle);
      if (!bytes.contains(ext + kExtensionHeaderSize, count * kExtensionSectionSize))
        fail("extension directory of " + std::to_string(count) +
                 " sections is past the end of the file",
             ext + 4);
      for (u64 i = 0; i < count; i++) {
        u64 at = ext + kExtensionHeaderSize + i * kExtensionSectionSize;
        u32 tag = bytes.u32_at(at, kLittle);
        u64 off = bytes.u32_at(at + 8, kLittle);
        u64 len = bytes.u32_at(at + 12, kLittle);
        if (!bytes.contains(off, len))
          fail("extension section " + std::to_string(i) + " (offset " + std::to_string(off) +
                   ", size " + std::to_string(len) + ") is past the end of the file",
               at + 8);
        // Unknown tags are skipped; a repeated tag replaces the earlier one.
        if (tag == kTagGenerator) {
          c.generator_ = bytes.sub(off, len).as_string_view();
        } else if (tag == kTagGlibcHwcaps) {
          hwcaps_section = std::make_pair(off, len);
        }
      }
      // cache_extension_verify drops an empty, misaligned or ragged
      // glibc-hwcaps section (ld.so then treats the entries as unusable).
      if (hwcaps_section && (hwcaps_section->second == 0 || hwcaps_section->first % 4 != 0 ||
                             hwcaps_section->second % 4 != 0))
        hwcaps_section.reset();
    }
    if (hwcaps_section) {
      for (u64 i = 0; i < hwcaps_section->second / 4; i++) {
        u64 at = hwcaps_section->first + 4 * i;
        u64 name = bytes.u32_at(at, kLittle);
        c.hwcaps_names_.push_back(string_at(0, name, "glibc-hwcaps name", i, ""));
        if (i > 0 && !(c.hwcaps_names_[i - 1] < c.hwcaps_names_[i])) c.hwcaps_names_sorted_ = false;
      }
    }

    c.entries_.reserve(nlibs);
    for (u64 i = 0; i < nlibs; i++) {
      u64 at = base + kNewHeaderSize + i * kNewEntrySize;
      LdCacheEntry e;
      e.flags = static_cast<i32>(bytes.u32_at(at, kLittle));
      e.key = string_at(base, bytes.u32_at(at + 4, kLittle), "entry", i, "key");
      e.value = string_at(base, bytes.u32_at(at + 8, kLittle), "entry", i, "value");
      e.hwcap = bytes.u64_at(at + 16, kLittle);
      if (is_hwcap_extension(e.hwcap)) {
        u32 index = static_cast<u32>(e.hwcap);
        if (index < c.hwcaps_names_.size()) e.hwcaps_subdir = c.hwcaps_names_[index];
      }
      c.entries_.push_back(e);
    }
  };

  // _dl_load_cache_lookup tries the new format first, then the old one
  // (with a new block inside it). Both demand more bytes than the header.
  if (size > kNewHeaderSize && has_magic(bytes, 0, kNewMagic) &&
      (size - kNewHeaderSize) / kNewEntrySize >= bytes.u32_at(kNewNlibs, kLittle)) {
    c.format_ = LdCacheFormat::New;
    parse_new(0);
    return c;
  }
  if (size > kOldHeaderSize && has_magic(bytes, 0, kOldMagic)) {
    u32 nlibs = bytes.u32_at(12, kLittle);
    if ((size - kOldHeaderSize) / kOldEntrySize < nlibs)
      fail("nlibs " + std::to_string(nlibs) + " does not fit in the file (" + std::to_string(size) +
               " bytes)",
           12);
    u64 table_end = kOldHeaderSize + u64{nlibs} * kOldEntrySize;
    u64 new_base = (table_end + kNewAlign - 1) & ~(kNewAlign - 1);  // ALIGN_CACHE
    if (size >= new_base + kNewHeaderSize && has_magic(bytes, new_base, kNewMagic)) {
      c.format_ = LdCacheFormat::Compat;
      parse_new(new_base);
      return c;
    }
    c.format_ = LdCacheFormat::Old;
    c.entries_.reserve(nlibs);
    for (u64 i = 0; i < nlibs; i++) {
      u64 at = kOldHeaderSize + i * kOldEntrySize;
      LdCacheEntry e;
      e.flags = static_cast<i32>(bytes.u32_at(at, kLittle));
      e.key = string_at(table_end, bytes.u32_at(at + 4, kLittle), "entry", i, "key");
      e.value = string_at(table_end, bytes.u32_at(at + 8, kLittle), "entry", i, "value");
      c.entries_.push_back(e);
    }
    return c;
  }
  if (has_magic(bytes, 0, kNewMagic)) {
    if (size <= kNewHeaderSize)
      fail("file of " + std::to_string(size) + " bytes is too small for the header", 0);
    fail("nlibs " + std::to_string(bytes.u32_at(kNewNlibs, kLittle)) +
             " does not fit in the file (" + std::to_string(size) + " bytes)",
         kNewNlibs);
  }
  if (has_magic(bytes, 0, kOldMagic))
    fail("file of " + std::to_string(size) + " bytes is too small for the header", 0);
  fail("bad magic: not an ld.so.cache file", 0);
}

std::optional<std::string_view> LdCache::lookup(std::string_view name,
                                                const std::vector<std::string>& hwcaps_subdirs,
                                                i32 default_flags, GlibcVersion glibc,
                                                const LdCacheCpu* cpu) const {
  const ArchTraits arch = arch_traits(default_flags);
  // The name is a C string in glibc.
  if (size_t nul = name.find('\0'); nul != std::string_view::npos) name = name.substr(0, nul);

  const bool new_entries = format_ != LdCacheFormat::Old;  // entry_size >= 24
  const bool knows_named = glibc >= GlibcVersion{2, 33};   // 600d9e0c87
  const bool skips_legacy = glibc >= GlibcVersion{2, 40};  // c5aa5fd40a

  // The legacy filter: hwcap_exclude and the platform bit.
  const u64 hwcap = cpu ? cpu->hwcap : arch.default_hwcap;
  const std::string_view platform_name =
      cpu ? std::string_view(cpu->platform) : arch.default_platform;
  u64 platform = ~0ULL;  // _dl_string_platform found nothing: (uint64_t) -1
  for (const std::pair<std::string_view, int>& p : arch.platforms) {
    if (!p.first.empty() && p.first == platform_name) platform = 1ULL << p.second;
  }
  const u64 hwcap_exclude = ~(hwcap | arch.platform_mask | kHwcapTlsMask);

  auto check_flags = [&](i32 flags) {
    return flags == default_flags || (arch.two_flags && flags == 1);
  };
  auto cmp = [&](std::string_view key) { return cache_libcmp(name, key, arch.signed_char); };

  // Computed on the first glibc-hwcaps entry, as glibc does.
  std::vector<u32> priorities;
  bool have_priorities = false;
  std::optional<u32> isa_1;

  // search_cache: the table is sorted in descending _dl_cache_libcmp order.
  i64 left = 0;
  i64 right = static_cast<i64>(entries_.size()) - 1;
  const std::string_view* best = nullptr;
  u32 best_priority = 0;
  while (left <= right) {
    i64 middle = (left + right) / 2;
    int cmpres = cmp(entries_[middle].key);
    if (cmpres == 0) {
      // Found one; back up to the first entry with this name, then walk
      // forward (never past `right`, as glibc).
      left = middle;
      while (middle > 0 && cmp(entries_[middle - 1].key) == 0) --middle;
      do {
        const LdCacheEntry& lib = entries_[middle];
        if (middle > left && cmp(lib.key) != 0) break;
        if (!check_flags(lib.flags)) continue;
        bool named_hwcap = false;
        if (new_entries) {
          named_hwcap = knows_named && is_hwcap_extension(lib.hwcap);
          if (named_hwcap && arch.x86) {
            // dl_cache_hwcap_isa_level_compatible; the shift count is
            // masked to 5 bits like the x86 shl instruction.
            if (!isa_1)
              isa_1 = isa_1_of_level(cpu && cpu->x86_isa_level > 0
                                         ? cpu->x86_isa_level
                                         : level_from_subdirs(hwcaps_subdirs));
            u32 level = static_cast<u32>((lib.hwcap >> 32) & kIsaLevelMask);
            u32 bit = 1u << (level & 31);
            if ((bit & *isa_1) != bit) continue;
          }
          // glibc-hwcaps entries come first; a plain entry after a match
          // ends the search.
          if (!named_hwcap && best != nullptr) break;
          if (skips_legacy) {
            if (!named_hwcap && lib.hwcap != 0) continue;
          } else {
            if ((lib.hwcap & hwcap_exclude) && !named_hwcap) continue;
            if (arch.platform_mask != 0 && (lib.hwcap & arch.platform_mask) != 0 &&
                (lib.hwcap & arch.platform_mask) != platform)
              continue;
          }
          if (named_hwcap) {
            u32 index = static_cast<u32>(lib.hwcap);
            u32 entry_priority = 0;
            if (hwcaps_names_sorted_) {
              // The merge then gives each name its first place in the list.
              if (index < hwcaps_names_.size())
                entry_priority = first_priority(hwcaps_names_[index], hwcaps_subdirs);
            } else {
              // Only a hand-made cache gets here; the full merge costs
              // O(names) once per lookup that meets such an entry.
              if (!have_priorities) {
                priorities = hwcaps_priorities(hwcaps_names_, hwcaps_subdirs);
                have_priorities = true;
              }
              if (index < priorities.size()) entry_priority = priorities[index];
            }
            if (entry_priority == 0) continue;  // not active on this CPU
            if (best == nullptr || entry_priority < best_priority)
              best_priority = entry_priority;
            else
              continue;  // an earlier entry ranks higher
          }
        }
        best = &lib.value;
        // Only a plain entry with exactly the default flags is final.
        if (!named_hwcap && lib.flags == default_flags) break;
      } while (++middle <= right);
      break;
    }
    if (cmpres < 0)
      left = middle + 1;
    else
      right = middle - 1;
  }
  if (!best) return std::nullopt;
  return *best;
}

}  // namespace mld::loader
