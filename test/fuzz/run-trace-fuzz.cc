// run-trace-fuzz.cc — the trace model of `mldoctor run` on arbitrary bytes:
// event files cut by a crash, invalid UTF-8, events out of order, unknown
// kinds, wrong types. parse_process_events must count what it cannot use and
// never crash or throw; load_chain must terminate on requester cycles.
//
// Corpus (test/fuzz/corpus/run-trace/): real event files of Debian's
// python3 (a dlopen with its dependency, a missing file, a static TLS
// rollback, thread-count calls) and damaged copies.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "run/run.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  mld::run::TracedProcess p = mld::run::parse_process_events(text, 1);
  for (const mld::run::LoadedObject& o : p.objects) (void)mld::run::load_chain(p, o.path);
  if (p.objects.size() > size) abort();  // every object comes from a line of input
  return 0;
}
