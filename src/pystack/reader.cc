// reader.cc — walking a live CPython process's threads and frames through
// process_vm_readv(2).
//
// Finding the interpreter: /proc/<pid>/maps lists the files mapped; the one
// that defines _PyRuntime (libpython3.X.so, or a python executable linked
// statically with it, as Debian's is) is parsed with our ELF reader from
// .dynsym, else .symtab, and its load bias is where its first page is mapped
// less the first PT_LOAD's page address. The release comes from
// _Py_DebugOffsets (3.13+), else Py_Version (3.11+), else the file's name.
// From 3.14 a frame's f_executable is a tagged _PyStackRef: its low bits
// are masked off before it is read as a code object.
//
// Matching thread states to kernel threads: 3.11+ keep native_thread_id;
// before, the thread state has only the pthread_t, which on glibc is the
// address of the thread's struct pthread, whose `tid` field sits at an offset
// that depends on the glibc build. It is found as py-spy finds it: the
// offset, within the first 2 KiB of every thread's struct pthread, where
// each holds one of the process's thread ids.
//
// Nothing is written to the process and no signal is sent: a read of memory
// being changed may see a half-updated chain, which the type checks catch; a
// thread whose chain broke is read again (three tries), then shown with a
// note.
#include <dirent.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "elf/elf.h"
#include "pystack/pystack-internal.h"

namespace mld::pystack {

using detail::kAbsent;
using detail::Layout;

namespace {

// The other process's memory. A read is whole or fails, with errno kept.
class Memory {
 public:
  explicit Memory(long pid) : pid_(pid) {}
  bool read(u64 addr, void* out, size_t n) {
    if (addr == 0 || n == 0) {
      error_ = EFAULT;
      return false;
    }
    iovec local{out, n};
    iovec remote{reinterpret_cast<void*>(addr), n};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(pid_), &local, 1, &remote, 1, 0);
    if (got == static_cast<ssize_t>(n)) return true;
    error_ = got < 0 ? errno : EFAULT;
    return false;
  }
  template <class T>
  std::optional<T> value(u64 addr) {
    T v{};
    if (!read(addr, &v, sizeof v)) return std::nullopt;
    return v;
  }
  int error() const { return error_; }

 private:
  long pid_;
  int error_ = 0;
};

struct Mapping {
  u64 start = 0;
  std::string path;
};

// The first mapping (file offset 0) of each file, by path, in maps order.
// *error is ENODATA when the maps could be read and hold no file.
std::vector<Mapping> mapped_files(long pid, int* error) {
  std::string why;
  const std::optional<std::string> text =
      read_regular_file("/proc/" + std::to_string(pid) + "/maps", 64u << 20, &why);
  std::vector<Mapping> out;
  if (!text) {
    *error = errno ? errno : EINVAL;
    return out;
  }
  std::istringstream in(*text);
  std::set<std::string> seen;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    if (path.empty() || path[0] != '/') continue;
    if (std::strtoull(offset.c_str(), nullptr, 16) != 0 || !seen.insert(path).second) continue;
    out.push_back({std::strtoull(range.c_str(), nullptr, 16), path});
  }
  // Older kernels let a process without the permission open another's
  // maps and read nothing.
  if (out.empty()) *error = text->empty() && geteuid() != 0 ? EACCES : ENODATA;
  return out;
}

bool interpreter_like(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  return base.rfind("libpython", 0) == 0 || base.rfind("python", 0) == 0;
}

std::string errno_words(int e) { return std::strerror(e); }

std::string permission_text(long pid, int e) {
  std::string text = "cannot read the memory of pid " + std::to_string(pid) + " (" +
                     errno_words(e) + "): it takes the permission a debugger needs";
  int level = -1;
  if (std::optional<std::string> scope =
          read_regular_file("/proc/sys/kernel/yama/ptrace_scope", 64))
    level = std::atoi(scope->c_str());
  // Root that is refused is refused by something being root does not
  // change: never tell it to run as root.
  if (geteuid() == 0)
    return text + (level == 3 ? "; /proc/sys/kernel/yama/ptrace_scope is 3: no process may "
                                "read another's memory until the next boot"
                              : "; root is refused too (a kernel lockdown, a security module, "
                                "or a process of another user namespace)");
  if (level > 0) {
    text += "; /proc/sys/kernel/yama/ptrace_scope is " + std::to_string(level) +
            (level == 1 ? " (only a parent may read its descendants): run mldoctor as root, "
                          "or start the job under `mldoctor run`"
                        : " : run mldoctor as root");
  } else {
    text += ": run mldoctor as the job's user, or as root";
  }
  return text;
}

