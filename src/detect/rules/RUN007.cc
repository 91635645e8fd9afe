// RUN007 — a lock-order inversion between the GIL and glibc's loader lock,
// from the native stacks `run` read while the job hung. glibc's
// dl_iterate_phdr holds the loader lock across its callbacks; a Python
// callback (ctypes) takes the GIL inside it. CPython calls dlopen with the
// GIL held (import of an extension, ctypes.CDLL), and dlopen/dlclose take
// the loader lock: one thread waits for the GIL below dl_iterate_phdr, the
// other holds it and waits for a mutex inside the loader. Both stacks must
// show it; each is named with its Python line, and the fix names the code
// whose callback is Python (threadpoolctl before 3.7, old mldoctor, the
// user's own).
#include <algorithm>

#include "detect/detect.h"

namespace {

using mld::detect::ProcessSample;
using mld::detect::PythonFrame;
using mld::detect::ThreadSample;

// A native frame's function as glibc and CPython spell it in their sources:
// "__pthread_mutex_lock@GLIBC_2.2.5 (libc.so.6)" -> "pthread_mutex_lock",
// "__GI___lll_lock_wait (libc.so.6)" -> "lll_lock_wait" (glibc's internal
// alias), "dlopen@GLIBC_2.2.5 (libc.so.6)" -> "dlopen".
std::string function_of(const std::string& frame) {
  std::string f = frame.substr(0, frame.find(" ("));
  f = f.substr(0, f.find('@'));
  for (int i = 0; i < 2; i++) {
    const size_t start = f.find_first_not_of('_');
    f = start == std::string::npos ? f : f.substr(start);
    if (!f.starts_with("GI_")) break;
    f = f.substr(3);
  }
  return f;
}

bool one_of(const std::string& f, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return f == n; });
}

// The innermost frame (index into t.stack) for which `pred` holds, or npos.
template <typename Pred>
size_t find_frame(const ThreadSample& t, Pred pred) {
  for (size_t i = 0; i < t.stack.size(); i++)
    if (pred(function_of(t.stack[i]))) return i;
  return std::string::npos;
}

bool gil_wait(const std::string& f) {
  return one_of(f, {"take_gil", "PyEval_RestoreThread", "PyEval_AcquireThread", "PyGILState_Ensure",
                    "PyThreadState_Attach", "PyEval_AcquireLock"});
}

// The object of a native frame: "?? (python3.11)" -> "python3.11".
std::string object_of(const std::string& frame) {
  const size_t open = frame.rfind(" (");
  if (open == std::string::npos || !frame.ends_with(")")) return "";
  return frame.substr(open + 2, frame.size() - open - 3);
}

// Where a thread waits for the GIL: a named CPython entry (gil_wait), or a
// condition wait called straight from an unnamed frame of the interpreter.
// take_gil is static: where the binary keeps no .symtab (Debian's) it has
// no name, and a thread that the eval loop made drop the GIL (another
// thread asked for it) takes it back from _PyEval_EvalFrameDefault through
// it, with no named entry in between. The GIL is the interpreter's own
// condition variable; its locks and parking lot wait on semaphores.
size_t gil_wait_at(const ThreadSample& t) {
  if (const size_t at = find_frame(t, gil_wait); at != std::string::npos) return at;
  for (size_t i = 0; i + 1 < t.stack.size(); i++) {
    if (!one_of(function_of(t.stack[i]),
                {"pthread_cond_timedwait", "pthread_cond_wait", "pthread_cond_clockwait"}))
      continue;
    const std::string caller = t.stack[i + 1];
    const std::string object = object_of(caller);
    if (function_of(caller) == "??" &&
        (object.starts_with("python3") || object.starts_with("libpython3")))
      return i + 1;
  }
  return std::string::npos;
}

// The GIL wait's function as the finding names it.
std::string gil_wait_name(const ThreadSample& t, size_t at) {
  const std::string f = function_of(t.stack[at]);
  return f == "??" ? "take_gil, unnamed in " + object_of(t.stack[at]) : f;
}

bool iterate(const std::string& f) { return f == "dl_iterate_phdr"; }

// Where a thread enters the loader's locks: the loader's own entry points
// and functions that run under them.
bool loader_entry(const std::string& f) {
  return one_of(f, {"dlopen", "dlmopen", "dlclose", "dl_open", "dl_close", "dl_open_worker",
                    "dl_catch_exception", "dl_catch_error", "dlopen_doit", "dlerror_run",
                    "libc_dlopen_mode", "dl_map_object", "dl_add_to_namespace_list",
                    "dl_iterate_phdr", "Unwind_Find_FDE", "tls_get_addr", "dl_update_slotinfo"});
}

bool lock_wait(const std::string& f) {
  return one_of(
      f, {"lll_lock_wait", "pthread_mutex_lock", "futex_wait", "futex_abstimed_wait_common",
          "futex_abstimed_wait_common64", "pthread_mutex_lock_full", "lll_lock_wait_private"});
}

// The loader function a thread called, for the message: its public entry
// point when one is in the stack (the outermost), else the innermost.
std::string loader_call(const ThreadSample& t) {
  for (size_t i = t.stack.size(); i-- > 0;) {
    const std::string f = function_of(t.stack[i]);
    if (one_of(f, {"dlopen", "dlmopen", "dlclose", "dl_iterate_phdr", "Unwind_Find_FDE",
                   "tls_get_addr"}))
      return f;
  }
  const size_t at = find_frame(t, loader_entry);
  return at == std::string::npos ? "the loader" : function_of(t.stack[at]);
}

