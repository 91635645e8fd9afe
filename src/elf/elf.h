// elf.h — a zero-copy, bounds-checked reader for ELF32/ELF64 files in either
// byte order. It decodes what the loader model and the doctor checks need:
// program headers, the dynamic section, GNU symbol versioning, dynamic
// symbols, dynamic TLS relocations, the build-id note and `.comment`.
//
// The bytes come from a ByteSource: a view of bytes in memory (a mapping, a
// test buffer), or a SparseFile that reads with pread only the ranges asked
// for. Strings are std::string_view into the source's bytes: a ByteView given
// to ElfFile::parse must outlive the ElfFile; a ByteSource given by shared_ptr
// is kept alive by it. All integers are normalised to host order and 64-bit
// width at read time. Malformed input throws mld::ParseError, with the same
// message whichever source holds the bytes.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "base/base.h"

namespace mld::elf {

// ELF constants, named as the gABI / glibc <elf.h> spell them.
inline constexpr u16 ET_EXEC = 2, ET_DYN = 3;
inline constexpr u16 EM_386 = 3, EM_ARM = 40, EM_X86_64 = 62, EM_AARCH64 = 183, EM_PPC64 = 21,
                     EM_S390 = 22, EM_RISCV = 243;
inline constexpr u32 PT_LOAD = 1, PT_DYNAMIC = 2, PT_INTERP = 3, PT_NOTE = 4, PT_TLS = 7,
                     PT_GNU_STACK = 0x6474e551;
inline constexpr i64 DT_NULL = 0, DT_NEEDED = 1, DT_STRTAB = 5, DT_SYMTAB = 6, DT_RELA = 7,
                     DT_RELASZ = 8, DT_RELAENT = 9, DT_STRSZ = 10, DT_SYMENT = 11, DT_SONAME = 14,
                     DT_RPATH = 15, DT_REL = 17, DT_RELSZ = 18, DT_RELENT = 19, DT_PLTREL = 20,
                     DT_JMPREL = 23, DT_PLTRELSZ = 2, DT_RUNPATH = 29, DT_FLAGS = 30,
                     DT_GNU_HASH = 0x6ffffef5, DT_HASH = 4, DT_VERSYM = 0x6ffffff0,
                     DT_FLAGS_1 = 0x6ffffffb, DT_VERDEF = 0x6ffffffc, DT_VERDEFNUM = 0x6ffffffd,
                     DT_VERNEED = 0x6ffffffe, DT_VERNEEDNUM = 0x6fffffff, DT_AUDIT = 0x6ffffefc,
                     DT_DEPAUDIT = 0x6ffffefb;
inline constexpr u64 DF_ORIGIN = 0x1, DF_BIND_NOW = 0x8, DF_STATIC_TLS = 0x10;
inline constexpr u64 DF_1_NOW = 0x1, DF_1_NODEFLIB = 0x800, DF_1_PIE = 0x08000000;
inline constexpr u16 VER_FLG_BASE = 0x1, VER_FLG_WEAK = 0x2;

struct ProgramHeader {
  u32 p_type = 0;
  u32 p_flags = 0;
  u64 p_offset = 0;
  u64 p_vaddr = 0;
  u64 p_filesz = 0;
  u64 p_memsz = 0;
  u64 p_align = 0;
};

// PT_TLS as glibc's loader sees it (elf/dl-load.c): blocksize = p_memsz,
// align = p_align, initimage = p_filesz, firstbyte_offset = p_vaddr & (p_align-1).
struct TlsSegment {
  u64 blocksize = 0;
  u64 align = 0;
  u64 initimage_size = 0;
  u64 firstbyte_offset = 0;
};

// One Vernaux entry: a version this object needs from `file`.
struct VersionNeedEntry {
  std::string_view name;  // e.g. "GLIBCXX_3.4.30"
  u32 hash = 0;
  u16 flags = 0;  // VER_FLG_WEAK
  u16 other = 0;  // version index used in .gnu.version
};
struct VersionNeed {
  std::string_view file;  // the DT_NEEDED name the versions are expected from
  std::vector<VersionNeedEntry> entries;
};

// One Verdef entry: a version this object defines.
struct VersionDef {
  u16 index = 0;
  u16 flags = 0;  // VER_FLG_BASE marks the soname entry
  u32 hash = 0;
  std::string_view name;                  // first Verdaux
  std::vector<std::string_view> parents;  // further Verdaux entries
};

inline constexpr u8 STT_NOTYPE = 0, STT_OBJECT = 1, STT_FUNC = 2, STT_TLS = 6, STT_GNU_IFUNC = 10;
inline constexpr u8 STB_LOCAL = 0, STB_GLOBAL = 1, STB_WEAK = 2, STB_GNU_UNIQUE = 10;
inline constexpr u16 SHN_UNDEF = 0;

struct DynamicSymbol {
  std::string_view name;
  u64 value = 0;
  u64 size = 0;
  u8 type = 0;            // STT_*
  u8 bind = 0;            // STB_*
  u16 shndx = 0;          // SHN_UNDEF for undefined
  u16 version_index = 0;  // from .gnu.version without the hidden bit; 0 if none
  bool version_hidden = false;
  std::string_view version;  // resolved version name, empty if none/local/global
  bool defined() const { return shndx != SHN_UNDEF; }
};

// Dynamic relocations that matter for static TLS (glibc elf/dl-reloc.c and
// sysdeps/*/dl-machine.h). An initial-exec reference (x86_64 R_X86_64_TPOFF64
// / R_X86_64_TPOFF32, i386 R_386_TLS_TPOFF / R_386_TLS_TPOFF32,
// aarch64 R_AARCH64_TLS_TPREL) needs the target module's TLS in the static
// block and fails the dlopen if it does not fit; a TLSDESC reference
// (R_X86_64_TLSDESC, R_AARCH64_TLSDESC, R_386_TLS_DESC) tries static TLS and
// falls back to dynamic TLS. DTPMOD/DTPOFF (general dynamic) never need it.
enum class TlsRelocKind { InitialExec, Descriptor, GeneralDynamic };
struct TlsRelocation {
  TlsRelocKind kind = TlsRelocKind::GeneralDynamic;
  u32 type = 0;                      // the raw r_type
  u32 symbol_index = 0;              // 0: the object's own TLS block (local symbol)
  std::string_view symbol_name;      // empty when symbol_index is 0
  u8 symbol_bind = 0;                // STB_* of the symbol (STB_LOCAL when symbol_index is 0)
  bool symbol_defined_here = false;  // the symbol is defined in this object
};

// A byte range of the file: offset and size.
struct FileRange {
  u64 offset = 0;
  u64 size = 0;
};

class ElfFile {
 public:
  // Parses headers, program headers and the dynamic section eagerly (cheap);
  // symbols, versions, relocations and notes are decoded on request.
  // Requires: `bytes` outlives the returned object.
  static ElfFile parse(ByteView bytes);
  // The same over any source, kept alive by the ElfFile. Over a SparseFile
  // parse reads the ELF header, the program headers, PT_DYNAMIC, PT_INTERP
  // and the dynamic strings it resolves, nothing else.
  static ElfFile parse(std::shared_ptr<const ByteSource> source);

