// python-imports-fuzz.cc — the module-level import scanner on arbitrary
// bytes: unterminated strings and brackets, stray backslashes, tabs, NULs,
// `from` without `import`. It never throws; every statement it returns
// names a dotted identifier (or is relative), and its line is in the text.
//
// Corpus (test/fuzz/corpus/python-imports/): package __init__.py files of
// the shapes the walk meets (relative imports, try/except, TYPE_CHECKING,
// docstrings, continuation lines) and broken ones.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "pyenv/pyenv.h"

namespace {

bool dotted(std::string_view s) {
  if (s.empty() || s.front() == '.' || s.back() == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return c == '.' || c == '_' || std::isalnum(static_cast<unsigned char>(c));
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t lines = static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (const mld::pyenv::ImportStatement& s : mld::pyenv::module_level_imports(text)) {
    if (s.line < 1 || s.line > lines) abort();
    if (s.level < 0 || (s.level == 0 && !dotted(s.module))) abort();
    if (!s.module.empty() && !dotted(s.module)) abort();
    for (const std::string& n : s.names)
      if (n != "*" && !dotted(n)) abort();
  }
  return 0;
}