// "thread 4312 at repro.py:18 (iterate)", with the library function it is in
// when that is not the user's own line.
std::string thread_words(const ThreadSample& t) {
  std::string out = "thread " + std::to_string(t.tid);
  if (t.python.empty()) return out;
  const PythonFrame* user = mld::detect::user_python_frame(t.python);
  if (user) {
    out += " at " + user->file.substr(user->file.rfind('/') + 1) + ":" +
           std::to_string(user->line) + " (" + user->function + ")";
    if (user != &t.python.front())
      out += ", in " + mld::detect::python_frame_text(t.python.front());
  } else {
    out += " in " + mld::detect::python_frame_text(t.python.front());
  }
  return out;
}

// A thread's native frames up to and including frame `last`, one line.
std::string native_words(const ThreadSample& t, size_t last) {
  std::string out;
  for (size_t i = 0; i <= last && i < t.stack.size(); i++) {
    if (i >= 10 && i + 1 < last) {
      out += " <- ...";
      i = last - 1;
      continue;
    }
    out += (i ? " <- " : "") + t.stack[i];
  }
  return out;
}

// Who runs the Python callback, from the iterating thread's innermost Python
// frame: a package's name, or "" for the user's own code.
std::string caller_package(const ThreadSample& t) {
  if (t.python.empty()) return "";
  const std::string& file = t.python.front().file;
  const std::string shortened = mld::detect::short_python_file(file);
  if (shortened == file) return "";
  std::string first = shortened.substr(0, shortened.find('/'));
  if (first.size() > 3 && first.ends_with(".py")) first.resize(first.size() - 3);
  return first;
}

}  // namespace

MLD_DETECTOR(RUN007) {
  using namespace mld;
  if (!facts.hang) return;
  for (const detect::ProcessSample& p : facts.hang->processes) {
    const ThreadSample* iterator = nullptr;
    size_t iterator_at = 0;
    for (const ThreadSample& t : p.threads) {
      const size_t gil = gil_wait_at(t), it = find_frame(t, iterate);
      if (gil != std::string::npos && it != std::string::npos && gil < it) {
        iterator = &t;
        iterator_at = it;
        break;
      }
    }
    if (!iterator) continue;
    // The thread that holds the GIL and waits for the loader lock. A thread
    // that walks the objects through a ctypes call (libffi's ffi_call)
    // waits for the same lock without the GIL, which ctypes released; the
    // holder came in without libffi: CPython's dlopen of an import or of
    // ctypes.CDLL, an unwinder under a C extension.
    const ThreadSample* opener = nullptr;
    size_t opener_at = 0;
    for (const ThreadSample& t : p.threads) {
      if (&t == iterator || gil_wait_at(t) != std::string::npos) continue;
      const size_t entry = find_frame(t, loader_entry);
      if (entry == std::string::npos) continue;
      const size_t wait = find_frame(t, lock_wait);
      const bool waits = wait != std::string::npos ? wait < entry : t.syscall == "futex";
      const bool via_ffi =
          find_frame(t, [](const std::string& f) { return f == "ffi_call"; }) != std::string::npos;
      if (!waits || via_ffi) continue;
      opener = &t;
      opener_at = entry;
      for (size_t i = entry; i < t.stack.size(); i++)
        if (loader_entry(function_of(t.stack[i]))) opener_at = i;
      break;
    }
    if (!opener) continue;

    Detection d;
    d.subject = "pid " + std::to_string(p.pid);
    const std::string call = loader_call(*opener);
    const size_t gil_at = gil_wait_at(*iterator);
    d.message = "deadlock in pid " + std::to_string(p.pid) + ": " + thread_words(*iterator) +
                " is inside dl_iterate_phdr, which holds glibc's loader lock, and its callback "
                "waits for the GIL (" +
                gil_wait_name(*iterator, gil_at) + "); " + thread_words(*opener) +
                " holds the GIL and waits for the loader lock in " + call;
    d.evidence.push_back({"pid " + std::to_string(p.pid) + ": " + p.command, "", std::nullopt});
    for (const auto& [t, last, role] :
         {std::tuple{iterator, iterator_at, "holds the loader lock, waits for the GIL"},
          std::tuple{opener, opener_at, "holds the GIL, waits for the loader lock"}}) {
      d.evidence.push_back({"  " + thread_words(*t) + ": " + role, "", std::nullopt});
      d.evidence.push_back({"    native: " + native_words(*t, last), "", std::nullopt});
      if (!t->python.empty()) {
        std::string py;
        for (size_t i = 0; i < t->python.size() && i < 8; i++)
          py += (i ? " <- " : "") + detect::python_frame_text(t->python[i]);
        d.evidence.push_back({"    Python: " + py, "", std::nullopt});
      }
    }
    // The code whose callback is Python: the iterating thread's innermost
    // Python frame.
    const std::string package = caller_package(*iterator);
    const std::string where = iterator->python.empty()
                                  ? std::string("the thread named above")
                                  : detect::python_frame_text(iterator->python.front());
    if (package == "threadpoolctl")
      d.fix = "threadpoolctl calls dl_iterate_phdr with a Python callback (" + where +
              "): pip install -U 'threadpoolctl>=3.7' (3.7 reads /proc/self/maps instead)";
    else if (package == "mldoctor")
      d.fix = "mldoctor's own library listing runs a Python callback there (" + where +
              "): upgrade mldoctor";
    else if (!package.empty())
      d.fix = package + " calls dl_iterate_phdr with a Python callback (" + where +
              "): upgrade it to a release that does not, or stop calling it from threads";
    else if (!iterator->python.empty())
      d.fix = "your code calls dl_iterate_phdr with a Python callback (" + where +
              "): never run Python in that callback; read /proc/self/maps instead, or do the walk "
              "in C and touch no Python object in the callback";
    out.push_back(std::move(d));
  }
}
