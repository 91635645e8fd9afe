// pystack-fuzz.cc — the decoders of src/pystack on arbitrary bytes, as a
// stack reader racing a running interpreter may see them: the first byte
// picks the line-table format (0 co_lnotab, 1 the 3.10 co_linetable, 2 the
// 3.11+ location table) and bytes 1–4 the offset; the rest is the table.
// Byte 0 = 3 hands the rest to the _Py_DebugOffsets parser instead. Nothing
// may crash, loop or read outside the input.
//
// Corpus (test/fuzz/corpus/pystack/): the line tables of one function as
// CPython 3.8–3.14 compiled it, and the debug offsets of libpython3.13 and
// of Debian unstable's python3.14.
#include <cstdint>
#include <cstring>
#include <string>

#include "pystack/pystack-internal.h"

using namespace mld;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 5) return 0;
  i32 offset;
  std::memcpy(&offset, data + 1, 4);
  const ByteView rest(data + 5, size - 5);
  switch (data[0] % 4) {
    case 0: pystack::line_at(pystack::LineTableFormat::Lnotab, rest, 7, offset); break;
    case 1: pystack::line_at(pystack::LineTableFormat::Linetable310, rest, 7, offset); break;
    case 2: pystack::line_at(pystack::LineTableFormat::Locations311, rest, 7, offset); break;
    case 3: {
      std::string why;
      (void)pystack::detail::debug_offsets_layout(rest, &why);
      break;
    }
  }
  return 0;
}
