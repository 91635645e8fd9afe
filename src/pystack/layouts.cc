// layouts.cc — the offsets of the fields a stack walk follows, per CPython
// release on LP64 Linux (x86-64, AArch64).
//
// 3.8–3.12 publish nothing: the numbers below are offsetof() of each field in
// each release's own headers (Include/internal/pycore_*.h and cpython/*.h,
// compiled with Py_BUILD_CORE against the interpreters under ~/.pyenv and
// Debian's 3.11), and they hold for every patch release of a minor one (the
// structures are part of what debuggers rely on, and the stack tests read
// Debian's 3.11.2 with the table made from 3.11.7). A debug build (Py_DEBUG)
// puts two more pointers in every object header; the reader refuses those.
//
// 3.13 puts _Py_DebugOffsets first in _PyRuntime: a cookie "xdebugpy", the
// version, then for each structure its size and the offsets of its fields,
// in the order of Include/internal/pycore_runtime.h. The struct itself
// changed in 3.14, so a cookie with another minor version is not read as
// 3.13's.
#include <cstring>

#include "pystack/pystack-internal.h"

namespace mld::pystack::detail {

std::optional<Layout> table_layout(int minor) {
  Layout l;
  l.minor = minor;
  switch (minor) {
    case 8:
    case 9:
    case 10:
      l.lines = minor == 10 ? LineTableFormat::Linetable310 : LineTableFormat::Lnotab;
      l.lasti_in_code_units = minor == 10;
      l.runtime_interpreters_head = 32;
      l.interp_next = 0;
      l.interp_threads_head = 8;
      l.tstate_next = 8;
      l.tstate_interp = 16;
      l.tstate_frame = 24;
      l.tstate_thread_id = 176;
      l.frame_previous = 24;
      l.frame_code = 32;
      l.frame_lasti = minor == 10 ? 96 : 104;
      l.code_firstlineno = 40;
      l.code_filename = 104;
      l.code_name = 112;
      l.code_linetable = 120;  // co_lnotab before 3.10
      return l;
    case 11:
    case 12:
      l.lines = LineTableFormat::Locations311;
      l.interpreter_frames = true;
      l.runtime_interpreters_head = 40;
      l.interp_next = 0;
      l.interp_threads_head = minor == 11 ? 16 : 72;
      l.tstate_next = 8;
      l.tstate_interp = 16;
      l.tstate_frame = 56;  // cframe
      l.cframe_current_frame = minor == 11 ? 8 : 0;
      l.tstate_thread_id = minor == 11 ? 152 : 136;
      l.tstate_native_thread_id = minor == 11 ? 160 : 144;
      l.frame_code = minor == 11 ? 32 : 0;
      l.frame_previous = minor == 11 ? 48 : 8;
      l.frame_lasti = 56;  // prev_instr
      l.frame_owner = minor == 11 ? 69 : 70;
      l.code_firstlineno = minor == 11 ? 72 : 68;
      l.code_filename = 112;
      l.code_name = 120;
      l.code_qualname = 128;
      l.code_linetable = 136;
      l.code_adaptive = minor == 11 ? 184 : 192;
      if (minor == 12) {  // PyASCIIObject lost its wstr pointer
        l.unicode_ascii_size = 40;
        l.unicode_compact_size = 56;
      }
      return l;
    default: return std::nullopt;
  }
}

std::optional<Layout> debug_offsets_layout(ByteView bytes, std::string* why) {
  if (bytes.size() < kDebugOffsetsBytes || std::memcmp(bytes.data(), "xdebugpy", 8) != 0) {
    *why = "no _Py_DebugOffsets at the start of _PyRuntime";
    return std::nullopt;
  }
  auto at = [&](size_t index) { return bytes.u64_at(8 * index, false); };
  const u64 version = at(1);
  if (((version >> 24) & 0xff) != 3 || ((version >> 16) & 0xff) != 13) {
    *why = "CPython " + version_text(version) +
           ": its _Py_DebugOffsets are laid out as this mldoctor does not know (it reads 3.8–3.13)";
    return std::nullopt;
  }
  if (at(2) != 0) {
    *why = "a free-threaded (no-GIL) build of CPython " + version_text(version) +
           ": its object headers are not read by this mldoctor";
    return std::nullopt;
  }
  // Indexes of u64 fields after cookie[8]: 1 version, 2 free_threaded, then
  // groups, each led by the structure's size.
  constexpr size_t runtime = 3, interp = 6, tstate = 19, iframe = 28, code = 34, pyobject = 44,
                   bytes_object = 64, unicode = 67;
  Layout l;
  l.minor = 13;
  l.lines = LineTableFormat::Locations311;
  l.interpreter_frames = true;
  l.runtime_interpreters_head = at(runtime + 2);
  l.interp_next = at(interp + 2);
  l.interp_threads_head = at(interp + 3);
  l.tstate_next = at(tstate + 2);
  l.tstate_interp = at(tstate + 3);
  l.tstate_frame = at(tstate + 4);  // current_frame, no _PyCFrame since 3.13
  l.tstate_thread_id = at(tstate + 5);
  l.tstate_native_thread_id = at(tstate + 6);
  l.frame_previous = at(iframe + 1);
  l.frame_code = at(iframe + 2);
  l.frame_lasti = at(iframe + 3);  // instr_ptr
  l.frame_owner = at(iframe + 5);
  l.code_filename = at(code + 1);
  l.code_name = at(code + 2);
  l.code_qualname = at(code + 3);
  l.code_linetable = at(code + 4);
  l.code_firstlineno = at(code + 5);
  l.code_adaptive = at(code + 9);
  l.object_type = at(pyobject + 1);
  l.bytes_size = at(bytes_object + 1);
  l.bytes_data = at(bytes_object + 2);
  l.unicode_state = at(unicode + 1);
  l.unicode_length = at(unicode + 2);
  l.unicode_ascii_size = at(unicode + 3);
  l.unicode_compact_size = l.unicode_ascii_size + 16;  // utf8_length, utf8
  // Offsets past a few KiB are not a structure of this interpreter.
  for (u64 v : {l.runtime_interpreters_head, l.interp_threads_head, l.tstate_frame, l.frame_code,
                l.frame_lasti, l.code_adaptive, l.unicode_ascii_size}) {
    if (v > 1u << 16) {
      *why = "_Py_DebugOffsets of CPython " + version_text(version) + " hold offsets past 64 KiB";
      return std::nullopt;
    }
  }
  return l;
}

}  // namespace mld::pystack::detail
