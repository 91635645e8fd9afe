// ld-cache-test.cc — LdCache against the machine's real ldconfig and ld.so.
//
// Oracles:
//   * parsing: caches in the old, compat and new formats written by the real
//     ldconfig from a fixture tree, and the machine's /etc/ld.so.cache, each
//     compared line by line with what `ldconfig -p` prints for it;
//   * lookup: the real ld.so (in ldd's trace mode) with the cache bind-mounted over
//     /etc/ld.so.cache in a private mount namespace, under several
//     --glibc-hwcaps-mask/--glibc-hwcaps-prepend settings and hwcap masks,
//     for the x86_64 loader and, where installed, the i386 one;
//   * behaviour of other glibc releases cannot be run here: those tests take
//     the expectation from the glibc source and say where.
// Malformed caches are real caches cut short or with one field changed.
#include <gnu/libc-version.h>
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstring>
#include <memory>

#include "ld-cache-builder.h"
#include "loader/loader.h"

using namespace mld;
using mld::loader::GlibcVersion;
using mld::loader::LdCache;
using mld::loader::LdCacheCpu;
using mld::loader::LdCacheEntry;
using mld::loader::LdCacheFormat;
namespace t = mld::test;

namespace {

constexpr const char* kLdso64 = "/lib64/ld-linux-x86-64.so.2";
constexpr const char* kLdso32 = "/lib/ld-linux.so.2";
constexpr const char* kLdconfig = "/sbin/ldconfig";

// DT_NEEDED names of the 64-bit and 32-bit probes.
const std::vector<std::string> kNames64 = {
    "libmldc-foo.so.1",   "libmldc-bar.so.2",    "libmldc-num.so.9", "libmldc-num.so.10",
    "libmldc-isa.so.1",   "libmldc-v3only.so.1", "libmldc-v4.so.1",  "libmldc-only32.so.1",
    "libmldc-leg.so.1",   "libmldc-plat.so.1",   "libmldc-avx.so.1", "libmldc-has.so.1",
    "libmldc-absent.so.1"};
const std::vector<std::string> kNames32 = {"libmldc-foo.so.1", "libmldc-q.so.1",
                                           "libmldc-only32.so.1", "libmldc-bar.so.2",
                                           "libmldc-absent.so.1"};

// The fixture: a library tree under <tmp>/fix, which is a symlink to the
// same path inside <tmp>/root, so that `ldconfig -r <tmp>/root` writes small
// caches (no system libraries) whose paths are also valid on the host.
struct Fixture {
  t::TempDir tmp;
  std::string root, fix, probe64, probe32;
  std::map<std::string, std::string> caches;  // "new"/"compat"/"old" -> host path
  std::string error;                          // why the fixture is unusable
  bool have32 = true;                         // gcc -m32 works (multilib)
  bool have_marker = true;                    // ld knows -z x86-64-v4 (binutils >= 2.37)
};

Fixture* g_fixture = nullptr;

std::string build_fixture(Fixture& f) {
  if (!t::have_program(kLdconfig) || !t::have_program("/usr/bin/gcc") ||
      !t::have_program("/usr/bin/ld"))
    return "needs /sbin/ldconfig, gcc and ld";
  if (f.tmp.path().empty()) return "cannot create a temporary directory";
  const std::string& tmp = f.tmp.path();
  f.root = tmp + "/root";
  f.fix = tmp + "/fix";
  std::string inner = f.root + f.fix;
  t::make_dirs(inner);
  if (symlink(inner.c_str(), f.fix.c_str()) != 0) return "symlink failed";
  std::string src = tmp + "/empty.c";
  t::write_file(src, "int mld_fixture_symbol;\n");

  struct Lib {
    std::string dir, soname, flags;
  };
  const std::vector<Lib> libs = {
      {"main", "libmldc-foo.so.1", ""},
      {"main/glibc-hwcaps/x86-64-v2", "libmldc-foo.so.1", ""},
      {"main/glibc-hwcaps/x86-64-v3", "libmldc-foo.so.1", ""},
      {"main", "libmldc-bar.so.2", ""},
      {"second", "libmldc-bar.so.2", ""},
      {"main", "libmldc-num.so.9", ""},
      {"main", "libmldc-num.so.10", ""},
      {"main", "libmldc-isa.so.1", ""},
      // An x86-64-v4 ISA marker in the v2 directory: ldconfig stores the
      // level in the hwcap word and ld.so checks it against the CPU.
      {"main/glibc-hwcaps/x86-64-v2", "libmldc-isa.so.1", "-z x86-64-v4"},
      {"main/glibc-hwcaps/x86-64-v3", "libmldc-v3only.so.1", ""},
      {"main", "libmldc-v4.so.1", ""},
      {"main/glibc-hwcaps/x86-64-v4", "libmldc-v4.so.1", ""},
      {"lib32", "libmldc-foo.so.1", "-m32"},
      {"lib32", "libmldc-only32.so.1", "-m32"},
      {"lib32", "libmldc-q.so.1", "-m32"},
      {"lib32b", "libmldc-q.so.1", "-m32"},
      // Legacy hwcap subdirectories (ldconfig 2.36 still records them).
      {"leg", "libmldc-leg.so.1", ""},
      {"leg/tls", "libmldc-leg.so.1", ""},
      {"leg/haswell", "libmldc-leg.so.1", ""},
      {"leg/x86_64", "libmldc-leg.so.1", ""},
      {"leg", "libmldc-plat.so.1", ""},
      {"leg/xeon_phi", "libmldc-plat.so.1", ""},
      {"leg/x86_64", "libmldc-plat.so.1", ""},
      {"leg", "libmldc-avx.so.1", ""},
      {"leg/avx512_1", "libmldc-avx.so.1", ""},
      {"leg", "libmldc-has.so.1", ""},
      {"leg/haswell", "libmldc-has.so.1", ""},
  };
  // 32-bit libraries and the ISA marker are optional: without them the
  // tests that need them skip.
  std::string obj64 = tmp + "/empty64.o", obj32 = tmp + "/empty32.o";
  if (!t::compile_empty(src, obj64)) return "gcc -c failed";
  f.have32 = t::compile_empty(src, obj32, "-m32") &&
             t::make_lib(obj32, tmp + "/try32.so", "try32.so", "-m elf_i386");
  f.have_marker = t::make_lib(obj64, tmp + "/trymarker.so", "trymarker.so", "-z x86-64-v4");
  for (const Lib& l : libs) {
    bool m32 = l.flags == "-m32";
    if (!f.have32 && m32) continue;
    std::string flags = m32 ? "-m elf_i386" : f.have_marker ? l.flags : "";
    if (!t::make_lib(m32 ? obj32 : obj64, inner + "/" + l.dir + "/" + l.soname, l.soname, flags))
      return "ld failed for " + l.dir + "/" + l.soname + " " + flags;
  }
  // Link stubs (outside every cache) give the probes their DT_NEEDED names.
  std::string needed64 = "--no-as-needed -L" + t::shell_quote(inner + "/stubs");
  for (const std::string& n : kNames64) {
    if (!t::make_lib(obj64, inner + "/stubs/" + n, n)) return "ld failed for stub " + n;
    needed64 += " -l:" + n;
  }
  f.probe64 = f.fix + "/probe64.so";
  if (!t::make_lib(obj64, inner + "/probe64.so", "probe64.so", needed64)) return "probe64 failed";
  if (f.have32) {
    std::string needed32 = "-m elf_i386 --no-as-needed -L" + t::shell_quote(inner + "/stubs32");
    for (const std::string& n : kNames32) {
      if (!t::make_lib(obj32, inner + "/stubs32/" + n, n, "-m elf_i386"))
        return "ld failed for stub " + n;
      needed32 += " -l:" + n;
    }
    f.probe32 = f.fix + "/probe32.so";
    if (!t::make_lib(obj32, inner + "/probe32.so", "probe32.so", needed32)) return "probe32 failed";
  }

  // ldconfig 2.36 -c old and -c compat overrun the heap (elf/cache.c
  // save_cache indexes the old table with idx_new) when legacy-hwcap entries
  // exist, and crash or write garbage, so only the new cache has the "leg"
  // directory.
  t::make_dirs(f.root + "/etc");
  std::string dirs =
      f.fix + "/main\n" + f.fix + "/second\n" + f.fix + "/lib32\n" + f.fix + "/lib32b\n";
  t::write_file(f.root + "/etc/ld.so.conf.full", dirs + f.fix + "/leg\n");
  t::write_file(f.root + "/etc/ld.so.conf.noleg", dirs);
  for (std::string format : {"new", "compat", "old"}) {
    std::string conf = format == "new" ? "/etc/ld.so.conf.full" : "/etc/ld.so.conf.noleg";
    t::CmdResult r = t::run_cmd(std::string(kLdconfig) + " -X -i -r " + t::shell_quote(f.root) +
                                " -f " + conf + " -c " + format + " -C /etc/" + format + ".cache");
    std::string path = f.root + "/etc/" + format + ".cache";
    if (r.status != 0 || access(path.c_str(), R_OK) != 0)
      return "ldconfig -c " + format + " failed: " + r.out;
    f.caches[format] = path;
  }
  return "";
}

class LdCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_fixture = new Fixture;
    g_fixture->error = build_fixture(*g_fixture);
  }
  static void TearDownTestSuite() {
    delete g_fixture;
    g_fixture = nullptr;
  }
  void SetUp() override {
    // Missing tools skip; a fixture that fails with the tools present is a
    // failure.
    if (g_fixture->error.rfind("needs ", 0) == 0) GTEST_SKIP() << g_fixture->error;
    ASSERT_EQ(g_fixture->error, "");
  }
  const Fixture& fx() const { return *g_fixture; }
};

