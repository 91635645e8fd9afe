// elf-test.cc — the ELF reader against three kinds of truth:
//  (a) synthetic objects from elf-builder.h in all four class/byte-order
//      combinations, where every field the reader returns is known exactly;
//  (b) real objects of this machine, compared field by field with what
//      binutils `readelf -W` prints for them (run with popen);
//  (c) deliberately broken inputs, which must give a ParseError with a clear
//      message and never a crash, a hang or a huge allocation.
#include "elf/elf.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "elf-builder.h"
#include "run-command.h"

using namespace mld;
using namespace mld::elf;
using mld::test::build_elf;
using mld::test::ElfLayout;
using mld::test::ElfSpec;

namespace {

// ─── helpers ────────────────────────────────────────────────────────────

ByteView view(const std::vector<u8>& b) { return ByteView(b.data(), b.size()); }

// Calls every lazy decoder; used where only "no crash" is asserted.
void decode_everything(const ElfFile& f) {
  (void)f.version_needs();
  (void)f.version_defs();
  (void)f.dynamic_symbols();
  (void)f.tls_relocations();
  (void)f.build_id();
  (void)f.comments();
}

// The ParseError message of `fn`, or "" if it does not throw one.
template <typename Fn>
std::string parse_error_of(Fn fn) {
  try {
    fn();
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_PARSE_ERROR(expr, substring)                              \
  do {                                                                   \
    std::string msg_ = parse_error_of([&] { (void)(expr); });            \
    EXPECT_NE(msg_, "") << "expected a ParseError from " #expr;          \
    EXPECT_NE(msg_.find(substring), std::string::npos)                   \
        << "message \"" << msg_ << "\" lacks \"" << (substring) << "\""; \
  } while (0)

std::vector<u8> read_file(const std::string& path) {
  std::vector<u8> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return out;
  u8 buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

// ─── (a) synthetic objects ──────────────────────────────────────────────

const std::vector<u8> kBuildId = {0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
                                  0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0xff};

// Relocation numbers per machine: {IE, IE2, DESC, GD-mod, GD-off, non-TLS, JUMP_SLOT}.
struct RelocNumbers {
  u32 ie, ie2, desc, dtpmod, dtpoff, other, jump_slot;
};
RelocNumbers numbers_for(u16 machine) {
  if (machine == EM_386) return {14, 37, 41, 35, 36, 8, 7};
  if (machine == EM_AARCH64) return {1030, 1030, 1031, 1028, 1029, 1027, 1026};
  return {18, 23, 36, 16, 17, 8, 7};
}

ElfSpec full_spec(bool is64, bool be, u16 machine) {
  ElfSpec s;
  s.is64 = is64;
  s.big_endian = be;
  s.machine = machine;
  s.rela = machine != EM_386;
  s.os_abi = 3;
  s.e_flags = 0x5;
  s.interp = "/lib/ld-test.so.1";
  s.tls = ElfSpec::Tls{0x10, 0x90, 0x40, 0x8};
  s.gnu_stack_flags = 6;  // PF_R | PF_W
  s.needed = {"libc.so.6", "libm.so.6", "libfoo.so"};
  s.soname = "libx.so.1";
  s.rpath = "/opt/x/lib:$ORIGIN";
  s.runpath = "$ORIGIN/../lib";
  s.audit = "libaudit.so";
  s.depaudit = "libdepaudit.so";
  s.flags = DF_STATIC_TLS | DF_BIND_NOW;
  s.flags_1 = DF_1_NOW | DF_1_NODEFLIB;
  s.verdef = {
      {1, VER_FLG_BASE, {"libx.so.1"}}, {2, 0, {"LIBX_1.0"}}, {3, 0, {"LIBX_2.0", "LIBX_1.0"}}};
  s.verneed = {{"libc.so.6", {{"GLIBC_2.2.5", 0, 4}, {"GLIBC_2.34", 0, 5}}},
               {"libm.so.6", {{"GLIBC_2.29", VER_FLG_WEAK, 6}}}};
  s.dynsym = {
      {"tls_var", 0x10, 4, STT_TLS, STB_GLOBAL, 5, 2},
      {"ext_tls", 0, 0, STT_TLS, STB_GLOBAL, 0, 4},
      {"func_hidden", 0x1234, 42, STT_FUNC, STB_GLOBAL, 7, 0x8003},
      {"malloc", 0, 0, STT_FUNC, STB_GLOBAL, 0, 5},
      {"plain", 0x2000, 8, STT_OBJECT, STB_WEAK, 9, 1},
      {"cosh", 0, 0, STT_FUNC, STB_WEAK, 0, 6},
  };
  RelocNumbers n = numbers_for(machine);
  s.relocs = {{0x3000, n.ie, 1, 0},
              {0x3008, n.ie2, 0, 16},
              {0x3010, n.other, 0, 0x99},
              {0x3018, n.dtpmod, 2, 0},
              {0x3020, n.dtpoff, 2, 0}};
  s.plt_relocs = {{0x4000, n.jump_slot, 4, 0}, {0x4008, n.desc, 2, 0}};
  s.notes = {{"GNU", 5, {1, 2, 3, 4, 5, 6, 7, 8}}, {"GNU", 3, kBuildId}};
  s.comments = {"GCC: (Debian 12.2.0-14) 12.2.0", "clang version 14.0.6"};
  return s;
}

struct Combo {
  bool is64, be;
  ElfSpec::Hash hash;
};
std::string combo_name(const ::testing::TestParamInfo<Combo>& i) {
  const char* h = i.param.hash == ElfSpec::Hash::Sysv   ? "SysvHash"
                  : i.param.hash == ElfSpec::Hash::Gnu  ? "GnuHash"
                  : i.param.hash == ElfSpec::Hash::Both ? "BothHashes"
                                                        : "SectionCount";
  return std::string(i.param.is64 ? "Elf64" : "Elf32") + (i.param.be ? "BE" : "LE") + h;
}

class Synthetic : public ::testing::TestWithParam<Combo> {};

// Every accessor returns exactly what the builder wrote, in ELF32/ELF64 and
// both byte orders, with the symbol count from each source (DT_HASH,
// DT_GNU_HASH, the .dynsym section header).
TEST_P(Synthetic, RoundTripsEveryField) {
  const Combo c = GetParam();
  const u16 machine = c.is64 ? EM_X86_64 : EM_386;
  ElfSpec s = full_spec(c.is64, c.be, machine);
  s.hash = c.hash;
  ElfLayout L;
  std::vector<u8> bytes = build_elf(s, &L);
  ElfFile f = ElfFile::parse(view(bytes));

  EXPECT_EQ(f.is_64(), c.is64);
  EXPECT_EQ(f.big_endian(), c.be);
  EXPECT_EQ(f.os_abi(), 3);
  EXPECT_EQ(f.e_type(), ET_DYN);
  EXPECT_EQ(f.e_machine(), machine);
  EXPECT_EQ(f.e_flags(), 0x5u);
  ASSERT_EQ(f.program_headers().size(), 7u);
  EXPECT_EQ(f.program_headers()[0].p_type, PT_LOAD);
  EXPECT_EQ(f.program_headers()[1].p_offset, L.seg2_offset);
  EXPECT_EQ(f.program_headers()[1].p_vaddr, L.seg2_offset + L.seg2_delta);
  EXPECT_EQ(f.program_headers()[1].p_flags, 6u);
  EXPECT_EQ(f.interp().value_or(""), "/lib/ld-test.so.1");
  ASSERT_TRUE(f.tls().has_value());
  EXPECT_EQ(f.tls()->blocksize, 0x90u);
  EXPECT_EQ(f.tls()->align, 0x40u);
  EXPECT_EQ(f.tls()->initimage_size, 0x10u);
  EXPECT_EQ(f.tls()->firstbyte_offset, 0x8u);
  EXPECT_EQ(f.gnu_stack_flags().value_or(0), 6u);

  EXPECT_TRUE(f.has_dynamic());
  EXPECT_EQ(f.needed(), (std::vector<std::string_view>{"libc.so.6", "libm.so.6", "libfoo.so"}));
  EXPECT_EQ(f.soname().value_or(""), "libx.so.1");
  EXPECT_EQ(f.rpath().value_or(""), "/opt/x/lib:$ORIGIN");
  EXPECT_EQ(f.runpath().value_or(""), "$ORIGIN/../lib");
  EXPECT_EQ(f.audit().value_or(""), "libaudit.so");
  EXPECT_EQ(f.depaudit().value_or(""), "libdepaudit.so");
  EXPECT_EQ(f.dt_flags(), DF_STATIC_TLS | DF_BIND_NOW);
  EXPECT_EQ(f.dt_flags_1(), DF_1_NOW | DF_1_NODEFLIB);

  // vaddr -> offset through both PT_LOADs; .bss and unmapped addresses fail.
  EXPECT_EQ(f.vaddr_to_offset(L.dynstr), L.dynstr);
  EXPECT_EQ(f.vaddr_to_offset(L.dynamic + L.seg2_delta), L.dynamic);
  EXPECT_FALSE(f.vaddr_to_offset(L.dynamic).has_value());
  EXPECT_FALSE(f.vaddr_to_offset(u64{bytes.size()} + L.seg2_delta + 0x100).has_value());

  std::vector<VersionNeed> needs = f.version_needs();
  ASSERT_EQ(needs.size(), 2u);
  EXPECT_EQ(needs[0].file, "libc.so.6");
  ASSERT_EQ(needs[0].entries.size(), 2u);
  EXPECT_EQ(needs[0].entries[0].name, "GLIBC_2.2.5");
  EXPECT_EQ(needs[0].entries[0].hash, 0x09691a75u);  // the well-known hash of GLIBC_2.2.5
  EXPECT_EQ(needs[0].entries[0].other, 4);
  EXPECT_EQ(needs[0].entries[1].name, "GLIBC_2.34");
  EXPECT_EQ(needs[0].entries[1].other, 5);
  EXPECT_EQ(needs[1].file, "libm.so.6");
  ASSERT_EQ(needs[1].entries.size(), 1u);
  EXPECT_EQ(needs[1].entries[0].name, "GLIBC_2.29");
  EXPECT_EQ(needs[1].entries[0].flags, VER_FLG_WEAK);
  EXPECT_EQ(needs[1].entries[0].other, 6);

  std::vector<VersionDef> defs = f.version_defs();
  ASSERT_EQ(defs.size(), 3u);
  EXPECT_EQ(defs[0].index, 1);
  EXPECT_EQ(defs[0].flags, VER_FLG_BASE);
  EXPECT_EQ(defs[0].name, "libx.so.1");
  EXPECT_EQ(defs[1].index, 2);
  EXPECT_EQ(defs[1].name, "LIBX_1.0");
  EXPECT_EQ(defs[1].hash, mld::test::elf_sysv_hash("LIBX_1.0"));
  EXPECT_TRUE(defs[1].parents.empty());
  EXPECT_EQ(defs[2].name, "LIBX_2.0");
  EXPECT_EQ(defs[2].parents, (std::vector<std::string_view>{"LIBX_1.0"}));

  std::vector<DynamicSymbol> syms = f.dynamic_symbols();
  ASSERT_EQ(syms.size(), 7u);
  EXPECT_EQ(syms[0].name, "");
  EXPECT_FALSE(syms[0].defined());
  for (size_t i = 0; i < s.dynsym.size(); i++) {
    SCOPED_TRACE(s.dynsym[i].name);
    const DynamicSymbol& y = syms[i + 1];
    EXPECT_EQ(y.name, s.dynsym[i].name);
    EXPECT_EQ(y.value, s.dynsym[i].value);
    EXPECT_EQ(y.size, s.dynsym[i].size);
    EXPECT_EQ(y.type, s.dynsym[i].type);
    EXPECT_EQ(y.bind, s.dynsym[i].bind);
    EXPECT_EQ(y.shndx, s.dynsym[i].shndx);
    EXPECT_EQ(y.version_index, s.dynsym[i].versym & 0x7fff);
    EXPECT_EQ(y.version_hidden, (s.dynsym[i].versym & 0x8000) != 0);
  }
  EXPECT_EQ(syms[1].version, "LIBX_1.0");
  EXPECT_EQ(syms[2].version, "GLIBC_2.2.5");
  EXPECT_EQ(syms[3].version, "LIBX_2.0");
  EXPECT_EQ(syms[4].version, "GLIBC_2.34");
  EXPECT_EQ(syms[5].version, "");  // VER_NDX_GLOBAL
  EXPECT_EQ(syms[6].version, "GLIBC_2.29");

  RelocNumbers n = numbers_for(machine);
  std::vector<TlsRelocation> rel = f.tls_relocations();
  ASSERT_EQ(rel.size(), 5u);
  EXPECT_EQ(rel[0].type, n.ie);
  EXPECT_EQ(rel[0].kind, TlsRelocKind::InitialExec);
  EXPECT_EQ(rel[0].symbol_index, 1u);
  EXPECT_EQ(rel[0].symbol_name, "tls_var");
  EXPECT_TRUE(rel[0].symbol_defined_here);
  EXPECT_EQ(rel[1].type, n.ie2);
  EXPECT_EQ(rel[1].kind, TlsRelocKind::InitialExec);
  EXPECT_EQ(rel[1].symbol_index, 0u);
  EXPECT_EQ(rel[1].symbol_name, "");
  EXPECT_EQ(rel[2].kind, TlsRelocKind::GeneralDynamic);
  EXPECT_EQ(rel[2].symbol_name, "ext_tls");
  EXPECT_FALSE(rel[2].symbol_defined_here);
  EXPECT_EQ(rel[3].type, n.dtpoff);
  EXPECT_EQ(rel[3].kind, TlsRelocKind::GeneralDynamic);
  EXPECT_EQ(rel[4].type, n.desc);  // from DT_JMPREL
  EXPECT_EQ(rel[4].kind, TlsRelocKind::Descriptor);
  EXPECT_EQ(rel[4].symbol_name, "ext_tls");

  EXPECT_EQ(f.build_id().value_or(""), "deadbeef000102030405060708090a0b0c0d0eff");
  EXPECT_EQ(f.comments(), (std::vector<std::string_view>{"GCC: (Debian 12.2.0-14) 12.2.0",
                                                         "clang version 14.0.6"}));
  std::optional<ByteView> comment = f.progbits_section(".comment");
  ASSERT_TRUE(comment.has_value());
  EXPECT_NE(comment->as_string_view().find("clang version 14.0.6"), std::string_view::npos);
  EXPECT_FALSE(f.progbits_section(".no-such-section").has_value());

  // The cached tables are the decoded ones, decoded once and kept.
  const std::vector<VersionNeed>& cached_needs = f.cached_version_needs();
  ASSERT_EQ(cached_needs.size(), needs.size());
  EXPECT_EQ(cached_needs[1].entries[0].name, "GLIBC_2.29");
  EXPECT_EQ(&cached_needs, &f.cached_version_needs());
  const std::vector<VersionDef>& cached_defs = f.cached_version_defs();
  ASSERT_EQ(cached_defs.size(), defs.size());
  EXPECT_EQ(cached_defs[2].parents, defs[2].parents);
  EXPECT_EQ(&cached_defs, &f.cached_version_defs());
}

INSTANTIATE_TEST_SUITE_P(AllClassesAndByteOrders, Synthetic,
                         ::testing::Values(Combo{true, false, ElfSpec::Hash::Sysv},
                                           Combo{true, true, ElfSpec::Hash::Sysv},
                                           Combo{false, false, ElfSpec::Hash::Sysv},
                                           Combo{false, true, ElfSpec::Hash::Sysv},
                                           Combo{true, false, ElfSpec::Hash::Gnu},
                                           Combo{true, true, ElfSpec::Hash::Gnu},
                                           Combo{false, false, ElfSpec::Hash::Gnu},
                                           Combo{false, true, ElfSpec::Hash::Gnu},
                                           Combo{true, false, ElfSpec::Hash::None},
                                           Combo{false, true, ElfSpec::Hash::None},
                                           Combo{true, true, ElfSpec::Hash::Both}),
                         combo_name);

// AArch64 numbers its TLS relocations differently (1028..1031).
TEST(SyntheticElf, AArch64TlsRelocations) {
  ElfSpec s = full_spec(true, false, EM_AARCH64);
  std::vector<u8> b = build_elf(s);
  ElfFile f = ElfFile::parse(view(b));
  std::vector<TlsRelocation> rel = f.tls_relocations();
  ASSERT_EQ(rel.size(), 5u);
  EXPECT_EQ(rel[0].type, 1030u);
  EXPECT_EQ(rel[0].kind, TlsRelocKind::InitialExec);
  EXPECT_EQ(rel[2].type, 1028u);
  EXPECT_EQ(rel[2].kind, TlsRelocKind::GeneralDynamic);
  EXPECT_EQ(rel[4].type, 1031u);
  EXPECT_EQ(rel[4].kind, TlsRelocKind::Descriptor);
}

// A machine the classifier does not know yields no TLS relocations rather
// than misreading another machine's numbers.
TEST(SyntheticElf, UnknownMachineHasNoTlsRelocations) {
  ElfSpec s = full_spec(true, true, EM_PPC64);
  std::vector<u8> b = build_elf(s);
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_TRUE(f.tls_relocations().empty());
  EXPECT_EQ(f.needed().size(), 3u);
  EXPECT_EQ(machine_name(f.e_machine()), "PowerPC64");
}

// Without PT_NOTE the build-id comes from the SHT_NOTE section.
TEST(SyntheticElf, BuildIdFromSectionWhenNoPtNote) {
  ElfSpec s = full_spec(false, true, EM_386);
  s.notes_in_segment = false;
  std::vector<u8> b = build_elf(s);
  ElfFile f = ElfFile::parse(view(b));
  for (const ProgramHeader& ph : f.program_headers()) EXPECT_NE(ph.p_type, PT_NOTE);
  EXPECT_EQ(f.build_id().value_or(""), "deadbeef000102030405060708090a0b0c0d0eff");
}

TEST(SyntheticElf, NoDynamicSection) {
  // A static executable: no PT_DYNAMIC, but TLS and notes still read.
  ElfSpec s;
  s.type = ET_EXEC;
  s.dynamic = false;
  s.tls = ElfSpec::Tls{0, 0x20, 0x10, 0};
  s.notes = {{"GNU", 3, {1, 2, 3, 4}}};
  std::vector<u8> b = build_elf(s);
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_FALSE(f.has_dynamic());
  EXPECT_TRUE(f.needed().empty());
  EXPECT_FALSE(f.soname().has_value());
  EXPECT_TRUE(f.version_needs().empty());
  EXPECT_TRUE(f.version_defs().empty());
  EXPECT_TRUE(f.dynamic_symbols().empty());
  EXPECT_TRUE(f.tls_relocations().empty());
  EXPECT_EQ(f.build_id().value_or(""), "01020304");
  EXPECT_EQ(f.tls()->blocksize, 0x20u);
  EXPECT_EQ(f.tls()->firstbyte_offset, 0u);
}

TEST(SyntheticElf, EmptyTlsSegmentIsIgnoredAndEmptyDynamicIsNone) {
  // glibc skips PT_TLS with p_memsz 0 and PT_DYNAMIC with p_filesz 0
  // (separate debug-info files).
  ElfSpec s;
  s.tls = ElfSpec::Tls{0, 0, 8, 0};
  ElfLayout L;
  std::vector<u8> b = build_elf(s, &L);
  const u64 dyn_ph = L.phoff + 56 * 3;  // LOAD, LOAD, TLS, DYNAMIC
  ASSERT_EQ(b[dyn_ph], PT_DYNAMIC);
  mld::test::put_u64(b, dyn_ph + 32, 0, false);  // p_filesz = 0
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_FALSE(f.tls().has_value());
  EXPECT_FALSE(f.has_dynamic());
}

TEST(SyntheticElf, RelocatableObjectWithoutProgramHeaders) {
  // Like a .o: no program headers at all, a .comment section.
  ElfSpec s;
  s.dynamic = false;
  s.comments = {"GCC: (GNU) 13.1.0"};
  std::vector<u8> b = build_elf(s);
  mld::test::put_u16(b, 16, 1, false);  // ET_REL
  mld::test::put_u16(b, 56, 0, false);  // e_phnum = 0
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_TRUE(f.program_headers().empty());
  EXPECT_FALSE(f.has_dynamic());
  EXPECT_EQ(f.comments(), (std::vector<std::string_view>{"GCC: (GNU) 13.1.0"}));
  EXPECT_FALSE(f.build_id().has_value());
}

// DT_SONAME appears before DT_STRTAB (as linkers write it) and twice: the
// last one counts, as in glibc's elf_get_dynamic_info.
TEST(SyntheticElf, DynamicStringsMayPrecedeStrtabAndLastTagWins) {
  ElfSpec s;
  s.soname = "first.so";
  s.extra_dynamic = {{DT_SONAME, 0}};  // offset 0: the empty string
  std::vector<u8> b = build_elf(s);
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_EQ(f.soname().value_or("unset"), "");
}

// DT_STRSZ is mandatory, but a file without it still has readable strings.
TEST(SyntheticElf, MissingStrszUsesRestOfFile) {
  ElfSpec s;
  s.needed = {"liba.so"};
  s.emit_strsz = false;
  std::vector<u8> b = build_elf(s);
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_EQ(f.needed(), (std::vector<std::string_view>{"liba.so"}));
}

TEST(SyntheticElf, JmprelInsideRelaIsCountedOnce) {
  // Older linkers make DT_RELA/DT_RELASZ cover .rela.plt as well.
  ElfSpec s = full_spec(true, false, EM_X86_64);
  s.relocs.clear();
  s.plt_relocs = {{0x4000, 18, 1, 0}, {0x4008, 36, 2, 0}};
  ElfLayout L;
  std::vector<u8> b = build_elf(s, &L);
  // Point DT_RELA/DT_RELASZ at the JMPREL table.
  s.extra_dynamic = {{DT_RELA, L.jmprel}, {DT_RELASZ, 48}, {DT_RELAENT, 24}};
  b = build_elf(s, &L);
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_EQ(f.tls_relocations().size(), 2u);
}

// A DT_GNU_HASH that hashes no symbol says nothing about how many .dynsym
// holds (Open MPI's libmpi_usempif08-gfortran.so.40: symoffset 1, four
// undefined symbols): the section header decides, symoffset only without one.
TEST(SyntheticElf, EmptyGnuHashLeavesTheCountToTheSectionHeader) {
  ElfSpec s = full_spec(true, false, EM_X86_64);
  s.hash = ElfSpec::Hash::Gnu;
  ElfLayout L;
  std::vector<u8> b = build_elf(s, &L);
  const size_t symbols = s.dynsym.size() + 1;
  ASSERT_GT(symbols, 2u);
  mld::test::put_u32(b, L.gnu_hash + 16 + 8, 0, false);  // the one bucket: empty
  EXPECT_EQ(ElfFile::parse(view(b)).dynamic_symbols().size(), symbols);
  s.section_headers = false;
  b = build_elf(s, &L);
  mld::test::put_u32(b, L.gnu_hash + 16 + 8, 0, false);
  EXPECT_EQ(ElfFile::parse(view(b)).dynamic_symbols().size(), 1u);  // symoffset
}

TEST(ElfBasics, MagicAndMachineNames) {
  EXPECT_TRUE(
      has_elf_magic(ByteView(std::string_view("\x7f"
                                              "ELF\x02",
                                              5))));
  EXPECT_FALSE(
      has_elf_magic(ByteView(std::string_view("\x7f"
                                              "EL",
                                              3))));
  EXPECT_FALSE(has_elf_magic(ByteView(std::string_view("#!/bin/sh\n"))));
  EXPECT_EQ(machine_name(EM_X86_64), "x86-64");
  EXPECT_EQ(machine_name(EM_AARCH64), "AArch64");
  EXPECT_EQ(machine_name(EM_386), "Intel 80386");
  EXPECT_EQ(machine_name(0x7777), "unknown machine");
}

// ─── (b) oracle: readelf on real objects ────────────────────────────────

using Cmd = mld::test::CommandResult;
Cmd run(const std::string& cmd) { return mld::test::run_command(cmd); }
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}
std::string readelf(const std::string& opts, const std::string& path) {
  return run("LC_ALL=C readelf -W " + opts + " " + quote(path) + " 2>/dev/null").out;
}
std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}
std::vector<std::string> tokens_of(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string t;
  while (in >> t) out.push_back(t);
  return out;
}
std::string bracketed(const std::string& s) {
  size_t a = s.find('['), b = s.rfind(']');
  return a == std::string::npos || b == std::string::npos ? "" : s.substr(a + 1, b - a - 1);
}

// readelf's names for DT_FLAGS and DT_FLAGS_1 bits (binutils readelf.c).
u64 flag_bits(const std::string& list, bool flags_1) {
  // Name tables, laid out by hand (clang-format would put one flag per line).
  // clang-format off
  static const std::map<std::string, u64> f = {
      {"ORIGIN", 0x1}, {"SYMBOLIC", 0x2}, {"TEXTREL", 0x4}, {"BIND_NOW", 0x8},
      {"STATIC_TLS", 0x10}};
  static const std::map<std::string, u64> f1 = {
      {"NOW", 0x1}, {"GLOBAL", 0x2}, {"GROUP", 0x4}, {"NODELETE", 0x8}, {"LOADFLTR", 0x10},
      {"INITFIRST", 0x20}, {"NOOPEN", 0x40}, {"ORIGIN", 0x80}, {"DIRECT", 0x100},
      {"TRANS", 0x200}, {"INTERPOSE", 0x400}, {"NODEFLIB", 0x800}, {"NODUMP", 0x1000},
      {"CONFALT", 0x2000}, {"ENDFILTEE", 0x4000}, {"DISPRELDNE", 0x8000},
      {"DISPRELPND", 0x10000}, {"NODIRECT", 0x20000}, {"IGNMULDEF", 0x40000},
      {"NOKSYMS", 0x80000}, {"NOHDR", 0x100000}, {"EDITED", 0x200000},
      {"NORELOC", 0x400000}, {"SYMINTPOSE", 0x800000}, {"GLOBAUDIT", 0x1000000},
      {"SINGLETON", 0x2000000}, {"STUB", 0x4000000}, {"PIE", 0x8000000},
      {"KMOD", 0x10000000}, {"WEAKFILTER", 0x20000000}, {"NOCOMMON", 0x40000000}};
  // clang-format on
  u64 bits = 0;
  for (const std::string& t : tokens_of(list)) {
    if (t == "Flags:") continue;
    const std::map<std::string, u64>& m = flags_1 ? f1 : f;
    auto it = m.find(t);
    if (it != m.end()) {
      bits |= it->second;
    } else if (t.rfind("0x", 0) == 0) {
      bits |= std::stoull(t, nullptr, 16);
    } else {
      ADD_FAILURE() << "unknown readelf flag name " << t;
    }
  }
  return bits;
}

std::string type_name(u8 t) {
  switch (t) {
    case 0: return "NOTYPE";
    case 1: return "OBJECT";
    case 2: return "FUNC";
    case 3: return "SECTION";
    case 4: return "FILE";
    case 5: return "COMMON";
    case 6: return "TLS";
    case 10: return "IFUNC";
  }
  return "?";
}
std::string bind_name(u8 b) {
  switch (b) {
    case 0: return "LOCAL";
    case 1: return "GLOBAL";
    case 2: return "WEAK";
    case 10: return "UNIQUE";
  }
  return "?";
}
std::string ndx_name(u16 n) {
  if (n == 0) return "UND";
  if (n == 0xfff1) return "ABS";
  if (n == 0xfff2) return "COM";
  return std::to_string(n);
}

// Compares everything ElfFile decodes from `path` with readelf's output.
void compare_with_readelf(const std::string& path) {
  SCOPED_TRACE(path);
  MappedFile m = MappedFile::open(path);
  ElfFile f = ElfFile::parse(m.view());

  // ── program headers (-l) ──
  {
    std::vector<std::string> ls = lines_of(readelf("-l", path));
    std::vector<std::vector<std::string>> rows;
    bool in = false;
    std::optional<std::string> interp;
    for (const std::string& l : ls) {
      if (l.find("Program Headers:") != std::string::npos) {
        in = true;
        continue;
      }
      if (!in) continue;
      if (l.find("Requesting program interpreter:") != std::string::npos) {
        std::string b = bracketed(l);
        interp = b.substr(b.find(": ") + 2);
        continue;
      }
      std::vector<std::string> t = tokens_of(l);
      if (t.empty()) break;
      if (t[0] == "Type") continue;
      rows.push_back(t);
    }
    ASSERT_EQ(rows.size(), f.program_headers().size());
    for (size_t i = 0; i < rows.size(); i++) {
      const ProgramHeader& ph = f.program_headers()[i];
      const std::vector<std::string>& t = rows[i];
      ASSERT_GE(t.size(), 8u);
      EXPECT_EQ(std::stoull(t[1], nullptr, 16), ph.p_offset) << "phdr " << i;
      EXPECT_EQ(std::stoull(t[2], nullptr, 16), ph.p_vaddr) << "phdr " << i;
      EXPECT_EQ(std::stoull(t[4], nullptr, 16), ph.p_filesz) << "phdr " << i;
      EXPECT_EQ(std::stoull(t[5], nullptr, 16), ph.p_memsz) << "phdr " << i;
      EXPECT_EQ(std::stoull(t.back(), nullptr, 16), ph.p_align) << "phdr " << i;
      if (t[0] == "TLS" && ph.p_memsz > 0) {
        ASSERT_TRUE(f.tls().has_value());
        EXPECT_EQ(f.tls()->blocksize, std::stoull(t[5], nullptr, 16));
        EXPECT_EQ(f.tls()->align, std::stoull(t.back(), nullptr, 16));
        EXPECT_EQ(f.tls()->initimage_size, std::stoull(t[4], nullptr, 16));
      }
      if (t[0] == "GNU_STACK") {
        EXPECT_TRUE(f.gnu_stack_flags().has_value());
      }
    }
    EXPECT_EQ(f.interp().has_value(), interp.has_value());
    if (interp && f.interp()) {
      EXPECT_EQ(*f.interp(), *interp);
    }
  }

  // ── dynamic section (-d) ──
  {
    std::string out = readelf("-d", path);
    EXPECT_EQ(f.has_dynamic(), out.find("Dynamic section at offset") != std::string::npos);
    static const std::regex entry(R"(^\s*0x[0-9a-f]+\s+\((\w+)\)\s+(.*)$)");
    std::vector<std::string> needed;
    std::optional<std::string> soname, rpath, runpath;
    u64 flags = 0, flags_1 = 0;
    for (const std::string& l : lines_of(out)) {
      std::smatch mt;
      if (!std::regex_match(l, mt, entry)) continue;
      const std::string tag = mt[1], val = mt[2];
      if (tag == "NEEDED") needed.push_back(bracketed(val));
      if (tag == "SONAME") soname = bracketed(val);
      if (tag == "RPATH") rpath = bracketed(val);
      if (tag == "RUNPATH") runpath = bracketed(val);
      if (tag == "FLAGS") flags = flag_bits(val, false);
      if (tag == "FLAGS_1") flags_1 = flag_bits(val, true);
    }
    std::vector<std::string> ours(f.needed().begin(), f.needed().end());
    EXPECT_EQ(ours, needed);
    EXPECT_EQ(f.soname().has_value(), soname.has_value());
    if (soname && f.soname()) {
      EXPECT_EQ(*f.soname(), *soname);
    }
    EXPECT_EQ(std::string(f.rpath().value_or("<none>")), rpath.value_or("<none>"));
    EXPECT_EQ(std::string(f.runpath().value_or("<none>")), runpath.value_or("<none>"));
    EXPECT_EQ(f.dt_flags(), flags);
    EXPECT_EQ(f.dt_flags_1(), flags_1);
  }

  // ── versions (-V) ──
  {
    std::vector<VersionDef> defs = f.version_defs();
    std::vector<VersionNeed> needs = f.version_needs();
    enum { None, Def, Need } where = None;
    std::vector<std::string> rneeds;  // files, in order
    static const std::regex def_re(
        R"(Rev: \d+\s+Flags: (.*?)\s+Index: (\d+)\s+Cnt: \d+\s+Name: (\S+))");
    static const std::regex parent_re(R"(Parent \d+: (\S+))");
    static const std::regex file_re(R"(File: (\S+)\s+Cnt: \d+)");
    static const std::regex aux_re(R"(Name: (\S+)\s+Flags: (.*?)\s+Version: (\d+))");
    std::vector<std::pair<std::string, std::vector<std::string>>> def_names;
    std::vector<std::tuple<std::string, std::string, int, int>> need_rows;  // file,name,flags,other
    std::string file;
    for (const std::string& l : lines_of(readelf("-V", path))) {
      if (l.find("Version definition section") == 0) where = Def;
      if (l.find("Version needs section") == 0) where = Need;
      if (l.find("Version symbols section") == 0) where = None;
      std::smatch mt;
      if (where == Def && std::regex_search(l, mt, def_re)) {
        def_names.push_back({mt[3], {}});
        EXPECT_TRUE(def_names.size() <= defs.size());
        if (def_names.size() <= defs.size()) {
          const VersionDef& d = defs[def_names.size() - 1];
          EXPECT_EQ(d.index, std::stoi(mt[2]));
          EXPECT_EQ((d.flags & VER_FLG_BASE) != 0, mt[1].str().find("BASE") != std::string::npos);
          EXPECT_EQ((d.flags & VER_FLG_WEAK) != 0, mt[1].str().find("WEAK") != std::string::npos);
        }
      } else if (where == Def && std::regex_search(l, mt, parent_re) && !def_names.empty()) {
        def_names.back().second.push_back(mt[1]);
      } else if (where == Need && std::regex_search(l, mt, file_re)) {
        file = mt[1];
        rneeds.push_back(file);
      } else if (where == Need && std::regex_search(l, mt, aux_re)) {
        need_rows.push_back(
            {file, mt[1], mt[2].str().find("WEAK") != std::string::npos, std::stoi(mt[3])});
      }
    }
    ASSERT_EQ(def_names.size(), defs.size());
    for (size_t i = 0; i < defs.size(); i++) {
      EXPECT_EQ(defs[i].name, def_names[i].first);
      std::vector<std::string> parents(defs[i].parents.begin(), defs[i].parents.end());
      EXPECT_EQ(parents, def_names[i].second) << defs[i].name;
    }
    EXPECT_EQ(needs.size(), rneeds.size());
    std::vector<std::tuple<std::string, std::string, int, int>> ours;
    for (const VersionNeed& n : needs) {
      for (const VersionNeedEntry& e : n.entries) {
        ours.push_back(
            {std::string(n.file), std::string(e.name), (e.flags & VER_FLG_WEAK) != 0, e.other});
      }
    }
    EXPECT_EQ(ours, need_rows);
  }

  // ── dynamic symbols (--dyn-syms) ──
  {
    std::vector<DynamicSymbol> syms = f.dynamic_symbols();
    std::string out = readelf("--dyn-syms", path);
    static const std::regex count_re(R"(Symbol table '\.dynsym' contains (\d+) entr)");
    std::smatch mt;
    const u64 count = std::regex_search(out, mt, count_re) ? std::stoull(mt[1]) : 0;
    ASSERT_EQ(syms.size(), count);
    static const std::regex row_re(R"(^\s*(\d+): ([0-9a-f]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$)");
    u64 rows = 0;
    for (std::string l : lines_of(out)) {
      // readelf names binding 10 UNIQUE only in ELFOSABI_GNU files; in the
      // others (GCC's libcc1.so, for one) it prints "<OS specific>: 10".
      if (size_t os = l.find("<OS specific>: 10 "); os != std::string::npos)
        l.replace(os, 17, "UNIQUE");
      if (!std::regex_match(l, mt, row_re)) continue;
      const u64 i = std::stoull(mt[1]);
      ASSERT_LT(i, syms.size());
      rows++;
      const DynamicSymbol& y = syms[i];
      EXPECT_EQ(y.value, std::stoull(mt[2], nullptr, 16)) << i;
      EXPECT_EQ(y.size, std::stoull(mt[3], nullptr, 0)) << i;
      EXPECT_EQ(type_name(y.type), mt[4].str()) << i;
      EXPECT_EQ(bind_name(y.bind), mt[5].str()) << i;
      // Rest: Vis [extra...] Ndx Name[@[@]Version][ (n)]
      std::vector<std::string> t = tokens_of(mt[6]);
      size_t k = 1;  // skip Vis
      if (k < t.size() && t[k][0] == '[') {
        while (k < t.size() && t[k].back() != ']') k++;
        k++;
      }
      ASSERT_LT(k, t.size()) << l;
      EXPECT_EQ(ndx_name(y.shndx), t[k]) << i;
      std::string name = k + 1 < t.size() ? t[k + 1] : "";
      if (name.find("<corrupt>") != std::string::npos) continue;
      std::string version;
      bool hidden_shown = false;
      size_t at = name.find('@');
      if (at != std::string::npos) {
        hidden_shown = name.compare(at, 2, "@@") != 0;
        version = name.substr(at + (hidden_shown ? 1 : 2));
        name = name.substr(0, at);
      }
      EXPECT_EQ(std::string(y.name), name) << i;
      // " (n)" after the name marks a version needed from another object.
      const bool from_verneed = k + 2 < t.size() && t[k + 2][0] == '(';
      if (!version.empty()) {
        EXPECT_EQ(std::string(y.version), version) << i << " " << name;
        if (y.defined() && !from_verneed) {
          EXPECT_EQ(y.version_hidden, hidden_shown) << i << " " << name;
        }
      } else if (!y.version.empty()) {
        // readelf omits the version of a symbol named like its version
        // (the ABS symbols that define version nodes).
        EXPECT_EQ(y.version, y.name) << i;
      }
    }
    EXPECT_EQ(rows, count);
  }

  // ── build-id (-n) ──
  {
    static const std::regex id_re(R"(Build ID: ([0-9a-f]+))");
    std::string out = readelf("-n", path);
    std::smatch mt;
    std::optional<std::string> id;
    if (std::regex_search(out, mt, id_re)) id = mt[1];
    EXPECT_EQ(f.build_id().value_or("<none>"), id.value_or("<none>"));
  }

  // ── TLS relocations (-r) ──
  {
    // readelf's names of the relocation types we classify, per machine,
    // with the kind glibc's dl-machine.h gives them.
    struct TlsType {
      u16 machine;
      u32 type;
      const char* name;
      TlsRelocKind kind;
    };
    static const TlsType table[] = {
        {EM_X86_64, 18, "R_X86_64_TPOFF64", TlsRelocKind::InitialExec},
        {EM_X86_64, 23, "R_X86_64_TPOFF32", TlsRelocKind::InitialExec},
        {EM_X86_64, 36, "R_X86_64_TLSDESC", TlsRelocKind::Descriptor},
        {EM_X86_64, 16, "R_X86_64_DTPMOD64", TlsRelocKind::GeneralDynamic},
        {EM_X86_64, 17, "R_X86_64_DTPOFF64", TlsRelocKind::GeneralDynamic},
        {EM_386, 14, "R_386_TLS_TPOFF", TlsRelocKind::InitialExec},
        {EM_386, 37, "R_386_TLS_TPOFF32", TlsRelocKind::InitialExec},
        {EM_386, 41, "R_386_TLS_DESC", TlsRelocKind::Descriptor},
        {EM_386, 35, "R_386_TLS_DTPMOD32", TlsRelocKind::GeneralDynamic},
        {EM_386, 36, "R_386_TLS_DTPOFF32", TlsRelocKind::GeneralDynamic},
        {EM_AARCH64, 1030, "R_AARCH64_TLS_TPREL64", TlsRelocKind::InitialExec},
        {EM_AARCH64, 1031, "R_AARCH64_TLSDESC", TlsRelocKind::Descriptor},
        {EM_AARCH64, 1028, "R_AARCH64_TLS_DTPMOD64", TlsRelocKind::GeneralDynamic},
        {EM_AARCH64, 1029, "R_AARCH64_TLS_DTPREL64", TlsRelocKind::GeneralDynamic},
    };
    std::map<std::string, int> theirs, ours;
    std::multiset<std::string> their_syms, our_syms;
    auto find_name = [&](const std::string& n) -> const TlsType* {
      for (const TlsType& t : table) {
        if (t.machine == f.e_machine() && n == t.name) return &t;
      }
      return nullptr;
    };
    for (const std::string& l : lines_of(readelf("-r", path))) {
      std::vector<std::string> t = tokens_of(l);
      if (t.size() >= 3 && find_name(t[2])) {
        theirs[t[2]]++;
        // Symbol column when present: "Sym. Value  Sym. Name [+ Addend]".
        if (t.size() >= 5 && t[4] != "+") their_syms.insert(t[4].substr(0, t[4].find('@')));
      }
    }
    for (const TlsRelocation& r : f.tls_relocations()) {
      const TlsType* known = nullptr;
      for (const TlsType& t : table) {
        if (t.machine == f.e_machine() && t.type == r.type) known = &t;
      }
      ASSERT_NE(known, nullptr) << "unexpected relocation type " << r.type;
      ours[known->name]++;
      EXPECT_EQ(r.kind, known->kind) << known->name;
      if (r.symbol_index != 0) our_syms.insert(std::string(r.symbol_name));
    }
    EXPECT_EQ(ours, theirs);
    EXPECT_EQ(our_syms, their_syms);
  }

  // ── .comment (-p .comment) ──
  {
    static const std::regex str_re(R"(^\s*\[\s*[0-9a-f]+\]\s\s(.*)$)");
    std::vector<std::string> theirs;
    for (const std::string& l : lines_of(readelf("-p .comment", path))) {
      std::smatch mt;
      if (std::regex_match(l, mt, str_re)) theirs.push_back(mt[1]);
    }
    std::vector<std::string> ours;
    for (std::string_view s : f.comments()) ours.push_back(std::string(s));
    EXPECT_EQ(ours, theirs);
  }
}

bool is_regular_elf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  FILE* fp = std::fopen(path.c_str(), "rb");
  if (!fp) return false;
  char magic[4] = {};
  size_t n = std::fread(magic, 1, 4, fp);
  std::fclose(fp);
  return n == 4 && std::memcmp(magic,
                               "\x7f"
                               "ELF",
                               4) == 0;
}

bool readelf_can_read(const std::string& path) {
  return run("readelf -W -h " + quote(path) + " >/dev/null 2>&1").status == 0;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(dir + "/" + n);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> oracle_sample() {
  std::vector<std::string> files = {"/lib/x86_64-linux-gnu/libc.so.6",
                                    "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
                                    "/usr/lib/x86_64-linux-gnu/libgomp.so.1",
                                    "/usr/bin/ls",
                                    "/sbin/ldconfig",
                                    "/lib64/ld-linux-x86-64.so.2",
                                    "/usr/lib/x86_64-linux-gnu/crt1.o"};
  std::vector<std::string> libs;
  for (const std::string& p : list_dir("/usr/lib/x86_64-linux-gnu")) {
    if (p.find(".so") != std::string::npos && is_regular_elf(p)) libs.push_back(p);
  }
  const size_t want = 50;
  const size_t step = std::max<size_t>(1, libs.size() / want);
  for (size_t i = 0; i < libs.size() && files.size() < want + 7; i += step)
    files.push_back(libs[i]);
  return files;
}

// libc, libstdc++, libgomp, ls, the static-pie ldconfig, ld.so, crt1.o and
// an even sample of ~50 shared objects from /usr/lib/x86_64-linux-gnu.
TEST(ReadelfOracle, SampleOfSystemObjects) {
  if (run("readelf --version >/dev/null 2>&1").status != 0) GTEST_SKIP() << "no readelf";
  int compared = 0;
  for (const std::string& path : oracle_sample()) {
    if (!is_regular_elf(path) || !readelf_can_read(path)) continue;
    compare_with_readelf(path);
    compared++;
  }
  EXPECT_GE(compared, 40);
}

// Objects built here by real toolchains for other classes, byte orders and
// machines (clang + lld cross-link without any target libc thanks to
// -nostdlib): ELF32 LE (i386), ELF32 BE (PowerPC), ELF64 BE (PowerPC64),
// AArch64, with symbol versions (defined and needed), DT_RPATH/DT_RUNPATH,
// BIND_NOW, a build-id and TLS in each access model.
TEST(ReadelfOracle, FreshlyBuiltObjectsForOtherTargets) {
  if (run("readelf --version >/dev/null 2>&1").status != 0) GTEST_SKIP() << "no readelf";
  char tmpl[] = "/tmp/mld-elf-test-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto write = [&](const std::string& name, const std::string& text) {
    FILE* fp = std::fopen((dir + "/" + name).c_str(), "w");
    std::fputs(text.c_str(), fp);
    std::fclose(fp);
  };
  write("dep.c", "int dep_fn(void) { return 1; }\nint dep_fn2(void) { return 2; }\n");
  write("dep.map",
        "DEP_1.0 { global: dep_fn; local: *; };\nDEP_2.0 { global: dep_fn2; } DEP_1.0;\n");
  write("x.c",
        "__thread int counter = 3;\n"
        "static __thread char buf[64];\n"
        "extern int dep_fn(void), dep_fn2(void);\n"
        "int bump(int i) { buf[i & 63]++; return ++counter + buf[i & 63] + dep_fn() + dep_fn2(); "
        "}\n");
  write("x.map",
        "LIBX_1.0 { global: bump; local: *; };\nLIBX_2.0 { global: counter; } LIBX_1.0;\n");
  struct Target {
    std::string name, cc, flags;
  };
  const std::string clang = "clang-14 -fuse-ld=lld -nostdlib -fPIC -O2 --target=";
  const std::vector<Target> targets = {
      {"x86_64-gd", "cc -nostdlib -fPIC -O2", "-Wl,--disable-new-dtags"},
      {"x86_64-tlsdesc", "cc -nostdlib -fPIC -O2 -mtls-dialect=gnu2", "-Wl,-z,now"},
      {"x86_64-ie", "cc -nostdlib -fPIC -O2 -ftls-model=initial-exec", "-Wl,--hash-style=both"},
      {"i386-ie", "cc -m32 -nostdlib -fPIC -O2 -ftls-model=initial-exec", "-Wl,-z,now"},
      {"i386-tlsdesc", "cc -m32 -nostdlib -fPIC -O2 -mtls-dialect=gnu2", "-Wl,--hash-style=sysv"},
      {"i386-lld", clang + "i686-linux-gnu", "-Wl,--hash-style=gnu"},
      {"aarch64-desc", clang + "aarch64-linux-gnu", "-Wl,-z,now"},
      {"aarch64-ie", clang + "aarch64-linux-gnu -ftls-model=initial-exec", "-Wl,--hash-style=sysv"},
      {"ppc64-be", clang + "powerpc64-linux-gnu", "-Wl,--hash-style=both"},
      {"ppc32-be", clang + "powerpc-linux-gnu -ftls-model=initial-exec", ""},
  };
  int built = 0;
  std::vector<std::string> not_built;
  for (const Target& t : targets) {
    SCOPED_TRACE(t.name);
    const std::string d = dir + "/" + t.name;
    mkdir(d.c_str(), 0755);
    const std::string cmd =
        "cd " + quote(d) + " && " + t.cc +
        " -shared -Wl,-soname,libdep.so.1 -Wl,--version-script=../dep.map -o libdep.so ../dep.c"
        " && " +
        t.cc + " " + t.flags +
        " -shared -Wl,-soname,libx.so.1 -Wl,--version-script=../x.map -Wl,--build-id=sha1"
        " -Wl,-rpath,'$ORIGIN/lib' -o libx.so ../x.c ./libdep.so 2>&1";
    Cmd c = run(cmd);
    if (c.status != 0) {
      not_built.push_back(t.name + ": " + c.out.substr(0, 200));
      continue;
    }
    built++;
    for (const char* obj : {"libx.so", "libdep.so"}) {
      const std::string path = d + "/" + obj;
      if (!readelf_can_read(path)) continue;
      compare_with_readelf(path);
    }
    // The facts we built in, independently of readelf.
    MappedFile m = MappedFile::open(d + "/libx.so");
    ElfFile f = ElfFile::parse(m.view());
    EXPECT_EQ(f.soname().value_or(""), "libx.so.1");
    EXPECT_EQ(f.needed(), (std::vector<std::string_view>{"libdep.so.1"}));
    EXPECT_EQ(f.rpath().value_or(f.runpath().value_or("")), "$ORIGIN/lib");
    ASSERT_TRUE(f.tls().has_value());
    EXPECT_EQ(f.tls()->blocksize, 68u);
    EXPECT_EQ(f.build_id().value_or("").size(), 40u);
    bool saw_counter = false;
    for (const DynamicSymbol& y : f.dynamic_symbols()) {
      if (y.name == "counter") {
        saw_counter = true;
        EXPECT_EQ(y.type, STT_TLS);
        EXPECT_EQ(y.version, "LIBX_2.0");
      }
      if (y.name == "dep_fn2") {
        EXPECT_EQ(y.version, "DEP_2.0");
        EXPECT_FALSE(y.defined());
      }
    }
    EXPECT_TRUE(saw_counter);
    std::vector<VersionNeed> needs = f.version_needs();
    ASSERT_EQ(needs.size(), 1u);
    EXPECT_EQ(needs[0].file, "libdep.so.1");
    EXPECT_EQ(needs[0].entries.size(), 2u);
  }
  run("rm -rf " + quote(dir));
  for (const std::string& n : not_built)
    std::printf("not built (toolchain missing?): %s\n", n.c_str());
  if (built == 0) GTEST_SKIP() << "no toolchain could build the test objects";
}

// Every ELF object readelf reads without complaint must parse and decode.
TEST(ReadelfOracle, EverySystemLibraryParses) {
  if (run("readelf --version >/dev/null 2>&1").status != 0) GTEST_SKIP() << "no readelf";
  int parsed = 0;
  for (const char* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/bin", "/usr/sbin"}) {
    for (const std::string& path : list_dir(dir)) {
      if (!is_regular_elf(path)) continue;
      MappedFile m = MappedFile::open(path);
      std::string err = parse_error_of([&] { decode_everything(ElfFile::parse(m.view())); });
      if (err.empty()) {
        parsed++;
        continue;
      }
      Cmd c = run("readelf -W -a " + quote(path) + " 2>&1 >/dev/null");
      EXPECT_NE(c.out, "") << path << ": we say \"" << err << "\" but readelf is silent";
    }
  }
  EXPECT_GT(parsed, 100);
}

// ─── (c) bad input ──────────────────────────────────────────────────────

// The identification bytes: each refusal names what is wrong.
TEST(BadInput, EmptyNonElfAndWrongIdent) {
  std::vector<u8> empty;
  EXPECT_PARSE_ERROR(ElfFile::parse(ByteView(empty.data(), 0)), "empty file");
  EXPECT_PARSE_ERROR(ElfFile::parse(ByteView(std::string_view("#!/bin/sh\necho hi\n"))),
                     "not an ELF file");
  std::vector<u8> b = build_elf(ElfSpec{});
  std::vector<u8> c = b;
  c[4] = 3;
  EXPECT_PARSE_ERROR(ElfFile::parse(view(c)), "invalid ELF class 3 in EI_CLASS");
  c = b;
  c[5] = 0;
  EXPECT_PARSE_ERROR(ElfFile::parse(view(c)), "invalid ELF data encoding 0");
  c.assign(b.begin(), b.begin() + 10);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(c)), "too short");
  c.assign(b.begin(), b.begin() + 40);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(c)), "ELF header truncated");
}

