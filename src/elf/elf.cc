// elf.cc — the eager half of the ELF reader: the ELF header, the program
// header table and the dynamic section, decoded the way glibc's loader reads
// them when it maps an object (elf/dl-load.c _dl_map_object_from_fd, then
// elf/get-dynamic-info.h elf_get_dynamic_info). Everything here runs once per
// file for `mldoctor libs` over thousands of files, so it allocates only the
// two vectors ElfFile owns and leaves symbols, versions, relocations and
// notes to the lazy decoders in elf-tables.cc and elf-sections.cc.
//
// The input is untrusted: every read goes through ByteView, every count is
// checked against the bytes that could hold it before anything is reserved,
// and every failure is a ParseError whose message names the ELF structure.
#include "elf/elf.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

#include "elf/elf-internal.h"

namespace mld::elf {

namespace detail {

void fail(u64 offset, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  throw ParseError(buf, offset);
}

// Elf64_Shdr: name@0 type@4 flags@8 addr@16 offset@24 size@32 link@40
// info@44 addralign@48 entsize@56 (64 bytes). Elf32_Shdr has the same fields
// as 4-byte words: offset@16 size@20 link@24 info@28 addralign@32 entsize@36.
SectionHeader SectionTable::at(u64 index) const {
  if (index >= count) {
    fail(offset, "section index %llu out of range (%llu sections)", ull(index), ull(count));
  }
  // In range by make_section_table's check, so the multiplication is safe.
  u64 off = offset + index * entsize;
  SectionHeader sh;
  sh.sh_name = r.word(off);
  sh.sh_type = r.word(off + 4);
  if (r.is64) {
    sh.sh_offset = r.xword(off + 24);
    sh.sh_size = r.xword(off + 32);
    sh.sh_link = r.word(off + 40);
    sh.sh_info = r.word(off + 44);
    sh.sh_addralign = r.xword(off + 48);
    sh.sh_entsize = r.xword(off + 56);
  } else {
    sh.sh_offset = r.word(off + 16);
    sh.sh_size = r.word(off + 20);
    sh.sh_link = r.word(off + 24);
    sh.sh_info = r.word(off + 28);
    sh.sh_addralign = r.word(off + 32);
    sh.sh_entsize = r.word(off + 36);
  }
  return sh;
}

// Requires: e_shstrndx names a section whose bytes are in the file; a name
// offset past its end or without a NUL is a ParseError.
std::string_view SectionTable::name(const SectionHeader& sh) const {
  if (shstrndx == 0 || shstrndx >= count) return {};
  SectionHeader strtab = at(shstrndx);
  ByteView names = contents(strtab, "section name table");
  if (sh.sh_name >= names.size()) {
    fail(names.base_offset(),
         "section name offset 0x%x is past the end of the section name table "
         "(size 0x%llx)",
         sh.sh_name, ull(names.size()));
  }
  return names.cstr_at(sh.sh_name, "section name");
}

ByteView SectionTable::contents(const SectionHeader& sh, const char* what) const {
  if (sh.sh_type == SHT_NOBITS) return ByteView();
  return contents_reader(sh, what).view(0, sh.sh_size);
}

Reader SectionTable::contents_reader(const SectionHeader& sh, const char* what) const {
  if (sh.sh_type == SHT_NOBITS) return Reader{r.src, 0, 0, r.is64, r.be};
  if (!r.contains(sh.sh_offset, sh.sh_size)) {
    fail(sh.sh_offset,
         "%s out of bounds (section at offset 0x%llx, size 0x%llx, file size "
         "0x%llx)",
         what, ull(sh.sh_offset), ull(sh.sh_size), ull(r.size()));
  }
  return r.sub(sh.sh_offset, sh.sh_size);
}

std::optional<std::string_view> StringTable::find(u64 off) const {
  // In memory the whole rest of the table is free to search; from a file,
  // start with a window that holds most names and widen it when no NUL is
  // in it.
  const u64 avail = size - off;
  u64 want = src->in_memory() ? avail : std::min<u64>(avail, 128);
  for (;;) {
    ByteView v = src->range(offset + off, want, "string");
    if (const void* nul = std::memchr(v.data(), 0, v.size())) {
      return std::string_view(reinterpret_cast<const char*>(v.data()),
                              static_cast<const u8*>(nul) - v.data());
    }
    if (want == avail) return std::nullopt;
    want = avail / 16 < want ? avail : want * 16;
  }
}

// Requires: the ELF header was read; e_shoff == 0 means "no sections" (as
// sstrip-style tools leave it), whatever e_shnum says.
SectionTable make_section_table(Reader r, u64 e_shoff, u16 e_shentsize, u16 e_shnum,
                                u16 e_shstrndx) {
  SectionTable t;
  t.r = r;
  if (e_shoff == 0) return t;  // no section headers (stripped of them)
  const u64 natural = r.is64 ? 64 : 40;
  if (e_shnum == 0 && e_shentsize == 0) return t;
  if (e_shentsize < natural) {
    fail(r.is64 ? 58 : 46, "section header entry size %u is smaller than %llu", e_shentsize,
         ull(natural));
  }
  t.offset = e_shoff;
  t.entsize = e_shentsize;
  t.count = e_shnum;
  t.shstrndx = e_shstrndx;
  if (e_shnum == 0 || e_shstrndx == SHN_XINDEX) {
    // Extended numbering (gABI): section 0 holds the real values.
    if (!r.contains(e_shoff, natural)) {
      fail(e_shoff,
           "section header table out of bounds (e_shoff 0x%llx, file size "
           "0x%llx)",
           ull(e_shoff), ull(r.size()));
    }
    t.count = 1;
    SectionHeader zero = t.at(0);
    if (e_shnum == 0) t.count = zero.sh_size;
    if (e_shstrndx == SHN_XINDEX) t.shstrndx = zero.sh_link;
    if (t.count == 0) t.count = 1;  // section 0 itself is there
  }
  std::optional<u64> bytes = checked_mul(t.count, t.entsize);
  if (!bytes || !r.contains(e_shoff, *bytes)) {
    fail(e_shoff,
         "section header table out of bounds (e_shoff 0x%llx, %llu entries of "
         "%llu bytes, file size 0x%llx)",
         ull(e_shoff), ull(t.count), ull(t.entsize), ull(r.size()));
  }
  return t;
}

}  // namespace detail

using detail::fail;
using detail::ull;

namespace {

constexpr u8 ELFCLASS32 = 1, ELFCLASS64 = 2, ELFDATA2LSB = 1, ELFDATA2MSB = 2;
constexpr u16 PN_XNUM = 0xffff;

// Resolves a string-valued dynamic entry (DT_NEEDED, DT_SONAME, ...) in the
// dynamic string table. `tag` names the entry in the message.
std::string_view dynamic_string(const detail::StringTable& dynstr, u64 value, const char* tag) {
  if (value >= dynstr.size) {
    fail(dynstr.offset,
         "%s string offset 0x%llx is past the end of the dynamic string table "
         "(DT_STRSZ 0x%llx)",
         tag, ull(value), ull(dynstr.size));
  }
  std::optional<std::string_view> s = dynstr.find(value);
  if (!s) {
    fail(dynstr.offset + value,
         "%s string at offset 0x%llx of the dynamic string table is not "
         "NUL-terminated",
         tag, ull(value));
  }
  return *s;
}

}  // namespace

// EI_MAG0..EI_MAG3 (gABI): the only check that is safe on any input.
bool has_elf_magic(ByteView bytes) {
  return bytes.size() >= 4 && bytes.data()[0] == 0x7f && bytes.data()[1] == 'E' &&
         bytes.data()[2] == 'L' && bytes.data()[3] == 'F';
}

std::optional<ElfTarget> elf_target(ByteView head) {
  if (!has_elf_magic(head) || head.size() < 20) return std::nullopt;
  return ElfTarget{head.u16_at(18, head.u8_at(5) == 2), head.u8_at(4) == 2};
}

// Short names in the style of binutils' readelf "Machine:" line, for the
// machines a Linux user meets; the rest are "unknown machine" (the caller
// prints the number alongside when it matters).
std::string_view machine_name(u16 e_machine) {
  switch (e_machine) {
    case 0: return "no machine";
    case 2: return "SPARC";
    case EM_386: return "Intel 80386";
    case 8: return "MIPS";
    case 20: return "PowerPC";
    case EM_PPC64: return "PowerPC64";
    case EM_S390: return "IBM S/390";
    case EM_ARM: return "ARM";
    case 42: return "SuperH";
    case 43: return "SPARC v9";
    case 50: return "IA-64";
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "AArch64";
    case EM_RISCV: return "RISC-V";
    case 258: return "LoongArch";
    default: return "unknown machine";
  }
}

std::optional<u64> ElfFile::vaddr_to_offset(u64 vaddr) const {
  // Only the file-backed part of a PT_LOAD ([p_vaddr, p_vaddr + p_filesz))
  // has bytes in the file; the rest of p_memsz is zero-filled .bss.
  for (const ProgramHeader& ph : phdrs_) {
    if (ph.p_type != PT_LOAD || vaddr < ph.p_vaddr) continue;
    u64 delta = vaddr - ph.p_vaddr;
    if (delta >= ph.p_filesz) continue;
    std::optional<u64> off = checked_add(ph.p_offset, delta);
    if (off) return off;
  }
  return std::nullopt;
}

ElfFile ElfFile::parse(ByteView bytes) { return parse(std::make_shared<ViewSource>(bytes)); }

ElfFile ElfFile::parse(std::shared_ptr<const ByteSource> source) {
  ElfFile f;
  f.src_ = std::move(source);
  const u64 file_size = f.src_->size();

  // ── ELF identification and header (glibc elf/dl-load.c open_verify) ──
  if (file_size == 0) fail(0, "empty file (0 bytes), not an ELF object");
  // The first KiB holds the ELF header and, in every linker's layout, the
  // program headers: from a file, one read.
  const ByteView ident = f.src_->range(0, std::min<u64>(file_size, 1024));
  if (!has_elf_magic(ident)) fail(0, "not an ELF file (no \\x7fELF magic)");
  if (file_size < 16) {
    fail(0, "file too short for the ELF identification (%llu bytes)", ull(file_size));
  }
  const u8 ei_class = ident.data()[4], ei_data = ident.data()[5];
  if (ei_class != ELFCLASS32 && ei_class != ELFCLASS64) {
    fail(4, "invalid ELF class %u in EI_CLASS (expected 1 for ELF32 or 2 for ELF64)", ei_class);
  }
  if (ei_data != ELFDATA2LSB && ei_data != ELFDATA2MSB) {
    fail(5, "invalid ELF data encoding %u in EI_DATA (expected 1 or 2)", ei_data);
  }
  f.is_64_ = ei_class == ELFCLASS64;
  f.big_endian_ = ei_data == ELFDATA2MSB;
  f.os_abi_ = ident.data()[7];
  const u64 ehsize = f.is_64_ ? 64 : 52;
  if (file_size < ehsize) {
    fail(0, "ELF header truncated: the file has %llu bytes, an ELF%d header needs %llu",
         ull(file_size), f.is_64_ ? 64 : 32, ull(ehsize));
  }
  // Elf64_Ehdr: e_type@16 e_machine@18 e_version@20 e_entry@24 e_phoff@32
  // e_shoff@40 e_flags@48 e_ehsize@52 e_phentsize@54 e_phnum@56
  // e_shentsize@58 e_shnum@60 e_shstrndx@62. Elf32_Ehdr shifts everything
  // after e_entry by the narrower addresses (e_phoff@28 ... e_shstrndx@50).
  // e_ident[EI_VERSION], EI_OSABI padding and e_version are not judged here:
  // the loader model applies glibc's open_verify checks itself.
  // One reader over the whole file; offsets below are file offsets.
  const detail::Reader r{f.src_.get(), 0, file_size, f.is_64_, f.big_endian_};
  f.e_type_ = r.half(16);
  f.e_machine_ = r.half(18);
  u64 e_phoff, e_shoff;
  u16 e_phentsize, e_phnum;
  if (f.is_64_) {
    e_phoff = r.xword(32);
    e_shoff = r.xword(40);
    f.e_flags_ = r.word(48);
    e_phentsize = r.half(54);
    e_phnum = r.half(56);
    f.e_shentsize_ = r.half(58);
    f.e_shnum_ = r.half(60);
    f.e_shstrndx_ = r.half(62);
  } else {
    e_phoff = r.word(28);
    e_shoff = r.word(32);
    f.e_flags_ = r.word(36);
    e_phentsize = r.half(42);
    e_phnum = r.half(44);
    f.e_shentsize_ = r.half(46);
    f.e_shnum_ = r.half(48);
    f.e_shstrndx_ = r.half(50);
  }
  f.e_shoff_ = e_shoff;

  // The section header table is not judged here: ld.so never reads it, and a
  // library whose table is cut off or garbage (e_shoff past the end, a wild
  // e_shnum) loads and runs. The decoders that need sections (the
  // `.comment`, `.rodata` and SHT_NOTE lookups, the `.dynsym` fallback)
  // build the table when asked and throw then.

  // ── Program headers ──
  // PN_XNUM (0xffff) means the real count is in section 0's sh_info (gABI
  // extended numbering); only then are the section headers needed here. The
  // whole table is bounds-checked before the vector is reserved, so a lying
  // e_phnum cannot cause a large allocation.
  u64 phnum = e_phnum;
  if (e_phnum == PN_XNUM) {
    detail::SectionTable sections =
        detail::make_section_table(r, e_shoff, f.e_shentsize_, f.e_shnum_, f.e_shstrndx_);
    if (sections.count > 0) phnum = sections.at(0).sh_info;
  }
  const u64 phentsize = f.is_64_ ? 56 : 32;
  if (phnum > 0) {
    // glibc refuses any other size ("ELF file's phentsize not the expected size").
    if (e_phentsize != phentsize) {
      fail(f.is_64_ ? 54 : 42,
           "program header entry size %u is not the expected %llu (e_phentsize)", e_phentsize,
           ull(phentsize));
    }
    std::optional<u64> table = checked_mul(phnum, phentsize);
    if (!table || !r.contains(e_phoff, *table)) {
      fail(e_phoff,
           "program header table out of bounds (e_phoff 0x%llx, e_phnum %llu, "
           "file size 0x%llx)",
           ull(e_phoff), ull(phnum), ull(file_size));
    }
    r.prefetch(e_phoff, *table);
  }
  f.phdrs_.reserve(phnum);
  const ProgramHeader* dynamic = nullptr;
  const ProgramHeader* prev_load = nullptr;
  // Elf64_Phdr: type@0 flags@4 offset@8 vaddr@16 paddr@24 filesz@32 memsz@40
  // align@48. Elf32_Phdr moves p_flags after p_memsz: type@0 offset@4
  // vaddr@8 paddr@12 filesz@16 memsz@20 flags@24 align@28.
  for (u64 i = 0; i < phnum; i++) {
    const u64 o = e_phoff + i * phentsize;
    ProgramHeader ph;
    ph.p_type = r.word(o);
    if (f.is_64_) {
      ph.p_flags = r.word(o + 4);
      ph.p_offset = r.xword(o + 8);
      ph.p_vaddr = r.xword(o + 16);
      ph.p_filesz = r.xword(o + 32);
      ph.p_memsz = r.xword(o + 40);
      ph.p_align = r.xword(o + 48);
    } else {
      ph.p_offset = r.word(o + 4);
      ph.p_vaddr = r.word(o + 8);
      ph.p_filesz = r.word(o + 16);
      ph.p_memsz = r.word(o + 20);
      ph.p_flags = r.word(o + 24);
      ph.p_align = r.word(o + 28);
    }
    f.phdrs_.push_back(ph);
  }
  for (const ProgramHeader& ph : f.phdrs_) {
    switch (ph.p_type) {
      case PT_LOAD: {
        // gABI: "Loadable segment entries ... appear in ascending order,
        // sorted on the p_vaddr member"; _dl_map_segments relies on it and
        // vaddr_to_offset would be ambiguous if the ranges overlapped.
        if (prev_load) {
          std::optional<u64> prev_end = checked_add(prev_load->p_vaddr, prev_load->p_memsz);
          if (!prev_end || ph.p_vaddr < *prev_end) {
            fail(e_phoff,
                 "PT_LOAD segments overlap or are out of order (segment at "
                 "vaddr 0x%llx starts before the previous one ends at 0x%llx)",
                 ull(ph.p_vaddr), ull(prev_end ? *prev_end : ~u64{0}));
          }
        }
        prev_load = &ph;
        break;
      }
      case PT_INTERP: {
        // The interpreter path; ld.so ignores PT_INTERP of a library, but
        // `mldoctor libs` reports the one of an executable.
        if (!r.contains(ph.p_offset, ph.p_filesz)) {
          fail(ph.p_offset,
               "PT_INTERP out of bounds (offset 0x%llx, size 0x%llx, file size 0x%llx)",
               ull(ph.p_offset), ull(ph.p_filesz), ull(file_size));
        }
        std::string_view s = r.view(ph.p_offset, ph.p_filesz).as_string_view();
        f.interp_ = s.substr(0, s.find('\0'));
        break;
      }
      case PT_TLS:
        // elf/dl-load.c: an empty PT_TLS is ignored; a later one wins.
        if (ph.p_memsz == 0) break;
        f.tls_ = TlsSegment{ph.p_memsz, ph.p_align, ph.p_filesz,
                            ph.p_align ? ph.p_vaddr & (ph.p_align - 1) : 0};
        break;
      case PT_GNU_STACK: f.gnu_stack_flags_ = ph.p_flags; break;
      case PT_DYNAMIC:
        // elf/dl-load.c: p_filesz == 0 is what `objcopy --only-keep-debug`
        // leaves behind; glibc treats it as "no dynamic section".
        if (ph.p_filesz != 0) dynamic = &ph;
        break;
      default: break;
    }
  }
  if (!dynamic) return f;

  // ── Dynamic section (elf/get-dynamic-info.h) ──
  // Read from the file at p_offset; the loader reads the same bytes at
  // p_vaddr once mapped.
  f.has_dynamic_ = true;
  if (!r.contains(dynamic->p_offset, dynamic->p_filesz)) {
    fail(dynamic->p_offset,
         "dynamic section out of bounds (PT_DYNAMIC at offset 0x%llx, size "
         "0x%llx, file size 0x%llx)",
         ull(dynamic->p_offset), ull(dynamic->p_filesz), ull(file_size));
  }
  r.prefetch(dynamic->p_offset, dynamic->p_filesz);
  // Elf64_Dyn is {Sxword d_tag; Xword d_val} (16 bytes); Elf32_Dyn is
  // {Sword; Word} (8 bytes), its tag sign-extended so DT_* compare alike.
  const u64 dynent = f.is_64_ ? 16 : 8;
  const u64 ndyn = dynamic->p_filesz / dynent;
  const u64 dyn0 = dynamic->p_offset;
  // First pass: the scalar entries (DT_STRTAB may follow the DT_NEEDED
  // entries that need it) and the number of DT_NEEDED entries.
  u64 nneeded = 0;
  bool has_strtab = false;
  u64 nentries = ndyn;  // entries before DT_NULL
  for (u64 i = 0; i < ndyn; i++) {
    const u64 o = dyn0 + i * dynent;
    const i64 tag =
        f.is_64_ ? static_cast<i64>(r.xword(o)) : static_cast<i64>(static_cast<i32>(r.word(o)));
    const u64 val = r.addr(o + dynent / 2);
    if (tag == DT_NULL) {
      nentries = i;
      break;
    }
    // A table, one dynamic tag per row (clang-format would break the rows).
    // clang-format off
    switch (tag) {
      case DT_NEEDED: nneeded++; break;
      case DT_STRTAB: f.strtab_ = val; has_strtab = true; break;
      case DT_STRSZ: f.strsz_ = val; break;
      case DT_SYMTAB: f.symtab_ = val; break;
      case DT_SYMENT: f.syment_ = val; break;
      case DT_HASH: f.hash_ = val; break;
      case DT_GNU_HASH: f.gnu_hash_ = val; break;
      case DT_VERSYM: f.versym_ = val; break;
      case DT_VERDEF: f.verdef_ = val; break;
      case DT_VERDEFNUM: f.verdefnum_ = val; break;
      case DT_VERNEED: f.verneed_ = val; break;
      case DT_VERNEEDNUM: f.verneednum_ = val; break;
      case DT_RELA: f.rela_ = val; break;
      case DT_RELASZ: f.relasz_ = val; break;
      case DT_RELAENT: f.relaent_ = val; break;
      case DT_REL: f.rel_ = val; break;
      case DT_RELSZ: f.relsz_ = val; break;
      case DT_RELENT: f.relent_ = val; break;
      case DT_JMPREL: f.jmprel_ = val; break;
      case DT_PLTRELSZ: f.pltrelsz_ = val; break;
      case DT_PLTREL: f.pltrel_ = val; break;
      case DT_FLAGS: f.dt_flags_ = val; break;
      case DT_FLAGS_1: f.dt_flags_1_ = val; break;
      default: break;
    }
    // clang-format on
  }
  // DT_STRTAB is an address; the loader reads it relocated in memory, we
  // read the same bytes through the PT_LOAD that maps them.
  if (has_strtab) {
    std::optional<u64> off = f.vaddr_to_offset(f.strtab_);
    if (!off || *off >= file_size) {
      fail(dyn0,
           "dynamic section entry DT_STRTAB points outside the file (address "
           "0x%llx is in no PT_LOAD segment's file bytes)",
           ull(f.strtab_));
    }
    // DT_STRSZ is mandatory with DT_STRTAB; without it take the rest of the file.
    const u64 size = f.strsz_ ? f.strsz_ : file_size - *off;
    if (!r.contains(*off, size)) {
      fail(*off,
           "dynamic string table out of bounds (DT_STRTAB at offset 0x%llx, "
           "DT_STRSZ 0x%llx, file size 0x%llx)",
           ull(*off), ull(size), ull(file_size));
    }
    // Only bounds-checked here: the strings are read when resolved.
    f.dynstr_off_ = *off;
    f.dynstr_size_ = size;
  }
  // Second pass: string-valued entries.
  const detail::StringTable dynstr{f.src_.get(), f.dynstr_off_, f.dynstr_size_};
  f.needed_.reserve(nneeded);
  for (u64 i = 0; i < nentries; i++) {
    const u64 o = dyn0 + i * dynent;
    const i64 tag =
        f.is_64_ ? static_cast<i64>(r.xword(o)) : static_cast<i64>(static_cast<i32>(r.word(o)));
    const char* name;
    std::optional<std::string_view>* slot = nullptr;
    // A table, one dynamic tag per row (clang-format would break the rows).
    // clang-format off
    switch (tag) {
      case DT_NEEDED: name = "DT_NEEDED"; break;
      case DT_SONAME: name = "DT_SONAME"; slot = &f.soname_; break;
      case DT_RPATH: name = "DT_RPATH"; slot = &f.rpath_; break;
      case DT_RUNPATH: name = "DT_RUNPATH"; slot = &f.runpath_; break;
      case DT_AUDIT: name = "DT_AUDIT"; slot = &f.audit_; break;
      case DT_DEPAUDIT: name = "DT_DEPAUDIT"; slot = &f.depaudit_; break;
      default: continue;
    }
    // clang-format on
    if (!has_strtab) {
      fail(o, "dynamic section has %s but no DT_STRTAB to resolve it", name);
    }
    std::string_view s = dynamic_string(dynstr, r.addr(o + dynent / 2), name);
    if (slot) {
      // elf_get_dynamic_info keeps the last entry of a tag.
      *slot = s;
    } else {
      f.needed_.push_back(s);
    }
  }
  return f;
}

}  // namespace mld::elf