// The symbols of the interpreter, at their addresses in the process.
struct Runtime {
  std::string path;
  u64 runtime = 0, code_type = 0, unicode_type = 0, bytes_type = 0, py_version = 0;
  u64 init_cleanup = 0;  // _Py_InitCleanup (3.13+), 0 where no symbol names it
  bool debug_build = false;
};

std::optional<Runtime> find_runtime(long pid, const std::vector<Mapping>& maps, std::string* why) {
  const std::string root = "/proc/" + std::to_string(pid) + "/root";
  for (int pass = 0; pass < 2; pass++) {
    for (const Mapping& m : maps) {
      // libpython and python* first, then every other file (an embedding
      // program, a renamed interpreter).
      if (interpreter_like(m.path) != (pass == 0)) continue;
      std::string path = m.path;
      if (const size_t d = path.rfind(" (deleted)"); d != std::string::npos) path.resize(d);
      std::shared_ptr<SparseFile> file;
      for (const std::string& candidate : {root + path, path}) {
        try {
          file = SparseFile::open(candidate);
          break;
        } catch (const std::exception&) {
        }
      }
      if (!file) continue;
      try {
        const elf::ElfFile elf = elf::ElfFile::parse(file);
        // Other files are asked through the hash table only (a few reads):
        // libtorch_cpu.so's 100,000 dynamic symbols are not decoded to learn
        // that it is not the interpreter. An interpreter's own file may keep
        // _PyRuntime in .symtab alone.
        if (pass == 1 && !elf.defines_symbol("_PyRuntime")) continue;
        const auto v =
            elf.symbol_values({"_PyRuntime", "PyCode_Type", "PyUnicode_Type", "PyBytes_Type",
                               "Py_Version", "_Py_NegativeRefcount", "_Py_InitCleanup"});
        if (!v[0]) continue;
        if (!v[1] || !v[2] || !v[3]) {
          *why = m.path + " defines _PyRuntime but not PyCode_Type/PyUnicode_Type/PyBytes_Type";
          return std::nullopt;
        }
        u64 first_load = kAbsent;
        for (const elf::ProgramHeader& ph : elf.program_headers()) {
          if (ph.p_type == elf::PT_LOAD && ph.p_vaddr < first_load) first_load = ph.p_vaddr;
        }
        if (first_load == kAbsent) continue;
        const u64 bias = m.start - (first_load & ~u64{0xfff});
        Runtime r;
        r.path = m.path;
        r.runtime = bias + *v[0];
        r.code_type = bias + *v[1];
        r.unicode_type = bias + *v[2];
        r.bytes_type = bias + *v[3];
        r.py_version = v[4] ? bias + *v[4] : 0;
        r.debug_build = v[5].has_value();
        r.init_cleanup = v[6] ? bias + *v[6] : 0;
        return r;
      } catch (const std::exception&) {
        continue;  // not ELF, damaged: not the interpreter
      }
    }
  }
  *why = "not a CPython 3 process: no mapped file defines _PyRuntime";
  for (const Mapping& m : maps) {
    static const std::regex old_python(R"(python(2\.\d+|3\.[0-7])m?(\.so|$|[^0-9]))");
    std::smatch match;
    const std::string base = m.path.substr(m.path.rfind('/') + 1);
    if (std::regex_search(base, match, old_python)) {
      *why = "CPython " + match[1].str() + " (" + m.path +
             "): this mldoctor reads the stacks of CPython 3.8–3.14";
      break;
    }
    if (base.find("pypy") != std::string::npos) {
      *why = "a PyPy process (" + m.path + "): this mldoctor reads the stacks of CPython 3.8–3.14";
      break;
    }
  }
  return std::nullopt;
}