TEST(BadInput, OversizedProgramHeaderTable) {
  // e_phnum 65535 in a 100-byte file: throws before reserving anything.
  std::vector<u8> b = build_elf(ElfSpec{});
  b.resize(100);
  mld::test::put_u64(b, 40, 0, false);  // no section headers
  mld::test::put_u16(b, 60, 0, false);
  mld::test::put_u16(b, 56, 65535, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "program header table out of bounds");
  b = build_elf(ElfSpec{});
  mld::test::put_u64(b, 32, ~u64{0} - 8, false);  // e_phoff near 2^64
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "program header table out of bounds");
  b = build_elf(ElfSpec{});
  mld::test::put_u16(b, 54, 40, false);  // e_phentsize
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "program header entry size 40");
  // 32-bit big-endian too.
  ElfSpec s;
  s.is64 = false;
  s.big_endian = true;
  b = build_elf(s);
  mld::test::put_u32(b, 28, 0xfffffff0, true);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "program header table out of bounds");
}

// ld.so never reads the section header table: a library whose table is cut
// off or garbage loads and runs, so parse() accepts it (the loader model
// must load it too) and only the decoders that need sections refuse it.
TEST(BadInput, OversizedSectionHeaderTable) {
  ElfSpec spec;
  spec.needed = {"libc.so.6"};
  spec.comments = {"GCC: (Debian 12.2.0-14) 12.2.0"};
  std::vector<u8> b = build_elf(spec);
  mld::test::put_u64(b, 40, b.size() - 10, false);
  ElfFile f = ElfFile::parse(view(b));
  EXPECT_EQ(f.needed(), std::vector<std::string_view>{"libc.so.6"});
  EXPECT_PARSE_ERROR(f.comments(), "section header table out of bounds");
  EXPECT_PARSE_ERROR(f.progbits_section(".rodata"), "section header table out of bounds");
  b = build_elf(spec);
  mld::test::put_u16(b, 60, 60000, false);
  EXPECT_EQ(ElfFile::parse(view(b)).needed().size(), 1u);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).comments(), "section header table out of bounds");
  b = build_elf(spec);
  mld::test::put_u16(b, 58, 12, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).comments(), "section header entry size 12");
  // A garbage table is still refused where it is needed to read the
  // program headers (PN_XNUM extended numbering).
  mld::test::put_u16(b, 56, 0xffff, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "section header entry size 12");
}

