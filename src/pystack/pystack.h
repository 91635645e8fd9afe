// pystack.h — the Python stacks of a running CPython process, read from
// outside without stopping it.
//
// The interpreter keeps its state in one global, _PyRuntime: a list of
// interpreters, each with a list of thread states, each with the chain of
// frames it is executing. Those structures are read with process_vm_readv(2)
// (the permission a debugger needs, no ptrace stop, no signal): CPython 3.13
// and later describe their own layout in _Py_DebugOffsets at the start of
// _PyRuntime; for 3.8–3.12 the offsets are this module's tables, one per
// minor release (layouts.cc). Lines come from each code object's line table,
// decoded as the interpreter decodes it (linetable.cc).
//
// The process runs on while it is read, so every pointer is checked against
// what it must point to (a code object's type is PyCode_Type, a string's
// PyUnicode_Type) and a chain that breaks ends the thread's stack with a
// note instead of garbage.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"

namespace mld::pystack {

struct Frame {
  std::string function;  // co_name
  std::string qualname;  // co_qualname (3.11+), else co_name
  std::string file;      // co_filename
  int line = 0;          // 0: unknown
};

struct Thread {
  u64 thread_id = 0;          // the pthread_t CPython keeps (threading.get_ident())
  long tid = 0;               // the kernel's thread id; 0 when it could not be matched
  bool main = false;          // the process's main thread (tid == pid)
  std::vector<Frame> frames;  // innermost first
  std::string note;           // why the stack is incomplete, "" when whole
};

struct Process {
  long pid = 0;
  bool cpython = false;         // _PyRuntime was found: a CPython interpreter
  std::string version;          // "3.11.2"
  std::string runtime_object;   // the file that defines _PyRuntime
  std::vector<Thread> threads;  // in the interpreter's order (newest first)
  std::string error;            // why no stack was read ("" when they were)
};

struct Options {
  size_t max_frames = 512;    // per thread
  size_t max_threads = 4096;  // per process
};

// Reads every thread's Python stack of `pid`. Never throws: a process that
// cannot be read says why in Process::error (not CPython, an unsupported
// version or build, no permission, gone, a zombie, a kernel thread).
Process read_stacks(long pid, const Options& options = {});

// Why process `pid` has no stacks at all, from the text of its
// /proc/<pid>/stat: "pid N is a zombie: it has exited and its parent has
// not reaped it; there are no stacks to read", or "pid N is a kernel thread:
// it runs no Python" (PF_KTHREAD in its flags); "" for any other process and
// for text that does not parse. A thread-group leader that exited while
// other threads run is no zombie (its threads still have stacks).
std::string without_stacks(long pid, std::string_view stat);

// ─── linetable.cc ───────────────────────────────────────────────────────────

// The three encodings of "which line is this instruction on": co_lnotab
// (3.8, 3.9), the 3.10 co_linetable and the 3.11+ location table.
enum class LineTableFormat { Lnotab, Linetable310, Locations311 };

// The line of the instruction at byte offset `offset` of the code, as
// PyCode_Addr2Line computes it; a negative offset (a frame that has not
// started) is the first line. 0 when the table gives the instruction no
// line. Bounded by the table's bytes for any input.
int line_at(LineTableFormat format, ByteView table, int first_line, i64 offset);

// "3.11.2" from a PY_VERSION_HEX value (0x030b02f0).
std::string version_text(u64 hex_version);

}  // namespace mld::pystack
