// elf-fuzz.cc — libFuzzer target for the ELF reader. `mldoctor libs` parses
// every file it is pointed at, corrupt ones included, so the reader must turn
// any byte string into either an ElfFile or a ParseError: no crash, no
// sanitizer report, no hang, no unbounded allocation. The target parses the
// input and then runs every lazy decoder, since each walks its own tables.
//
// The input is copied into an exact-size heap buffer so AddressSanitizer
// flags a read even one byte past the end. It is then parsed a second time
// through a source that, like the pread-backed SparseFile, hands out only
// the ranges asked for, each in its own exact-size buffer: every answer and
// every error message must be the same, and a decoder that reads past the
// range it asked for is caught by AddressSanitizer.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
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

namespace {

class PieceSource final : public mld::ByteSource {
 public:
  explicit PieceSource(mld::ByteView bytes) : bytes_(bytes) {}
  mld::u64 size() const override { return bytes_.size(); }
  mld::ByteView range(mld::u64 off, mld::u64 n, const char* what) const override {
    mld::ByteView v = bytes_.sub(off, n, what);
    pieces_.push_back(std::make_unique<uint8_t[]>(n ? n : 1));
    std::memcpy(pieces_.back().get(), v.data(), n);
    return mld::ByteView(pieces_.back().get(), n, off);
  }

 private:
  mld::ByteView bytes_;
  mutable std::vector<std::unique_ptr<uint8_t[]>> pieces_;
};

// Runs every decoder; returns what they said (values and error texts).
std::string decode_all(const std::function<mld::elf::ElfFile()>& parse) {
  std::string out;
  auto add = [&out](std::string_view s) {
    touch(s);
    out.append(s);
    out.push_back('\n');
  };
  try {
    mld::elf::ElfFile f = parse();
    (void)mld::elf::machine_name(f.e_machine());
    if (f.interp()) add(*f.interp());
    add(f.soname().value_or(""));
    add(f.rpath().value_or(""));
    add(f.runpath().value_or(""));
    add(f.audit().value_or(""));
    add(f.depaudit().value_or(""));
    for (std::string_view n : f.needed()) add(n);
    // Each decoder on its own: one failing must not hide the others.
    try {
      for (const mld::elf::VersionNeed& n : f.version_needs()) {
        add(n.file);
        for (const mld::elf::VersionNeedEntry& e : n.entries) add(e.name);
      }
    } catch (const mld::ParseError& e) {
      add(e.what());
    }
    try {
      for (const mld::elf::VersionDef& d : f.version_defs()) {
        add(d.name);
        for (std::string_view p : d.parents) add(p);
      }
    } catch (const mld::ParseError& e) {
      add(e.what());
    }
    try {
      for (const mld::elf::DynamicSymbol& s : f.dynamic_symbols()) {
        add(s.name);
        add(s.version);
      }
    } catch (const mld::ParseError& e) {
      add(e.what());
    }
    try {
      for (const mld::elf::TlsRelocation& r : f.tls_relocations()) add(r.symbol_name);
    } catch (const mld::ParseError& e) {
      add(e.what());
    }
    try {
      // The hash-table walks (DT_GNU_HASH bloom, buckets, chains; DT_HASH).
      for (std::string_view n :
           {"malloc", "omp_get_num_threads", "", "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs"})
        add(f.defines_symbol(n) ? "defined" : "undefined");
      for (std::string_view n : f.tls_definitions()) add(n);
    } catch (const mld::ParseError& e) {
      add(e.what());
    }
    try {
      add(f.build_id().value_or(""));
    } catch (const mld::ParseError& e) {
      add(e.what());
    }
    try {
      for (std::string_view c : f.comments()) add(c);
    } catch (const mld::ParseError& e) {
      add(e.what());
    }
    for (const mld::elf::ProgramHeader& ph : f.program_headers())
      (void)f.vaddr_to_offset(ph.p_vaddr);
  } catch (const mld::ParseError& e) {
    add(e.what());
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> copy(data, data + size);
  mld::ByteView bytes(copy.data(), copy.size());
  (void)mld::elf::has_elf_magic(bytes);
  std::string in_memory = decode_all([&] { return mld::elf::ElfFile::parse(bytes); });
  std::string in_pieces =
      decode_all([&] { return mld::elf::ElfFile::parse(std::make_shared<PieceSource>(bytes)); });
  if (in_memory != in_pieces) __builtin_trap();
  return 0;
}