// The glibc of this machine, which is what ldconfig and ld.so here are.
GlibcVersion machine_glibc() {
  std::optional<GlibcVersion> g = loader::parse_glibc_version(gnu_get_libc_version());
  return g.value_or(GlibcVersion{});
}

// An LdCache together with the bytes it points into.
struct Parsed {
  std::shared_ptr<std::string> bytes;
  LdCache cache;
};

Parsed parse_bytes(std::string bytes) {
  std::shared_ptr<std::string> b = std::make_shared<std::string>(std::move(bytes));
  LdCache c = LdCache::parse(ByteView(reinterpret_cast<const u8*>(b->data()), b->size()));
  return Parsed{b, std::move(c)};
}

// An entry as print_entry in elf/cache.c prints it (the oracle's format).
std::string printed_line(const LdCacheEntry& e) {
  static const char* const type[] = {"libc4", "ELF", "libc5", "libc6"};
  std::string s(e.key);
  s += " (";
  s += (e.flags & 0xff) <= 3 ? type[e.flags & 0xff] : "unknown";
  switch (e.flags & 0xff00) {
    case 0x0000: break;
    case 0x0100:
    case 0x0400:
    case 0x0500:
    case 0x0700: s += ",64bit"; break;
    case 0x0200: s += ",IA-64"; break;
    case 0x0300: s += ",x86-64"; break;
    case 0x0600: s += ",N32"; break;
    case 0x0800: s += ",x32"; break;
    case 0x0900: s += ",hard-float"; break;
    case 0x0a00: s += ",AArch64"; break;
    case 0x0b00:
    case 0x0f00: s += ",soft-float"; break;
    case 0x0c00: s += ",nan2008"; break;
    case 0x0d00: s += ",N32,nan2008"; break;
    case 0x0e00: s += ",64bit,nan2008"; break;
    case 0x1000: s += ",double-float"; break;
    default: s += "," + std::to_string(e.flags & 0xff00); break;
  }
  if (e.hwcaps_subdir) {
    s += ", hwcap: \"" + std::string(*e.hwcaps_subdir) + "\"";
  } else if (e.hwcap != 0) {
    char buf[40];
    snprintf(buf, sizeof buf, ", hwcap: %#.16" PRIx64, e.hwcap);
    s += buf;
  }
  s += ") => ";
  s += e.value;
  return s;
}

