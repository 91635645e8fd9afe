// elf-builder.h — a small in-memory ELF writer for tests. It lays out an
// ELF32 or ELF64 object in either byte order from an ElfSpec (program
// headers, dynamic section, dynstr, GNU versioning, dynsym + versym + hash
// tables, relocations, notes, `.comment` and section headers) and reports
// where each table landed (ElfLayout), so tests can build exact inputs and
// then break them byte by byte with the put_* helpers.
//
// Layout: two PT_LOAD segments with different vaddr-offset deltas, so a
// reader that confuses addresses with offsets fails. Segment 1 (R) holds the
// headers and read-only tables at vaddr = base + offset; segment 2 (RW) holds
// the TLS image and the dynamic section at vaddr = base + offset + 0x200000.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "elf/elf.h"

namespace mld::test {

// What to put in the object. Every table is optional; an empty vector or
// nullopt leaves it (and its dynamic entries) out. Defaults make a minimal
// x86-64 ET_DYN with an empty dynamic section.
struct ElfSpec {
  bool is64 = true;
  bool big_endian = false;
  u16 machine = elf::EM_X86_64;
  u16 type = elf::ET_DYN;
  u8 os_abi = 0;
  u32 e_flags = 0;
  u64 base_vaddr = 0;

  std::optional<std::string> interp;
  struct Tls {
    u64 filesz = 0, memsz = 0, align = 0;
    u64 vaddr_bias = 0;  // added to the natural vaddr (tests firstbyte_offset)
  };
  std::optional<Tls> tls;
  std::optional<u32> gnu_stack_flags;

  bool dynamic = true;  // emit PT_DYNAMIC
  std::vector<std::string> needed;
  std::optional<std::string> soname, rpath, runpath, audit, depaudit;
  u64 flags = 0, flags_1 = 0;  // emitted when nonzero
  // Raw entries appended before DT_NULL; a later entry of a tag overrides an
  // earlier one for readers that keep the last (as glibc does).
  std::vector<std::pair<i64, u64>> extra_dynamic;
  bool emit_strsz = true;

  struct NeedAux {
    std::string name;
    u16 flags = 0;
    u16 other = 0;
  };
  struct Need {
    std::string file;
    std::vector<NeedAux> aux;
  };
  std::vector<Need> verneed;  // vna_hash is computed from the name
  struct Def {
    u16 index = 0;
    u16 flags = 0;
    std::vector<std::string> names;  // first is the version, rest parents
  };
  std::vector<Def> verdef;

  struct Sym {
    std::string name;
    u64 value = 0, size = 0;
    u8 type = elf::STT_FUNC, bind = elf::STB_GLOBAL;
    u16 shndx = 1;
    u16 versym = 1;  // raw .gnu.version half, hidden bit included
  };
  std::vector<Sym> dynsym;  // index 0 (the null symbol) is added
  // Which hash table(s) to emit; None leaves only the .dynsym section header
  // to tell the symbol count.
  enum class Hash { Sysv, Gnu, Both, None } hash = Hash::Sysv;
  bool versym = true;  // emit DT_VERSYM when there are symbols

  struct Reloc {
    u64 offset = 0;
    u32 type = 0;
    u32 sym = 0;
    i64 addend = 0;
  };
  bool rela = true;  // RELA (x86_64, aarch64) or REL (i386)
  std::vector<Reloc> relocs;
  std::vector<Reloc> plt_relocs;  // DT_JMPREL

  struct Note {
    std::string name;  // without the NUL
    u32 type = 0;
    std::vector<u8> desc;
  };
  std::vector<Note> notes;
  bool notes_in_segment = true;  // PT_NOTE; an SHT_NOTE section always

