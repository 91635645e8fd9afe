// elf-sections.cc — the decoders that read notes and sections rather than
// the dynamic section: the GNU build-id note (NT_GNU_BUILD_ID, which
// `mldoctor` prints so a user can match a library with its debug info and
// its package) and the `.comment` section (the compiler identification
// strings that tell which GCC/Clang built an extension), and a named
// section's bytes for callers that look for a string in `.rodata` (the glibc
// release banner) without scanning the whole file.
//
// The loader never looks at sections, so neither does ElfFile::parse beyond
// checking the table's extent; these decoders walk it only on request.
#include <algorithm>
#include <string>

#include "elf/elf-internal.h"
#include "elf/elf.h"

namespace mld::elf {

using detail::fail;
using detail::ull;

namespace {

constexpr u32 NT_GNU_BUILD_ID = 3;

// Walks one note area (a PT_NOTE segment or an SHT_NOTE section) and returns
// the build-id descriptor, if present. Notes are {namesz, descsz, type, name,
// desc}, name and desc padded to `align` (4, or 8 for areas aligned to 8 as
// in GNU property notes; glibc elf/dl-prop.h and readelf agree). Every step
// advances at least 12 bytes, so the walk ends.
std::optional<ByteView> find_build_id(const detail::Reader& r, u64 align) {
  auto pad = [align](u64 n) { return (n + align - 1) & ~(align - 1); };
  u64 off = 0;
  while (r.size() - off >= 12) {
    const u64 namesz = r.word(off), descsz = r.word(off + 4);
    const u32 type = r.word(off + 8);
    const u64 name_off = off + 12;
    // Offsets are aligned from the note's start (binutils
    // ELF_NOTE_DESC_OFFSET / ELF_NOTE_NEXT_OFFSET): with 8-byte notes the
    // descriptor of a 4-byte name starts at +16, not +20. Values < 2^35.
    const u64 desc_off = off + pad(12 + namesz);
    const u64 desc_end = desc_off + descsz;
    // The last note's padding may lie beyond the area; that is fine.
    const u64 next = std::min<u64>(pad(desc_end), r.size());
    if (desc_end > r.size()) {
      fail(r.base_offset() + off,
           "note out of bounds (namesz %llu, descsz %llu, %llu bytes left in the note area)",
           ull(namesz), ull(descsz), ull(r.size() - off));
    }
    if (type == NT_GNU_BUILD_ID && namesz == 4 &&
        std::memcmp(r.view(name_off, 4).data(), "GNU", 4) == 0) {
      return r.view(desc_off, descsz);
    }
    off = next;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ElfFile::build_id() const {
  const detail::Reader file{src_.get(), 0, src_->size(), is_64_, big_endian_};
  for (const ProgramHeader& ph : phdrs_) {
    if (ph.p_type != PT_NOTE) continue;
    if (!file.contains(ph.p_offset, ph.p_filesz)) {
      fail(ph.p_offset, "PT_NOTE out of bounds (offset 0x%llx, size 0x%llx, file size 0x%llx)",
           ull(ph.p_offset), ull(ph.p_filesz), ull(src_->size()));
    }
    const detail::Reader r = file.sub(ph.p_offset, ph.p_filesz);
    r.prefetch(0, ph.p_filesz);
    if (std::optional<ByteView> id = find_build_id(r, ph.p_align == 8 ? 8 : 4)) return to_hex(*id);
  }
  // No PT_NOTE carries it (relocatable objects, odd linkers): the sections.
  detail::SectionTable t =
      detail::make_section_table(file, e_shoff_, e_shentsize_, e_shnum_, e_shstrndx_);
  t.r.prefetch(t.offset, t.count * t.entsize);
  for (u64 i = 0; i < t.count; i++) {
    detail::SectionHeader sh = t.at(i);
    if (sh.sh_type != detail::SHT_NOTE) continue;
    const detail::Reader r = t.contents_reader(sh, "note section");
    r.prefetch(0, r.size());
    if (std::optional<ByteView> id = find_build_id(r, sh.sh_addralign == 8 ? 8 : 4)) {
      return to_hex(*id);
    }
  }
  return std::nullopt;
}

std::optional<ByteView> ElfFile::progbits_section(std::string_view name) const {
  std::optional<FileRange> at = progbits_range(name);
  if (!at) return std::nullopt;
  return src_->range(at->offset, at->size, "section");
}

std::optional<FileRange> ElfFile::progbits_range(std::string_view name, const char* what) const {
  const detail::Reader fr{src_.get(), 0, src_->size(), is_64_, big_endian_};
  detail::SectionTable t =
      detail::make_section_table(fr, e_shoff_, e_shentsize_, e_shnum_, e_shstrndx_);
  t.r.prefetch(t.offset, t.count * t.entsize);
  for (u64 i = 1; i < t.count; i++) {
    detail::SectionHeader sh = t.at(i);
    if (sh.sh_type == detail::SHT_PROGBITS && t.name(sh) == name) {
      const detail::Reader r = t.contents_reader(sh, what);
      return FileRange{r.base_offset(), r.size()};
    }
  }
  return std::nullopt;
}

std::vector<std::string_view> ElfFile::comments() const {
  std::vector<std::string_view> out;
  std::optional<FileRange> at = progbits_range(".comment", ".comment section");
  if (at) {
    // A sequence of NUL-terminated strings; linkers merge the ones of every
    // input object, so repeats are already gone. Skip empty strings.
    std::string_view all = src_->range(at->offset, at->size, ".comment section").as_string_view();
    while (!all.empty()) {
      const size_t nul = all.find('\0');
      std::string_view s = all.substr(0, nul);
      if (!s.empty()) out.push_back(s);
      if (nul == std::string_view::npos) break;
      all.remove_prefix(nul + 1);
    }
  }
  return out;
}

}  // namespace mld::elf

namespace mld::elf {

std::vector<std::optional<u64>> ElfFile::symbol_values(
    const std::vector<std::string_view>& names) const {
  std::vector<std::optional<u64>> out(names.size());
  size_t missing = names.size();
  auto note = [&](std::string_view name, u64 value) {
    for (size_t i = 0; i < names.size(); i++) {
      if (!out[i] && names[i] == name) {
        out[i] = value;
        missing--;
      }
    }
  };
  for (const DynamicSymbol& s : dynamic_symbols()) {
    if (s.defined() && !s.name.empty()) note(s.name, s.value);
  }
  if (missing == 0 || e_shoff_ == 0) return out;
  // .symtab: {st_name, st_info, st_other, st_shndx, st_value, st_size} in
  // ELF64, {st_name, st_value, st_size, st_info, st_other, st_shndx} in ELF32;
  // its strings are in the section sh_link names.
  const detail::Reader fr{src_.get(), 0, src_->size(), is_64_, big_endian_};
  const detail::SectionTable t =
      detail::make_section_table(fr, e_shoff_, e_shentsize_, e_shnum_, e_shstrndx_);
  for (u64 i = 1; i < t.count && missing > 0; i++) {
    const detail::SectionHeader sh = t.at(i);
    if (sh.sh_type != detail::SHT_SYMTAB || sh.sh_link == 0 || sh.sh_link >= t.count) continue;
    const detail::SectionHeader strsh = t.at(sh.sh_link);
    const detail::Reader strings = t.contents_reader(strsh, ".strtab");
    const detail::StringTable strtab{src_.get(), strings.base_offset(), strings.size()};
    const u64 entsize = is_64_ ? 24 : 16;
    const detail::Reader syms = t.contents_reader(sh, ".symtab");
    syms.for_each_entry(syms.size() / entsize, entsize, ".symtab", [&](ByteView e) {
      const u32 st_name = e.u32_at(0, big_endian_);
      const u16 shndx = e.u16_at(is_64_ ? 6 : 14, big_endian_);
      if (st_name == 0 || shndx == SHN_UNDEF || st_name >= strtab.size) return;
      const u64 value = is_64_ ? e.u64_at(8, big_endian_) : e.u32_at(4, big_endian_);
      if (std::optional<std::string_view> name = strtab.find(st_name)) note(*name, value);
    });
  }
  return out;
}

}  // namespace mld::elf