// Parses `path` and compares it with `ldconfig -p -C path`.
void expect_matches_ldconfig_print(const std::string& path, const std::string& print_cmd) {
  Parsed p = parse_bytes(t::read_file(path));
  t::CmdResult r = t::run_cmd(print_cmd);
  ASSERT_EQ(r.status, 0) << print_cmd << "\n" << r.out;
  t::PrintedCache printed = t::parse_ldconfig_print(r.out);
  ASSERT_TRUE(printed.count.has_value()) << r.out;
  EXPECT_EQ(*printed.count, p.cache.entries().size());
  ASSERT_EQ(printed.entries.size(), p.cache.entries().size());
  for (size_t i = 0; i < printed.entries.size(); i++)
    EXPECT_EQ(printed_line(p.cache.entries()[i]), printed.entries[i]) << path << " entry " << i;
  EXPECT_EQ(printed.generator, p.cache.generator()
                                   ? std::optional<std::string>(std::string(*p.cache.generator()))
                                   : std::nullopt);
}

// The LdCacheCpu the loader reports in `ld.so --help`; legacy hwcap bit
// numbers from _dl_x86_hwcap_flags (sysdeps/x86/dl-procinfo.c).
LdCacheCpu cpu_from_help(const t::LoaderHelp& h) {
  LdCacheCpu cpu;
  cpu.x86_isa_level = h.isa_level;
  cpu.platform = h.platform;
  for (const std::string& n : h.legacy_searched) {
    if (n == "sse2") cpu.hwcap |= 1u << 0;
    if (n == "x86_64") cpu.hwcap |= 1u << 1;
    if (n == "avx512_1") cpu.hwcap |= 1u << 2;
  }
  return cpu;
}

std::string describe(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ":") + x;
  return "{" + s + "}";
}

// Compares lookup() with the real loader for every probe name. Returns
// false (after reporting a skip reason in *why) when no oracle could run.
bool expect_lookups_match_loader(const std::string& cache_path, const std::string& ldso,
                                 const std::string& probe, const std::vector<std::string>& names,
                                 i32 default_flags, const std::string& options,
                                 const std::string& env, std::string* why) {
  t::CmdResult help = t::run_cmd("env " + env + " " + ldso + " " + options + " --help");
  if (help.status != 0) {
    *why = ldso + " --help failed: " + help.out;
    return false;
  }
  t::LoaderHelp h = t::parse_loader_help(help.out);
  std::optional<std::map<std::string, std::string>> real =
      t::loader_list(ldso, cache_path, probe, options, env);
  if (!real) {
    *why = "no private mount namespace (needs root): cannot make ld.so read a test cache";
    return false;
  }
  Parsed p = parse_bytes(t::read_file(cache_path));
  LdCacheCpu cpu = cpu_from_help(h);
  for (const std::string& name : names) {
    auto it = real->find(name);
    EXPECT_NE(it, real->end()) << name << " missing from the ld.so trace";
    if (it == real->end()) continue;
    std::optional<std::string_view> ours =
        p.cache.lookup(name, h.hwcaps_searched, default_flags, machine_glibc(), &cpu);
    EXPECT_EQ(ours ? std::string(*ours) : std::string("not found"), it->second)
        << "name " << name << ", cache " << cache_path << ", ld.so " << ldso << " " << options
        << " " << env << ", hwcaps " << describe(h.hwcaps_searched) << ", platform " << cpu.platform
        << ", hwcap " << cpu.hwcap;
  }
  return true;
}

// Little-endian field access for mutating real caches (layouts from
// sysdeps/generic/dl-cache.h).
u32 get_u32(const std::string& b, size_t off) {
  u32 v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}