// 3.<minor> from the interpreter's file name ("libpython3.9.so.1.0").
std::optional<int> minor_from_name(const std::string& path) {
  static const std::regex name(R"(python3\.(\d+))");
  std::smatch m;
  const std::string base = path.substr(path.rfind('/') + 1);
  if (!std::regex_search(base, m, name)) return std::nullopt;
  return std::stoi(m[1].str());
}

// One walk over a process's interpreter state.
class Walker {
 public:
  Walker(Memory& mem, const Runtime& rt, const Layout& layout, const Options& options)
      : mem_(mem), rt_(rt), l_(layout), options_(options) {}

  struct ThreadState {
    u64 address = 0;
    u64 thread_id = 0;
    long native_tid = 0;
    u64 frame = 0;  // the innermost frame (or _PyCFrame for 3.11/3.12)
  };

  // Every thread state of every interpreter; false when the list could not
  // be read at all.
  bool thread_states(std::vector<ThreadState>& out, std::string* why) {
    const auto interp = mem_.value<u64>(rt_.runtime + l_.runtime_interpreters_head);
    if (!interp) {
      *why = "cannot read _PyRuntime (" + errno_words(mem_.error()) + ")";
      return false;
    }
    std::set<u64> seen;
    for (u64 is = *interp; is != 0 && seen.insert(is).second && seen.size() < 256;) {
      const auto head = mem_.value<u64>(is + l_.interp_threads_head);
      if (!head) break;
      for (u64 ts = *head;
           ts != 0 && seen.insert(ts).second && out.size() < options_.max_threads;) {
        ThreadState t;
        t.address = ts;
        const auto tid = mem_.value<u64>(ts + l_.tstate_thread_id);
        const auto frame = mem_.value<u64>(ts + l_.tstate_frame);
        if (!tid || !frame) break;
        t.thread_id = *tid;
        t.frame = *frame;
        if (l_.tstate_native_thread_id != kAbsent) {
          t.native_tid =
              static_cast<long>(mem_.value<u64>(ts + l_.tstate_native_thread_id).value_or(0));
        }
        out.push_back(t);
        const auto next = mem_.value<u64>(ts + l_.tstate_next);
        if (!next) break;
        ts = *next;
      }
      const auto next = mem_.value<u64>(is + l_.interp_next);
      if (!next) break;
      is = *next;
    }
    if (out.empty() && seen.size() <= 1) {
      *why = *interp == 0 ? "the interpreter is not initialised (or has finalised)"
                          : "the interpreter has no thread states";
      return false;
    }
    return true;
  }

  // The frames of one thread, innermost first; *note says why they stop
  // early (a chain that changed while it was read).
  std::vector<Frame> frames(const ThreadState& t, std::string* note) {
    std::vector<Frame> out;
    u64 frame = t.frame;
    if (l_.cframe_current_frame != kAbsent && frame != 0) {
      const auto current = mem_.value<u64>(frame + l_.cframe_current_frame);
      if (!current) {
        *note = "its frame could not be read";
        raced_ = true;
        return out;
      }
      frame = *current;
    }
    std::set<u64> seen;
    while (frame != 0) {
      if (!seen.insert(frame).second) {
        *note = "its frame chain loops (read while it changed)";
        raced_ = true;
        break;
      }
      if (out.size() >= options_.max_frames) {
        *note =
            "more than " + std::to_string(options_.max_frames) + " frames; the outermost left out";
        break;
      }
      u8 block[128];
      const u64 span = std::max({l_.frame_previous, l_.frame_code, l_.frame_lasti,
                                 l_.frame_owner == kAbsent ? 0 : l_.frame_owner}) +
                       8;
      if (span > sizeof block || !mem_.read(frame, block, span)) {
        *note = "a frame could not be read (" + errno_words(mem_.error()) + ")";
        raced_ = true;
        break;
      }
      auto word = [&](u64 off) {
        u64 v;
        std::memcpy(&v, block + off, 8);
        return v;
      };
      const u64 previous = word(l_.frame_previous);
      const u64 code = word(l_.frame_code) & ~l_.executable_tag_bits;
      // Frames that run no Python code of their own, which faulthandler
      // skips too: FRAME_OWNED_BY_CSTACK (3 in 3.12 and 3.13: the entry
      // frame of each _PyEval_EvalFrameDefault); 3.14 has
      // FRAME_OWNED_BY_INTERPRETER (3: frames the interpreter pushes for
      // itself, such as that entry frame) and FRAME_OWNED_BY_CSTACK (4).
      // 3.11 has no owner above 2.
      if (l_.frame_owner != kAbsent && block[l_.frame_owner] >= 3) {
        frame = previous;
        continue;
      }
      const Code* c = code_at(code);
      if (!c) {
        // 3.13+'s shim frames may hold None; elsewhere a frame without a
        // code object is a chain read while it changed.
        if (l_.minor >= 13 && code != 0 && type_of(code) != 0) {
          frame = previous;
          continue;
        }
        *note = "a frame's code object could not be read (the stack changed while it was read)";
        raced_ = true;
        break;
      }
      if (init_cleanup(code, *c)) {
        frame = previous;
        continue;
      }
      i64 offset;
      if (l_.interpreter_frames) {
        offset = static_cast<i64>(word(l_.frame_lasti)) - static_cast<i64>(code + l_.code_adaptive);
      } else {
        i32 lasti;
        std::memcpy(&lasti, block + l_.frame_lasti, 4);
        offset = l_.lasti_in_code_units ? i64{lasti} * 2 : lasti;
      }
      Frame f;
      f.function = c->name;
      f.qualname = c->qualname.empty() ? c->name : c->qualname;
      f.file = c->file;
      if (offset > i64{1} << 31) offset = -1;  // a wild pointer: the first line
      f.line = line_at(l_.lines, ByteView(c->linetable), c->first_line, offset);
      out.push_back(std::move(f));
      frame = previous;
    }
    return out;
  }

