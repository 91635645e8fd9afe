// LD005 — ld.so would stop loading the process: an error the loader model
// reached the way ld.so does (a DT_NEEDED entry that is no ELF file of this
// machine, an object it cannot map), from libs' program or check's import set.
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
  }
}
