// linetable.cc — from an instruction's offset to its source line, in each
// encoding CPython has used since 3.8, decoded as Objects/codeobject.c does
// (PyCode_Addr2Line) so that a frame's line is the one the interpreter itself
// would print (faulthandler, tracebacks):
//
// - co_lnotab (3.8, 3.9): byte pairs (address increment, signed line
//   increment); the line is the sum of the increments of the pairs whose
//   address is not past the instruction.
// - co_linetable (3.10): byte pairs (length of a range in bytes, signed line
//   delta, -128 meaning "no line"); ranges follow each other from offset 0.
// - the location table (3.11+): entries whose first byte has bit 7 set, a
//   4-bit code and the range's length in code units (1–8); the code says how
//   the line changes (none, a delta in the entry's varint, 0–2 in short
//   forms) and the column bytes that follow are skipped to the next entry.
//
// Every loop advances through the table and stops at its end, so a damaged
// table read from a running process gives a wrong line at worst, never a
// hang or a read outside it.
#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "pystack/pystack.h"

namespace mld::pystack {

namespace {

int lnotab_line(ByteView t, int first_line, i64 offset) {
  int line = first_line;
  i64 addr = 0;
  for (u64 i = 0; i + 1 < t.size(); i += 2) {
    addr += t.data()[i];
    if (addr > offset) break;
    line += static_cast<signed char>(t.data()[i + 1]);
  }
  return line;
}

int linetable310_line(ByteView t, int first_line, i64 offset) {
  int computed = first_line;
  i64 end = 0;
  for (u64 i = 0; i + 1 < t.size(); i += 2) {
    const i64 start = end;
    end += t.data()[i];
    const auto delta = static_cast<signed char>(t.data()[i + 1]);
    const bool no_line = delta == -128;
    if (!no_line) computed += delta;
    if (start <= offset && offset < end) return no_line ? 0 : computed;
  }
  return 0;
}

// A varint of the location table: 6-bit groups, least significant first,
// bit 6 set while more follow. Reads at most to the table's end.
u64 read_varint(ByteView t, u64& i) {
  u64 value = 0;
  unsigned shift = 0;
  while (i < t.size()) {
    const u8 b = t.data()[i++];
    if (shift < 58) value |= u64{b & 63u} << shift;
    shift += 6;
    if (!(b & 64)) break;
  }
  return value;
}

i64 read_signed_varint(ByteView t, u64& i) {
  const u64 v = read_varint(t, i);
  return (v & 1) ? -static_cast<i64>(v >> 1) : static_cast<i64>(v >> 1);
}

int locations311_line(ByteView t, int first_line, i64 offset) {
  constexpr unsigned kNone = 15, kLong = 14, kNoColumns = 13, kOneLine0 = 10;
  i64 computed = first_line;
  i64 end = 0;
  u64 i = 0;
  while (i < t.size()) {
    const u8 head = t.data()[i];
    if (!(head & 128)) {  // not an entry's first byte: damaged, resynchronise
      i++;
      continue;
    }
    const unsigned code = (head >> 3) & 15;
    const i64 start = end;
    end += 2 * ((head & 7) + 1);
    u64 at = i + 1;
    i64 delta = 0;
    if (code == kLong || code == kNoColumns) {
      delta = read_signed_varint(t, at);
    } else if (code >= kOneLine0 && code < kNoColumns) {
      delta = code - kOneLine0;
    }
    // A damaged varint can hold any 64-bit value: lines stay within int.
    computed = std::clamp<i64>(computed + std::clamp<i64>(delta, INT32_MIN, INT32_MAX), INT32_MIN,
                               INT32_MAX);
    if (start <= offset && offset < end) {
      return code == kNone ? 0 : static_cast<int>(computed);
    }
    i = at;
    while (i < t.size() && !(t.data()[i] & 128)) i++;
  }
  return 0;
}

}  // namespace

int line_at(LineTableFormat format, ByteView table, int first_line, i64 offset) {
  if (offset < 0) return first_line;
  switch (format) {
    case LineTableFormat::Lnotab: return lnotab_line(table, first_line, offset);
    case LineTableFormat::Linetable310: return linetable310_line(table, first_line, offset);
    case LineTableFormat::Locations311: return locations311_line(table, first_line, offset);
  }
  return 0;
}

std::string version_text(u64 hex_version) {
  char text[32];
  std::snprintf(text, sizeof text, "%u.%u.%u", static_cast<unsigned>((hex_version >> 24) & 0xff),
                static_cast<unsigned>((hex_version >> 16) & 0xff),
                static_cast<unsigned>((hex_version >> 8) & 0xff));
  return text;
}

}  // namespace mld::pystack
