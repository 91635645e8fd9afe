// JIT009 — a symbolic link of an extension cache layout (build directory,
// tag level, $TORCH_EXTENSIONS_DIR) whose target is missing or which loops:
// torch's os.makedirs fails at once on it (FileExistsError on a linked build
// directory; FileNotFoundError or ELOOP under a linked root), so the load
// fails instead of building. The facts are jit's scan, which follows links
// with a bound and records those that lead nowhere.
#include "detect/jit-locks.h"

MLD_DETECTOR(JIT009) {
  using namespace mld;
  if (!facts.jit) return;
  for (const jit::BrokenLink& b : facts.jit->broken_links) {
    Detection d;
    d.rule = "JIT009";
    d.subject = b.path;
    const std::string where =
        b.loop ? "is a loop of symbolic links"
               : "is a symbolic link to " + b.target +
                     (b.missing == b.target ? ", which does not exist"
                                            : " (" + b.missing + " does not exist)");
    std::string consequence;
    if (b.what == "build directory")
      consequence = "load() of " + b.name +
                    " fails at once with FileExistsError (torch's os.makedirs on the link)";
    else if (b.what == "tag directory")
      consequence = "every load() of a " + b.name + " build fails at once with " +
                    (b.loop ? "OSError: Too many levels of symbolic links" : "FileNotFoundError");
    else if (b.root_kind == "TORCH_EXTENSIONS_DIR" || b.root_kind == "torch_extensions cache")
      consequence =
          "every load() under it fails at once with " +
          std::string(b.loop ? "OSError: Too many levels of symbolic links" : "FileNotFoundError");
    else
      consequence = "no build can be made or examined there";
    d.message = b.what + " " + b.path + " (" + b.root_kind + ") " + where + ": " + consequence;
    d.evidence.push_back({"links followed: " + detect::links_text(b.links), "", std::nullopt});
    d.fix = b.loop ? "point " + b.path + " at an existing directory (ln -sfn DIR " + b.path +
                         ") or rm " + b.path + "; mldoctor jit --fix leaves it alone"
                   : "mkdir -p " + b.target + " (or rm " + b.path +
                         "); mldoctor jit --fix leaves it alone";
    out.push_back(std::move(d));
  }
}