TEST(BadInput, OverlappingLoadSegments) {
  ElfLayout L;
  std::vector<u8> b = build_elf(ElfSpec{}, &L);
  // Move the second PT_LOAD's p_vaddr into the first one.
  mld::test::put_u64(b, L.phoff + 56 + 16, 0x10, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "PT_LOAD segments overlap");
}

// Every address-valued dynamic entry, pointed outside the file (or its
// size made too large), fails in the decoder that follows it.
TEST(BadInput, DynamicEntriesPointingOutsideTheFile) {
  ElfSpec s = full_spec(true, false, EM_X86_64);
  ElfLayout L;
  std::vector<u8> good = build_elf(s, &L);
  // Find a dynamic entry by tag and overwrite its value.
  auto patch = [&](i64 tag, u64 value) {
    std::vector<u8> b = good;
    for (u64 off : L.dynamic_entries) {
      ByteView v = view(b);
      if (static_cast<i64>(v.u64_at(off, false)) == tag) {
        mld::test::put_u64(b, off + 8, value, false);
        return b;
      }
    }
    ADD_FAILURE() << "tag " << tag << " not written";
    return b;
  };
  std::vector<u8> b = patch(DT_STRTAB, 0xdeadbeef);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)),
                     "dynamic section entry DT_STRTAB points outside the file");
  b = patch(DT_STRSZ, 0x7fffffff);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "dynamic string table out of bounds");
  b = patch(DT_NEEDED, 0x100000);
  EXPECT_PARSE_ERROR(
      ElfFile::parse(view(b)),
      "DT_NEEDED string offset 0x100000 is past the end of the dynamic string table");
  b = patch(DT_SONAME, L.dynstr_size - 1 + 0);  // the last NUL: empty, fine
  EXPECT_EQ(ElfFile::parse(view(b)).soname().value_or("x"), "");

  b = patch(DT_VERNEED, 0x7000000);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(),
                     "dynamic section entry DT_VERNEED points outside the file");
  b = patch(DT_VERDEF, 0x7000000);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_defs(),
                     "dynamic section entry DT_VERDEF points outside the file");
  b = patch(DT_SYMTAB, 0x7000000);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(),
                     "dynamic section entry DT_SYMTAB points outside the file");
  b = patch(DT_VERSYM, 0x7000000);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(),
                     "dynamic section entry DT_VERSYM points outside the file");
  b = patch(DT_RELA, 0x7000000);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).tls_relocations(),
                     "dynamic section entry DT_RELA points outside the file");
  b = patch(DT_RELASZ, 0x7000000);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).tls_relocations(), "DT_RELA table out of bounds");
  b = patch(DT_RELAENT, 3);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).tls_relocations(), "DT_RELAENT 3 is smaller");
  b = patch(DT_HASH, 0x7000000);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(),
                     "dynamic section entry DT_HASH points outside the file");
  b = patch(DT_VERNEEDNUM, 1u << 30);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(), "DT_VERNEEDNUM 1073741824 exceeds");
  b = patch(DT_VERDEFNUM, 1u << 30);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_defs(), "DT_VERDEFNUM 1073741824 exceeds");
}

