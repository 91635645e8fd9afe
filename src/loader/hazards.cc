// hazards.cc — turns a simulated process into findings: what a user of
// `mldoctor libs` must act on. The loader model says *what* ld.so would do;
// this file says which of those outcomes break a job (a missing library, an
// unmet GLIBCXX version, two copies of one runtime, several OpenMP runtimes,
// a dlopen that runs out of static TLS) and what to change.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "loader/loader.h"

namespace mld::loader {

std::optional<GlibcVersion> detect_glibc_version(const host::Host& host,
                                                 const std::vector<std::string>& system_dirs) {
  for (const std::string& dir : system_dirs) {
    std::string path = host::join_path(dir, "libc.so.6");
    if (host.stat(path).kind != host::FileKind::Regular) continue;
    try {
      MappedFile f = host.map(path);
      std::string_view text = f.view().as_string_view();
      // The banner printed by running libc.so.6: "... release version 2.36."
      static constexpr std::string_view kMarker = "release version ";
      size_t pos = text.find(kMarker);
      if (pos == std::string_view::npos) continue;
      size_t start = pos + kMarker.size();
      size_t end = start;
      while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.'))
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

// The name a runtime goes by: the soname, else the file name.
std::string object_soname(const Object& o) {
  if (o.elf && o.elf->soname()) return std::string(*o.elf->soname());
  size_t slash = o.path.rfind('/');
  return slash == std::string::npos ? o.path : o.path.substr(slash + 1);
}

// Wheels repaired by auditwheel vendor runtimes as "libgomp-a34b3233.so.1":
// strip a "-<hex>" suffix of 8+ digits before ".so" to get the real name.
std::string strip_vendor_hash(const std::string& soname) {
  size_t so = soname.find(".so");
  if (so == std::string::npos) return soname;
  size_t dash = soname.rfind('-', so);
  if (dash == std::string::npos || so - dash - 1 < 8) return soname;
  for (size_t i = dash + 1; i < so; i++)
    if (!std::isxdigit(static_cast<unsigned char>(soname[i]))) return soname;
  return soname.substr(0, dash) + soname.substr(so);
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string where_needed(const Process& p, size_t idx) {
  std::vector<std::string> by;
  for (const Object& o : p.objects)
    for (const Resolution& r : o.needed)
      if (r.object == idx && std::find(by.begin(), by.end(), o.path) == by.end()) by.push_back(o.path);
  std::string out;
  for (size_t i = 0; i < by.size(); i++) out += (i ? ", " : "") + by[i];
  return out;
}

}  // namespace

OpenMpKind openmp_kind(const Object& o) {
  std::string name = strip_vendor_hash(object_soname(o));
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
    f.evidence.push_back({vp.file + " => " + prov.path + (how.empty() ? "" : " (found via " + how + ")"), "", std::nullopt});
    f.evidence.push_back({prov.path + " does not define " + vp.version, "", std::nullopt});
    f.fix = "make a " + vp.file + " that defines " + vp.version + " load first (put its directory "
            "first in LD_LIBRARY_PATH, or remove the older copy from the search path), or rebuild " +
            p.objects[vp.requirer].path + " against " + prov.path;
    sink.add(std::move(f));
  }
  // LD003 / LD004: one runtime from two files.
  std::map<std::string, std::vector<size_t>> by_soname, by_base;
  for (size_t i = 0; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    std::string so = object_soname(o);
    by_soname[so].push_back(i);
    by_base[strip_vendor_hash(so)].push_back(i);
  }
  for (const auto& [so, idx] : by_soname) {
    if (idx.size() < 2) continue;
    Finding f;
    f.rule = "LD003";
    f.severity = Severity::Warning;
    f.subject = so;
    f.message = so + " is loaded from " + std::to_string(idx.size()) + " different files";
    for (size_t i : idx)
      f.evidence.push_back({p.objects[i].path + " (needed by " + where_needed(p, i) + ")", "", std::nullopt});
    f.fix = "keep one copy of " + so + " on the search path so every user shares it";
    sink.add(std::move(f));
  }
  for (const auto& [base, idx] : by_base) {
    std::set<std::string> sonames;
    for (size_t i : idx) sonames.insert(object_soname(p.objects[i]));
    if (sonames.size() < 2) continue;
    Finding f;
    f.rule = "LD004";
    f.severity = Severity::Warning;
    f.subject = base;
    f.message = "two copies of " + base + " under different sonames: each keeps its own state";
    for (size_t i : idx)
      f.evidence.push_back({object_soname(p.objects[i]) + " => " + p.objects[i].path, "", std::nullopt});
    f.fix = "make the packages share one " + base + " (use builds linked against the system copy)";
    sink.add(std::move(f));
  }
  // OMP001: more than one OpenMP runtime.
  std::vector<size_t> omp;
  for (size_t i = 0; i < p.objects.size(); i++) {
    const Object& o = p.objects[i];
    if (o.faked || o.removed || !o.elf) continue;
    if (openmp_kind(o) != OpenMpKind::None) omp.push_back(i);
  }
  if (omp.size() >= 2) {
    int kmp = 0;
    for (size_t i : omp) kmp += openmp_kind(p.objects[i]) != OpenMpKind::Gnu;
    Finding f;
    f.rule = "OMP001";
    f.severity = kmp >= 2 ? Severity::Error : Severity::Warning;
    f.subject = subject;
    f.message = std::to_string(omp.size()) + " OpenMP runtimes would be loaded" +
                (kmp >= 2 ? ": two LLVM/Intel runtimes abort with \"OMP: Error #15\""
                          : ": each keeps its own thread pool");
    for (size_t i : omp)
      f.evidence.push_back({std::string(openmp_kind_name(openmp_kind(p.objects[i]))) + ": " +
                                p.objects[i].path + " (needed by " + where_needed(p, i) + ")",
                            "", std::nullopt});
    f.fix = "use packages built against one OpenMP runtime; do not set KMP_DUPLICATE_LIB_OK=TRUE, "
            "which hides the clash instead of removing it";
    sink.add(std::move(f));
  }
}

void find_dlopen_hazards(const DlopenSequence& seq, FindingSink& sink) {
  for (size_t i = 0; i < seq.steps.size(); i++) {
    const DlopenStep& st = seq.steps[i];
    if (st.ok || st.tls_module.empty()) continue;
    Finding f;
    f.rule = "TLS001";
    f.severity = Severity::Error;
    f.subject = st.object;
    f.message = "dlopen(" + st.object + ") fails: " + st.error;
    f.evidence.push_back({st.tls_module + " needs " + std::to_string(st.bytes_needed) +
                              " bytes of static TLS; " + std::to_string(st.bytes_left) +
                              " are left after the objects loaded before it",
                          "", std::nullopt});
    f.evidence.push_back({"static TLS area " + std::to_string(seq.static_size) + " bytes: " +
                              std::to_string(seq.startup_used) + " used at startup, surplus " +
                              std::to_string(seq.surplus),
                          "", std::nullopt});
    if (seq.tunables_fix) {
      f.env_fix.push_back("GLIBC_TUNABLES=" + *seq.tunables_fix);
      f.fix = "export GLIBC_TUNABLES=" + *seq.tunables_fix +
              " (more static TLS surplus), or load " + st.object + " before the others";
    } else {
      f.fix = "load " + st.object + " first (before the libraries that use static TLS), or "
              "preload it with LD_PRELOAD so it is placed at startup";
    }
    sink.add(std::move(f));
    break;  // later steps run in a process that already failed
  }
}

}  // namespace mld::loader