  // struct pthread's tid offset (≤3.10), from the process's threads.
  std::optional<u64> pthread_tid_offset(const std::vector<ThreadState>& states,
                                        const std::set<long>& tids) {
    std::optional<std::set<u64>> common;
    for (const ThreadState& t : states) {
      std::vector<i32> words(512);
      if (!mem_.read(t.thread_id, words.data(), words.size() * 4)) continue;
      std::set<u64> here;
      for (size_t i = 0; i < words.size(); i++) {
        if (tids.count(words[i])) here.insert(i * 4);
      }
      if (!common) {
        common = here;
      } else {
        std::set<u64> both;
        for (u64 o : here)
          if (common->count(o)) both.insert(o);
        common = both;
      }
    }
    if (!common || common->empty()) return std::nullopt;
    return *common->begin();
  }

  Memory& memory() { return mem_; }
  // A chain broke while it was read (the thread ran meanwhile).
  bool raced() const { return raced_; }

 private:
  struct Code {
    std::string name, qualname, file;
    int first_line = 0;
    std::string linetable;
  };

  u64 type_of(u64 object) { return mem_.value<u64>(object + l_.object_type).value_or(0); }

  // The trampoline 3.13+ push under a specialised call of a class's
  // __init__ (CALL_ALLOC_AND_ENTER_INIT): a frame owned by the thread whose
  // code is the static _Py_InitCleanup, named "__init__" in a file
  // "__init__", that runs once __init__ returns. Python's own frame chain
  // (f_back, traceback, sys._current_frames) skips it as incomplete, and
  // so does this reader: by its address where a symbol names it (3.14
  // exports it; an unstripped 3.13 has it in .symtab), else by those names.
  // faulthandler prints it as `File "__init__", line ???`, and 3.14.10's
  // stops the thread's dump there with "<invalid frame>".
  bool init_cleanup(u64 code, const Code& c) const {
    if (l_.minor < 13) return false;
    if (rt_.init_cleanup != 0) return code == rt_.init_cleanup;
    return c.name == "__init__" && c.file == "__init__";
  }

