// findings.cc — names of severities. The severity words are part of the
// JSON schema and of --fail-on, so they are spelled in exactly one place.
#include "findings/findings.h"

namespace mld {

std::string_view severity_name(Severity s) {
  switch (s) {
    case Severity::Info: return "info";
    case Severity::Warning: return "warning";
    case Severity::Error: return "error";
  }
  return "error";
}

std::optional<Severity> parse_severity(std::string_view s) {
  if (s == "info") return Severity::Info;
  if (s == "warning") return Severity::Warning;
  if (s == "error") return Severity::Error;
  return std::nullopt;
}

}  // namespace mld
