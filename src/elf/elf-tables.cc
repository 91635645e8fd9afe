// elf-tables.cc — the lazy decoders of the dynamic tables: GNU symbol
// versioning (DT_VERNEED / DT_VERDEF / DT_VERSYM), the dynamic symbol table
// and the TLS-related dynamic relocations. They run only when a check asks,
// e.g. the version-satisfaction check of elf/dl-version.c
// (_dl_check_map_versions) or the static TLS accounting of elf/dl-reloc.c.
//
// glibc walks the version chains with vn_next/vna_next/vd_next/vda_next until
// a zero link and trusts the counts; here every walk is bounded by the
// DT_*NUM count and by the bytes that could hold the entries, so a corrupt or
// self-referencing chain ends in a ParseError instead of a hang or a huge
// allocation.
#include <algorithm>

#include "elf/elf-internal.h"
#include "elf/elf.h"

namespace mld::elf {

using detail::fail;
using detail::ull;

namespace {

// The versioning structures have the same layout in both classes:
//   Elf_Verneed  {vn_version@0 u16, vn_cnt@2 u16, vn_file@4, vn_aux@8, vn_next@12}
//   Elf_Vernaux  {vna_hash@0, vna_flags@4 u16, vna_other@6 u16, vna_name@8, vna_next@12}
//   Elf_Verdef   {vd_version@0 u16, vd_flags@2 u16, vd_ndx@4 u16, vd_cnt@6 u16,
//                 vd_hash@8, vd_aux@12, vd_next@16}
//   Elf_Verdaux  {vda_name@0, vda_next@4}
// All links (vn_aux, vn_next, ...) are byte offsets relative to the entry
// that holds them, so a walk only moves forward; a zero next link ends it.
constexpr u64 VERNEED_SIZE = 16, VERNAUX_SIZE = 16;
constexpr u64 VERDEF_SIZE = 20, VERDAUX_SIZE = 8;
constexpr u16 EM_ALPHA = 41;

// The bytes from `vaddr` to the end of the file (read only where used).
// Requires: vaddr inside a PT_LOAD's file bytes; else ParseError naming the
// dynamic tag.
detail::Reader table_from(const ElfFile& f, u64 vaddr, const char* tag) {
  const u64 size = f.source().size();
  std::optional<u64> off = f.vaddr_to_offset(vaddr);
  if (!off || *off >= size) {
    fail(0,
         "dynamic section entry %s points outside the file (address 0x%llx is in "
         "no PT_LOAD segment's file bytes)",
         tag, ull(vaddr));
  }
  return detail::Reader{&f.source(), *off, size - *off, f.is_64(), f.big_endian()};
}

// A NUL-terminated string at `off` in a string table (dynstr or a section).
std::string_view string_at(const detail::StringTable& strtab, u64 off, const char* what) {
  if (off >= strtab.size) {
    fail(strtab.offset, "%s name offset 0x%llx is past the end of the string table (size 0x%llx)",
         what, ull(off), ull(strtab.size));
  }
  std::optional<std::string_view> s = strtab.find(off);
  if (!s) {
    fail(strtab.offset + off, "%s name at string table offset 0x%llx is not NUL-terminated", what,
         ull(off));
  }
  return *s;
}

// One Elf32_Sym / Elf64_Sym; versions are filled in by the caller.
//   Elf64_Sym {st_name@0, st_info@4 u8, st_other@5 u8, st_shndx@6 u16,
//              st_value@8, st_size@16}                       (24 bytes)
//   Elf32_Sym {st_name@0, st_value@4, st_size@8, st_info@12, st_other@13,
//              st_shndx@14}                                  (16 bytes)
// Requires: `syms` starts at the table; index*entsize inside it (checked).
DynamicSymbol read_symbol(const detail::Reader& syms, u64 entsize,
                          const detail::StringTable& strtab, u64 index) {
  std::optional<u64> off = checked_mul(index, entsize);
  const u64 natural = syms.is64 ? 24 : 16;
  if (!off || !syms.contains(*off, natural)) {
    fail(syms.base_offset(), "symbol index %llu is past the end of the dynamic symbol table",
         ull(index));
  }
  const detail::Reader r = syms.sub(*off, natural);
  DynamicSymbol s;
  u32 st_name = r.word(0);
  u8 st_info;
  if (syms.is64) {
    st_info = r.byte(4);
    s.shndx = r.half(6);
    s.value = r.xword(8);
    s.size = r.xword(16);
  } else {
    s.value = r.word(4);
    s.size = r.word(8);
    st_info = r.byte(12);
    s.shndx = r.half(14);
  }
  s.type = st_info & 0xf;
  s.bind = st_info >> 4;
  if (st_name != 0) s.name = string_at(strtab, st_name, "symbol");
  return s;
}

// Symbol count from DT_HASH: nchain equals the number of symbols (gABI).
u64 sysv_hash_count(const ElfFile& f, u64 hash) {
  const detail::Reader r = table_from(f, hash, "DT_HASH");
  const detail::Reader& fr = r;
  // s390x and Alpha use 64-bit hash table entries (as readelf knows).
  const bool wide = fr.is64 && (f.e_machine() == EM_S390 || f.e_machine() == EM_ALPHA);
  if (!r.contains(0, wide ? 16 : 8)) fail(r.base_offset(), "DT_HASH table header out of bounds");
  return wide ? r.xword(8) : r.word(4);
}

// Symbol count from DT_GNU_HASH: the table only covers symbols from
// symoffset on, so walk the chain of the highest bucket to its end marker
// (bit 0 set); that symbol is the last one (as glibc's dl-lookup and readelf
// do). The walk moves forward one 4-byte entry per step and stops at the end
// of the file, so it cannot loop. With no hashed symbol at all the table says
// nothing about the count (Open MPI's libmpi_usempif08 has symoffset 1 and
// four undefined symbols after it): 0, and *floor gets symoffset.
u64 gnu_hash_count(const ElfFile& f, u64 gnu_hash, u64* floor) {
  const detail::Reader r = table_from(f, gnu_hash, "DT_GNU_HASH");
  const detail::Reader& fr = r;
  if (!r.contains(0, 16)) fail(r.base_offset(), "DT_GNU_HASH table header out of bounds");
  const u64 nbuckets = r.word(0), symoffset = r.word(4), bloom_size = r.word(8);
  const u64 bloom_bytes = bloom_size * (fr.is64 ? 8 : 4);  // < 2^36: no overflow
  const u64 buckets = 16 + bloom_bytes;
  if (!r.contains(buckets, nbuckets * 4)) {
    fail(r.base_offset(),
         "DT_GNU_HASH table out of bounds (%llu bloom words, %llu buckets, %llu bytes "
         "to the end of the file)",
         ull(bloom_size), ull(nbuckets), ull(r.size()));
  }
  r.prefetch(buckets, nbuckets * 4);
  u64 max_bucket = 0;
  for (u64 i = 0; i < nbuckets; i++)
    max_bucket = std::max<u64>(max_bucket, r.word(buckets + 4 * i));
  if (max_bucket == 0) {  // no hashed symbols
    *floor = symoffset;
    return 0;
  }
  if (max_bucket < symoffset) {
    fail(r.base_offset(), "DT_GNU_HASH bucket value %llu is below symoffset %llu", ull(max_bucket),
         ull(symoffset));
  }
  const u64 chains = buckets + nbuckets * 4;
  for (u64 i = max_bucket;; i++) {
    const u64 at = chains + (i - symoffset) * 4;
    if (!r.contains(at, 4)) {
      fail(r.base_offset() + chains,
           "GNU hash chain runs past the end of the file (symbol index %llu has no "
           "end-of-chain marker)",
           ull(i));
    }
    if (r.word(at) & 1) return i + 1;
  }
}

// The relocation types of each machine that touch TLS (glibc
// sysdeps/{x86_64,i386,aarch64}/dl-machine.h elf_machine_rela/rel).
std::optional<TlsRelocKind> classify(u16 machine, bool is64, u32 type) {
  // A table: relocation numbers, kind, glibc's names (clang-format would break the rows).
  // clang-format off
  switch (machine) {
    case EM_X86_64:  // x86-64 and x32 share the numbers
      switch (type) {
        case 18: case 23: return TlsRelocKind::InitialExec;   // TPOFF64, TPOFF32
        case 36: return TlsRelocKind::Descriptor;             // TLSDESC
        case 16: case 17: return TlsRelocKind::GeneralDynamic;  // DTPMOD64, DTPOFF64
      }
      break;
    case EM_386:
      switch (type) {
        case 14: case 37: return TlsRelocKind::InitialExec;   // TLS_TPOFF, TLS_TPOFF32
        case 41: return TlsRelocKind::Descriptor;             // TLS_DESC
        case 35: case 36: return TlsRelocKind::GeneralDynamic;  // TLS_DTPMOD32, TLS_DTPOFF32
      }
      break;
    case EM_AARCH64:
      if (!is64) break;  // ILP32 numbers differ
      switch (type) {
        case 1030: return TlsRelocKind::InitialExec;          // TLS_TPREL
        case 1031: return TlsRelocKind::Descriptor;           // TLSDESC
        case 1028: case 1029: return TlsRelocKind::GeneralDynamic;  // TLS_DTPMOD, TLS_DTPREL
      }
      break;
  }
  return std::nullopt;
  // clang-format on
}

bool machine_has_tls_relocs(u16 machine) {
  return machine == EM_X86_64 || machine == EM_386 || machine == EM_AARCH64;
}

}  // namespace

// The DT_VERNEED chain as glibc's _dl_check_map_versions reads it.
// Requires: DT_VERNEED inside a PT_LOAD; every vn_file/vna_name inside the
// dynamic string table. Bounds: DT_VERNEEDNUM entries (or, without it, as
// many as fit), Vernaux entries in total no more than fit in the file.
std::vector<VersionNeed> ElfFile::version_needs() const {
  std::vector<VersionNeed> out;
  if (!verneed_) return out;
  const detail::Reader r = table_from(*this, verneed_, "DT_VERNEED");
  const detail::StringTable dynstr{src_.get(), dynstr_off_, dynstr_size_};
  const u64 fit = r.size() / VERNEED_SIZE;
  if (verneednum_ > fit) {
    fail(r.base_offset(), "DT_VERNEEDNUM %llu exceeds the %llu entries that fit in the file",
         ull(verneednum_), ull(fit));
  }
  // Without DT_VERNEEDNUM, follow vn_next to its zero link like glibc; every
  // entry takes 16 bytes, so more than `fit` entries means a loop.
  const u64 limit = verneednum_ ? verneednum_ : fit;
  out.reserve(verneednum_);
  u64 aux_budget = r.size() / VERNAUX_SIZE;  // total Vernaux entries that fit
  u64 off = 0;
  for (u64 i = 0;; i++) {
    if (i == limit) {
      if (verneednum_) break;
      fail(r.base_offset() + off, "version need chain loops (more than %llu entries)", ull(fit));
    }
    if (!r.contains(off, VERNEED_SIZE)) {
      fail(r.base_offset() + off, "version need entry %llu out of bounds", ull(i));
    }
    const u16 vn_cnt = r.half(off + 2);
    const u32 vn_file = r.word(off + 4), vn_aux = r.word(off + 8), vn_next = r.word(off + 12);
    // A link shorter than an entry points back into the entry itself.
    if (vn_aux < VERNEED_SIZE && vn_cnt > 0) {
      fail(r.base_offset() + off,
           "version need chain loops (vn_aux 0x%x of entry %llu points into the entry itself)",
           vn_aux, ull(i));
    }
    if (vn_next != 0 && vn_next < VERNEED_SIZE) {
      fail(r.base_offset() + off,
           "version need chain loops (vn_next 0x%x of entry %llu points into the entry itself)",
           vn_next, ull(i));
    }
    VersionNeed need;
    need.file = string_at(dynstr, vn_file, "version need file");
    if (vn_cnt > aux_budget) {
      fail(r.base_offset() + off,
           "version need entry %llu has %u auxiliary entries, more than fit in the file", ull(i),
           vn_cnt);
    }
    aux_budget -= vn_cnt;
    need.entries.reserve(vn_cnt);
    u64 aoff = off + vn_aux;
    for (u32 j = 0; j < vn_cnt; j++) {
      if (!r.contains(aoff, VERNAUX_SIZE)) {
        fail(r.base_offset() + off, "version need auxiliary entry out of bounds (entry %llu)",
             ull(i));
      }
      VersionNeedEntry e;
      e.hash = r.word(aoff);
      e.flags = r.half(aoff + 4);
      e.other = r.half(aoff + 6);
      e.name = string_at(dynstr, r.word(aoff + 8), "version need");
      need.entries.push_back(e);
      const u32 vna_next = r.word(aoff + 12);
      if (vna_next != 0 && vna_next < VERNAUX_SIZE) {
        fail(r.base_offset() + aoff,
             "version need auxiliary chain loops (vna_next 0x%x points into the entry itself)",
             vna_next);
      }
      if (vna_next == 0 && j + 1 < vn_cnt) {
        // A zero link before vn_cnt entries makes a count-driven reader
        // (readelf) revisit the same entry: the chain points at itself.
        fail(r.base_offset() + aoff,
             "version need auxiliary chain loops (vna_next is 0 after %u of %u entries)", j + 1,
             vn_cnt);
      }
      aoff += vna_next;
    }
    out.push_back(std::move(need));
    if (vn_next == 0) {
      if (verneednum_ && i + 1 < verneednum_) {
        fail(r.base_offset() + off,
             "version need chain loops (vn_next is 0 after %llu of %llu entries)", ull(i + 1),
             ull(verneednum_));
      }
      break;
    }
    off += vn_next;
  }
  return out;
}

// The DT_VERDEF chain (what _dl_check_map_versions matches needs against).
const std::vector<VersionNeed>& ElfFile::cached_version_needs() const {
  if (!version_needs_cache_) version_needs_cache_ = version_needs();
  return *version_needs_cache_;
}

const std::vector<VersionDef>& ElfFile::cached_version_defs() const {
  if (!version_defs_cache_) version_defs_cache_ = version_defs();
  return *version_defs_cache_;
}

// Requires and bounds as for version_needs, with DT_VERDEFNUM.
std::vector<VersionDef> ElfFile::version_defs() const {
  std::vector<VersionDef> out;
  if (!verdef_) return out;
  const detail::Reader r = table_from(*this, verdef_, "DT_VERDEF");
  const detail::StringTable dynstr{src_.get(), dynstr_off_, dynstr_size_};
  const u64 fit = r.size() / VERDEF_SIZE;
  if (verdefnum_ > fit) {
    fail(r.base_offset(), "DT_VERDEFNUM %llu exceeds the %llu entries that fit in the file",
         ull(verdefnum_), ull(fit));
  }
  const u64 limit = verdefnum_ ? verdefnum_ : fit;
  out.reserve(verdefnum_);
  u64 aux_budget = r.size() / VERDAUX_SIZE;
  u64 off = 0;
  for (u64 i = 0;; i++) {
    if (i == limit) {
      if (verdefnum_) break;
      fail(r.base_offset() + off, "version definition chain loops (more than %llu entries)",
           ull(fit));
    }
    if (!r.contains(off, VERDEF_SIZE)) {
      fail(r.base_offset() + off, "version definition entry %llu out of bounds", ull(i));
    }
    VersionDef def;
    def.flags = r.half(off + 2);
    def.index = r.half(off + 4);
    const u16 vd_cnt = r.half(off + 6);
    def.hash = r.word(off + 8);
    const u32 vd_aux = r.word(off + 12), vd_next = r.word(off + 16);
    if (vd_aux < VERDEF_SIZE && vd_cnt > 0) {
      fail(r.base_offset() + off,
           "version definition chain loops (vd_aux 0x%x of entry %llu points into the entry "
           "itself)",
           vd_aux, ull(i));
    }
    if (vd_next != 0 && vd_next < VERDEF_SIZE) {
      fail(r.base_offset() + off,
           "version definition chain loops (vd_next 0x%x of entry %llu points into the entry "
           "itself)",
           vd_next, ull(i));
    }
    if (vd_cnt > aux_budget) {
      fail(r.base_offset() + off,
           "version definition entry %llu has %u auxiliary entries, more than fit in the file",
           ull(i), vd_cnt);
    }
    aux_budget -= vd_cnt;
    if (vd_cnt > 1) def.parents.reserve(vd_cnt - 1);
    u64 aoff = off + vd_aux;
    for (u32 j = 0; j < vd_cnt; j++) {
      if (!r.contains(aoff, VERDAUX_SIZE)) {
        fail(r.base_offset() + off, "version definition auxiliary entry out of bounds (entry %llu)",
             ull(i));
      }
      std::string_view name = string_at(dynstr, r.word(aoff), "version definition");
      if (j == 0) {
        def.name = name;
      } else {
        def.parents.push_back(name);
      }
      const u32 vda_next = r.word(aoff + 4);
      if (vda_next != 0 && vda_next < VERDAUX_SIZE) {
        fail(r.base_offset() + aoff,
             "version definition auxiliary chain loops (vda_next 0x%x points into the entry "
             "itself)",
             vda_next);
      }
      if (vda_next == 0 && j + 1 < vd_cnt) {
        fail(r.base_offset() + aoff,
             "version definition auxiliary chain loops (vda_next is 0 after %u of %u "
             "entries)",
             j + 1, vd_cnt);
      }
      aoff += vda_next;
    }
    out.push_back(std::move(def));
    if (vd_next == 0) {
      if (verdefnum_ && i + 1 < verdefnum_) {
        fail(r.base_offset() + off,
             "version definition chain loops (vd_next is 0 after %llu of %llu entries)", ull(i + 1),
             ull(verdefnum_));
      }
      break;
    }
    off += vd_next;
  }
  return out;
}

// The dynamic symbol table. Its length is not recorded in the dynamic
// section; like `readelf -D` we take it from DT_HASH, else DT_GNU_HASH, else the
// SHT_DYNSYM section header. Requires: count * DT_SYMENT bytes in the file.
bool ElfFile::dynsym_table(DynsymTable* t) const {
  const detail::Reader fr{src_.get(), 0, src_->size(), is_64_, big_endian_};
  const u64 natural = is_64_ ? 24 : 16;
  detail::Reader syms{src_.get(), 0, 0, is_64_, big_endian_};
  detail::StringTable strtab{src_.get(), dynstr_off_, dynstr_size_};
  u64 entsize = natural;
  std::optional<u64> count;
  u64 floor = 0;  // an empty DT_GNU_HASH's symoffset, when nothing better is known
  if (symtab_) {
    syms = table_from(*this, symtab_, "DT_SYMTAB");
    if (syment_) entsize = syment_;
    if (hash_) {
      count = sysv_hash_count(*this, hash_);
    } else if (gnu_hash_) {
      if (u64 n = gnu_hash_count(*this, gnu_hash_, &floor)) count = n;
    }
  }
  if (!count) {
    // No hash table (or no dynamic section): the .dynsym section header.
    detail::SectionTable st =
        detail::make_section_table(fr, e_shoff_, e_shentsize_, e_shnum_, e_shstrndx_);
    for (u64 i = 0; i < st.count; i++) {
      detail::SectionHeader sh = st.at(i);
      if (sh.sh_type != detail::SHT_DYNSYM) continue;
      if (!symtab_) {
        syms = st.contents_reader(sh, ".dynsym section");
        if (sh.sh_entsize) entsize = sh.sh_entsize;
        const detail::Reader names = st.contents_reader(st.at(sh.sh_link), ".dynsym string table");
        strtab = detail::StringTable{src_.get(), names.base_offset(), names.size()};
      }
      count = sh.sh_size / (sh.sh_entsize ? sh.sh_entsize : natural);
      break;
    }
  }
  if (!count && floor) count = floor;
  if (!count || *count == 0) return false;
  if (entsize < natural) {
    fail(syms.base_offset(), "dynamic symbol entry size %llu is smaller than %llu", ull(entsize),
         ull(natural));
  }
  std::optional<u64> need = checked_mul(*count, entsize);
  if (!need || *need > syms.size()) {
    fail(syms.base_offset(),
         "dynamic symbol count %llu exceeds the symbol table bytes in the file (%llu bytes "
         "from offset 0x%llx)",
         ull(*count), ull(syms.size()), ull(syms.base_offset()));
  }
  *t = DynsymTable{syms, strtab, entsize, *count};
  return true;
}

std::vector<DynamicSymbol> ElfFile::dynamic_symbols() const {
  std::vector<DynamicSymbol> out;
  DynsymTable t;
  if (!dynsym_table(&t)) return out;
  const detail::Reader& syms = t.syms;
  const detail::StringTable& strtab = t.strtab;
  const u64 entsize = t.entsize;
  const std::optional<u64> count = t.count;
  const std::optional<u64> need = t.count * t.entsize;

  // Versions: .gnu.version holds one half per symbol; index 0 is local,
  // 1 global, others name a Verdef (vd_ndx) or Vernaux (vna_other).
  // Every symbol is read: fetch the tables in one piece each.
  syms.prefetch(0, *need);
  if (strtab.size > 0 && !src_->in_memory()) src_->range(strtab.offset, strtab.size);
  detail::Reader versym{src_.get(), 0, 0, is_64_, big_endian_};
  std::vector<std::string_view> names;
  if (versym_) {
    versym = table_from(*this, versym_, "DT_VERSYM");
    if (!versym.contains(0, *count * 2)) {
      fail(versym.base_offset(), "DT_VERSYM table out of bounds (%llu symbols)", ull(*count));
    }
    versym.prefetch(0, *count * 2);
    auto note = [&names](u16 index, std::string_view name) {
      index &= 0x7fff;
      if (index >= names.size()) names.resize(index + 1);
      names[index] = name;
    };
    for (const VersionDef& d : version_defs()) note(d.index, d.name);
    for (const VersionNeed& n : version_needs()) {
      for (const VersionNeedEntry& e : n.entries) note(e.other, e.name);
    }
  }

  out.reserve(*count);
  for (u64 i = 0; i < *count; i++) {
    DynamicSymbol s = read_symbol(syms, entsize, strtab, i);
    if (versym_) {
      const u16 v = versym.half(2 * i);
      s.version_hidden = (v & 0x8000) != 0;
      s.version_index = v & 0x7fff;
      if (s.version_index >= 2 && s.version_index < names.size()) {
        s.version = names[s.version_index];
      }
    }
    out.push_back(s);
  }
  return out;
}

namespace {

u32 gnu_hash(std::string_view name) {
  u32 h = 5381;
  for (unsigned char c : name) h = h * 33 + c;
  return h;
}

u32 sysv_hash(std::string_view name) {
  u32 h = 0;
  for (unsigned char c : name) {
    h = (h << 4) + c;
    const u32 g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

}  // namespace

bool ElfFile::defines_symbol(std::string_view name) const {
  DynsymTable t;
  if (!dynsym_table(&t)) return false;
  auto matches = [&](u64 index) {
    if (index >= t.count) return false;
    DynamicSymbol s = read_symbol(t.syms, t.entsize, t.strtab, index);
    return s.name == name && s.defined() && s.bind != STB_LOCAL;
  };
  if (gnu_hash_) {
    const detail::Reader r = table_from(*this, gnu_hash_, "DT_GNU_HASH");
    if (!r.contains(0, 16)) fail(r.base_offset(), "DT_GNU_HASH table header out of bounds");
    const u64 nbuckets = r.word(0), symoffset = r.word(4), bloom_size = r.word(8),
              shift = r.word(12);
    if (nbuckets == 0 || bloom_size == 0) return false;
    const u64 word_bits = is_64_ ? 64 : 32;
    const u32 h = gnu_hash(name);
    const u64 word = r.addr(16 + ((h / word_bits) % bloom_size) * (word_bits / 8));
    const u64 mask = (u64{1} << (h % word_bits)) | (u64{1} << ((h >> (shift & 31)) % word_bits));
    if ((word & mask) != mask) return false;
    const u64 buckets = 16 + bloom_size * (word_bits / 8);
    const u64 chains = buckets + nbuckets * 4;
    u64 i = r.word(buckets + 4 * (h % nbuckets));
    if (i == 0 || i < symoffset) return false;
    for (; i < t.count; i++) {
      const u32 h2 = r.word(chains + 4 * (i - symoffset));
      if ((h | 1) == (h2 | 1) && matches(i)) return true;
      if (h2 & 1) break;
    }
    return false;
  }
  if (hash_ && !(is_64_ && (e_machine_ == EM_S390 || e_machine_ == EM_ALPHA))) {
    const detail::Reader r = table_from(*this, hash_, "DT_HASH");
    if (!r.contains(0, 8)) fail(r.base_offset(), "DT_HASH table header out of bounds");
    const u64 nbucket = r.word(0), nchain = r.word(4);
    if (nbucket == 0) return false;
    u64 i = r.word(8 + 4 * (sysv_hash(name) % nbucket));
    // A chain longer than the table is a loop in a corrupt file.
    for (u64 steps = 0; i != 0 && i < nchain && steps <= nchain; steps++) {
      if (matches(i)) return true;
      i = r.word(8 + 4 * nbucket + 4 * i);
    }
    return false;
  }
  for (const DynamicSymbol& s : dynamic_symbols())
    if (s.name == name && s.defined() && s.bind != STB_LOCAL) return true;
  return false;
}

// Only st_info and st_shndx of each entry are looked at (the table is
// streamed, not kept); names are read for the few TLS definitions.
std::vector<std::string_view> ElfFile::tls_definitions() const {
  std::vector<std::string_view> out;
  DynsymTable t;
  if (!dynsym_table(&t)) return out;
  const u64 info_at = is_64_ ? 4 : 12, shndx_at = is_64_ ? 6 : 14;
  u64 index = 0;
  t.syms.sub(0, t.count * t.entsize)
      .for_each_entry(t.count, t.entsize, "DT_SYMTAB", [&](ByteView e) {
        const u8 info = e.u8_at(info_at);
        if ((info & 0xf) == STT_TLS && (info >> 4) != STB_LOCAL &&
            e.u16_at(shndx_at, big_endian_) != 0)
          out.push_back(read_symbol(t.syms, t.entsize, t.strtab, index).name);
        index++;
      });
  return out;
}

// The TLS relocations of DT_RELA/DT_REL and DT_JMPREL (TLSDESC usually lives
// in .rela.plt). DT_RELR only holds relative relocations and is skipped.
// Requires: each table inside a PT_LOAD; entry sizes at least the natural
// Elf_Rel/Elf_Rela size; symbol indexes inside the file.
//   Elf64_Rela {r_offset@0, r_info@8 (sym << 32 | type), r_addend@16}
//   Elf32_Rel  {r_offset@0, r_info@4 (sym << 8 | type)} (+ r_addend@8 for Rela)
std::vector<TlsRelocation> ElfFile::tls_relocations() const {
  std::vector<TlsRelocation> out;
  if (!machine_has_tls_relocs(e_machine_)) return out;
  struct Range {
    u64 vaddr, size, entsize;
    bool rela;
    const char* tag;
    const char* ent_tag;
  };
  const u64 rela_natural = is_64_ ? 24 : 12, rel_natural = is_64_ ? 16 : 8;
  Range ranges[3];
  int nranges = 0;
  if (rela_ && relasz_) {
    ranges[nranges++] = {rela_, relasz_,   relaent_ ? relaent_ : rela_natural,
                         true,  "DT_RELA", "DT_RELAENT"};
  }
  if (rel_ && relsz_) {
    ranges[nranges++] = {rel_,  relsz_,   relent_ ? relent_ : rel_natural,
                         false, "DT_REL", "DT_RELENT"};
  }
  if (jmprel_ && pltrelsz_) {
    // DT_PLTREL says which form DT_JMPREL uses; i386 uses REL, the others RELA.
    const bool rela = pltrel_ == static_cast<u64>(DT_RELA)  ? true
                      : pltrel_ == static_cast<u64>(DT_REL) ? false
                                                            : e_machine_ != EM_386;
    const Range plt = {
        jmprel_,
        pltrelsz_,
        rela ? (relaent_ ? relaent_ : rela_natural) : (relent_ ? relent_ : rel_natural),
        rela,
        "DT_JMPREL",
        rela ? "DT_RELAENT" : "DT_RELENT"};
    // Some linkers make DT_RELA cover .rela.plt too (glibc's
    // ELF_DURING_STARTUP range merging in elf/dynamic-link.h): count once.
    bool covered = false;
    for (int i = 0; i < nranges; i++) {
      const Range& o = ranges[i];
      if (o.rela == plt.rela && plt.vaddr >= o.vaddr && plt.vaddr - o.vaddr <= o.size &&
          plt.size <= o.size - (plt.vaddr - o.vaddr)) {
        covered = true;
      }
    }
    if (!covered) ranges[nranges++] = plt;
  }
  if (nranges == 0) return out;

  std::optional<detail::Reader> syms;
  const detail::StringTable dynstr{src_.get(), dynstr_off_, dynstr_size_};
  const u64 sym_entsize = syment_ ? syment_ : (is_64_ ? 24 : 16);
  for (int k = 0; k < nranges; k++) {
    const Range& g = ranges[k];
    if (g.entsize < (g.rela ? rela_natural : rel_natural)) {
      fail(0, "%s %llu is smaller than the %llu-byte relocation entry", g.ent_tag, ull(g.entsize),
           ull(g.rela ? rela_natural : rel_natural));
    }
    const detail::Reader table = table_from(*this, g.vaddr, g.tag);
    if (!table.contains(0, g.size)) {
      fail(table.base_offset(),
           "%s table out of bounds (offset 0x%llx, size 0x%llx, file size 0x%llx)", g.tag,
           ull(table.base_offset()), ull(g.size), ull(src_->size()));
    }
    const detail::Reader r = table.sub(0, g.size);
    const u64 n = g.size / g.entsize;
    r.for_each_entry(n, g.entsize, g.tag, [&](ByteView e) {
      const u64 info = is_64_ ? e.u64_at(8, big_endian_) : e.u32_at(4, big_endian_);
      const u32 type = is_64_ ? static_cast<u32>(info) : static_cast<u32>(info & 0xff);
      const u32 sym = is_64_ ? static_cast<u32>(info >> 32) : static_cast<u32>(info >> 8);
      std::optional<TlsRelocKind> kind = classify(e_machine_, is_64_, type);
      if (!kind) return;
      TlsRelocation t;
      t.kind = *kind;
      t.type = type;
      t.symbol_index = sym;
      if (sym != 0) {
        if (!symtab_) {
          fail(r.base_offset(), "%s relocation refers to symbol %u but there is no DT_SYMTAB",
               g.tag, sym);
        }
        if (!syms) syms = table_from(*this, symtab_, "DT_SYMTAB");
        DynamicSymbol s = read_symbol(*syms, sym_entsize, dynstr, sym);
        t.symbol_name = s.name;
        t.symbol_defined_here = s.defined();
        t.symbol_bind = s.bind;
      }
      out.push_back(t);
    });
  }
  return out;
}

}  // namespace mld::elf
