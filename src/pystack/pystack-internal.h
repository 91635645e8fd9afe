// pystack-internal.h — where the fields the stack reader follows lie in one
// CPython release's structures (layouts.cc), shared with reader.cc.
#pragma once

#include <optional>
#include <string>

#include "pystack/pystack.h"

namespace mld::pystack::detail {

inline constexpr u64 kAbsent = ~u64{0};

// Offsets in bytes from the start of each structure; kAbsent where a
// release has no such field.
struct Layout {
  int minor = 0;  // 3.<minor>
  LineTableFormat lines = LineTableFormat::Lnotab;
  // 3.11+: _PyInterpreterFrame chains (an instruction pointer, an owner);
  // before: PyFrameObject chains (f_lasti).
  bool interpreter_frames = false;
  bool lasti_in_code_units = false;  // 3.10's f_lasti counts 2-byte units

  u64 runtime_interpreters_head = 0;
  u64 interp_next = 0, interp_threads_head = 0;
  u64 tstate_next = 0, tstate_interp = 0, tstate_thread_id = 0;
  u64 tstate_native_thread_id = kAbsent;  // 3.11+
  // ≤3.10: PyFrameObject* frame; 3.11, 3.12: _PyCFrame* cframe; 3.13+:
  // _PyInterpreterFrame* current_frame.
  u64 tstate_frame = 0;
  u64 cframe_current_frame = kAbsent;  // 3.11, 3.12: inside _PyCFrame

  u64 frame_previous = 0;  // f_back / previous
  u64 frame_code = 0;      // f_code / f_executable
  u64 frame_lasti = 0;     // int f_lasti (≤3.10) / the instruction pointer (3.11+)
  u64 frame_owner = kAbsent;
  // 3.14+: f_executable is a _PyStackRef, a pointer whose low bits are tags
  // (Py_TAG_BITS: a deferred or immortal reference); masked off to read it.
  u64 executable_tag_bits = 0;

  u64 code_filename = 0, code_name = 0, code_qualname = kAbsent, code_firstlineno = 0,
      code_linetable = 0, code_adaptive = kAbsent;

  u64 object_type = 8;  // ob_type
  u64 unicode_state = 32, unicode_length = 16, unicode_ascii_size = 48, unicode_compact_size = 72;
  u64 bytes_size = 16, bytes_data = 32;
};

// The layout of CPython 3.<minor> for minor 8–12; nullopt for others.
std::optional<Layout> table_layout(int minor);

// The layout a 3.13+ interpreter publishes in _Py_DebugOffsets (the first
// bytes of _PyRuntime, `bytes` of them); nullopt with *why set when they
// are not a layout this reader knows (another release's struct, a
// free-threaded build) or do not hold together (an offset outside its
// structure's size).
std::optional<Layout> debug_offsets_layout(ByteView bytes, std::string* why);
// How many bytes of _PyRuntime debug_offsets_layout reads for the release
// of PY_VERSION_HEX `hex_version` (the u64 after the cookie); 0 for a
// release whose _Py_DebugOffsets this reader does not know.
size_t debug_offsets_bytes(u64 hex_version);

}  // namespace mld::pystack::detail
