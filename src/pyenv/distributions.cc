// distributions.cc — installed distributions, as importlib.metadata finds
// them: every sys.path directory is listed once and its `*.dist-info` (wheels)
// and `*.egg-info` (setuptools; Debian ships both directories and plain
// files) entries are read for Name and Version (RFC 822 headers of METADATA /
// PKG-INFO), top-level import names (top_level.txt, else RECORD) and
// INSTALLER. Two copies of one distribution on sys.path are the classic
// "pip upgraded it in ~/.local but the job sees the old one" problem: the
// first on sys.path is what import and importlib.metadata see, so later ones
// are marked shadowed by it. A broken METADATA is a per-item problem; the
// name and version then come from the directory name.
#include <algorithm>
#include <set>

#include "pyenv/pyenv.h"

namespace mld::pyenv {

std::string normalize_distribution_name(std::string_view name) {
  std::string out;
  bool sep = false;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      sep = true;
      continue;
    }
    if (sep && !out.empty()) out.push_back('-');
    sep = false;
    out.push_back(static_cast<char>(tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

namespace {

struct Headers {
  std::optional<std::string> name, version;
};

// The header block of an RFC 822 message (METADATA, PKG-INFO): "Key: value"
// lines with continuation lines indented, ended by an empty line. Keys are
// case-insensitive, as in the email parser importlib.metadata uses.
Headers parse_headers(std::string_view text) {
  Headers h;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    if (line.front() == ' ' || line.front() == '\t') continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string key(line.substr(0, colon));
    std::transform(key.begin(), key.end(), key.begin(), ::tolower);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (key == "name" && !h.name)
      h.name = std::string(value);
    else if (key == "version" && !h.version)
      h.version = std::string(value);
  }
  return h;
}

std::vector<std::string> non_empty_lines(std::string_view text) {
  std::vector<std::string> out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (!line.empty()) out.emplace_back(line);
  }
  return out;
}

// First field of each RECORD line (CSV; a quoted field doubles its quotes).
std::vector<std::string> record_first_fields(std::string_view text) {
  std::vector<std::string> out;
  for (const std::string& line : non_empty_lines(text)) {
    std::string field;
    if (line.front() == '"') {
      for (size_t i = 1; i < line.size(); i++) {
        if (line[i] == '"') {
          if (i + 1 < line.size() && line[i + 1] == '"') {
            field.push_back('"');
            i++;
            continue;
          }
          break;
        }
        field.push_back(line[i]);
      }
    } else {
      field = line.substr(0, line.find(','));
    }
    if (!field.empty()) out.push_back(std::move(field));
  }
  return out;
}

// Import names a RECORD installs at the top of site-packages: "six.py" is
// "six", "torch/__init__.py" is "torch", "_cffi_backend.cpython-311-...so"
// is "_cffi_backend". Metadata, `.data`, `.libs`, caches and paths outside
// site-packages are not importable.
std::vector<std::string> top_level_from_record(const std::vector<std::string>& paths) {
  std::set<std::string> seen;
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    if (p.starts_with("../") || p.starts_with("/")) continue;
    size_t slash = p.find('/');
    std::string first = p.substr(0, slash);
    std::string name;
    if (slash != std::string::npos) {
      if (first.find('.') != std::string::npos || first == "__pycache__") continue;
      name = first;
    } else {
      if (first.ends_with(".pth")) continue;
      if (!first.ends_with(".py") && !first.ends_with(".so")) continue;
      name = first.substr(0, first.find('.'));
    }
    if (!name.empty() && seen.insert(name).second) out.push_back(name);
  }
  return out;
}

// "numpy-1.24.2-py3.11.egg-info" -> {"numpy", "1.24.2"}.
std::pair<std::string, std::string> name_version_from_dir(std::string_view entry) {
  size_t dot = entry.rfind('.');
  std::string_view stem = entry.substr(0, dot);
  size_t dash = stem.find('-');
  if (dash == std::string_view::npos) return {std::string(stem), ""};
  std::string_view rest = stem.substr(dash + 1);
  return {std::string(stem.substr(0, dash)), std::string(rest.substr(0, rest.find('-')))};
}

// (::tolower on a byte above 0x7f, a negative char, is undefined.)
std::string lower(std::string_view s) { return ascii_lower(s); }

void read_distribution(const host::Host& host, Distribution& d,
                       std::vector<ScanProblem>& problems) {
  std::string meta_file;
  switch (d.format) {
    case MetadataFormat::DistInfo: meta_file = host::join_path(d.metadata_path, "METADATA"); break;
    case MetadataFormat::EggInfoDir:
      meta_file = host::join_path(d.metadata_path, "PKG-INFO");
      break;
    case MetadataFormat::EggInfoFile: meta_file = d.metadata_path; break;
    case MetadataFormat::Egg: meta_file = host::join_path(d.metadata_path, "PKG-INFO"); break;
  }
  // The headers sit at the top; the long description after them can be
  // large and is never needed.
  std::string why;
  std::optional<std::string> text = host.read_file(meta_file, 256 << 10, &why);
  std::string entry = d.format == MetadataFormat::Egg ? d.site_dir : d.metadata_path;
  auto [dir_name, dir_version] = name_version_from_dir(entry.substr(entry.rfind('/') + 1));
  if (!text) {
    // A FIFO or a device is refused unopened (host::Host::read_file).
    host::FileStat st = host.stat(meta_file);
    d.error = meta_file.substr(meta_file.rfind('/') + 1) + ": " +
              (st.kind == host::FileKind::Missing ? std::string("missing") : why + ": not read");
  } else {
    Headers h = parse_headers(*text);
    if (!h.name || h.name->empty())
      d.error = "metadata has no Name";
    else if (!h.version || h.version->empty())
      d.error = "metadata has no Version";
    if (h.name) d.name = *h.name;
    if (h.version) d.version = *h.version;
  }
  if (d.name.empty()) d.name = dir_name;
  if (d.version.empty()) d.version = dir_version;
  d.normalized_name = normalize_distribution_name(d.name);
  if (d.error) problems.push_back({d.metadata_path, *d.error});
  if (d.format == MetadataFormat::EggInfoFile) return;

  if (std::optional<std::string> top =
          host.read_file(host::join_path(d.metadata_path, "top_level.txt"), 64 << 10))
    d.top_level = non_empty_lines(*top);
  else if (std::optional<std::string> record =
               host.read_file(host::join_path(d.metadata_path, "RECORD"), 64 << 20))
    d.top_level = top_level_from_record(record_first_fields(*record));
  for (std::string& t : d.top_level) std::replace(t.begin(), t.end(), '/', '.');
  if (std::optional<std::string> inst =
          host.read_file(host::join_path(d.metadata_path, "INSTALLER"), 4096)) {
    std::vector<std::string> lines = non_empty_lines(*inst);
    if (!lines.empty()) d.installer = lines.front();
  }
}

}  // namespace