TEST(BadInput, DynamicSectionOutOfBounds) {
  ElfLayout L;
  std::vector<u8> b = build_elf(ElfSpec{}, &L);
  const u64 dyn_ph = L.phoff + 56 * 2;
  ASSERT_EQ(b[dyn_ph], PT_DYNAMIC);
  mld::test::put_u64(b, dyn_ph + 8, b.size() - 8, false);  // p_offset near the end
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "dynamic section out of bounds");
}

TEST(BadInput, NeededWithoutStrtab) {
  ElfSpec s;
  s.needed = {"liba.so"};
  ElfLayout L;
  std::vector<u8> b = build_elf(s, &L);
  // Turn DT_STRTAB (entry 1) into an ignored tag.
  mld::test::put_u64(b, L.dynamic_entries[1], 0x6ffffff9, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "dynamic section has DT_NEEDED but no DT_STRTAB");
}

// Version chains whose links point back into their own entry or end before
// the count says: each walk ends with a "chain loops" ParseError.
TEST(BadInput, SelfReferencingVersionChains) {
  for (bool be : {false, true}) {
    SCOPED_TRACE(be ? "big-endian" : "little-endian");
    ElfSpec s = full_spec(true, be, EM_X86_64);
    ElfLayout L;
    const std::vector<u8> good = build_elf(s, &L);
    std::vector<u8> b = good;
    // vna_next of the first Vernaux 0 while vn_cnt says 2.
    mld::test::put_u32(b, L.verneed + 16 + 12, 0, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(),
                       "version need auxiliary chain loops");
    // vn_next of the first Verneed 0 while DT_VERNEEDNUM says 2.
    b = good;
    mld::test::put_u32(b, L.verneed + 12, 0, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(), "version need chain loops");
    // vn_aux 0: the auxiliary entry is the Verneed itself.
    b = good;
    mld::test::put_u32(b, L.verneed + 8, 0, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(), "version need chain loops");
    // vn_next pointing back into the entry.
    b = good;
    mld::test::put_u32(b, L.verneed + 12, 4, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(), "version need chain loops");
    // vna_next 1: overlapping auxiliary entries.
    b = good;
    mld::test::put_u32(b, L.verneed + 16 + 12, 1, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(),
                       "version need auxiliary chain loops");
    // Verdef: vd_next 0 while DT_VERDEFNUM is 3; vd_aux 0; vda_next 0 early.
    b = good;
    mld::test::put_u32(b, L.verdef + 16, 0, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_defs(), "version definition chain loops");
    b = good;
    mld::test::put_u32(b, L.verdef + 12, 0, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_defs(), "version definition chain loops");
    b = good;
    const u64 third = L.verdef + 28 + 28;  // third Verdef (two with one aux each before)
    mld::test::put_u32(b, third + 20 + 4, 0, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_defs(),
                       "version definition auxiliary chain loops");
    // A huge vn_cnt is refused before reserving.
    b = good;
    mld::test::put_u16(b, L.verneed + 2, 65535, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).version_needs(), "more than fit in the file");
    // dynamic_symbols resolves versions, so it reports the same problem.
    b = good;
    mld::test::put_u32(b, L.verneed + 16 + 12, 0, be);
    EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(), "chain loops");
  }
}