void put_u32(std::string& b, size_t off, u32 v) { std::memcpy(b.data() + off, &v, 4); }

// Offset of the new-format header: 0, or the compat block after the old table.
size_t new_base(const std::string& b) {
  if (b.compare(0, 11, "ld.so-1.7.0") != 0) return 0;
  return (16 + 12 * size_t{get_u32(b, 12)} + 7) & ~size_t{7};
}

// The glibc-hwcaps section of a new/compat cache: {offset, size}.
std::pair<size_t, size_t> hwcaps_section(const std::string& b) {
  size_t ext = get_u32(b, new_base(b) + 32);
  u32 count = get_u32(b, ext + 4);
  for (u32 i = 0; i < count; i++) {
    size_t at = ext + 8 + 16 * size_t{i};
    if (get_u32(b, at) == 1) return {get_u32(b, at + 8), get_u32(b, at + 12)};
  }
  return {0, 0};
}

std::string parse_error_of(const std::string& bytes) {
  try {
    parse_bytes(bytes);
  } catch (const ParseError& e) {
    return e.what();
  }
  return "(parsed)";
}

}  // namespace

// ─── Parsing against ldconfig -p ────────────────────────────────────────────

TEST_F(LdCacheTest, EveryFormatMatchesLdconfigPrint) {
  for (const auto& [format, path] : fx().caches) {
    SCOPED_TRACE(format);
    expect_matches_ldconfig_print(path, std::string(kLdconfig) + " -p -C " + t::shell_quote(path));
    Parsed p = parse_bytes(t::read_file(path));
    LdCacheFormat want = format == "new"      ? LdCacheFormat::New
                         : format == "compat" ? LdCacheFormat::Compat
                                              : LdCacheFormat::Old;
    EXPECT_EQ(p.cache.format(), want);
    EXPECT_EQ(p.cache.generator().has_value(), format != "old");
  }
}

TEST_F(LdCacheTest, NewFormatRecordsGlibcHwcapsSubdirectories) {
  // ldconfig -p prints hwcap: "x86-64-v3" for these; the comparison above
  // covers the text, this pins that the fixture exercises them at all.
  Parsed p = parse_bytes(t::read_file(fx().caches.at("new")));
  std::vector<std::string> subdirs;
  for (const LdCacheEntry& e : p.cache.entries())
    if (e.hwcaps_subdir) subdirs.emplace_back(*e.hwcaps_subdir);
  t::CmdResult r = t::run_cmd(std::string(kLdconfig) + " -p -C " +
                              t::shell_quote(fx().caches.at("new")) + " | grep -c 'hwcap: \"'");
  EXPECT_EQ(std::to_string(subdirs.size()) + "\n", r.out);
  EXPECT_GE(subdirs.size(), 5u);
}

TEST(LdCacheSystem, MachineCacheMatchesLdconfigPrint) {
  if (access("/etc/ld.so.cache", R_OK) != 0 || !t::have_program(kLdconfig))
    GTEST_SKIP() << "no /etc/ld.so.cache or ldconfig";
  expect_matches_ldconfig_print("/etc/ld.so.cache", std::string(kLdconfig) + " -p");
}

// ─── Lookup against the real loader ─────────────────────────────────────────

TEST_F(LdCacheTest, LookupMatchesRealLoaderX8664) {
  if (!t::have_program(kLdso64)) GTEST_SKIP() << "no " << kLdso64;
  // Each: ld.so options, environment.
  const std::vector<std::pair<std::string, std::string>> settings = {
      {"", ""},
      {"--glibc-hwcaps-mask x86-64-v2", ""},
      {"--glibc-hwcaps-mask x86-64-v2:x86-64-v3", ""},
      {"--glibc-hwcaps-mask x86-64-v4", ""},
      {"--glibc-hwcaps-prepend x86-64-v2", ""},
      {"--glibc-hwcaps-prepend x86-64-v2 --glibc-hwcaps-mask x86-64-v3", ""},
      {"--glibc-hwcaps-mask ''", ""},
      {"", "GLIBC_TUNABLES=glibc.cpu.hwcap_mask=0"},
      {"", "GLIBC_TUNABLES=glibc.cpu.hwcap_mask=2"},
  };
  for (const auto& [format, path] : fx().caches) {
    for (const auto& [options, env] : settings) {
      SCOPED_TRACE(format + " " + options + " " + env);
      std::string why;
      if (!expect_lookups_match_loader(path, kLdso64, fx().probe64, kNames64, 0x0303, options, env,
                                       &why))
        GTEST_SKIP() << why;
    }
  }
}

TEST_F(LdCacheTest, LookupMatchesRealLoaderI386) {
  if (!t::have_program(kLdso32) || !fx().have32)
    GTEST_SKIP() << "needs " << kLdso32 << " and gcc -m32";
  // The i386 loader accepts flags 1 or 3 (the generic _dl_cache_check_flags)
  // and, in the old format, takes the LAST acceptable libmldc-q.so.1.
  for (const auto& [format, path] : fx().caches) {
    SCOPED_TRACE(format);
    std::string why;
    if (!expect_lookups_match_loader(path, kLdso32, fx().probe32, kNames32, 0x0003, "", "", &why))
      GTEST_SKIP() << why;
  }
}

