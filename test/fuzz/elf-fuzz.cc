// elf-fuzz.cc — libFuzzer target for the ELF reader. `mldoctor libs` parses
// every file it is pointed at, corrupt ones included, so the reader must turn
// any byte string into either an ElfFile or a ParseError: no crash, no
// sanitizer report, no hang, no unbounded allocation. The target parses the
// input and then runs every lazy decoder, since each walks its own tables.
//
// The input is copied into an exact-size heap buffer so AddressSanitizer
// flags a read even one byte past the end.
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "elf/elf.h"

// Reads every byte of a returned string so ASan checks that it lies inside
// the input.
static volatile unsigned sink;
static void touch(std::string_view s) {
  unsigned sum = 0;
  for (char c : s) sum += static_cast<unsigned char>(c);
  sink = sink + sum;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> copy(data, data + size);
  mld::ByteView bytes(copy.data(), copy.size());
  (void)mld::elf::has_elf_magic(bytes);
  try {
    mld::elf::ElfFile f = mld::elf::ElfFile::parse(bytes);
    (void)mld::elf::machine_name(f.e_machine());
    if (f.interp()) touch(*f.interp());
    touch(f.soname().value_or(""));
    touch(f.rpath().value_or(""));
    touch(f.runpath().value_or(""));
    touch(f.audit().value_or(""));
    touch(f.depaudit().value_or(""));
    for (std::string_view n : f.needed()) touch(n);
    // Each decoder on its own: one failing must not hide the others.
    try {
      for (const mld::elf::VersionNeed& n : f.version_needs()) {
        touch(n.file);
        for (const mld::elf::VersionNeedEntry& e : n.entries) touch(e.name);
      }
    } catch (const mld::ParseError&) {
    }
    try {
      for (const mld::elf::VersionDef& d : f.version_defs()) {
        touch(d.name);
        for (std::string_view p : d.parents) touch(p);
      }
    } catch (const mld::ParseError&) {
    }
    try {
      for (const mld::elf::DynamicSymbol& s : f.dynamic_symbols()) {
        touch(s.name);
        touch(s.version);
      }
    } catch (const mld::ParseError&) {
    }
    try {
      for (const mld::elf::TlsRelocation& r : f.tls_relocations()) touch(r.symbol_name);
    } catch (const mld::ParseError&) {
    }
    try {
      touch(f.build_id().value_or(""));
    } catch (const mld::ParseError&) {
    }
    try {
      for (std::string_view c : f.comments()) touch(c);
    } catch (const mld::ParseError&) {
    }
    for (const mld::elf::ProgramHeader& ph : f.program_headers()) (void)f.vaddr_to_offset(ph.p_vaddr);
  } catch (const mld::ParseError&) {
  }
  return 0;
}
