// layouts.cc — the offsets of the fields a stack walk follows, per CPython
// release on LP64 Linux (x86-64, AArch64).
//
// 3.8–3.12 publish nothing: the numbers below are offsetof() of each field in
// each release's own headers (Include/internal/pycore_*.h and cpython/*.h,
// compiled with Py_BUILD_CORE against the interpreters under ~/.pyenv and
// Debian's 3.11), and they hold for every patch release of a minor one (the
// structures are part of what debuggers rely on, and the stack tests read
// Debian's 3.11.2 with the table made from 3.11.7). A debug build (Py_DEBUG)
// of these may put two more pointers in every object header (Py_TRACE_REFS);
// the reader refuses them. From 3.13 a debug build's _Py_DebugOffsets
// describe its own layout, and Debian's python3.14d is read like python3.14.
//
// 3.13 puts _Py_DebugOffsets first in _PyRuntime: a cookie "xdebugpy", the
// version, a free-threaded flag, then for each structure its size and the
// offsets of its fields (Include/internal/pycore_debug_offsets.h). 3.14
// inserted fields in the middle (interpreter_state.threads_main, the
// generation counters, interpreter_frame.stackpointer and tlbc_index,
// code_object.co_tlbc, a set_object group) and appended others (the
// generator, llist_node and debugger_support groups), so where each group
// starts depends on the minor release: kGroups below, counted from the
// headers of 3.13.0 and of Debian's 3.14. A cookie with a minor release
// not in kGroups is refused by name, and a struct whose offsets do not fit
// inside the sizes it gives for their structures (another release's struct
// read with the wrong groups, or bytes that are no _Py_DebugOffsets) is
// refused too: the offsets are data from the process being read.
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

namespace {

// Where each group of _Py_DebugOffsets starts, as an index of its u64
// words (word 0 is the cookie, 1 the version, 2 free_threaded; each group
// starts with its structure's size), and how many words the whole struct
// holds. Within a group the fields this reader follows keep their places
// from 3.13 to 3.14.
struct DebugOffsetsGroups {
  int minor;
  size_t runtime_state, interpreter_state, thread_state, interpreter_frame, code_object, pyobject,
      bytes_object, unicode_object, words;
};
constexpr DebugOffsetsGroups kGroups[] = {
    {13, 3, 6, 19, 28, 34, 44, 64, 67, 73},
    {14, 3, 6, 22, 31, 39, 50, 74, 77, 95},
};

const DebugOffsetsGroups* groups_of(u64 hex_version) {
  if (((hex_version >> 24) & 0xff) != 3) return nullptr;
  for (const DebugOffsetsGroups& g : kGroups)
    if (static_cast<u64>(g.minor) == ((hex_version >> 16) & 0xff)) return &g;
  return nullptr;
}

}  // namespace

size_t debug_offsets_bytes(u64 hex_version) {
  const DebugOffsetsGroups* g = groups_of(hex_version);
  return g ? 8 * g->words : 0;
}

std::optional<Layout> debug_offsets_layout(ByteView bytes, std::string* why) {
  if (bytes.size() < 24 || std::memcmp(bytes.data(), "xdebugpy", 8) != 0) {
    *why = "no _Py_DebugOffsets at the start of _PyRuntime";
    return std::nullopt;
  }
  auto at = [&](size_t index) { return bytes.u64_at(8 * index, false); };
  const u64 version = at(1);
  const std::string release = "CPython " + version_text(version);
  const DebugOffsetsGroups* g = groups_of(version);
  if (!g) {
    *why = release +
           ": its _Py_DebugOffsets are laid out as this mldoctor does not know (it reads 3.8–3.14)";
    return std::nullopt;
  }
  if (at(2) != 0) {
    // Debian ships no free-threaded build (3.13t/3.14t) to test a reader
    // against, and its frames differ: instr_ptr points into a per-thread
    // copy of the bytecode (tlbc_index), and a string's flags sit one byte
    // further on (state.interned is a whole byte).
    *why = "a free-threaded (no-GIL) build of " + release +
           ": not read by this mldoctor (its frames point into per-thread copies of the "
           "bytecode, and no such build was at hand to test a reader against)";
    return std::nullopt;
  }
  if (bytes.size() < 8 * g->words) {
    *why = "_Py_DebugOffsets of " + release + " cut short (" + std::to_string(bytes.size()) +
           " of " + std::to_string(8 * g->words) + " bytes)";
    return std::nullopt;
  }
  Layout l;
  l.minor = g->minor;
  l.lines = LineTableFormat::Locations311;
  l.interpreter_frames = true;
  // The fields this reader follows, per group: (index in the group, bytes
  // read there). Each must lie inside the structure's size, the group's
  // first word.
  struct Field {
    u64* into;
    size_t group, index, width;
  };
  const Field fields[] = {
      {&l.runtime_interpreters_head, g->runtime_state, 2, 8},
      {&l.interp_next, g->interpreter_state, 2, 8},
      {&l.interp_threads_head, g->interpreter_state, 3, 8},
      {&l.tstate_next, g->thread_state, 2, 8},
      {&l.tstate_interp, g->thread_state, 3, 8},
      {&l.tstate_frame, g->thread_state, 4, 8},  // current_frame, no _PyCFrame since 3.13
      {&l.tstate_thread_id, g->thread_state, 5, 8},
      {&l.tstate_native_thread_id, g->thread_state, 6, 8},
      {&l.frame_previous, g->interpreter_frame, 1, 8},
      {&l.frame_code, g->interpreter_frame, 2, 8},   // f_executable
      {&l.frame_lasti, g->interpreter_frame, 3, 8},  // instr_ptr
      {&l.frame_owner, g->interpreter_frame, 5, 1},
      {&l.code_filename, g->code_object, 1, 8},
      {&l.code_name, g->code_object, 2, 8},
      {&l.code_qualname, g->code_object, 3, 8},
      {&l.code_linetable, g->code_object, 4, 8},
      {&l.code_firstlineno, g->code_object, 5, 4},
      {&l.code_adaptive, g->code_object, 9, 0},  // co_code_adaptive: the code itself follows
      {&l.object_type, g->pyobject, 1, 8},
      {&l.bytes_size, g->bytes_object, 1, 8},
      {&l.bytes_data, g->bytes_object, 2, 0},  // ob_sval
      {&l.unicode_state, g->unicode_object, 1, 4},
      {&l.unicode_length, g->unicode_object, 2, 8},
      {&l.unicode_ascii_size, g->unicode_object, 3, 0},  // sizeof(PyASCIIObject)
  };
  for (const Field& f : fields) {
    const u64 size = at(f.group), offset = at(f.group + f.index);
    // Offsets past a few KiB, or outside their structure, are not a
    // structure of this interpreter.
    if (offset > 1u << 16 || size > 1u << 24 || offset + f.width > size) {
      *why = "_Py_DebugOffsets of " + release + " do not hold together (an offset of " +
             std::to_string(offset) + " in a structure of " + std::to_string(size) +
             " bytes): not the struct of that release";
      return std::nullopt;
    }
    *f.into = offset;
  }
  l.unicode_compact_size = l.unicode_ascii_size + 16;  // utf8_length, utf8
  // 3.14's frames hold a _PyStackRef: Py_TAG_BITS is 3 in a build with the
  // GIL (Include/internal/pycore_stackref.h).
  if (g->minor >= 14) l.executable_tag_bits = 3;
  return l;
}

}  // namespace mld::pystack::detail
