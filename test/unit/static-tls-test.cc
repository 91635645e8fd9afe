// static-tls-test.cc — the static TLS arithmetic of src/loader/static-tls.cc.
//
// Oracles:
//  * numbers measured with real dlopen() on Debian glibc 2.36 x86_64
//    (/work/shared/research/glibc-tls-audit.md §2–3, re-run for this test:
//    libc's PT_TLS is 0x90 bytes at alignment 8, so used0 = 144 and the room
//    is 1856 - 144 = 1712; _dl_get_tls_static_info reports 4224 = 1856 +
//    sizeof (struct pthread) 2368, and 3712 with optional_static_tls=0);
//  * for aarch64, glibc < 2.32 and GLIBC_TUNABLES of other releases, the
//    arithmetic worked by hand from the glibc sources named at each test
//    (no machine of those kinds is available), never numbers printed by the
//    code under test.
// test/e2e/tls-differential.py compares whole dlopen sequences with the real
// loader of this machine.
#include <gtest/gtest.h>

#include "loader/loader.h"

using namespace mld;
using namespace mld::loader;

namespace {

StaticTlsParams x86(GlibcVersion g = {2, 36}) {
  return *StaticTlsParams::for_machine(elf::EM_X86_64, g);
}
StaticTlsParams arm(GlibcVersion g = {2, 36}) {
  return *StaticTlsParams::for_machine(elf::EM_AARCH64, g);
}
TlsBlock block(u64 size, u64 align, u64 firstbyte = 0) {
  TlsBlock b;
  b.module = "/t/lib.so";
  b.blocksize = size;
  b.align = align;
  b.firstbyte_offset = firstbyte;
  return b;
}
// libc.so.6 of Debian 12: PT_TLS memsz 0x90, align 8.
const TlsBlock kLibc = block(144, 8);

// ─── Surplus ────────────────────────────────────────────────────────────────

TEST(StaticTlsSurplus, DefaultIs1664Everywhere) {
  EXPECT_EQ(x86().surplus(), 1664u);
  EXPECT_EQ(arm().surplus(), 1664u);
  EXPECT_EQ(x86({2, 31}).surplus(), 1664u);
  EXPECT_EQ(x86({2, 21}).surplus(), 1664u);
}

TEST(StaticTlsSurplus, FormulaFrom232) {
  // 288 per namespace (144 libc + 144 other, one libc fewer) + optional.
  StaticTlsParams p = x86();
  p.rtld_nns = 5;
  EXPECT_EQ(p.surplus(), 1952u);
  p.rtld_nns = 1;
  EXPECT_EQ(p.surplus(), 800u);  // 0*144 + 1*144 + 512 + 144
  p.rtld_nns = 40;               // clamped to DL_NNS = 16
  EXPECT_EQ(p.surplus(), 15u * 144 + 16 * 144 + 512 + 144);
  p = x86();
  p.optional_static_tls = 1024;
  EXPECT_EQ(p.surplus(), 2176u);
  p = x86();
  p.naudit = 1;  // auditors come on top of nns
  EXPECT_EQ(p.surplus(), 1952u);
}

TEST(StaticTlsSurplus, LegacyIgnoresTunables) {
  StaticTlsParams p = x86({2, 31});
  p.rtld_nns = 16;
  p.optional_static_tls = 0;
  p.naudit = 2;
  EXPECT_EQ(p.surplus(), 1664u);  // TLS_STATIC_SURPLUS = 64 + DL_NNS * 100
}

// Debian 11's 2.31 carries upstream ffb17e7ba3's accounting (LIBC_IE_TLS
// 192, no LEGACY_TLS): the static sizes its own ld.so reports under these
// settings (test/e2e/roots-static-tls.py) follow from these surpluses.
TEST(StaticTlsSurplus, Backport231) {
  StaticTlsParams p = x86({2, 31});
  p.surplus_backport = true;
  EXPECT_TRUE(p.surplus_accounting());
  EXPECT_EQ(p.surplus(), 1664u);  // the default is the historic value
  p.rtld_nns = 1;
  EXPECT_EQ(p.surplus(), 656u);
  p.rtld_nns = 2;
  EXPECT_EQ(p.surplus(), 992u);
  p.rtld_nns = 16;
  EXPECT_EQ(p.surplus(), 5696u);
  p = x86({2, 31});
  p.surplus_backport = true;
  p.naudit = 1;
  EXPECT_EQ(p.surplus(), 2000u);
  p = x86({2, 31});
  p.surplus_backport = true;
  EXPECT_EQ(p.apply_tunables("glibc.rtld.optional_static_tls=1024"), std::vector<std::string>{});
  EXPECT_EQ(p.surplus(), 2176u);
  EXPECT_FALSE(x86({2, 31}).surplus_accounting());
}

// ─── The numbers measured on glibc 2.36 x86_64 ──────────────────────────────

TEST(StaticTlsX86, LibcOnlyStartup) {
  StaticTlsArena a(x86(), {kLibc});
  EXPECT_EQ(a.used(), 144u);
  EXPECT_EQ(a.static_size(), 4224u);  // _dl_get_tls_static_info on the machine
  EXPECT_EQ(a.static_align(), 64u);
  EXPECT_EQ(a.bytes_left(), 1712u);
  StaticTlsParams p = x86();
  p.optional_static_tls = 0;
  EXPECT_EQ(StaticTlsArena(p, {kLibc}).static_size(), 3712u);
}

TEST(StaticTlsX86, Loads1712Fails1713) {
  StaticTlsArena a(x86(), {kLibc});
  StaticTlsArena b = a;
  EXPECT_TRUE(a.try_allocate(block(1712, 16), false).has_value());
  EXPECT_EQ(a.bytes_left(), 0u);
  EXPECT_EQ(b.bytes_needed(block(1713, 16)), 1713u);
  EXPECT_FALSE(b.try_allocate(block(1713, 16), false).has_value());
  EXPECT_EQ(b.used(), 144u);  // a refusal changes nothing
}

TEST(StaticTlsX86, OptionalStaticTls1024) {
  StaticTlsParams p = x86();
  p.optional_static_tls = 1024;
  StaticTlsArena a(p, {kLibc}), b(p, {kLibc});
  EXPECT_TRUE(a.try_allocate(block(2224, 16), false));
  EXPECT_FALSE(b.try_allocate(block(2225, 16), false));
}

TEST(StaticTlsX86, Nns5Loads1713) {
  StaticTlsParams p = x86();
  p.rtld_nns = 5;
  StaticTlsArena a(p, {kLibc});
  EXPECT_TRUE(a.try_allocate(block(1713, 16), false));
}

TEST(StaticTlsX86, OneAuditor) {
  // init_tls runs before libc is mapped: nothing is laid out at startup, and
  // the base libc and the auditor's libc take 144 bytes each from the
  // surplus: S = roundup(1952, 64) = 1984, room 1984 - 288 = 1696.
  StaticTlsParams p = x86();
  p.naudit = 1;
  StaticTlsArena a(p, {});
  ASSERT_TRUE(a.try_allocate(kLibc, false));
  ASSERT_TRUE(a.try_allocate(kLibc, false));
  StaticTlsArena b = a;
  EXPECT_TRUE(a.try_allocate(block(1696, 16), false));
  EXPECT_FALSE(b.try_allocate(block(1697, 16), false));
}

TEST(StaticTlsX86, AlignedBlockLandsAt256) {
  StaticTlsArena a(x86(), {kLibc});
  EXPECT_EQ(a.try_allocate(block(64, 64), false), 256u);
  EXPECT_EQ(a.used(), 256u);
  EXPECT_FALSE(a.try_allocate(block(1648, 16), false));
  EXPECT_TRUE(a.try_allocate(block(1600, 16), false));
}

// ─── x86 details from elf/dl-reloc.c and elf/dl-tls.c ───────────────────────

TEST(StaticTlsX86, FirstbyteOffsetCountsAgainstRoom) {
  // blsize = blocksize + firstbyte_offset is compared with the free bytes;
  // the block ends up at an offset congruent to -firstbyte modulo align.
  StaticTlsArena a(x86(), {kLibc}), b(x86(), {kLibc});
  EXPECT_EQ(a.bytes_needed(block(1704, 16, 8)), 1712u);
  EXPECT_TRUE(a.try_allocate(block(1704, 16, 8), false));
  EXPECT_FALSE(b.try_allocate(block(1705, 16, 8), false));
  StaticTlsArena c(x86(), {kLibc});
  std::optional<u64> off = c.try_allocate(block(100, 32, 8), false);
  ASSERT_TRUE(off);
  EXPECT_EQ((*off + 8) % 32, 0u);
  EXPECT_GE(*off, 244u);
}

TEST(StaticTlsX86, AlignmentAboveStaticAlignNeverFits) {
  StaticTlsArena a(x86(), {kLibc});
  EXPECT_FALSE(a.bytes_needed(block(8, 128)).has_value());
  EXPECT_FALSE(a.try_allocate(block(8, 128), false));
  EXPECT_FALSE(a.try_allocate(block(8, 128), true));
  // A startup module with a larger alignment raises static_align.
  StaticTlsArena b(x86(), {kLibc, block(16, 256)});
  EXPECT_EQ(b.static_align(), 256u);
  EXPECT_TRUE(b.try_allocate(block(8, 128), false));
}

TEST(StaticTlsX86, StartupGapIsReused) {
  // _dl_determine_tlsoffset: 8@1 at offset 8, 64@64 at 128 leaves the gap
  // (8, 64] free; 8@8 goes into it at 16, so used stays 128.
  StaticTlsArena a(x86(), {block(8, 1), block(64, 64), block(8, 8)});
  EXPECT_EQ(a.used(), 128u);
  EXPECT_EQ(a.static_size(), 128u + 1664 + 2368);  // roundup(1792, 64) = 1792
  // Without the small block at the end, the same layout.
  EXPECT_EQ(StaticTlsArena(x86(), {block(8, 1), block(64, 64)}).used(), 128u);
  // A block that does not fit the gap goes below.
  EXPECT_EQ(StaticTlsArena(x86(), {block(8, 1), block(64, 64), block(60, 8)}).used(), 192u);
}

TEST(StaticTlsX86, OptionalBudget) {
  // TLSDESC (optional) allocations count slack too and stop at the budget;
  // initial-exec ones may still use what is left.
  StaticTlsArena a(x86(), {kLibc});
  EXPECT_EQ(a.try_allocate(block(400, 16), true), 544u);
  EXPECT_EQ(a.optional_left(), 112u);
  EXPECT_TRUE(a.try_allocate(block(100, 16), true));  // use 112: slack included
  EXPECT_EQ(a.optional_left(), 0u);
  EXPECT_FALSE(a.try_allocate(block(1, 1), true));
  EXPECT_TRUE(a.try_allocate(block(1, 1), false));
}

TEST(StaticTlsX86, ReleaseOnlyAtTheEndAndNotTheSlack) {
  // elf/dl-close.c frees [offset - blocksize, offset): the slack below an
  // aligned block stays used (test/e2e/tls-differential.py shows it with a
  // real failed dlopen).
  StaticTlsArena a(x86(), {kLibc});
  std::optional<u64> off = a.try_allocate(block(64, 64), false);
  ASSERT_EQ(off, 256u);
  a.release(block(64, 64), *off, 144);
  EXPECT_EQ(a.used(), 192u);
  // A block that is not the last one is not reclaimed.
  StaticTlsArena b(x86(), {kLibc});
  u64 o1 = *b.try_allocate(block(100, 4), false);
  u64 o2 = *b.try_allocate(block(100, 4), false);
  b.release(block(100, 4), o1, 144);
  EXPECT_EQ(b.used(), o2);
  // Two contiguous blocks of one close merge and both come back, in either
  // order: 100@4 at 244, 200@4 at 444.
  StaticTlsArena c(x86(), {kLibc});
  u64 p1 = *c.try_allocate(block(100, 4), false);
  u64 p2 = *c.try_allocate(block(200, 4), false);
  ASSERT_EQ(p2, 444u);
  StaticTlsArena c2 = c;
  c.release_all({{block(200, 4), p2, p1}, {block(100, 4), p1, 144}});
  EXPECT_EQ(c.used(), 144u);
  c2.release_all({{block(100, 4), p1, 144}, {block(200, 4), p2, p1}});
  EXPECT_EQ(c2.used(), 144u);
  // Slack between them breaks the chunk: 200@8 lands at 448, [244, 248)
  // belongs to nobody, so only the later block comes back.
  StaticTlsArena d(x86(), {kLibc});
  u64 q1 = *d.try_allocate(block(100, 4), false);
  u64 q2 = *d.try_allocate(block(200, 8), false);
  ASSERT_EQ(q2, 448u);
  d.release_all({{block(200, 8), q2, q1}, {block(100, 4), q1, 144}});
  EXPECT_EQ(d.used(), 248u);
  // The optional budget is never given back.
  StaticTlsArena e(x86(), {kLibc});
  u64 r = *e.try_allocate(block(400, 16), true);
  e.release(block(400, 16), r, 144);
  EXPECT_EQ(e.used(), 144u);
  EXPECT_EQ(e.optional_left(), 112u);
}

// ─── glibc ≤ 2.31 ───────────────────────────────────────────────────────────

TEST(StaticTlsLegacy, Glibc231) {
  StaticTlsArena a(x86({2, 31}), {kLibc});
  // sizeof (struct pthread) was 2304 on x86_64 up to 2.31.
  EXPECT_EQ(a.static_size(), 1856u + 2304);
  EXPECT_EQ(a.bytes_left(), 1712u);
  // No optional budget: TLSDESC may take the whole surplus (BZ #25051).
  EXPECT_TRUE(a.try_allocate(block(1000, 16), true));
  StaticTlsArena b(x86(), {kLibc});
  EXPECT_FALSE(b.try_allocate(block(1000, 16), true));
}

// ─── aarch64 (TLS_DTV_AT_TP), worked from the sources ───────────────────────

TEST(StaticTlsAarch64, Parameters) {
  StaticTlsParams p = arm();
  EXPECT_EQ(p.abi, TlsAbi::DtvAtTp);
  EXPECT_EQ(p.tcb_size, 16u);       // sizeof (tcbhead_t)
  EXPECT_EQ(p.tcb_alignment, 32u);  // generic TCB_ALIGNMENT from 2.35
  EXPECT_EQ(arm({2, 34}).tcb_alignment, 16u);
  EXPECT_FALSE(StaticTlsParams::for_machine(elf::EM_RISCV, {2, 36}).has_value());
}

TEST(StaticTlsAarch64, SizeAndRoom) {
  // used0 = 16 + 152 = 168; static_size = roundup(168 + 1664, TCB_ALIGNMENT).
  StaticTlsArena a(arm(), {block(152, 8)});
  EXPECT_EQ(a.used(), 168u);
  EXPECT_EQ(a.static_size(), 1856u);  // roundup(1832, 32)
  EXPECT_EQ(a.bytes_left(), 1688u);
  StaticTlsArena old(arm({2, 34}), {block(152, 8)});
  EXPECT_EQ(old.static_size(), 1840u);  // roundup(1832, 16)
  EXPECT_EQ(old.bytes_left(), 1672u);
  StaticTlsArena b = a;
  EXPECT_TRUE(a.try_allocate(block(1688, 8), false));
  EXPECT_FALSE(b.try_allocate(block(1689, 8), false));
}

TEST(StaticTlsAarch64, PaddingAndFirstbyte) {
  StaticTlsArena a(arm(), {block(152, 8)});
  // offset = ALIGN_UP(168, 32) = 192; the 24 bytes of padding count.
  EXPECT_EQ(a.bytes_needed(block(100, 32)), 124u);
  EXPECT_EQ(a.try_allocate(block(100, 32), false), 192u);
  EXPECT_EQ(a.used(), 292u);
  // firstbyte 8 at align 16: offset = ALIGN_UP(292 - 8, 16) + 8 = 296.
  EXPECT_EQ(a.try_allocate(block(40, 16, 8), false), 296u);
  EXPECT_EQ(a.used(), 336u);
  // dl-close.c on DTV_AT_TP gives the padding back (l_tls_firstbyte_offset
  // holds the old used value).
  a.release(block(40, 16, 8), 296, 292);
  EXPECT_EQ(a.used(), 292u);
}

TEST(StaticTlsAarch64, StartupGapIsReused) {
  // After the TCB (16): 8@1 at 16..24, 64@64 at 64 leaves [24, 64) free,
  // 8@8 goes to 24. used = 128.
  StaticTlsArena a(arm(), {block(8, 1), block(64, 64), block(8, 8)});
  EXPECT_EQ(a.used(), 128u);
  EXPECT_EQ(a.static_align(), 64u);
  EXPECT_EQ(a.static_size(), 1792u);  // roundup(128 + 1664, 32)
}

TEST(StaticTlsRseq, ExtraBlockFrom241) {
  // 2.41 appends the 32-byte rseq area (aligned to 32) after the startup
  // blocks: used0 = roundup(144, 32) + 32 = 192 on x86.
  StaticTlsArena a(x86({2, 41}), {kLibc});
  EXPECT_EQ(a.used(), 192u);
  // The surplus is not touched: static_size = roundup(192 + 1664, 64).
  EXPECT_EQ(a.static_size(), 1856u + 2368);
  EXPECT_EQ(a.bytes_left(), 1664u);
}

// ─── GLIBC_TUNABLES ─────────────────────────────────────────────────────────
// glibc 2.36 results are also checked against the real loader by
// tls-differential.py; the other releases follow elf/dl-tunables.c there.

StaticTlsParams tuned(const std::string& s, GlibcVersion g = {2, 36},
                      std::vector<std::string>* notes = nullptr) {
  StaticTlsParams p = x86(g);
  std::vector<std::string> n = p.apply_tunables(s);
  if (notes) *notes = n;
  return p;
}

TEST(StaticTlsTunables, Basic) {
  EXPECT_EQ(tuned("glibc.rtld.nns=5").rtld_nns, 5u);
  EXPECT_EQ(tuned("glibc.rtld.optional_static_tls=1024").optional_static_tls, 1024u);
  StaticTlsParams p = tuned("glibc.rtld.nns=2:glibc.rtld.optional_static_tls=256");
  EXPECT_EQ(p.rtld_nns, 2u);
  EXPECT_EQ(p.optional_static_tls, 256u);
  EXPECT_EQ(tuned("glibc.malloc.check=3:glibc.rtld.nns=7").rtld_nns, 7u);
  EXPECT_EQ(tuned("foo:glibc.rtld.nns=3").rtld_nns, 3u);  // a name ended by ':'
  EXPECT_EQ(tuned("glibc.rtld.nns=0x10").rtld_nns, 16u);
  EXPECT_EQ(tuned("glibc.rtld.nns=010").rtld_nns, 8u);
  EXPECT_EQ(tuned("glibc.rtld.optional_static_tls=").optional_static_tls, 0u);
}

TEST(StaticTlsTunables, OutOfRangeAndUnknownAreIgnored) {
  std::vector<std::string> notes;
  EXPECT_EQ(tuned("glibc.rtld.nns=0", {2, 36}, &notes).rtld_nns, 4u);
  EXPECT_EQ(notes.size(), 1u);
  EXPECT_EQ(tuned("glibc.rtld.nns=17").rtld_nns, 4u);
  EXPECT_EQ(tuned("glibc.rtld.nns=-1").rtld_nns, 4u);
  EXPECT_EQ(tuned("glibc.rtld.nnsx=3", {2, 36}, &notes).rtld_nns, 4u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("not a tunable"), std::string::npos);
  EXPECT_TRUE(tuned("glibc.malloc.check=3", {2, 36}, &notes).rtld_nns == 4 && notes.empty());
}

TEST(StaticTlsTunables, OldParserIsLenient) {
  // Up to 2.38: the leading number counts, a value may contain '=', a
  // trailing name without '=' only stops the parse, repeats apply in order.
  EXPECT_EQ(tuned("glibc.rtld.nns=5x").rtld_nns, 5u);
  EXPECT_EQ(tuned("glibc.rtld.nns=2=3").rtld_nns, 2u);
  EXPECT_EQ(tuned("glibc.rtld.nns=3:bogus").rtld_nns, 3u);
  EXPECT_EQ(tuned("glibc.rtld.nns=2:glibc.rtld.nns=99").rtld_nns, 2u);
  EXPECT_EQ(tuned("glibc.rtld.nns=99:glibc.rtld.nns=2").rtld_nns, 2u);
}

TEST(StaticTlsTunables, NewParserIsStrict) {
  // 2.39: a bad number is ignored; '=' in a value or a name without a value
  // makes the whole string invalid.
  EXPECT_EQ(tuned("glibc.rtld.nns=5x", {2, 39}).rtld_nns, 4u);
  EXPECT_EQ(tuned("glibc.rtld.nns=2=3", {2, 39}).rtld_nns, 4u);
  EXPECT_EQ(tuned("glibc.rtld.nns=3:bogus", {2, 39}).rtld_nns, 4u);
  EXPECT_EQ(tuned("glibc.rtld.nns=3:glibc.rtld.optional_static_tls=9", {2, 39}).rtld_nns, 3u);
  // 2.39 still applies repeats in order; 2.40 keeps only the last one, even
  // when that one is out of range.
  EXPECT_EQ(tuned("glibc.rtld.nns=2:glibc.rtld.nns=99", {2, 39}).rtld_nns, 2u);
  EXPECT_EQ(tuned("glibc.rtld.nns=2:glibc.rtld.nns=99", {2, 40}).rtld_nns, 4u);
}

TEST(StaticTlsTunables, IntArithmeticWraps) {
  // tls_static_surplus() adds in int: 2^32 becomes 0, -64 stays -64.
  EXPECT_EQ(tuned("glibc.rtld.optional_static_tls=4294967296").surplus(), 1152u);
  EXPECT_EQ(tuned("glibc.rtld.optional_static_tls=-64").surplus(), 1088u);
}

TEST(StaticTlsTunables, OlderReleases) {
  std::vector<std::string> notes;
  StaticTlsParams p = tuned("glibc.rtld.nns=8", {2, 31}, &notes);
  EXPECT_EQ(p.surplus(), 1664u);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("2.32"), std::string::npos);
  tuned("glibc.rtld.nns=8", {2, 25}, &notes);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("no GLIBC_TUNABLES"), std::string::npos);
}

}  // namespace
