// ENV014 — GLIBC_TUNABLES has items glibc ignores without a word: an item
// that is not name=value, or a name no glibc release (2.26-2.41) defines, so
// the setting the user meant (an arena limit, static TLS room) is not applied
// (rules/ENV014.toml). hostfacts parses it as dl-tunables.c does.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV014) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::EnvFacts& e = facts.host->env;
  std::vector<std::string> problems;
  for (const std::string& m : e.glibc_tunables_malformed)
    problems.push_back("\"" + m + "\" is not name=value");
  for (const hostfacts::GlibcTunable& t : e.glibc_tunables)
    if (!t.known) problems.push_back("\"" + t.key + "\" is not a glibc tunable");
  const std::string* value = e.value_of("GLIBC_TUNABLES");
  if (problems.empty() || !value) return;
  Detection d = detect::env_detection("ENV014", "GLIBC_TUNABLES", *value);
  d.message =
      "GLIBC_TUNABLES has entries glibc ignores silently: " + detect::joined(problems, "; ");
  d.fix =
      "Write GLIBC_TUNABLES as colon-separated glibc.<namespace>.<name>=<value> items; `ld.so "
      "--list-tunables` (glibc 2.33 and later) prints the names this glibc knows.";
  out.push_back(std::move(d));
}