  std::optional<std::string> unicode_at(u64 object) {
    if (object == 0 || type_of(object) != rt_.unicode_type) return std::nullopt;
    const auto length = mem_.value<i64>(object + l_.unicode_length);
    const auto state = mem_.value<u32>(object + l_.unicode_state);
    if (!length || !state || *length < 0 || *length > 4096) return std::nullopt;
    const unsigned kind = (*state >> 2) & 7, compact = (*state >> 5) & 1, ascii = (*state >> 6) & 1;
    if (!compact || (kind != 1 && kind != 2 && kind != 4)) return std::nullopt;
    const u64 data = object + (ascii ? l_.unicode_ascii_size : l_.unicode_compact_size);
    std::string raw(static_cast<size_t>(*length) * kind, '\0');
    if (!raw.empty() && !mem_.read(data, raw.data(), raw.size())) return std::nullopt;
    if (kind == 1 && ascii) return raw;
    std::string utf8;  // code points of 1, 2 or 4 bytes to UTF-8
    for (size_t i = 0; i < raw.size(); i += kind) {
      u32 cp = 0;
      std::memcpy(&cp, raw.data() + i, kind);
      if (cp < 0x110000) {
        append_utf8(utf8, cp);
      } else {
        return std::nullopt;
      }
    }
    return utf8;
  }

  std::optional<std::string> bytes_at(u64 object) {
    if (object == 0 || type_of(object) != rt_.bytes_type) return std::nullopt;
    const auto size = mem_.value<i64>(object + l_.bytes_size);
    if (!size || *size < 0 || *size > (1 << 20)) return std::nullopt;
    std::string out(static_cast<size_t>(*size), '\0');
    if (!out.empty() && !mem_.read(object + l_.bytes_data, out.data(), out.size()))
      return std::nullopt;
    return out;
  }

  // A code object's names and line table, read once per walk.
  const Code* code_at(u64 address) {
    if (auto it = codes_.find(address); it != codes_.end()) return &it->second;
    if (address == 0 || type_of(address) != rt_.code_type) return nullptr;
    auto pointer = [&](u64 off) { return mem_.value<u64>(address + off).value_or(0); };
    Code c;
    const auto name = unicode_at(pointer(l_.code_name));
    const auto file = unicode_at(pointer(l_.code_filename));
    const auto table = bytes_at(pointer(l_.code_linetable));
    const auto first = mem_.value<i32>(address + l_.code_firstlineno);
    if (!name || !file || !table || !first) return nullptr;
    c.name = *name;
    c.file = *file;
    c.linetable = *table;
    c.first_line = *first;
    if (l_.code_qualname != kAbsent)
      c.qualname = unicode_at(pointer(l_.code_qualname)).value_or("");
    return &codes_.emplace(address, std::move(c)).first->second;
  }

  Memory& mem_;
  const Runtime& rt_;
  const Layout& l_;
  const Options& options_;
  std::unordered_map<u64, Code> codes_;
  bool raced_ = false;
};

std::set<long> task_ids(long pid) {
  std::set<long> out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.insert(std::atol(e->d_name));
    }
    closedir(d);
  }
  return out;
}

}  // namespace

std::string without_stacks(long pid, std::string_view stat) {
  // "pid (comm) S ppid ...": the command may hold spaces and parentheses.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return "";
  std::istringstream in{std::string(stat.substr(close + 1))};
  std::vector<std::string> f;
  for (std::string w; in >> w && f.size() < 18;) f.push_back(w);
  // proc_pid_stat(5): state is field 3, flags 9, num_threads 20.
  if (f.size() < 18) return "";
  // PF_KTHREAD of include/linux/sched.h.
  constexpr unsigned long kPfKthread = 0x00200000;
  const std::string who = "pid " + std::to_string(pid);
  if (std::strtoul(f[6].c_str(), nullptr, 10) & kPfKthread)
    return who + " is a kernel thread: it runs no Python";
  if ((f[0] == "Z" || f[0] == "X") && std::strtol(f[17].c_str(), nullptr, 10) <= 1)
    return who +
           " is a zombie: it has exited and its parent has not reaped it; there are no stacks "
           "to read";
  return "";
}