TEST_F(LdCacheTest, UnsortedHwcapsNamesFollowGlibcMerge) {
  // Swap the two names of the glibc-hwcaps section. glibc merges the
  // section with its sorted priority list assuming both are sorted
  // (glibc_hwcaps_priorities_init), so a name out of order loses its
  // priority. The real loader and ldconfig -p are the oracles.
  std::string b = t::read_file(fx().caches.at("new"));
  auto [off, size] = hwcaps_section(b);
  ASSERT_EQ(size, 12u) << "expected three names: x86-64-v2, v3, v4";
  u32 first = get_u32(b, off);
  put_u32(b, off, get_u32(b, off + 4));
  put_u32(b, off + 4, first);
  std::string path = fx().root + "/etc/swapped.cache";
  t::write_file(path, b);
  expect_matches_ldconfig_print(path, std::string(kLdconfig) + " -p -C " + t::shell_quote(path));
  for (std::string options : {"", "--glibc-hwcaps-mask x86-64-v2", "--glibc-hwcaps-mask x86-64-v3",
                              "--glibc-hwcaps-mask x86-64-v2:x86-64-v3"}) {
    SCOPED_TRACE(options);
    std::string why;
    if (!expect_lookups_match_loader(path, kLdso64, fx().probe64, kNames64, 0x0303, options, "",
                                     &why))
      GTEST_SKIP() << why;
  }
}

TEST_F(LdCacheTest, EndiannessFlagAsTheLoaderReadsIt) {
  // cache_file_new_matches_endian: 0 (unknown) and values whose low two
  // bits say little-endian are used; anything else makes ld.so ignore the
  // cache (so every fixture name becomes "not found").
  std::string base = t::read_file(fx().caches.at("new"));
  for (int flags : {0, 1, 2, 3, 4, 6, 0x82}) {
    SCOPED_TRACE(flags);
    std::string b = base;
    b[28] = static_cast<char>(flags);
    std::string path = fx().root + "/etc/endian.cache";
    t::write_file(path, b);
    bool usable = flags == 0 || (flags & 3) == 2;
    std::optional<std::map<std::string, std::string>> real =
        t::loader_list(kLdso64, path, fx().probe64, "");
    if (real) {
      EXPECT_EQ(real->at("libmldc-bar.so.2") != "not found", usable);
    }
    if (usable) {
      std::string why;
      EXPECT_TRUE(expect_lookups_match_loader(path, kLdso64, fx().probe64, kNames64, 0x0303, "", "",
                                              &why) ||
                  !real)
          << why;
    } else {
      EXPECT_NE(parse_error_of(b).find(flags == 3 ? "big-endian" : "invalid"), std::string::npos)
          << parse_error_of(b);
    }
  }
}

// ─── Lookup rules of other releases (from the glibc source) ────────────────

TEST_F(LdCacheTest, LegacyEntriesFilteredBefore240AndSkippedFrom240) {
  Parsed p = parse_bytes(t::read_file(fx().caches.at("new")));
  const std::vector<std::string> hwcaps = {"x86-64-v4", "x86-64-v3", "x86-64-v2"};
  LdCacheCpu haswell{4, (1u << 1) | (1u << 2), "haswell"};
  std::string leg = fx().fix + "/leg";
  // 2.36-2.39 (elf/dl-cache.c search_cache): tls/ (bit 63) is always
  // allowed, and sorts first (ldconfig: more hwcap bits, then larger).
  for (GlibcVersion g : {GlibcVersion{2, 36}, GlibcVersion{2, 39}})
    EXPECT_EQ(p.cache.lookup("libmldc-leg.so.1", hwcaps, 0x0303, g, &haswell),
              leg + "/tls/libmldc-leg.so.1");
  // Platform entries need GLRO(dl_platform) to be that platform; hwcap
  // entries need their bit in dl_hwcap & hwcap_mask.
  EXPECT_EQ(p.cache.lookup("libmldc-has.so.1", hwcaps, 0x0303, {2, 36}, &haswell),
            leg + "/haswell/libmldc-has.so.1");
  EXPECT_EQ(p.cache.lookup("libmldc-plat.so.1", hwcaps, 0x0303, {2, 36}, &haswell),
            leg + "/x86_64/libmldc-plat.so.1");
  LdCacheCpu amd{3, 1u << 1, "x86_64"};
  EXPECT_EQ(p.cache.lookup("libmldc-has.so.1", hwcaps, 0x0303, {2, 36}, &amd),
            leg + "/libmldc-has.so.1");
  EXPECT_EQ(p.cache.lookup("libmldc-avx.so.1", hwcaps, 0x0303, {2, 36}, &amd),
            leg + "/libmldc-avx.so.1");
  // The default CPU is a baseline x86-64: hwcap "x86_64", no platform.
  EXPECT_EQ(p.cache.lookup("libmldc-plat.so.1", hwcaps, 0x0303, {2, 36}),
            leg + "/x86_64/libmldc-plat.so.1");
  EXPECT_EQ(p.cache.lookup("libmldc-has.so.1", hwcaps, 0x0303, {2, 36}), leg + "/libmldc-has.so.1");
  // 2.40 (commit c5aa5fd40a): any non-glibc-hwcaps entry with hwcap != 0 is
  // skipped, so only the plain entry is left.
  for (const char* n : {"libmldc-leg.so.1", "libmldc-has.so.1", "libmldc-plat.so.1"})
    EXPECT_EQ(p.cache.lookup(n, hwcaps, 0x0303, {2, 40}, &haswell), leg + "/" + std::string(n));
}

