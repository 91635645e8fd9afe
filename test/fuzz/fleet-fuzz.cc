// fleet-fuzz.cc — what fleet and diff read from outside: check reports (any
// JSON, of any version) and the protocol's messages from other ranks. Every
// input must give fact groups or a ReportError, never a crash; a digest
// message that decodes must encode back to the same bytes.
//
// Corpus (test/fuzz/corpus/fleet/): check reports of the 8-GPU fixture host
// (current and 0.1.0), and digest, plan and details messages of a run.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fleet/fleet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  using namespace mld::fleet;
  if (bytes.starts_with("MLDF") && bytes.size() > 4) {
    try {
      switch (bytes[4]) {
        case 'D': {
          DigestMessage m = decode_digests(bytes);
          if (m.digests.size() != group_specs().size()) abort();
          break;
        }
        case 'P': (void)decode_plan(bytes); break;
        default: (void)decode_details(bytes);
      }
    } catch (const ReportError&) {
    }
    return 0;
  }
  nlohmann::json doc = nlohmann::json::parse(bytes, nullptr, false);
  if (doc.is_discarded()) return 0;
  try {
    MemberFacts m = facts_from_check(doc);
    if (m.groups.size() != group_specs().size()) abort();
    for (const FactGroup& g : m.groups) (void)digest(g);
  } catch (const ReportError&) {
  }
  return 0;
}
