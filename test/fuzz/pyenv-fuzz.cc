// pyenv-fuzz.cc — the interpreter probe's answer on arbitrary bytes: text
// before the answer, truncated or malformed JSON, wrong types, bad
// {"hex": ...} strings. The parser either returns facts or throws
// PyenvError; nothing else may escape, nothing may crash.
//
// Corpus (test/fuzz/corpus/pyenv/): a real answer of Debian's python3, one
// with noise before it, one with hex-encoded paths, near misses.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pyenv/pyenv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    mld::pyenv::PythonFacts f = mld::pyenv::parse_probe_answer(text, "fuzz: ");
    if (f.version.empty()) abort();  // a parsed answer always has a version
  } catch (const mld::pyenv::PyenvError&) {
  }
  return 0;
}