TEST_F(LdCacheTest, GlibcHwcapsEntriesIgnoredBefore233) {
  // Before 2.33 (commit 600d9e0c87) bit 62 was just an unknown hwcap bit,
  // outside every hwcap_mask, so the entries fall to the legacy filter and
  // are skipped (sysdeps/generic/dl-cache.h: "Older glibc versions ... will
  // ignore these entries").
  Parsed p = parse_bytes(t::read_file(fx().caches.at("new")));
  const std::vector<std::string> hwcaps = {"x86-64-v3", "x86-64-v2"};
  std::string main = fx().fix + "/main";
  EXPECT_EQ(p.cache.lookup("libmldc-foo.so.1", hwcaps, 0x0303, {2, 33}),
            main + "/glibc-hwcaps/x86-64-v3/libmldc-foo.so.1");
  EXPECT_EQ(p.cache.lookup("libmldc-foo.so.1", hwcaps, 0x0303, {2, 32}),
            main + "/libmldc-foo.so.1");
  EXPECT_EQ(p.cache.lookup("libmldc-v3only.so.1", hwcaps, 0x0303, {2, 32}), std::nullopt);
}

TEST_F(LdCacheTest, IsaLevelMarkerOfGlibcHwcapsEntry) {
  // libmldc-isa.so.1 in glibc-hwcaps/x86-64-v2 carries an x86-64-v4 marker;
  // ldconfig stores level 3 in bits 32-41 and ld.so skips the entry unless
  // cpu_features->isa_1 has x86-64-v4 (sysdeps/x86/dl-isa-level.h).
  if (!fx().have_marker) GTEST_SKIP() << "ld does not know -z x86-64-v4";
  Parsed p = parse_bytes(t::read_file(fx().caches.at("new")));
  std::string main = fx().fix + "/main";
  const std::vector<std::string> v2 = {"x86-64-v2"};
  LdCacheCpu v3cpu{3, 2, ""};
  LdCacheCpu v4cpu{4, 2, ""};
  EXPECT_EQ(p.cache.lookup("libmldc-isa.so.1", v2, 0x0303, {2, 36}, &v3cpu),
            main + "/libmldc-isa.so.1");
  EXPECT_EQ(p.cache.lookup("libmldc-isa.so.1", v2, 0x0303, {2, 36}, &v4cpu),
            main + "/glibc-hwcaps/x86-64-v2/libmldc-isa.so.1");
  // Without a CPU the level is the best x86-64-vN in the list.
  EXPECT_EQ(p.cache.lookup("libmldc-isa.so.1", {"x86-64-v3", "x86-64-v2"}, 0x0303, {2, 36}),
            main + "/libmldc-isa.so.1");
  EXPECT_EQ(p.cache.lookup("libmldc-isa.so.1", {"x86-64-v4", "x86-64-v2"}, 0x0303, {2, 36}),
            main + "/glibc-hwcaps/x86-64-v2/libmldc-isa.so.1");
}

TEST_F(LdCacheTest, FlagsMustMatchTheArchitecture) {
  Parsed p = parse_bytes(t::read_file(fx().caches.at("new")));
  // x86_64 accepts only 0x0303; the 32-bit entries (flags 1 here: no libc
  // dependency) are never returned (sysdeps/unix/sysv/linux/x86_64/dl-cache.h).
  EXPECT_EQ(p.cache.lookup("libmldc-only32.so.1", {}, 0x0303, {2, 36}), std::nullopt);
  EXPECT_EQ(p.cache.lookup("libmldc-q.so.1", {}, 0x0303, {2, 36}), std::nullopt);
  // aarch64 (0x0a03) finds none of the x86 entries.
  for (const std::string& n : kNames64)
    EXPECT_EQ(p.cache.lookup(n, {}, 0x0a03, {2, 36}), std::nullopt) << n;
}

TEST_F(LdCacheTest, AbsentNamesAndCStringNames) {
  Parsed p = parse_bytes(t::read_file(fx().caches.at("new")));
  for (const char* n : {"", "libmldc", "libmldc-bar.so", "libmldc-bar.so.2.0", "libmldc-num.so.09x",
                        "zzz", "\x80\xff"})
    EXPECT_EQ(p.cache.lookup(n, {}, 0x0303, {2, 36}), std::nullopt) << n;
  // "libmldc-num.so.09" equals "libmldc-num.so.9" under _dl_cache_libcmp
  // (digit runs compare as numbers), so ld.so returns that entry for it.
  EXPECT_EQ(p.cache.lookup("libmldc-num.so.09", {}, 0x0303, {2, 36}),
            fx().fix + "/main/libmldc-num.so.9");
  // glibc takes the name as a C string: an embedded NUL ends it.
  using namespace std::string_view_literals;
  EXPECT_EQ(p.cache.lookup("libmldc-bar.so.2\0junk"sv, {}, 0x0303, {2, 36}),
            fx().fix + "/main/libmldc-bar.so.2");
  // Both entries of the key are kept, in ldconfig's order.
  int bars = 0;
  for (const LdCacheEntry& e : p.cache.entries()) bars += e.key == "libmldc-bar.so.2";
  EXPECT_EQ(bars, 2);
}

