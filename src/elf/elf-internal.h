// elf-internal.h — private helpers shared by the elf-*.cc files: a reader
// that fixes class and byte order once, the section header table (which the
// public ElfFile keeps only as raw e_sh* fields), and formatted ParseErrors.
// Not installed, not included outside src/elf/.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "base/base.h"

namespace mld::elf::detail {

// Throws ParseError(printf-style message, offset).
[[noreturn]] void fail(u64 offset, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));

// Shorthand for the printf "%llx"/"%llu" family with u64 arguments.
inline unsigned long long ull(u64 v) { return static_cast<unsigned long long>(v); }

// Reads ELF fields of one file: half (16), word (32) and class-sized
// addresses/offsets/xwords (32 or 64 bits), all in the file's byte order.
struct Reader {
  ByteView v;
  bool is64 = false;
  bool be = false;

  u8 byte(u64 off) const { return v.u8_at(off); }
  u16 half(u64 off) const { return v.u16_at(off, be); }
  u32 word(u64 off) const { return v.u32_at(off, be); }
  u64 xword(u64 off) const { return v.u64_at(off, be); }
  // Elf32_Addr/Off/Word or Elf64_Addr/Off/Xword depending on the class.
  u64 addr(u64 off) const { return is64 ? v.u64_at(off, be) : v.u32_at(off, be); }
};

inline constexpr u32 SHT_PROGBITS = 1, SHT_STRTAB = 3, SHT_NOTE = 7,
                     SHT_NOBITS = 8, SHT_DYNSYM = 11;
inline constexpr u64 SHN_XINDEX = 0xffff;

struct SectionHeader {
  u32 sh_name = 0;
  u32 sh_type = 0;
  u64 sh_offset = 0;
  u64 sh_size = 0;
  u32 sh_link = 0;
  u32 sh_info = 0;
  u64 sh_addralign = 0;
  u64 sh_entsize = 0;
};

// The section header table after extended numbering is applied (e_shnum == 0
// and e_shstrndx == SHN_XINDEX take their real values from section 0).
struct SectionTable {
  Reader r;
  u64 offset = 0;
  u64 entsize = 0;
  u64 count = 0;     // 0: the file has no section headers
  u64 shstrndx = 0;  // 0: no section name table

  // Requires: index < count (checked; throws ParseError).
  SectionHeader at(u64 index) const;
  // The section's name through the section name table; empty when absent.
  std::string_view name(const SectionHeader& sh) const;
  // The section's bytes; empty for SHT_NOBITS. Throws if out of bounds.
  ByteView contents(const SectionHeader& sh, const char* what) const;
};

// Builds and bounds-checks the table from the raw ELF header values.
// Throws ParseError("section header table out of bounds ...") when the table
// does not fit in the file.
SectionTable make_section_table(Reader r, u64 e_shoff, u16 e_shentsize,
                                u16 e_shnum, u16 e_shstrndx);

}  // namespace mld::elf::detail