  std::vector<std::string> comments;
  bool section_headers = true;
};

// File offsets of what build_elf wrote (0 when absent).
struct ElfLayout {
  u64 phoff = 0, shoff = 0, interp = 0, dynstr = 0, dynstr_size = 0, dynsym = 0, hash = 0,
      gnu_hash = 0, versym = 0, verneed = 0, verdef = 0, rela = 0, jmprel = 0, notes = 0, tls = 0,
      dynamic = 0, comment = 0, shstrtab = 0;
  u64 seg2_offset = 0;               // first byte of the RW segment
  u64 seg2_delta = 0;                // vaddr - offset inside the RW segment
  std::vector<u64> dynamic_entries;  // offset of each dynamic entry, DT_NULL last
};

// Endian-aware patching of an existing image.
inline void put_u8(std::vector<u8>& b, u64 off, u8 v) { b.at(off) = v; }
inline void put_u16(std::vector<u8>& b, u64 off, u16 v, bool be) {
  for (int i = 0; i < 2; i++) b.at(off + i) = static_cast<u8>(v >> (be ? 8 * (1 - i) : 8 * i));
}
inline void put_u32(std::vector<u8>& b, u64 off, u32 v, bool be) {
  for (int i = 0; i < 4; i++) b.at(off + i) = static_cast<u8>(v >> (be ? 8 * (3 - i) : 8 * i));
}
inline void put_u64(std::vector<u8>& b, u64 off, u64 v, bool be) {
  for (int i = 0; i < 8; i++) b.at(off + i) = static_cast<u8>(v >> (be ? 8 * (7 - i) : 8 * i));
}
// A class-sized word (Elf32_Word/Addr or Elf64_Xword/Addr).
inline void put_word(std::vector<u8>& b, u64 off, u64 v, bool is64, bool be) {
  if (is64) {
    put_u64(b, off, v, be);
  } else {
    put_u32(b, off, static_cast<u32>(v), be);
  }
}

// SysV ELF hash (gABI) and the GNU hash (DJB, h*33+c).
inline u32 elf_sysv_hash(const std::string& s) {
  u32 h = 0;
  for (unsigned char c : s) {
    h = (h << 4) + c;
    u32 g = h & 0xf0000000;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}
inline u32 elf_gnu_hash(const std::string& s) {
  u32 h = 5381;
  for (unsigned char c : s) h = h * 33 + c;
  return h;
}

namespace builder_detail {

// An append-only byte buffer that writes integers in the target byte order
// and class-sized words.
class Out {
 public:
  Out(bool is64, bool be) : is64_(is64), be_(be) {}
  std::vector<u8> b;
  u64 pos() const { return b.size(); }
  void align(u64 a) {
    while (a > 1 && b.size() % a) b.push_back(0);
  }
  void u8_(u8 v) { b.push_back(v); }
  void u16_(u16 v) {
    b.resize(b.size() + 2);
    put_u16(b, b.size() - 2, v, be_);
  }
  void u32_(u32 v) {
    b.resize(b.size() + 4);
    put_u32(b, b.size() - 4, v, be_);
  }
  void u64_(u64 v) {
    b.resize(b.size() + 8);
    put_u64(b, b.size() - 8, v, be_);
  }
  void word(u64 v) {
    if (is64_) {
      u64_(v);
    } else {
      u32_(static_cast<u32>(v));
    }
  }
  void bytes(const void* p, u64 n) {
    const u8* c = static_cast<const u8*>(p);
    b.insert(b.end(), c, c + n);
  }
  void zeros(u64 n) { b.resize(b.size() + n); }

 private:
  bool is64_, be_;
};

// A string table that de-duplicates; offset 0 is the empty string.
struct StrTab {
  std::string data = std::string(1, '\0');
  u32 add(const std::string& s) {
    if (s.empty()) return 0;
    size_t at = data.find(s + '\0');
    if (at != std::string::npos && (at == 0 || data[at - 1] == '\0')) return static_cast<u32>(at);
    u32 off = static_cast<u32>(data.size());
    data += s;
    data += '\0';
    return off;
  }
};

}  // namespace builder_detail

// Lays out the object in this order: ELF header, program headers, interp,
// dynstr, dynsym, hash, gnu_hash, versym, verneed, verdef, relocations,
// notes | (segment 2) TLS image, dynamic | .comment, .shstrtab, section
// headers. Each table is aligned to its natural alignment.
inline std::vector<u8> build_elf(const ElfSpec& s, ElfLayout* layout_out = nullptr) {
  using namespace mld::elf;
  using builder_detail::Out;
  using builder_detail::StrTab;
  const bool is64 = s.is64, be = s.big_endian;
  const u64 wsz = is64 ? 8 : 4;
  const u64 ehsize = is64 ? 64 : 52, phentsize = is64 ? 56 : 32, shentsize = is64 ? 64 : 40;
  const u64 symsz = is64 ? 24 : 16, dynsz = is64 ? 16 : 8;
  const u64 relsz = s.rela ? (is64 ? 24 : 12) : (is64 ? 16 : 8);
  const u64 seg2_delta = 0x200000;
  ElfLayout L;
  L.seg2_delta = seg2_delta;

  // Strings first, so every table knows its offsets.
  StrTab dynstr;
  std::vector<u32> needed_off;
  for (const std::string& n : s.needed) needed_off.push_back(dynstr.add(n));
  auto opt_str = [&dynstr](const std::optional<std::string>& v) -> std::optional<u32> {
    if (!v) return std::nullopt;
    return dynstr.add(*v);
  };
  std::optional<u32> soname = opt_str(s.soname), rpath = opt_str(s.rpath),
                     runpath = opt_str(s.runpath), audit = opt_str(s.audit),
                     depaudit = opt_str(s.depaudit);
  std::vector<u32> sym_name;
  for (const ElfSpec::Sym& y : s.dynsym) sym_name.push_back(dynstr.add(y.name));
  for (const ElfSpec::Need& n : s.verneed) {
    dynstr.add(n.file);
    for (const ElfSpec::NeedAux& a : n.aux) dynstr.add(a.name);
  }
  for (const ElfSpec::Def& d : s.verdef) {
    for (const std::string& n : d.names) dynstr.add(n);
  }

  // Program header count.
  const bool has_syms = !s.dynsym.empty();
  const bool has_notes = !s.notes.empty();
  u64 phnum = 2;  // two PT_LOADs
  if (s.interp) phnum++;
  if (s.tls) phnum++;
  if (s.gnu_stack_flags) phnum++;
  if (s.dynamic) phnum++;
  if (has_notes && s.notes_in_segment) phnum++;

  Out o(is64, be);
  o.zeros(ehsize);
  L.phoff = o.pos();
  o.zeros(phnum * phentsize);

  if (s.interp) {
    L.interp = o.pos();
    o.bytes(s.interp->c_str(), s.interp->size() + 1);
  }
  o.align(8);
  L.dynstr = o.pos();
  L.dynstr_size = dynstr.data.size();
  o.bytes(dynstr.data.data(), dynstr.data.size());

  const u64 nsyms = has_syms ? s.dynsym.size() + 1 : 0;
  if (has_syms) {
    o.align(wsz);
    L.dynsym = o.pos();
    o.zeros(symsz);  // the null symbol
    for (size_t i = 0; i < s.dynsym.size(); i++) {
      const ElfSpec::Sym& y = s.dynsym[i];
      const u8 info = static_cast<u8>((y.bind << 4) | (y.type & 0xf));
      if (is64) {
        o.u32_(sym_name[i]);
        o.u8_(info);
        o.u8_(0);
        o.u16_(y.shndx);
        o.u64_(y.value);
        o.u64_(y.size);
      } else {
        o.u32_(sym_name[i]);
        o.u32_(static_cast<u32>(y.value));
        o.u32_(static_cast<u32>(y.size));
        o.u8_(info);
        o.u8_(0);
        o.u16_(y.shndx);
      }
    }
    if (s.hash == ElfSpec::Hash::Sysv || s.hash == ElfSpec::Hash::Both) {
      // One bucket; the chain runs from the last symbol down to 1.
      o.align(4);
      L.hash = o.pos();
      o.u32_(1);
      o.u32_(static_cast<u32>(nsyms));
      o.u32_(static_cast<u32>(nsyms - 1));
      for (u64 i = 0; i < nsyms; i++) o.u32_(i == 0 ? 0 : static_cast<u32>(i - 1));
    }
    if (s.hash == ElfSpec::Hash::Gnu || s.hash == ElfSpec::Hash::Both) {
      // One bucket holding symbols 1..n-1, a bloom filter that passes all.
      o.align(wsz);
      L.gnu_hash = o.pos();
      o.u32_(1);  // nbuckets
      o.u32_(1);  // symoffset
      o.u32_(1);  // bloom_size
      o.u32_(6);  // bloom_shift
      o.word(~u64{0});
      o.u32_(nsyms > 1 ? 1 : 0);
      for (u64 i = 1; i < nsyms; i++) {
        u32 h = elf_gnu_hash(s.dynsym[i - 1].name) & ~1u;
        o.u32_(h | (i == nsyms - 1 ? 1 : 0));
      }
    }
    if (s.versym) {
      o.align(2);
      L.versym = o.pos();
      o.u16_(0);
      for (const ElfSpec::Sym& y : s.dynsym) o.u16_(y.versym);
    }
  }
  // Verneed entries each followed by their Vernaux entries; vn_aux = 16,
  // vna_next = 16 and vn_next skips the auxiliaries; zero links end chains.
  if (!s.verneed.empty()) {
    o.align(4);
    L.verneed = o.pos();
    for (size_t i = 0; i < s.verneed.size(); i++) {
      const ElfSpec::Need& n = s.verneed[i];
      const bool last = i + 1 == s.verneed.size();
      o.u16_(1);
      o.u16_(static_cast<u16>(n.aux.size()));
      o.u32_(dynstr.add(n.file));
      o.u32_(16);
      o.u32_(last ? 0 : static_cast<u32>(16 + 16 * n.aux.size()));
      for (size_t j = 0; j < n.aux.size(); j++) {
        const ElfSpec::NeedAux& a = n.aux[j];
        o.u32_(elf_sysv_hash(a.name));
        o.u16_(a.flags);
        o.u16_(a.other);
        o.u32_(dynstr.add(a.name));
        o.u32_(j + 1 == n.aux.size() ? 0 : 16);
      }
    }
  }
  // Verdef (20 bytes) then its Verdaux entries (8 bytes each).
  if (!s.verdef.empty()) {
    o.align(4);
    L.verdef = o.pos();
    for (size_t i = 0; i < s.verdef.size(); i++) {
      const ElfSpec::Def& d = s.verdef[i];
      const bool last = i + 1 == s.verdef.size();
      o.u16_(1);
      o.u16_(d.flags);
      o.u16_(d.index);
      o.u16_(static_cast<u16>(d.names.size()));
      o.u32_(d.names.empty() ? 0 : elf_sysv_hash(d.names[0]));
      o.u32_(20);
      o.u32_(last ? 0 : static_cast<u32>(20 + 8 * d.names.size()));
      for (size_t j = 0; j < d.names.size(); j++) {
        o.u32_(dynstr.add(d.names[j]));
        o.u32_(j + 1 == d.names.size() ? 0 : 8);
      }
    }
  }
  // Elf_Rel/Elf_Rela with r_info packed per class (sym<<32|type or sym<<8|type).
  auto write_relocs = [&](const std::vector<ElfSpec::Reloc>& rs) {
    for (const ElfSpec::Reloc& r : rs) {
      o.word(r.offset);
      if (is64) {
        o.u64_((u64{r.sym} << 32) | r.type);
      } else {
        o.u32_((r.sym << 8) | (r.type & 0xff));
      }
      if (s.rela) o.word(static_cast<u64>(r.addend));
    }
  };
  if (!s.relocs.empty()) {
    o.align(wsz);
    L.rela = o.pos();
    write_relocs(s.relocs);
  }
  if (!s.plt_relocs.empty()) {
    o.align(wsz);
    L.jmprel = o.pos();
    write_relocs(s.plt_relocs);
  }
  u64 notes_size = 0;
  // Notes: {namesz, descsz, type, name + NUL padded to 4, desc padded to 4}.
  if (has_notes) {
    o.align(4);
    L.notes = o.pos();
    for (const ElfSpec::Note& n : s.notes) {
      o.u32_(static_cast<u32>(n.name.size() + 1));
      o.u32_(static_cast<u32>(n.desc.size()));
      o.u32_(n.type);
      o.bytes(n.name.c_str(), n.name.size() + 1);
      o.align(4);
      o.bytes(n.desc.data(), n.desc.size());
      o.align(4);
    }
    notes_size = o.pos() - L.notes;
  }
  const u64 seg1_end = o.pos();

  // Segment 2: TLS image, then the dynamic section.
  o.align(16);
  L.seg2_offset = o.pos();
  auto vaddr1 = [&](u64 off) { return s.base_vaddr + off; };
  auto vaddr2 = [&](u64 off) { return s.base_vaddr + off + seg2_delta; };
  if (s.tls) {
    o.align(s.tls->align > 1 && s.tls->align <= 64 ? s.tls->align : 8);
    L.tls = o.pos();
    o.b.resize(o.b.size() + s.tls->filesz, 0xab);
  }
  // The dynamic section: string entries first (before DT_STRTAB, as real
  // linkers write them), then table addresses, then flags and extras.
  std::vector<std::pair<i64, u64>> dyn;
  if (s.dynamic) {
    for (u32 n : needed_off) dyn.push_back({DT_NEEDED, n});
    if (soname) dyn.push_back({DT_SONAME, *soname});
    if (rpath) dyn.push_back({DT_RPATH, *rpath});
    if (runpath) dyn.push_back({DT_RUNPATH, *runpath});
    if (audit) dyn.push_back({DT_AUDIT, *audit});
    if (depaudit) dyn.push_back({DT_DEPAUDIT, *depaudit});
    dyn.push_back({DT_STRTAB, vaddr1(L.dynstr)});
    if (s.emit_strsz) dyn.push_back({DT_STRSZ, L.dynstr_size});
    if (has_syms) {
      dyn.push_back({DT_SYMTAB, vaddr1(L.dynsym)});
      dyn.push_back({DT_SYMENT, symsz});
    }
    if (L.hash) dyn.push_back({DT_HASH, vaddr1(L.hash)});
    if (L.gnu_hash) dyn.push_back({DT_GNU_HASH, vaddr1(L.gnu_hash)});
    if (L.versym) dyn.push_back({DT_VERSYM, vaddr1(L.versym)});
    if (L.verneed) {
      dyn.push_back({DT_VERNEED, vaddr1(L.verneed)});
      dyn.push_back({DT_VERNEEDNUM, s.verneed.size()});
    }
    if (L.verdef) {
      dyn.push_back({DT_VERDEF, vaddr1(L.verdef)});
      dyn.push_back({DT_VERDEFNUM, s.verdef.size()});
    }
    if (L.rela) {
      dyn.push_back({s.rela ? DT_RELA : DT_REL, vaddr1(L.rela)});
      dyn.push_back({s.rela ? DT_RELASZ : DT_RELSZ, s.relocs.size() * relsz});
      dyn.push_back({s.rela ? DT_RELAENT : DT_RELENT, relsz});
    }
    if (L.jmprel) {
      dyn.push_back({DT_JMPREL, vaddr1(L.jmprel)});
      dyn.push_back({DT_PLTRELSZ, s.plt_relocs.size() * relsz});
      dyn.push_back({DT_PLTREL, static_cast<u64>(s.rela ? DT_RELA : DT_REL)});
    }
    if (s.flags) dyn.push_back({DT_FLAGS, s.flags});
    if (s.flags_1) dyn.push_back({DT_FLAGS_1, s.flags_1});
    for (const std::pair<i64, u64>& e : s.extra_dynamic) dyn.push_back(e);
    dyn.push_back({DT_NULL, 0});
    o.align(wsz);
    L.dynamic = o.pos();
    for (const std::pair<i64, u64>& e : dyn) {
      L.dynamic_entries.push_back(o.pos());
      o.word(static_cast<u64>(e.first));
      o.word(e.second);
    }
  }
  const u64 seg2_end = o.pos();
  const u64 tls_bss = s.tls && s.tls->memsz > s.tls->filesz ? s.tls->memsz - s.tls->filesz : 0;

  // Non-allocated sections: .comment, .shstrtab, section headers.
  StrTab shstr;
  struct Sec {
    u32 name, type;
    u64 flags, addr, offset, size;
    u32 link, info;
    u64 align, entsize;
  };
  std::vector<Sec> secs;
  if (s.section_headers) {
    secs.push_back(Sec{0, 0, 0, 0, 0, 0, 0, 0, 0, 0});
    const u32 dynstr_index = has_syms ? 2 : 1;
    if (has_syms) {
      secs.push_back(Sec{shstr.add(".dynsym"), 11, 2, vaddr1(L.dynsym), L.dynsym, nsyms * symsz,
                         dynstr_index, 1, wsz, symsz});
    }
    secs.push_back(
        Sec{shstr.add(".dynstr"), 3, 2, vaddr1(L.dynstr), L.dynstr, L.dynstr_size, 0, 0, 1, 0});
    if (has_notes) {
      secs.push_back(
          Sec{shstr.add(".note.test"), 7, 2, vaddr1(L.notes), L.notes, notes_size, 0, 0, 4, 0});
    }
    if (L.dynamic) {
      secs.push_back(Sec{shstr.add(".dynamic"), 6, 3, vaddr2(L.dynamic), L.dynamic,
                         seg2_end - L.dynamic, dynstr_index, 0, wsz, dynsz});
    }
    if (!s.comments.empty()) {
      L.comment = o.pos();
      for (const std::string& c : s.comments) o.bytes(c.c_str(), c.size() + 1);
      secs.push_back(
          Sec{shstr.add(".comment"), 1, 0x30, 0, L.comment, o.pos() - L.comment, 0, 0, 1, 1});
    }
    const u32 shstr_name = shstr.add(".shstrtab");
    L.shstrtab = o.pos();
    o.bytes(shstr.data.data(), shstr.data.size());
    secs.push_back(Sec{shstr_name, 3, 0, 0, L.shstrtab, shstr.data.size(), 0, 0, 1, 0});
    o.align(wsz);
    L.shoff = o.pos();
    for (const Sec& c : secs) {
      o.u32_(c.name);
      o.u32_(c.type);
      o.word(c.flags);
      o.word(c.addr);
      o.word(c.offset);
      o.word(c.size);
      o.u32_(c.link);
      o.u32_(c.info);
      o.word(c.align);
      o.word(c.entsize);
    }
  }

  // ELF header, written last because it needs every offset. e_shstrndx is
  // the last section (.shstrtab).
  std::vector<u8>& b = o.b;
  b[0] = 0x7f;
  b[1] = 'E';
  b[2] = 'L';
  b[3] = 'F';
  b[4] = is64 ? 2 : 1;
  b[5] = be ? 2 : 1;
  b[6] = 1;
  b[7] = s.os_abi;
  put_u16(b, 16, s.type, be);
  put_u16(b, 18, s.machine, be);
  put_u32(b, 20, 1, be);
  if (is64) {
    put_u64(b, 32, L.phoff, be);
    put_u64(b, 40, L.shoff, be);
    put_u32(b, 48, s.e_flags, be);
    put_u16(b, 52, static_cast<u16>(ehsize), be);
    put_u16(b, 54, static_cast<u16>(phentsize), be);
    put_u16(b, 56, static_cast<u16>(phnum), be);
    put_u16(b, 58, s.section_headers ? static_cast<u16>(shentsize) : 0, be);
    put_u16(b, 60, static_cast<u16>(secs.size()), be);
    put_u16(b, 62, secs.empty() ? 0 : static_cast<u16>(secs.size() - 1), be);
  } else {
    put_u32(b, 28, static_cast<u32>(L.phoff), be);
    put_u32(b, 32, static_cast<u32>(L.shoff), be);
    put_u32(b, 36, s.e_flags, be);
    put_u16(b, 40, static_cast<u16>(ehsize), be);
    put_u16(b, 42, static_cast<u16>(phentsize), be);
    put_u16(b, 44, static_cast<u16>(phnum), be);
    put_u16(b, 46, s.section_headers ? static_cast<u16>(shentsize) : 0, be);
    put_u16(b, 48, static_cast<u16>(secs.size()), be);
    put_u16(b, 50, secs.empty() ? 0 : static_cast<u16>(secs.size() - 1), be);
  }

  // Program headers, in the order the phnum count above assumed: LOAD,
  // LOAD, INTERP, TLS, GNU_STACK, DYNAMIC, NOTE (absent ones skipped).
  u64 ph = L.phoff;
  auto phdr = [&](u32 type, u32 flags, u64 off, u64 vaddr, u64 filesz, u64 memsz, u64 align) {
    put_u32(b, ph, type, be);
    if (is64) {
      put_u32(b, ph + 4, flags, be);
      put_u64(b, ph + 8, off, be);
      put_u64(b, ph + 16, vaddr, be);
      put_u64(b, ph + 24, vaddr, be);
      put_u64(b, ph + 32, filesz, be);
      put_u64(b, ph + 40, memsz, be);
      put_u64(b, ph + 48, align, be);
    } else {
      put_u32(b, ph + 4, static_cast<u32>(off), be);
      put_u32(b, ph + 8, static_cast<u32>(vaddr), be);
      put_u32(b, ph + 12, static_cast<u32>(vaddr), be);
      put_u32(b, ph + 16, static_cast<u32>(filesz), be);
      put_u32(b, ph + 20, static_cast<u32>(memsz), be);
      put_u32(b, ph + 24, flags, be);
      put_u32(b, ph + 28, static_cast<u32>(align), be);
    }
    ph += phentsize;
  };
  constexpr u32 PF_R = 4, PF_W = 2;
  phdr(PT_LOAD, PF_R, 0, vaddr1(0), seg1_end, seg1_end, 0x1000);
  phdr(PT_LOAD, PF_R | PF_W, L.seg2_offset, vaddr2(L.seg2_offset), seg2_end - L.seg2_offset,
       seg2_end - L.seg2_offset + tls_bss, 0x1000);
  if (s.interp)
    phdr(PT_INTERP, PF_R, L.interp, vaddr1(L.interp), s.interp->size() + 1, s.interp->size() + 1,
         1);
  if (s.tls) {
    phdr(PT_TLS, PF_R, L.tls, vaddr2(L.tls) + s.tls->vaddr_bias, s.tls->filesz, s.tls->memsz,
         s.tls->align);
  }
  if (s.gnu_stack_flags) phdr(PT_GNU_STACK, *s.gnu_stack_flags, 0, 0, 0, 0, 16);
  if (s.dynamic) {
    phdr(PT_DYNAMIC, PF_R | PF_W, L.dynamic, vaddr2(L.dynamic), seg2_end - L.dynamic,
         seg2_end - L.dynamic, wsz);
  }
  if (has_notes && s.notes_in_segment) {
    phdr(PT_NOTE, PF_R, L.notes, vaddr1(L.notes), notes_size, notes_size, 4);
  }
  if (layout_out) *layout_out = L;
  return b;
}

}  // namespace mld::test