// ─── Malformed caches ───────────────────────────────────────────────────────

TEST_F(LdCacheTest, TruncatedAtEveryByte) {
  for (const auto& [format, path] : fx().caches) {
    SCOPED_TRACE(format);
    std::string full = t::read_file(path);
    Parsed whole = parse_bytes(full);
    size_t parsed = 0;
    for (size_t n = 0; n < full.size(); n++) {
      // An exact-size heap copy, so an over-read is an over-read.
      std::unique_ptr<u8[]> buf(new u8[n ? n : 1]);
      std::memcpy(buf.get(), full.data(), n);
      try {
        LdCache c = LdCache::parse(ByteView(buf.get(), n));
        // Only the old format can lose bytes nobody refers to (strings that
        // only the new block used), and then it must read the same entries.
        ++parsed;
        EXPECT_EQ(c.format(), LdCacheFormat::Old) << n;
        ASSERT_EQ(c.entries().size(), whole.cache.entries().size()) << n;
        for (size_t i = 0; i < c.entries().size(); i++)
          EXPECT_EQ(c.entries()[i].value, whole.cache.entries()[i].value) << n;
      } catch (const ParseError&) {
      }
    }
    if (format != "old") {
      EXPECT_EQ(parsed, 0u);
    }
    EXPECT_LT(parsed, full.size() / 2);
  }
}

TEST_F(LdCacheTest, WrongMagic) {
  for (const auto& [format, path] : fx().caches) {
    std::string b = t::read_file(path);
    b[0] ^= 0x20;
    EXPECT_NE(parse_error_of(b).find("bad magic"), std::string::npos) << format;
  }
  EXPECT_NE(parse_error_of("").find("bad magic"), std::string::npos);
  EXPECT_NE(parse_error_of("glibc-ld.so.cache1.1").find("too small"), std::string::npos);
  EXPECT_NE(parse_error_of(std::string("ld.so-1.7.0\0\0\0\0\0", 16)).find("too small"),
            std::string::npos);
  // A compat cache whose inner magic is damaged is read as old format, as
  // ld.so does.
  std::string b = t::read_file(fx().caches.at("compat"));
  b[new_base(b)] ^= 0x20;
  EXPECT_EQ(parse_bytes(b).cache.format(), LdCacheFormat::Old);
}

TEST_F(LdCacheTest, StringOffsetsPastTheEnd) {
  for (const auto& [format, path] : fx().caches) {
    std::string orig = t::read_file(path);
    size_t first_entry = format == "old" ? 16 : new_base(orig) + 48;
    for (size_t field : {4, 8}) {  // key, value
      for (u32 bad : {u32(orig.size()), u32(orig.size() + 100), 0xFFFFFFF0u}) {
        std::string b = orig;
        put_u32(b, first_entry + field, bad);
        EXPECT_NE(parse_error_of(b).find("past the end"), std::string::npos)
            << format << " field " << field << " " << parse_error_of(b);
      }
    }
    // The file cut just before the NUL that ends entry 0's value.
    size_t strings = format == "old" ? 16 + 12 * size_t{get_u32(orig, 12)} : new_base(orig);
    size_t nul = orig.find('\0', strings + get_u32(orig, first_entry + 8));
    ASSERT_NE(nul, std::string::npos);
    std::string e = parse_error_of(orig.substr(0, nul));
    EXPECT_TRUE(e.find("not NUL-terminated") != std::string::npos ||
                (format != "old" && e.find("past the end") != std::string::npos))
        << format << ": " << e;
  }
}

TEST_F(LdCacheTest, NlibsTooLarge) {
  for (const auto& [format, path] : fx().caches) {
    std::string orig = t::read_file(path);
    size_t at = format == "new" ? 20 : 12;
    for (u32 bad : {0xFFFFFFFFu, u32(orig.size() / 12 + 1)}) {
      std::string b = orig;
      put_u32(b, at, bad);
      std::string e = parse_error_of(b);
      EXPECT_TRUE(e.find("nlibs") != std::string::npos ||
                  e.find("past the end") != std::string::npos)
          << format << ": " << e;
    }
  }
  // The new block inside a compat cache has its own count.
  std::string b = t::read_file(fx().caches.at("compat"));
  put_u32(b, new_base(b) + 20, 0x10000000);
  EXPECT_NE(parse_error_of(b).find("nlibs"), std::string::npos);
}

