// ENV013 — LD_PRELOAD names absolute paths that do not exist under the
// analysed root: every process prints "cannot be preloaded ... ignored" and
// runs without the allocator or runtime meant to be preloaded
// (rules/ENV013.toml). hostfacts looked them up.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV013) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::EnvFacts& e = facts.host->env;
  std::vector<std::string> missing;
  for (const hostfacts::LoaderPathEntry& entry : e.ld_preload)
    if (entry.missing) missing.push_back(entry.path);
  const std::string* value = e.value_of("LD_PRELOAD");
  if (missing.empty() || !value) return;
  Detection d = detect::env_detection("ENV013", "LD_PRELOAD", *value);
  d.message = "LD_PRELOAD names libraries that do not exist: " + detect::joined(missing) +
              "; ld.so prints \"cannot be preloaded ... ignored\" in every process";
  d.fix = "Remove the missing libraries from LD_PRELOAD or correct their paths.";
  out.push_back(std::move(d));
}
