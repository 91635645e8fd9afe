// objects.cc — what the objects of a simulated process are, in the terms the
// detectors of src/detect/rules/ reason in: the C library's release (the
// banner libc.so.6 prints), the soname an object goes by, which OpenMP
// runtime it is, and the vendored copies wheels carry under hashed names
// ("libgomp-a34b3233.so.1", auditwheel's renaming). Deciding what breaks a
// job is the detectors' part (LD001-LD005, OMP001, TLS001).
#include <string.h>

#include <algorithm>
#include <cctype>

#include "loader/loader.h"

namespace mld::loader {

std::optional<u64> find_in_source(const ByteSource& src, elf::FileRange range,
                                  std::string_view needle) {
  if (needle.empty() || range.size < needle.size()) return std::nullopt;
  if (src.in_memory()) {
    ByteView v = src.range(range.offset, range.size);
    const void* at = memmem(v.data(), v.size(), needle.data(), needle.size());
    if (!at) return std::nullopt;
    return range.offset + static_cast<u64>(static_cast<const u8*>(at) - v.data());
  }
  // From a file: 16 KiB at a time through one buffer (not kept), each chunk
  // overlapping the last by the needle's length minus one.
  constexpr u64 kChunk = 16 << 10;
  if (needle.size() > kChunk / 2) {
    ByteView v = src.range(range.offset, range.size);
    const void* at = memmem(v.data(), v.size(), needle.data(), needle.size());
    if (!at) return std::nullopt;
    return range.offset + static_cast<u64>(static_cast<const u8*>(at) - v.data());
  }
  u8 buf[kChunk];
  u64 pos = range.offset;
  const u64 end = range.offset + range.size;
  for (;;) {
    const u64 n = std::min(kChunk, end - pos);
    src.copy_out(pos, n, buf);
    if (const void* at = memmem(buf, n, needle.data(), needle.size()))
      return pos + static_cast<u64>(static_cast<const u8*>(at) - buf);
    if (pos + n == end) return std::nullopt;
    pos += n - (needle.size() - 1);
  }
}

std::optional<GlibcVersion> detect_glibc_version(const host::Host& host,
                                                 const std::vector<std::string>& system_dirs) {
  // A snapshot records the release of the machine it was taken on.
  if (std::optional<std::string> recorded = host.recorded_glibc_release())
    if (std::optional<GlibcVersion> g = parse_glibc_version(*recorded)) return g;
  for (const std::string& dir : system_dirs) {
    std::string path = host::join_path(dir, "libc.so.6");
    if (host.stat(path).kind != host::FileKind::Regular) continue;
    try {
      std::shared_ptr<SparseFile> f = host.open_sparse(path);
      // The banner printed by running libc.so.6: "... release version 2.36."
      // It lives near the start of .rodata (150 KiB of a 2 MiB libc): look
      // there first, and in the whole file only when that finds nothing (a
      // libc without section headers, or a fixture that is just the banner).
      static constexpr std::string_view kMarker = "release version ";
      std::optional<u64> at;
      try {
        elf::ElfFile e = elf::ElfFile::parse(f);
        if (std::optional<elf::FileRange> rodata = e.progbits_range(".rodata"))
          at = find_in_source(*f, *rodata, kMarker);
      } catch (const ParseError&) {
        // Not an ELF file we can read: the whole-file search below decides.
      }
      if (!at) at = find_in_source(*f, elf::FileRange{0, f->size()}, kMarker);
      if (!at) continue;
      std::string_view text = f->range(*at, std::min<u64>(f->size() - *at, 64)).as_string_view();
      size_t start = kMarker.size();
      size_t end = start;
      while (end < text.size() &&
             (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
        end++;
      std::string_view v = text.substr(start, end - start);
      while (!v.empty() && v.back() == '.') v.remove_suffix(1);
      if (std::optional<GlibcVersion> g = parse_glibc_version(v)) return g;
    } catch (const std::exception&) {
      continue;
    }
  }
  return std::nullopt;
}

// A view into the object's ELF bytes or its path.
std::string_view object_soname(const Object& o) {
  if (o.elf && o.elf->soname()) return *o.elf->soname();
  size_t slash = o.path.rfind('/');
  return slash == std::string::npos ? std::string_view(o.path)
                                    : std::string_view(o.path).substr(slash + 1);
}

std::string_view openmp_kind_name(OpenMpKind k) {
  switch (k) {
    case OpenMpKind::None: return "none";
    case OpenMpKind::Gnu: return "GNU libgomp";
    case OpenMpKind::Llvm: return "LLVM libomp";
    case OpenMpKind::Intel: return "Intel libiomp5";
  }
  return "?";
}

// Wheels repaired by auditwheel vendor runtimes as "libgomp-a34b3233.so.1":
// the position of the "-<hex>" suffix of 8+ digits before ".so", npos if none.
size_t vendor_hash_at(std::string_view soname) {
  size_t so = soname.find(".so");
  if (so == std::string::npos) return std::string_view::npos;
  size_t dash = soname.rfind('-', so);
  if (dash == std::string::npos || so - dash - 1 < 8) return std::string_view::npos;
  for (size_t i = dash + 1; i < so; i++)
    if (!std::isxdigit(static_cast<unsigned char>(soname[i]))) return std::string_view::npos;
  return dash;
}

std::string strip_vendor_hash(std::string_view soname) {
  size_t dash = vendor_hash_at(soname);
  if (dash == std::string_view::npos) return std::string(soname);
  return std::string(soname.substr(0, dash)).append(soname.substr(soname.find(".so")));
}

namespace {

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

}  // namespace

std::string needed_by(const Process& p, size_t idx) {
  std::vector<std::string> by;
  for (const Object& o : p.objects)
    for (const Resolution& r : o.needed)
      if (r.object == idx && std::find(by.begin(), by.end(), o.path) == by.end())
        by.push_back(o.path);
  std::string out;
  for (size_t i = 0; i < by.size(); i++) out += (i ? ", " : "") + by[i];
  return out;
}

OpenMpKind openmp_kind(const Object& o) {
  std::string_view so = object_soname(o);
  // Every runtime's name starts with "libgomp", "libiomp5", "libomp": the
  // common case costs one comparison and no string.
  if (!starts_with(so, "lib") ||
      (so.substr(3, 3) != "gom" && so.substr(3, 3) != "iom" && so.substr(3, 3) != "omp"))
    return OpenMpKind::None;
  std::string name = strip_vendor_hash(so);
  // A file that calls itself libgomp but is LLVM's runtime (a copy
  // patchelf'd to that soname; conda-forge's _openmp_mutex=*_llvm links
  // lib/libgomp.so.1 to libomp.so, whose soname says libomp): LLVM's entry
  // points decide.
  if (starts_with(name, "libgomp.so"))
    return o.elf && o.elf->defines_symbol("__kmpc_fork_call") ? OpenMpKind::Llvm : OpenMpKind::Gnu;
  if (starts_with(name, "libiomp5")) return OpenMpKind::Intel;
  if (starts_with(name, "libomp.so") || starts_with(name, "libomp5")) return OpenMpKind::Llvm;
  return OpenMpKind::None;
}

std::string kmp_library_name(const Object& o) {
  // LLVM's and Intel's runtimes print KMP_LIBRARY_FILE, compiled in, in
  // "OMP: Error #15: Initializing <it>, but found <the other's> already
  // initialized." — not the soname a copy was renamed to.
  if (!o.elf || !o.file) return "";
  std::optional<elf::FileRange> rodata = o.elf->progbits_range(".rodata");
  if (!rodata) return "";
  try {
    for (std::string_view name : {"libiomp5.so", "libomp.so.5", "libomp.so"}) {
      std::string needle = std::string(1, '\0') + std::string(name) + '\0';
      if (find_in_source(*o.file, *rodata, needle)) return std::string(name);
    }
  } catch (const std::exception&) {
    return "";
  }
  return "";
}

std::vector<size_t> openmp_runtimes(const Process& p) {
  std::vector<size_t> out;
  for (size_t i = 0; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    if (openmp_kind(o) != OpenMpKind::None) out.push_back(i);
  }
  return out;
}

}  // namespace mld::loader