TEST(BadInput, VersionChainWithoutCountEndsAtTheTable) {
  // Without DT_VERNEEDNUM the walk follows vn_next like glibc and stops at 0.
  ElfSpec s = full_spec(false, false, EM_386);
  ElfLayout L;
  std::vector<u8> b = build_elf(s, &L);
  for (u64 off : L.dynamic_entries) {
    if (static_cast<i64>(static_cast<i32>(view(b).u32_at(off, false))) == DT_VERNEEDNUM) {
      mld::test::put_u32(b, off, 0x6ffffff9, false);
    }
  }
  EXPECT_EQ(ElfFile::parse(view(b)).version_needs().size(), 2u);
}

// Hash tables whose counts or chains lie, and symbols with bad names.
TEST(BadInput, HashTablesAndSymbols) {
  ElfSpec s = full_spec(true, false, EM_X86_64);
  s.hash = ElfSpec::Hash::Gnu;
  ElfLayout L;
  std::vector<u8> good = build_elf(s, &L);
  // GNU hash bucket pointing far beyond the chains.
  std::vector<u8> b = good;
  mld::test::put_u32(b, L.gnu_hash + 16 + 8, 0x7fffffff, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(),
                     "GNU hash chain runs past the end of the file");
  // Bucket count huge.
  b = good;
  mld::test::put_u32(b, L.gnu_hash, 0x40000000, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(), "DT_GNU_HASH table out of bounds");
  // Symbol name offset past the string table.
  b = good;
  mld::test::put_u32(b, L.dynsym + 24 * 3, 0x00ffffff, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(),
                     "symbol name offset 0xffffff is past the end of the string table");
  // DT_HASH nchain larger than the file can hold.
  s.hash = ElfSpec::Hash::Sysv;
  good = build_elf(s, &L);
  b = good;
  mld::test::put_u32(b, L.hash + 4, 0xfffffff, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).dynamic_symbols(),
                     "dynamic symbol count 268435455 exceeds");
  // A relocation naming a symbol past the end of the file.
  b = good;
  mld::test::put_u32(b, L.rela + 8 + 4, 0x7ffffff, false);  // r_sym of the first Rela
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).tls_relocations(),
                     "symbol index 134217727 is past the end");
}

