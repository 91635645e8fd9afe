// system-packages.cc — the operating system's package that installed a file,
// so a finding about /usr/lib/x86_64-linux-gnu/libgomp.so.1 can say "from
// libgomp1 12.2.0-14 (dpkg)": the name a user passes to apt. dpkg keeps one
// list of installed paths per package (info/<package>.list, or
// <package>:<arch>.list for Multi-Arch: same packages) and the versions in
// the status file, one stanza per package and architecture.
//
// Only shared-object paths are indexed (a line holding ".so"), which keeps
// the index to a few tens of thousands of entries; the lists are read once,
// on the first question.
#include "hostfacts/hostfacts.h"

namespace mld::hostfacts {

namespace {

// The other spelling of a usrmerged path: /lib/x -> /usr/lib/x and back.
std::optional<std::string> usrmerge_alias(std::string_view path) {
  for (std::string_view top : {"/lib/", "/lib64/", "/lib32/", "/bin/", "/sbin/"}) {
    if (path.starts_with(top)) return "/usr" + std::string(path);
    if (path.starts_with("/usr") && path.substr(4).starts_with(top))
      return std::string(path.substr(4));
  }
  return std::nullopt;
}

}  // namespace

void SystemPackages::load() const {
  loaded_ = true;
  const std::string info = "/var/lib/dpkg/info";
  std::optional<std::vector<std::string>> names = host_.list_dir(info);
  if (!names) return;
  for (const std::string& n : *names) {
    if (!n.ends_with(".list")) continue;
    std::optional<std::string> text = host_.read_file(info + "/" + n, 64u << 20);
    if (!text) continue;
    const std::string package = n.substr(0, n.size() - 5);
    std::string_view t = *text;
    for (size_t at = 0; at < t.size();) {
      size_t end = t.find('\n', at);
      if (end == std::string_view::npos) end = t.size();
      std::string_view line = t.substr(at, end - at);
      at = end + 1;
      if (line.find(".so") != std::string_view::npos) files_.emplace(std::string(line), package);
    }
  }
  // Versions: stanzas of Package/Architecture/Version.
  std::optional<std::string> status = host_.read_file("/var/lib/dpkg/status", 256u << 20);
  if (!status) return;
  std::string_view s = *status;
  std::string package, arch, version;
  auto flush = [&] {
    if (!package.empty() && !version.empty()) {
      versions_.emplace(package + ":" + arch, version);
      versions_.emplace(package, version);  // the first stanza of a name, for <package>.list
    }
    package.clear();
    arch.clear();
    version.clear();
  };
  for (size_t at = 0; at <= s.size();) {
    size_t end = s.find('\n', at);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(at, end - at);
    at = end + 1;
    if (line.empty()) {
      flush();
      if (end >= s.size()) break;
      continue;
    }
    if (line.starts_with("Package: ")) package = std::string(trim(line.substr(9)));
    if (line.starts_with("Architecture: ")) arch = std::string(trim(line.substr(14)));
    if (line.starts_with("Version: ")) version = std::string(trim(line.substr(9)));
  }
  flush();
}

std::optional<std::string> SystemPackages::owner(std::string_view path) const {
  if (!loaded_) load();
  if (files_.empty()) return std::nullopt;
  std::vector<std::string> spellings = {host::normalize_path(path)};
  if (std::optional<std::string> alias = usrmerge_alias(spellings[0])) spellings.push_back(*alias);
  if (std::optional<std::string> real = host_.real_path(spellings[0])) {
    spellings.push_back(*real);
    if (std::optional<std::string> alias = usrmerge_alias(*real)) spellings.push_back(*alias);
  }
  for (const std::string& p : spellings) {
    auto it = files_.find(p);
    if (it == files_.end()) continue;
    const std::string& package = it->second;
    auto v = versions_.find(package);
    std::string name = package.substr(0, package.find(':'));
    return name + (v != versions_.end() ? " " + v->second : "") + " (dpkg)";
  }
  return std::nullopt;
}

}  // namespace mld::hostfacts