TEST_F(LdCacheTest, ExtensionDirectoryChecked) {
  for (std::string format : {"new", "compat"}) {
    SCOPED_TRACE(format);
    std::string orig = t::read_file(fx().caches.at(format));
    size_t hdr = new_base(orig);
    size_t ext = get_u32(orig, hdr + 32);
    ASSERT_NE(ext, 0u);
    struct Case {
      size_t at;
      u32 value;
      const char* message;
    };
    const std::vector<Case> cases = {
        {hdr + 32, u32((orig.size() + 7) & ~size_t{3}), "past the end"},  // offset
        {hdr + 32, u32(ext + 2), "multiple of 4"},
        {hdr + 32, 0xFFFFFFFCu, "past the end"},
        {ext, 0xEAA42175u, "magic"},
        {ext + 4, 0x10000000u, "past the end"},           // section count
        {ext + 8 + 8, u32(orig.size()), "past the end"},  // section 0 offset
        {ext + 8 + 12, 0xFFFFFFFFu, "past the end"},      // section 0 size
    };
    for (const Case& c : cases) {
      std::string b = orig;
      put_u32(b, c.at, c.value);
      EXPECT_NE(parse_error_of(b).find(c.message), std::string::npos)
          << "at " << c.at << " = " << c.value << ": " << parse_error_of(b);
    }
    // No extension at all is not an error (glibc: "not a format error").
    std::string b = orig;
    put_u32(b, hdr + 32, 0);
    Parsed p = parse_bytes(b);
    EXPECT_FALSE(p.cache.generator().has_value());
    // A glibc-hwcaps name offset past the end.
    b = orig;
    put_u32(b, hwcaps_section(orig).first, u32(orig.size() + 1));
    EXPECT_NE(parse_error_of(b).find("glibc-hwcaps name"), std::string::npos);
  }
}

TEST(LdCacheHostile, ManyOffsetsIntoOneLongString) {
  // 100,000 entries whose keys and values all point into one 1.5 MB run:
  // reading each string by scanning would take minutes; it must not.
  const u32 nlibs = 100000;
  const size_t run = 1500000;
  std::string b(48 + size_t{nlibs} * 24, '\0');
  std::memcpy(b.data(), "glibc-ld.so.cache1.1", 20);
  put_u32(b, 20, nlibs);
  b[28] = 2;  // little-endian
  u32 strings = static_cast<u32>(b.size());
  for (u32 i = 0; i < nlibs; i++) {
    put_u32(b, 48 + 24 * size_t{i}, 0x0303);
    put_u32(b, 48 + 24 * size_t{i} + 4, strings + i);
    put_u32(b, 48 + 24 * size_t{i} + 8, strings + i * 7);
  }
  b.append(run, 'a');
  b.push_back('\0');
  Parsed p = parse_bytes(b);
  ASSERT_EQ(p.cache.entries().size(), nlibs);
  EXPECT_EQ(p.cache.entries()[5].key.size(), run - 5);
  EXPECT_EQ(p.cache.entries()[5].value.size(), run - 35);
  // Without the NUL the first key is unterminated.
  b.back() = 'a';
  EXPECT_NE(parse_error_of(b).find("entry 0 key at offset"), std::string::npos)
      << parse_error_of(b);
}

TEST_F(LdCacheTest, RaggedHwcapsSectionIsDropped) {
  // cache_extension_verify drops a glibc-hwcaps section whose size is not a
  // multiple of 4; ldconfig -p then prints the raw hwcap words, and ld.so
  // ignores the glibc-hwcaps entries.
  std::string b = t::read_file(fx().caches.at("new"));
  size_t ext = get_u32(b, 32);
  u32 count = get_u32(b, ext + 4);
  for (u32 i = 0; i < count; i++)
    if (get_u32(b, ext + 8 + 16 * i) == 1) put_u32(b, ext + 8 + 16 * i + 12, 6);
  std::string path = fx().root + "/etc/ragged.cache";
  t::write_file(path, b);
  expect_matches_ldconfig_print(path, std::string(kLdconfig) + " -p -C " + t::shell_quote(path));
  std::string why;
  if (!expect_lookups_match_loader(path, kLdso64, fx().probe64, kNames64, 0x0303, "", "", &why))
    GTEST_SKIP() << why;
}

// ─── parse_glibc_version ────────────────────────────────────────────────────

TEST(GlibcVersion, ParsesTheRunningLibrary) {
  // Oracle: the C library's own version string and its compile-time macros.
  std::optional<GlibcVersion> g = loader::parse_glibc_version(gnu_get_libc_version());
  ASSERT_TRUE(g.has_value()) << gnu_get_libc_version();
  EXPECT_EQ(g->major, __GLIBC__);
  EXPECT_EQ(g->minor, __GLIBC_MINOR__);
  // And the banner libc.so.6 prints when run ("... release version 2.36.").
  t::CmdResult r = t::run_cmd("/lib/x86_64-linux-gnu/libc.so.6");
  size_t at = r.out.find("release version ");
  if (at != std::string::npos) {
    std::string v = r.out.substr(at + 16);
    v = v.substr(0, v.find_first_not_of("0123456789."));
    if (!v.empty() && v.back() == '.') v.pop_back();
    EXPECT_EQ(loader::parse_glibc_version(v), g) << v;
  }
}

TEST(GlibcVersion, ExtraComponentsAndMalformedText) {
  // The header's contract: "2.36" and "2.36.9000"; nullopt otherwise.
  EXPECT_EQ(loader::parse_glibc_version("2.36.9000"), (GlibcVersion{2, 36}));
  EXPECT_EQ(loader::parse_glibc_version("2.9"), (GlibcVersion{2, 9}));
  EXPECT_EQ(loader::parse_glibc_version("2.36.1.2"), (GlibcVersion{2, 36}));
  for (const char* bad : {"", "2", "2.", ".36", "2.36.", "2..36", "2.36a", "v2.36", "-2.36",
                          " 2.36", "2.36 ", "2.x", "9999999999.1", "2.36-9+deb12u14"})
    EXPECT_EQ(loader::parse_glibc_version(bad), std::nullopt) << bad;
}