// Notes, sections and strings that run past their containers.
TEST(BadInput, NotesAndSections) {
  ElfSpec s = full_spec(true, false, EM_X86_64);
  ElfLayout L;
  std::vector<u8> good = build_elf(s, &L);
  std::vector<u8> b = good;
  mld::test::put_u32(b, L.notes, 0xfffffff0, false);  // namesz
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).build_id(), "note out of bounds");
  // .comment whose sh_offset points past the end.
  b = good;
  // The .comment header is the second-to-last section header.
  const u64 shnum = view(b).u16_at(60, false);
  const u64 comment_sh = L.shoff + 64 * (shnum - 2);
  mld::test::put_u64(b, comment_sh + 24, b.size() + 100, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).comments(), ".comment section out of bounds");
  // Section name offset past the section name table.
  b = good;
  mld::test::put_u32(b, comment_sh, 0x10000, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)).comments(),
                     "section name offset 0x10000 is past the end");
  // Dynamic string table not NUL-terminated: DT_STRSZ cut inside a name.
  b = good;
  for (u64 off : L.dynamic_entries) {
    if (static_cast<i64>(view(b).u64_at(off, false)) == DT_STRSZ) {
      mld::test::put_u64(b, off + 8, 3, false);  // "\0li" (inside "libc.so.6")
    }
  }
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "not NUL-terminated");
  // PT_INTERP out of bounds.
  b = good;
  const u64 interp_ph = L.phoff + 56 * 2;
  ASSERT_EQ(b[interp_ph], PT_INTERP);
  mld::test::put_u64(b, interp_ph + 32, 1u << 30, false);
  EXPECT_PARSE_ERROR(ElfFile::parse(view(b)), "PT_INTERP out of bounds");
}

