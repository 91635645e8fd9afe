// ENV012 — LD_LIBRARY_PATH names directories that do not exist under the
// analysed root. ld.so skips them, but they are usually left from a CUDA
// toolkit or conda environment that is gone, and the library expected from
// there comes from elsewhere (rules/ENV012.toml). hostfacts looked them up.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV012) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::EnvFacts& e = facts.host->env;
  std::vector<std::string> missing;
  for (const hostfacts::LoaderPathEntry& entry : e.ld_library_path)
    if (entry.missing) missing.push_back(entry.path);
  const std::string* value = e.value_of("LD_LIBRARY_PATH");
  if (missing.empty() || !value) return;
  Detection d = detect::env_detection("ENV012", "LD_LIBRARY_PATH", *value);
  d.message = "LD_LIBRARY_PATH names directories that do not exist: " + detect::joined(missing);
  d.fix =
      "Remove the directories that do not exist from LD_LIBRARY_PATH (often left from another "
      "CUDA or conda installation).";
  out.push_back(std::move(d));
}
