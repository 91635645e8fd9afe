// ENV011 — LD_LIBRARY_PATH searches the current directory (an empty element,
// a relative one), or LD_PRELOAD names a library by a relative path: which
// libraries a process loads then depends on where it starts (a launcher
// that changes directory, a DataLoader worker, a torchrun child)
// (rules/ENV011.toml). Elements are as hostfacts split them the way ld.so
// does; "$ORIGIN"-style elements are ld.so's to expand and not reported, nor
// LD_PRELOAD's bare names, which ld.so searches like DT_NEEDED entries.
#include "detect/detect.h"
#include "detect/env-detection.h"

MLD_DETECTOR(ENV011) {
  using namespace mld;
  if (!facts.host) return;
  const hostfacts::EnvFacts& e = facts.host->env;
  std::vector<std::string> relative;
  for (const hostfacts::LoaderPathEntry& entry : e.ld_library_path) {
    if (entry.path.empty())
      relative.push_back("(empty element = current directory)");
    else if (entry.path[0] != '/' && entry.path[0] != '$')
      relative.push_back("\"" + entry.path + "\"");
  }
  const std::string* path = e.value_of("LD_LIBRARY_PATH");
  if (!relative.empty() && path) {
    Detection d = detect::env_detection("ENV011", "LD_LIBRARY_PATH", *path);
    d.message =
        "LD_LIBRARY_PATH searches relative to the current directory: " + detect::joined(relative) +
        "; which libraries load then depends on where the job starts";
    d.fix =
        "Remove empty elements (leading, trailing or doubled ':') and make every element an "
        "absolute path.";
    out.push_back(std::move(d));
  }

  relative.clear();
  for (const hostfacts::LoaderPathEntry& entry : e.ld_preload)
    if (entry.path.find('/') != std::string::npos && entry.path[0] != '/' && entry.path[0] != '$')
      relative.push_back("\"" + entry.path + "\"");
  const std::string* preload = e.value_of("LD_PRELOAD");
  if (!relative.empty() && preload) {
    Detection d = detect::env_detection("ENV011", "LD_PRELOAD", *preload);
    d.message = "LD_PRELOAD names libraries by a relative path: " + detect::joined(relative) +
                "; every process that starts in another directory fails to preload them";
    d.fix = "Give LD_PRELOAD absolute paths.";
    out.push_back(std::move(d));
  }
}