// Truncating at every 64-byte boundary must give a ParseError or a parse,
// never a crash; with the section headers cut off, the lazy decoders meet
// truncated tables too. Each truncation is a fresh exact-size buffer so
// sanitizers see any over-read.
void truncate_everywhere(const std::vector<u8>& whole, int* parsed_out, int* errors_out) {
  const bool is64 = whole.size() > 4 && whole[4] == 2;
  const bool be = whole.size() > 5 && whole[5] == 2;
  for (size_t n = 0; n <= whole.size(); n += 64) {
    for (int drop_sections = 0; drop_sections < 2; drop_sections++) {
      std::vector<u8> b(whole.begin(), whole.begin() + n);
      if (drop_sections && b.size() >= 64) {
        mld::test::put_word(b, is64 ? 40 : 32, 0, is64, be);  // e_shoff
      }
      try {
        ElfFile f = ElfFile::parse(view(b));
        (*parsed_out)++;
        try {
          decode_everything(f);
        } catch (const ParseError&) {
          (*errors_out)++;
        }
      } catch (const ParseError& e) {
        (*errors_out)++;
        EXPECT_STRNE(e.what(), "");
      }
    }
  }
}

// glibc 2.34+'s libdl.so.2 stub: small, versioned, with a build-id.
TEST(BadInput, TruncatedRealSharedObject) {
  const std::string path = "/usr/lib/x86_64-linux-gnu/libdl.so.2";
  std::vector<u8> whole = read_file(path);
  if (whole.empty()) GTEST_SKIP() << path << " not on this machine";
  int parsed = 0, errors = 0;
  truncate_everywhere(whole, &parsed, &errors);
  EXPECT_GT(parsed, 10);  // the tail truncations keep the headers
  EXPECT_GT(errors, 10);
}

TEST(BadInput, TruncatedSyntheticObjects) {
  for (bool is64 : {false, true}) {
    for (bool be : {false, true}) {
      std::vector<u8> whole = build_elf(full_spec(is64, be, is64 ? EM_X86_64 : EM_386));
      int parsed = 0, errors = 0;
      truncate_everywhere(whole, &parsed, &errors);
      EXPECT_GT(errors, 0);
    }
  }
}

// Single-byte corruption of every byte of a synthetic object: never a crash.
TEST(BadInput, EveryByteFlipped) {
  for (bool is64 : {false, true}) {
    const std::vector<u8> good = build_elf(full_spec(is64, !is64, is64 ? EM_X86_64 : EM_386));
    for (size_t i = 0; i < good.size(); i++) {
      for (u8 x : {u8{0xff}, u8{0x80}, u8{0x01}}) {
        std::vector<u8> b = good;
        b[i] ^= x;
        try {
          decode_everything(ElfFile::parse(view(b)));
        } catch (const ParseError&) {
        }
      }
    }
  }
}