  bool is_64() const { return is_64_; }
  bool big_endian() const { return big_endian_; }
  u8 os_abi() const { return os_abi_; }
  u16 e_type() const { return e_type_; }
  u16 e_machine() const { return e_machine_; }
  u32 e_flags() const { return e_flags_; }

  const std::vector<ProgramHeader>& program_headers() const { return phdrs_; }
  // PT_INTERP contents without the trailing NUL, if present.
  std::optional<std::string_view> interp() const { return interp_; }
  bool has_dynamic() const { return has_dynamic_; }
  // PT_TLS with p_memsz > 0 (glibc skips empty ones).
  std::optional<TlsSegment> tls() const { return tls_; }
  // PT_GNU_STACK flags (PF_X means executable stack), if present.
  std::optional<u32> gnu_stack_flags() const { return gnu_stack_flags_; }

  // Dynamic section facts (strings resolved through DT_STRTAB).
  const std::vector<std::string_view>& needed() const { return needed_; }
  std::optional<std::string_view> soname() const { return soname_; }
  // Raw DT_RPATH / DT_RUNPATH strings (colon lists, DSTs unexpanded).
  std::optional<std::string_view> rpath() const { return rpath_; }
  std::optional<std::string_view> runpath() const { return runpath_; }
  std::optional<std::string_view> audit() const { return audit_; }
  std::optional<std::string_view> depaudit() const { return depaudit_; }
  u64 dt_flags() const { return dt_flags_; }
  u64 dt_flags_1() const { return dt_flags_1_; }