std::vector<Distribution> find_distributions(const host::Host& host,
                                             const std::vector<std::string>& sys_path,
                                             std::vector<ScanProblem>& problems) {
  std::vector<Distribution> out;
  std::set<std::string> listed;
  for (size_t i = 0; i < sys_path.size(); i++) {
    const std::string& dir = sys_path[i];
    if (dir.empty() || dir.front() != '/' || !listed.insert(dir).second) continue;
    if (lower(dir).ends_with(".egg")) {
      if (host.stat(host::join_path(dir, "EGG-INFO")).kind == host::FileKind::Directory) {
        Distribution d;
        d.format = MetadataFormat::Egg;
        d.metadata_path = host::join_path(dir, "EGG-INFO");
        d.site_dir = dir;
        d.sys_path_index = i;
        read_distribution(host, d, problems);
        out.push_back(std::move(d));
      }
      continue;
    }
    host::FileStat st = host.stat(dir);
    if (st.kind != host::FileKind::Directory) {
      if (st.kind == host::FileKind::Error)
        problems.push_back({dir, "sys.path entry unreadable: " + errno_text(st.error)});
      continue;
    }
    std::optional<std::vector<std::string>> names = host.list_dir(dir);
    if (!names) {
      problems.push_back({dir, "sys.path directory cannot be listed"});
      continue;
    }
    // .dist-info first: where both forms of one distribution share a
    // directory, the wheel's metadata is the current one.
    for (bool want_dist_info : {true, false}) {
      for (const std::string& name : *names) {
        std::string low = lower(name);
        bool dist_info = low.ends_with(".dist-info");
        if (dist_info != want_dist_info || (!dist_info && !low.ends_with(".egg-info"))) continue;
        Distribution d;
        d.metadata_path = host::join_path(dir, name);
        d.site_dir = dir;
        d.sys_path_index = i;
        host::FileStat est = host.stat(d.metadata_path);
        if (dist_info) {
          d.format = MetadataFormat::DistInfo;
        } else if (est.kind == host::FileKind::Regular) {
          d.format = MetadataFormat::EggInfoFile;
        } else {
          d.format = MetadataFormat::EggInfoDir;
        }
        if (est.kind == host::FileKind::Error) {
          auto [n, v] = name_version_from_dir(name);
          d.name = n;
          d.version = v;
          d.normalized_name = normalize_distribution_name(n);
          d.error = "cannot stat: " + errno_text(est.error);
          problems.push_back({d.metadata_path, *d.error});
        } else if (dist_info && est.kind != host::FileKind::Directory) {
          continue;  // a stray file named *.dist-info is not metadata
        } else {
          read_distribution(host, d, problems);
        }
        out.push_back(std::move(d));
      }
    }
  }
  std::map<std::string, size_t> first;
  for (size_t i = 0; i < out.size(); i++) {
    auto [it, inserted] = first.emplace(out[i].normalized_name, i);
    if (!inserted) out[i].shadowed_by = it->second;
  }
  return out;
}

std::vector<std::string> record_paths(const host::Host& host, const Distribution& dist,
                                      std::vector<ScanProblem>& problems) {
  if (dist.format != MetadataFormat::DistInfo && dist.format != MetadataFormat::EggInfoDir)
    return {};
  std::string record_file =
      host::join_path(dist.metadata_path,
                      dist.format == MetadataFormat::DistInfo ? "RECORD" : "installed-files.txt");
  std::optional<std::string> text = host.read_file(record_file, 64 << 20);
  if (!text) return {};
  std::vector<std::string> out;
  // installed-files.txt paths are relative to the .egg-info directory.
  std::string base = dist.format == MetadataFormat::DistInfo ? dist.site_dir : dist.metadata_path;
  for (const std::string& p : record_first_fields(*text))
    out.push_back(host::normalize_path(p.front() == '/' ? p : host::join_path(base, p)));
  if (out.empty()) problems.push_back({record_file, "empty RECORD"});
  return out;
}

std::vector<std::string> record_entries(const host::Host& host, const Distribution& dist) {
  if (dist.format != MetadataFormat::DistInfo) return {};
  std::optional<std::string> text =
      host.read_file(host::join_path(dist.metadata_path, "RECORD"), 64 << 20);
  return text ? record_first_fields(*text) : std::vector<std::string>{};
}

}  // namespace mld::pyenv