// ─── (d) the same answers whichever source holds the bytes ─────────────

// A source that, like SparseFile, hands out only the ranges asked for, each
// in its own exact-size heap buffer: a decoder reading past what it asked
// for reads another allocation (AddressSanitizer reports it) and gets bytes
// that differ from the in-memory parse.
class PieceSource final : public ByteSource {
 public:
  explicit PieceSource(std::vector<u8> bytes) : bytes_(std::move(bytes)) {}
  u64 size() const override { return bytes_.size(); }
  ByteView range(u64 off, u64 n, const char* what) const override {
    ByteView whole(bytes_.data(), bytes_.size());
    ByteView v = whole.sub(off, n, what);
    pieces_.push_back(std::make_unique<u8[]>(n ? n : 1));
    std::memcpy(pieces_.back().get(), v.data(), n);
    requested_ += n;
    return ByteView(pieces_.back().get(), n, off);
  }
  u64 requested() const { return requested_; }

 private:
  std::vector<u8> bytes_;
  mutable std::vector<std::unique_ptr<u8[]>> pieces_;
  mutable u64 requested_ = 0;
};

// Everything the reader says about a file, decoder errors included, as text.
std::string summarize(const std::function<ElfFile()>& parse) {
  std::ostringstream o;
  try {
    ElfFile f = parse();
    o << f.is_64() << f.big_endian() << ' ' << f.e_type() << ' ' << f.e_machine() << ' '
      << f.program_headers().size() << ' ' << f.interp().value_or("-") << ' '
      << f.soname().value_or("-") << ' ' << f.rpath().value_or("-") << ' '
      << f.runpath().value_or("-") << ' ' << f.dt_flags() << ' ' << f.dt_flags_1() << '\n';
    for (std::string_view n : f.needed()) o << "needed " << n << '\n';
    auto guarded = [&o](const char* what, const std::function<void()>& fn) {
      try {
        fn();
      } catch (const ParseError& e) {
        o << what << " error: " << e.what() << " @" << e.offset() << '\n';
      }
    };
    guarded("needs", [&] {
      for (const VersionNeed& n : f.version_needs()) {
        o << "need " << n.file;
        for (const VersionNeedEntry& e : n.entries)
          o << ' ' << e.name << '/' << e.hash << '/' << e.other;
        o << '\n';
      }
    });
    guarded("defs", [&] {
      for (const VersionDef& d : f.version_defs()) {
        o << "def " << d.index << ' ' << d.name;
        for (std::string_view p : d.parents) o << ' ' << p;
        o << '\n';
      }
    });
    guarded("symbols", [&] {
      for (const DynamicSymbol& s : f.dynamic_symbols())
        o << "sym " << s.name << '@' << s.version << ' ' << s.value << ' ' << s.shndx << '\n';
    });
    guarded("tls", [&] {
      for (const TlsRelocation& r : f.tls_relocations())
        o << "tls " << r.type << ' ' << r.symbol_name << '\n';
    });
    guarded("build-id", [&] { o << "build-id " << f.build_id().value_or("-") << '\n'; });
    guarded("comments", [&] {
      for (std::string_view c : f.comments()) o << "comment " << c << '\n';
    });
    guarded("rodata", [&] {
      std::optional<ByteView> r = f.progbits_section(".rodata");
      o << "rodata " << (r ? r->base_offset() : 0) << ' ' << (r ? r->size() : 0) << '\n';
    });
  } catch (const ParseError& e) {
    o << "parse error: " << e.what() << " @" << e.offset() << '\n';
  }
  return o.str();
}

std::string summarize_in_memory(const std::vector<u8>& b) {
  return summarize([&] { return ElfFile::parse(view(b)); });
}
std::string summarize_in_pieces(const std::vector<u8>& b) {
  return summarize([&] { return ElfFile::parse(std::make_shared<PieceSource>(b)); });
}

TEST(SparseSource, EveryByteFlippedGivesTheSameAnswers) {
  for (bool is64 : {false, true}) {
    const std::vector<u8> good = build_elf(full_spec(is64, !is64, is64 ? EM_X86_64 : EM_386));
    ASSERT_EQ(summarize_in_memory(good), summarize_in_pieces(good));
    for (size_t i = 0; i < good.size(); i++) {
      for (u8 x : {u8{0xff}, u8{0x80}, u8{0x01}}) {
        std::vector<u8> b = good;
        b[i] ^= x;
        ASSERT_EQ(summarize_in_memory(b), summarize_in_pieces(b))
            << "byte " << i << " ^ " << int(x);
      }
    }
  }
}

TEST(SparseSource, TruncationsGiveTheSameAnswers) {
  const std::vector<u8> whole = build_elf(full_spec(true, false, EM_X86_64));
  for (size_t n = 0; n <= whole.size(); n++) {
    std::vector<u8> b(whole.begin(), whole.begin() + static_cast<long>(n));
    ASSERT_EQ(summarize_in_memory(b), summarize_in_pieces(b)) << "truncated to " << n;
  }
}

// Real objects read with pread give what their mapping gives, and the
// loader's part (headers, dynamic section, needed names, version tables)
// reads a small part of each file.
TEST(SparseSource, SystemLibrariesThroughSparseFile) {
  int compared = 0;
  for (const char* name : {"libc.so.6", "libstdc++.so.6", "libm.so.6", "libz.so.1", "libgcc_s.so.1",
                           "libdl.so.2", "libpthread.so.0", "libgomp.so.1"}) {
    const std::string path = std::string("/usr/lib/x86_64-linux-gnu/") + name;
    if (!is_regular_elf(path)) continue;
    MappedFile m = MappedFile::open(path);
    std::shared_ptr<SparseFile> sf = SparseFile::open(path);
    {
      ElfFile f = ElfFile::parse(sf);
      (void)f.cached_version_needs();
      (void)f.cached_version_defs();
      EXPECT_LT(sf->bytes_read(), 16u << 10)
          << path << ": the loader's part read " << sf->bytes_read();
    }
    EXPECT_EQ(summarize([&] { return ElfFile::parse(m.view()); }),
              summarize([&] { return ElfFile::parse(SparseFile::open(path)); }))
        << path;
    compared++;
  }
  if (compared == 0) GTEST_SKIP() << "no system libraries";
}

TEST(SparseSource, MoreFilesThanTheDescriptorPoolStayReadable) {
  const std::string path = "/usr/lib/x86_64-linux-gnu/libz.so.1";
  if (!is_regular_elf(path)) GTEST_SKIP() << path << " not on this machine";
  std::vector<ElfFile> files;
  for (int i = 0; i < 200; i++) files.push_back(ElfFile::parse(SparseFile::open(path)));
  // The first ones' descriptors were closed; their lazy decoders reopen.
  for (const ElfFile& f : files) EXPECT_FALSE(f.version_needs().empty());
}

}  // namespace

// defines_symbol goes through DT_GNU_HASH (or DT_HASH); the oracle is the
// linear dynamic symbol table of the same file: every defined global or weak
// symbol is found, and names that are only undefined there are not.
TEST(SymbolLookup, HashLookupAgreesWithTheSymbolTable) {
  int files = 0;
  for (const char* path :
       {"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libm.so.6",
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/lib/x86_64-linux-gnu/libz.so.1",
        "/usr/lib/x86_64-linux-gnu/libgomp.so.1"}) {
    if (access(path, R_OK) != 0) continue;
    files++;
    MappedFile f = MappedFile::open(path);
    ElfFile e = ElfFile::parse(f.view());
    std::set<std::string_view> defined;
    std::vector<std::string_view> undefined;
    for (const DynamicSymbol& s : e.dynamic_symbols()) {
      if (s.name.empty()) continue;
      if (s.defined() && s.bind != STB_LOCAL)
        defined.insert(s.name);
      else if (!s.defined())
        undefined.push_back(s.name);
    }
    for (std::string_view n : defined) EXPECT_TRUE(e.defines_symbol(n)) << path << ": " << n;
    for (std::string_view n : undefined) {
      if (!defined.count(n)) {
        EXPECT_FALSE(e.defines_symbol(n)) << path << ": " << n;
      }
    }
    EXPECT_FALSE(e.defines_symbol("mld_no_such_symbol_anywhere")) << path;
  }
  EXPECT_GT(files, 2);
}

// A variable with internal linkage is in .symtab only (an executable exports
// nothing to .dynsym unless linked with -rdynamic), under its mangled name
// (_ZL18symtab_only_marker): what a stack reader needs to find _PyRuntime in
// an interpreter that does not export it.
static int symtab_only_marker = 42;

// The linker's symbol at the start of the program's first segment: the
// distance from it to the marker is the same in the file and in memory.
extern "C" char __executable_start;

TEST(SymbolValues, StaticSymbolsFromSymtabAtTheirRuntimeAddress) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  ASSERT_GT(n, 0);
  exe[n] = '\0';
  const ElfFile f = ElfFile::parse(SparseFile::open(exe));
  const auto values = f.symbol_values(
      {"_ZL18symtab_only_marker", "malloc", "no_such_symbol_here", "__executable_start"});
  ASSERT_EQ(values.size(), 4u);
  if (!values[0]) GTEST_SKIP() << exe << " has no .symtab (stripped): nothing to look up";
  ASSERT_TRUE(values[3]);
  EXPECT_EQ(*values[0] - *values[3], reinterpret_cast<uintptr_t>(&symtab_only_marker) -
                                         reinterpret_cast<uintptr_t>(&__executable_start));
  EXPECT_EQ(symtab_only_marker, 42);
  EXPECT_FALSE(values[1]) << "malloc is undefined in this program: no value";
  EXPECT_FALSE(values[2]);
}