Process read_stacks(long pid, const Options& options) {
  Process p;
  p.pid = pid;
  int maps_error = 0;
  const std::vector<Mapping> maps = mapped_files(pid, &maps_error);
  if (maps.empty()) {
    // No memory to read: a zombie or a kernel thread says what it is.
    const std::optional<std::string> stat =
        read_regular_file("/proc/" + std::to_string(pid) + "/stat", 4096);
    const std::string none = stat ? without_stacks(pid, *stat) : "";
    p.error = !none.empty()                                 ? none
              : maps_error == ENOENT                        ? "no process " + std::to_string(pid)
              : maps_error == EACCES || maps_error == EPERM ? permission_text(pid, maps_error)
              : maps_error == ENODATA ? "pid " + std::to_string(pid) + " maps no file"
                                      : "cannot read /proc/" + std::to_string(pid) + "/maps (" +
                                            errno_words(maps_error) + ")";
    return p;
  }
  std::string why;
  const std::optional<Runtime> rt = find_runtime(pid, maps, &why);
  if (!rt) {
    p.error = why;
    return p;
  }
  p.cpython = true;
  p.runtime_object = rt->path;
  Memory mem(pid);

  // Which release, and its layout: the cookie and version first, then as
  // many bytes of _Py_DebugOffsets as that release's struct holds.
  std::vector<u8> head(24);
  if (!mem.read(rt->runtime, head.data(), head.size())) {
    const int e = mem.error();
    p.error = e == EPERM || e == EACCES ? permission_text(pid, e)
              : e == ESRCH              ? "the process exited while it was read"
                                        : "cannot read _PyRuntime (" + errno_words(e) + ")";
    return p;
  }
  std::optional<Layout> layout;
  if (std::memcmp(head.data(), "xdebugpy", 8) == 0) {
    u64 version;
    std::memcpy(&version, head.data() + 8, 8);
    p.version = version_text(version);
    if (const size_t n = detail::debug_offsets_bytes(version); n > head.size()) {
      head.resize(n);
      if (!mem.read(rt->runtime, head.data(), head.size())) {
        p.error = mem.error() == ESRCH ? "the process exited while it was read"
                                       : "cannot read _PyRuntime's _Py_DebugOffsets (" +
                                             errno_words(mem.error()) + ")";
        return p;
      }
    }
    layout = detail::debug_offsets_layout(ByteView(head.data(), head.size()), &why);
    if (!layout) {
      p.error = why;
      return p;
    }
  } else {
    std::optional<int> minor;
    if (rt->py_version != 0) {
      if (const auto hex = mem.value<u64>(rt->py_version)) {
        p.version = version_text(*hex);
        minor = static_cast<int>((*hex >> 16) & 0xff);
      }
    }
    if (!minor) {
      minor = minor_from_name(rt->path);
      if (minor) p.version = "3." + std::to_string(*minor);
    }
    if (!minor) {
      p.error = "cannot tell which CPython release " + rt->path +
                " is (no Py_Version, no version in its name)";
      return p;
    }
    if (rt->debug_build) {
      p.error = "a debug build of CPython " + p.version +
                " (Py_DEBUG: two more pointers in every object): not read by this mldoctor";
      return p;
    }
    layout = detail::table_layout(*minor);
    if (!layout) {
      p.error = "CPython " + p.version + ": this mldoctor reads the stacks of CPython 3.8–3.14";
      return p;
    }
  }

  // Up to three reads: a chain that broke while the thread ran is read again.
  const std::set<long> tids = task_ids(pid);
  for (int attempt = 0; attempt < 3; attempt++) {
    Walker walker(mem, *rt, *layout, options);
    std::vector<Walker::ThreadState> states;
    if (!walker.thread_states(states, &why)) {
      p.error = mem.error() == ESRCH ? "the process exited while it was read" : why;
      return p;
    }
    std::optional<u64> tid_offset;
    if (layout->tstate_native_thread_id == kAbsent)
      tid_offset = walker.pthread_tid_offset(states, tids);
    p.threads.clear();
    for (const Walker::ThreadState& s : states) {
      Thread t;
      t.thread_id = s.thread_id;
      t.tid = s.native_tid;
      if (t.tid == 0 && tid_offset) {
        t.tid = walker.memory().value<i32>(s.thread_id + *tid_offset).value_or(0);
      }
      if (t.tid != 0 && !tids.count(t.tid)) t.tid = 0;
      t.main = t.tid == pid;
      t.frames = walker.frames(s, &t.note);
      p.threads.push_back(std::move(t));
    }
    if (mem.error() == ESRCH) {
      p.threads.clear();
      p.error = "the process exited while it was read";
      return p;
    }
    if (!walker.raced()) break;
  }
  return p;
}

}  // namespace mld::pystack
