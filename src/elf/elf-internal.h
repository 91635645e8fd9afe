// elf-internal.h — private helpers shared by the elf-*.cc files: a reader
// that fixes class and byte order once, the section header table (which the
// public ElfFile keeps only as raw e_sh* fields), and formatted ParseErrors.
// Not installed, not included outside src/elf/.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "elf/elf.h"

namespace mld::elf::detail {

// Throws ParseError(printf-style message, offset).
[[noreturn]] void fail(u64 offset, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Shorthand for the printf "%llx"/"%llu" family with u64 arguments.
inline unsigned long long ull(u64 v) { return static_cast<unsigned long long>(v); }

// Reads ELF fields of one structure of a file: half (16), word (32) and
// class-sized addresses/offsets/xwords (32 or 64 bits), all in the file's
// byte order. The structure is the `size` bytes at file offset `base` of the
// source (often everything to the end of the file); bytes are fetched from
// the source only when read, so a Reader over "the rest of a 2 MiB file"
// costs nothing until used. Offsets are relative to `base`; an access outside
// [0, size) throws ParseError("<what> out of bounds", base + off), as a
// ByteView of the same bytes would.
struct Reader {
  const ByteSource* src = nullptr;
  u64 base = 0;
  u64 size_ = 0;
  bool is64 = false;
  bool be = false;

  u64 size() const { return size_; }
  u64 base_offset() const { return base; }
  bool contains(u64 off, u64 n) const {
    std::optional<u64> end = checked_add(off, n);
    return end && *end <= size_;
  }
  // The bytes [off, off+n) (read now). Requires: inside the structure.
  ByteView view(u64 off, u64 n, const char* what = "range") const {
    if (!contains(off, n)) throw ParseError(std::string(what) + " out of bounds", base + off);
    return src->range(base + off, n, what);
  }
  // The structure [off, off+n) of this one. Requires: inside it.
  Reader sub(u64 off, u64 n, const char* what = "range") const {
    if (!contains(off, n)) throw ParseError(std::string(what) + " out of bounds", base + off);
    return Reader{src, base + off, n, is64, be};
  }
  // Reads [off, off+n) ahead in one piece when a loop is about to read it
  // field by field (no effect on in-memory sources or outside the bounds).
  void prefetch(u64 off, u64 n) const {
    if (!src->in_memory() && n > 0 && contains(off, n)) src->range(base + off, n);
  }

  // Calls fn(entry) for each of `count` entries of `entsize` bytes from
  // offset 0, `entry` being a ByteView of that entry (its base_offset() the
  // entry's file offset). A source not in memory is read through one reused
  // buffer of about 64 KiB, so a large table (a 10 MB .rela.dyn) is read
  // once and not kept: on the machines measured, a fresh multi-megabyte
  // buffer costs more in page faults than the read itself. Requires: the
  // entries inside the structure.
  template <class F>
  void for_each_entry(u64 count, u64 entsize, const char* what, F&& fn) const {
    std::optional<u64> total = checked_mul(count, entsize);
    if (!total || !contains(0, *total))
      throw ParseError(std::string(what) + " out of bounds", base);
    if (count == 0 || entsize == 0) return;
    const u64 per = std::max<u64>(1, (u64{64} << 10) / entsize);
    std::vector<u8> buf;
    for (u64 i = 0; i < count; i += per) {
      const u64 k = std::min(per, count - i);
      const u64 off = base + i * entsize;
      ByteView chunk;
      if (src->in_memory()) {
        chunk = src->range(off, k * entsize, what);
      } else {
        buf.resize(k * entsize);
        src->copy_out(off, k * entsize, buf.data(), what);
        chunk = ByteView(buf.data(), buf.size(), off);
      }
      for (u64 j = 0; j < k; j++) fn(chunk.sub(j * entsize, entsize, what));
    }
  }

  u8 byte(u64 off) const { return view(off, 1, "integer").data()[0]; }
  u16 half(u64 off) const { return view(off, 2, "integer").u16_at(0, be); }
  u32 word(u64 off) const { return view(off, 4, "integer").u32_at(0, be); }
  u64 xword(u64 off) const { return view(off, 8, "integer").u64_at(0, be); }
  // Elf32_Addr/Off/Word or Elf64_Addr/Off/Xword depending on the class.
  u64 addr(u64 off) const { return is64 ? xword(off) : word(off); }
};

// A string table (DT_STRTAB, a section's SHT_STRTAB): `size` bytes at file
// offset `offset`. Strings are read on demand, a growing window at a time,
// so one name costs one small read, not the whole table.
struct StringTable {
  const ByteSource* src = nullptr;
  u64 offset = 0;
  u64 size = 0;

  // The NUL-terminated string at `off`, nullopt when no NUL follows it
  // inside the table. Requires: off < size.
  std::optional<std::string_view> find(u64 off) const;
};

inline constexpr u32 SHT_PROGBITS = 1, SHT_SYMTAB = 2, SHT_STRTAB = 3, SHT_NOTE = 7, SHT_NOBITS = 8,
                     SHT_DYNSYM = 11;
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
  Reader r;  // the whole file
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
  // The same as a Reader (nothing read yet).
  Reader contents_reader(const SectionHeader& sh, const char* what) const;
};

// Builds and bounds-checks the table from the raw ELF header values; `r`
// covers the whole file.
// Throws ParseError("section header table out of bounds ...") when the table
// does not fit in the file.
SectionTable make_section_table(Reader r, u64 e_shoff, u16 e_shentsize, u16 e_shnum,
                                u16 e_shstrndx);

}  // namespace mld::elf::detail

namespace mld::elf {

// Where the dynamic symbol table is: its entries, entry size, count, and
// string table (ElfFile::dynsym_table).
struct ElfFile::DynsymTable {
  detail::Reader syms;
  detail::StringTable strtab;
  u64 entsize = 0;
  u64 count = 0;
};

}  // namespace mld::elf
