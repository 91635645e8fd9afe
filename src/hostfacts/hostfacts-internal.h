// hostfacts-internal.h — small text helpers shared by the hostfacts sources:
// the files under /proc and /sys and the environment variables are all short
// lines of text, parsed strictly (a value the kernel or a runtime would reject
// must not become a number here).
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "host/host.h"

namespace mld::hostfacts::detail {

inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

using mld::trim;

// Splits on one separator character, keeping empty fields.
inline std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t p = s.find(sep, start);
    if (p == std::string_view::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, p - start));
    start = p + 1;
  }
}

// Splits on runs of blanks, dropping empty fields.
inline std::vector<std::string_view> split_words(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) i++;
    size_t start = i;
    while (i < s.size() && !is_space(s[i])) i++;
    if (i > start) out.push_back(s.substr(start, i - start));
  }
  return out;
}

// A decimal number made only of digits (no sign, no blanks).
inline std::optional<u64> parse_u64(std::string_view s) {
  if (s.empty()) return std::nullopt;
  u64 v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

inline std::optional<i64> parse_i64(std::string_view s) {
  if (s.empty()) return std::nullopt;
  i64 v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

inline std::string lower(std::string_view s) { return ascii_lower(s); }

inline std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

inline bool iequals(std::string_view a, std::string_view b) { return lower(a) == lower(b); }

// "49367240 kB" -> bytes.
inline std::optional<u64> parse_kb_value(std::string_view v) {
  std::vector<std::string_view> w = split_words(v);
  if (w.empty()) return std::nullopt;
  std::optional<u64> n = parse_u64(w[0]);
  if (!n) return std::nullopt;
  if (w.size() >= 2 && (w[1] == "kB" || w[1] == "KB" || w[1] == "kb")) {
    std::optional<u64> b = checked_mul(*n, 1024);
    return b;
  }
  return n;
}

// The value of "Key:   value" in a /proc-style "key: value" file.
inline std::optional<std::string_view> field_of(std::string_view text, std::string_view key) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ':')
      return trim(line.substr(key.size() + 1));
    pos = end + 1;
  }
  return std::nullopt;
}

// Lines of a text, without the final empty one.
inline std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out = split(text, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

// Mount table entry from /proc/self/mountinfo (or /proc/mounts, where `root`
// is "/" since that format has no root field).
struct MountEntry {
  std::string root;         // the mounted directory inside its filesystem
  std::string mount_point;  // where it is mounted
  std::string fstype;
  std::string super_options;  // "rw,size=65536k" / "rw,cpu,cpuacct"
  std::optional<u64> device;  // st_dev of its files (mountinfo's "major:minor"), as makedev()
};

// The mount that holds `path`: the one with the longest mount point that is
// `path` or one of its directories, the later of equal ones (mounted over
// the earlier); nullptr when none does (a chroot does not list its root).
const MountEntry* holding_mount(const std::vector<MountEntry>& mounts, std::string_view path);

// The mount table: /proc/self/mountinfo, else /proc/mounts. `source` names
// the file read ("" when neither could be read).
std::vector<MountEntry> read_mounts(const host::Host& host, std::string* source);

// KMP_AFFINITY's comma-separated items, a proclist=[...] kept whole (its
// brackets hold commas); nullopt when the brackets do not match.
std::optional<std::vector<std::string>> kmp_affinity_items(std::string_view v);

}  // namespace mld::hostfacts::detail
