// LD005 — ld.so would stop loading the process: an error the loader model
// reached the way ld.so does (a DT_NEEDED entry that is no ELF file of this
// machine, an object it cannot map), from libs' program or check's import
// set; and a dlopen() of check's import replay (or libs --load-order) that
// fails on a file that is there but unusable (a truncated or corrupt
// extension module): the import raises, or the process dies of SIGBUS
// touching pages past the end of the file.
#include "detect/detect.h"

MLD_DETECTOR(LD005) {
  using namespace mld;
  for (const detect::SimulatedProcess& p : facts.simulated) {
    for (const std::string& e : p.process->errors) {
      Detection d;
      d.rule = "LD005";
      d.subject = p.subject;
      d.message = "ld.so would stop loading " + p.subject + ": " + e;
      detect::add_loaded_by(p, d);
      out.push_back(std::move(d));
    }
    for (const detect::SimulatedProcess::FailedLoad& f : p.failed_loads) {
      Detection d;
      d.rule = "LD005";
      d.subject = f.object;
      d.message =
          (f.caller.empty() ? "dlopen(" + f.object + ")" : f.caller) + " would fail: " + f.error;
      d.evidence.push_back({"in " + p.subject, "", std::nullopt});
      const std::string file(base_name(f.object));
      const std::optional<std::string> owner = detect::owner_of(p, f.object);
      if (owner) d.evidence.push_back({file + " is from " + *owner, "", std::nullopt});
      d.fix = "Reinstall " + (owner ? *owner : "the package that ships " + file) + ": " + file +
              " is damaged (a wheel: `pip install --force-reinstall --no-deps NAME==VERSION`).";
      out.push_back(std::move(d));
    }
  }
}
