// hazards.cc — turns a simulated process into findings: what a user of
// `mldoctor libs` must act on. The loader model says *what* ld.so would do;
// this file says which of those outcomes break a job (a missing library, an
// unmet GLIBCXX version, two copies of one runtime) and what to change, and
// names the OpenMP runtimes of a process for the OMP001 detector.
#include <string.h>

#include <algorithm>
#include <cctype>
#include <set>

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

namespace {

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

// The soname without such a suffix: the real name of a vendored runtime.
std::string strip_vendor_hash(std::string_view soname) {
  size_t dash = vendor_hash_at(soname);
  if (dash == std::string_view::npos) return std::string(soname);
  return std::string(soname.substr(0, dash)).append(soname.substr(soname.find(".so")));
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string where_needed(const Process& p, size_t idx) {
  std::vector<std::string> by;
  for (const Object& o : p.objects)
    for (const Resolution& r : o.needed)
      if (r.object == idx && std::find(by.begin(), by.end(), o.path) == by.end())
        by.push_back(o.path);
  std::string out;
  for (size_t i = 0; i < by.size(); i++) out += (i ? ", " : "") + by[i];
  return out;
}

}  // namespace

OpenMpKind openmp_kind(const Object& o) {
  std::string_view so = object_soname(o);
  // Every runtime's name starts with "libgomp", "libiomp5", "libomp": the
  // common case costs one comparison and no string.
  if (!starts_with(so, "lib") ||
      (so.substr(3, 3) != "gom" && so.substr(3, 3) != "iom" && so.substr(3, 3) != "omp"))
    return OpenMpKind::None;
  std::string name = strip_vendor_hash(so);
  if (starts_with(name, "libgomp.so")) return OpenMpKind::Gnu;
  if (starts_with(name, "libiomp5")) return OpenMpKind::Intel;
  if (starts_with(name, "libomp.so") || starts_with(name, "libomp5")) return OpenMpKind::Llvm;
  return OpenMpKind::None;
}

void find_hazards(const Process& p, const std::string& subject, FindingSink& sink) {
  for (const std::string& e : p.errors) {
    Finding f;
    f.rule = "LD005";
    f.severity = Severity::Error;
    f.subject = subject;
    f.message = "ld.so would stop loading " + subject + ": " + e;
    sink.add(std::move(f));
  }
  // LD001: missing libraries, with the paths considered.
  std::set<std::string> reported;
  for (size_t i = 0; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    for (const Resolution& r : o.needed) {
      if (r.how != How::NotFound || !r.object || !p.objects[*r.object].faked) continue;
      if (!reported.insert(r.name + "\n" + o.path).second) continue;
      Finding f;
      f.rule = "LD001";
      f.severity = Severity::Error;
      f.subject = r.name;
      f.message = r.name + " (needed by " + o.path + ") is not found";
      for (const Attempt& a : r.tried)
        f.evidence.push_back({a.source + ": " + a.path + " (" + a.outcome + ")", "", std::nullopt});
      f.fix = "install the package that ships " + r.name +
              ", or add its directory to the DT_RUNPATH of " + o.path +
              " (patchelf --add-rpath DIR) or to LD_LIBRARY_PATH";
      sink.add(std::move(f));
    }
  }
  // LD002: unmet symbol versions.
  for (const VersionProblem& vp : check_versions(p)) {
    if (vp.kind != VersionProblem::NotFound) continue;
    const Object& prov = p.objects[vp.provider];
    Finding f;
    f.rule = "LD002";
    f.severity = Severity::Error;
    f.subject = p.objects[vp.requirer].path;
    f.message = version_problem_text(p, vp);
    std::string how;
    for (const Object& o : p.objects)
      for (const Resolution& r : o.needed)
        if (r.object == vp.provider && how.empty())
          how = std::string(how_name(r.how)) + (r.via.empty() ? "" : " of " + r.via);
    f.evidence.push_back(
        {vp.file + " => " + prov.path + (how.empty() ? "" : " (found via " + how + ")"), "",
         std::nullopt});
    f.evidence.push_back({prov.path + " does not define " + vp.version, "", std::nullopt});
    f.fix =
        "make a " + vp.file + " that defines " + vp.version +
        " load first (put its directory "
        "first in LD_LIBRARY_PATH, or remove the older copy from the search path), or rebuild " +
        p.objects[vp.requirer].path + " against " + prov.path;
    sink.add(std::move(f));
  }
  // LD003 / LD004: one runtime from two files. Objects sorted by (soname,
  // index) and by (name without a vendor hash, index), then grouped; the
  // findings come out in name order.
  std::vector<std::pair<std::string_view, size_t>> by_soname;
  std::vector<std::string> stripped;  // the few names that had a vendor hash
  for (size_t i = 0; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    by_soname.emplace_back(object_soname(o), i);
  }
  std::vector<std::pair<std::string_view, size_t>> by_base = by_soname;
  for (auto& [name, i] : by_base)
    if (vendor_hash_at(name) != std::string_view::npos) stripped.push_back(strip_vendor_hash(name));
  for (size_t k = 0, s_i = 0; k < by_base.size(); k++)
    if (vendor_hash_at(by_base[k].first) != std::string_view::npos)
      by_base[k].first = stripped[s_i++];
  std::sort(by_soname.begin(), by_soname.end());
  std::sort(by_base.begin(), by_base.end());
  auto groups = [](const std::vector<std::pair<std::string_view, size_t>>& v, auto&& fn) {
    for (size_t a = 0; a < v.size();) {
      size_t b = a + 1;
      while (b < v.size() && v[b].first == v[a].first) b++;
      if (b - a >= 2) {
        std::vector<size_t> idx;
        for (size_t k = a; k < b; k++) idx.push_back(v[k].second);
        fn(std::string(v[a].first), idx);
      }
      a = b;
    }
  };
  groups(by_soname, [&](const std::string& so, const std::vector<size_t>& idx) {
    Finding f;
    f.rule = "LD003";
    f.severity = Severity::Warning;
    f.subject = so;
    f.message = so + " is loaded from " + std::to_string(idx.size()) + " different files";
    for (size_t i : idx)
      f.evidence.push_back(
          {p.objects[i].path + " (needed by " + where_needed(p, i) + ")", "", std::nullopt});
    f.fix = "keep one copy of " + so + " on the search path so every user shares it";
    sink.add(std::move(f));
  });
  groups(by_base, [&](const std::string& base, const std::vector<size_t>& idx) {
    std::set<std::string_view> sonames;
    for (size_t i : idx) sonames.insert(object_soname(p.objects[i]));
    if (sonames.size() < 2) return;
    Finding f;
    f.rule = "LD004";
    f.severity = Severity::Warning;
    f.subject = base;
    f.message = "two copies of " + base + " under different sonames: each keeps its own state";
    for (size_t i : idx)
      f.evidence.push_back({std::string(object_soname(p.objects[i])) + " => " + p.objects[i].path,
                            "", std::nullopt});
    f.fix = "make the packages share one " + base + " (use builds linked against the system copy)";
    sink.add(std::move(f));
  });
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

std::string needed_by(const Process& p, size_t idx) { return where_needed(p, idx); }

}  // namespace mld::loader
