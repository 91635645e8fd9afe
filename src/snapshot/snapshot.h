// snapshot.h — `mldoctor snapshot OUT.tar.gz`: exactly the /proc, /sys and
// /etc files (and the container markers) that the checks read, as they read
// them, plus the environment with secrets masked, in one gzip'd tar that
// anyone can unpack and analyse with `mldoctor check --root DIR`.
//
// What goes in comes from a host::AccessLog recorded while the checks ran,
// not from a list kept by hand: a new check that reads a new file is in the
// next snapshot without anyone remembering to add it. Other processes'
// /proc/<pid> entries (read to find lock holders) stay out.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "host/host.h"

namespace mld::snapshot {

// The environment file inside a snapshot: NAME=value entries separated by
// NUL, as /proc/<pid>/environ. host_at_root() reads it back.
inline constexpr std::string_view kEnvironFile = "/.mldoctor/environ";

// Whether a variable's value is a secret by its name (TOKEN, SECRET,
// PASSWORD, KEY, CREDENTIAL, AUTH, COOKIE, ...), and the value as it goes
// into a snapshot: "<masked>" for secrets, credentials removed from URLs
// (scheme://user:***@host), well-known token shapes (ghp_, hf_, sk-, AKIA)
// masked whatever the name.
bool is_secret_name(std::string_view name);
std::string masked_value(std::string_view name, std::string_view value);

struct Written {
  size_t files = 0, directories = 0, links = 0, masked = 0;
  size_t sparse_files = 0;  // objects kept as the ranges read of them
  u64 sparse_bytes = 0;     // the bytes of those ranges
  size_t placeholders = 0;  // entries of listed directories, kept empty
  u64 bytes = 0;            // of the compressed archive
};

// Writes the archive to `out_path`, which must not exist (it is created
// with O_EXCL: a snapshot never overwrites anything). Throws IoError.
// `facts` are written as they are under /.mldoctor/ (facts the checks learn
// without a file of /proc, /sys or /etc: the glibc release).
Written write_snapshot(const host::AccessLog& log, const std::map<std::string, std::string>& env,
                       const std::map<std::string, std::string>& facts,
                       const std::string& out_path);

// A Host for an analysed tree: its own recorded environment when it is a
// snapshot (the file above), else `fallback` (the caller's environment).
host::Host host_at_root(const std::string& root,
                        const std::map<std::string, std::string>& fallback);

}  // namespace mld::snapshot