  // GNU versioning. Throws ParseError on malformed tables.
  std::vector<VersionNeed> version_needs() const;
  std::vector<VersionDef> version_defs() const;
  // The same tables, decoded on first use and kept with this ElfFile: the
  // loader checks the needs of every process it simulates against the same
  // few providers (libc above all). A malformed table throws on every call.
  // Not synchronised: an ElfFile is used by one thread at a time.
  const std::vector<VersionNeed>& cached_version_needs() const;
  const std::vector<VersionDef>& cached_version_defs() const;
  // Dynamic symbols with versions resolved. The count comes from DT_HASH, else
  // DT_GNU_HASH, else the .dynsym section header.
  std::vector<DynamicSymbol> dynamic_symbols() const;
  // TLS-related dynamic relocations from DT_RELA/DT_REL and DT_JMPREL.
  std::vector<TlsRelocation> tls_relocations() const;
  // Whether the dynamic symbol table defines `name` (global or weak, any
  // version), looked up through DT_GNU_HASH, else DT_HASH, as ld.so's
  // do_lookup_x does: a few small reads, not the whole table. Objects
  // without either table are searched linearly. Throws ParseError on
  // malformed tables.
  bool defines_symbol(std::string_view name) const;
  // The st_value of each defined symbol of `names` (any binding): from the
  // dynamic symbol table, else from .symtab (the static symbols of a file
  // that is not stripped); nullopt for a name found in neither. One pass over
  // each table, whatever the number of names.
  std::vector<std::optional<u64>> symbol_values(const std::vector<std::string_view>& names) const;
  // Names of the defined, non-local STT_TLS dynamic symbols (what another
  // object's TLS reference can bind to), without decoding every symbol.
  std::vector<std::string_view> tls_definitions() const;

  // NT_GNU_BUILD_ID as lowercase hex, from PT_NOTE (or SHT_NOTE sections).
  std::optional<std::string> build_id() const;
  // Strings of the `.comment` section (compiler identifications), if any.
  std::vector<std::string_view> comments() const;

  // Translates a virtual address to a file offset through PT_LOAD segments.
  std::optional<u64> vaddr_to_offset(u64 vaddr) const;

  // The bytes of the first SHT_PROGBITS section called `name` (".rodata"),
  // nullopt when the file has no such section or no section headers.
  std::optional<ByteView> progbits_section(std::string_view name) const;
  // Where that section lies in the file, without reading its bytes.
  // `what` names the section in the error for contents past the file's end.
  std::optional<FileRange> progbits_range(std::string_view name,
                                          const char* what = "section") const;

  const ByteSource& source() const { return *src_; }

 private:
  std::shared_ptr<const ByteSource> src_;
  bool is_64_ = false;
  bool big_endian_ = false;
  u8 os_abi_ = 0;
  u16 e_type_ = 0;
  u16 e_machine_ = 0;
  u32 e_flags_ = 0;
  u64 e_shoff_ = 0;
  u16 e_shentsize_ = 0, e_shnum_ = 0, e_shstrndx_ = 0;
  std::vector<ProgramHeader> phdrs_;
  std::optional<std::string_view> interp_;
  bool has_dynamic_ = false;
  std::optional<TlsSegment> tls_;
  std::optional<u32> gnu_stack_flags_;
  std::vector<std::string_view> needed_;
  std::optional<std::string_view> soname_, rpath_, runpath_, audit_, depaudit_;
  u64 dt_flags_ = 0, dt_flags_1_ = 0;
  // Raw dynamic-table values needed by the lazy decoders (0 when absent).
  u64 strtab_ = 0, strsz_ = 0, symtab_ = 0, syment_ = 0, hash_ = 0, gnu_hash_ = 0, versym_ = 0,
      verdef_ = 0, verdefnum_ = 0, verneed_ = 0, verneednum_ = 0, rela_ = 0, relasz_ = 0,
      relaent_ = 0, rel_ = 0, relsz_ = 0, relent_ = 0, jmprel_ = 0, pltrelsz_ = 0, pltrel_ = 0;
  // The DT_STRTAB bytes, DT_STRSZ long (offset and size in the file).
  u64 dynstr_off_ = 0, dynstr_size_ = 0;
  // The dynamic symbol table's location (elf-internal.h); nullopt-like
  // false when the object has none.
  struct DynsymTable;
  bool dynsym_table(DynsymTable* out) const;
  mutable std::optional<std::vector<VersionNeed>> version_needs_cache_;
  mutable std::optional<std::vector<VersionDef>> version_defs_cache_;
};

// Cheap check used before parsing: does the input start with \x7fELF?
bool has_elf_magic(ByteView bytes);

// The machine and class an ELF file is built for, from its first 20 bytes
// (e_ident and e_machine in the file's byte order); nullopt when they are
// not an ELF header.
struct ElfTarget {
  u16 machine = EM_X86_64;
  bool is_64 = true;
  auto operator<=>(const ElfTarget&) const = default;
};
std::optional<ElfTarget> elf_target(ByteView head);

// Human-readable machine name ("x86-64", "AArch64") for messages.
std::string_view machine_name(u16 e_machine);

}  // namespace mld::elf
