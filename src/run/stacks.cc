// stacks.cc — native stacks of a hung process, through elfutils' libdwfl.
//
// libdwfl attaches to each thread with ptrace (the thread stops while it is
// unwound and runs on at detach: the job keeps running), maps the modules
// from /proc/<pid>/maps and unwinds with CFI (.eh_frame, or .debug_frame
// where debug files are installed). A process that another tracer holds, or
// that the kernel does not let us attach to (ptrace_scope, another user),
// gives no stacks and the reason; so does a build without libdw.
#include "run/run.h"

#ifdef MLD_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#endif

namespace mld::run {

#ifdef MLD_HAVE_LIBDW
namespace {

struct Unwind {
  Dwfl* dwfl = nullptr;
  std::map<long, std::vector<std::string>>* out = nullptr;
  size_t max_frames = 24;
  size_t max_threads = 64;
};

std::string frame_text(Dwfl* dwfl, Dwarf_Addr pc) {
  Dwfl_Module* m = dwfl_addrmodule(dwfl, pc);
  if (!m) return "?? (" + std::to_string(pc) + ")";
  const char* module =
      dwfl_module_info(m, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  const char* fn = dwfl_module_addrname(m, pc);
  std::string mod = module ? module : "?";
  if (size_t s = mod.rfind('/'); s != std::string::npos) mod = mod.substr(s + 1);
  // C++ names as source spells them: c10d::Work::wait(...), not _ZN4c10d4Work4waitE...
  return (fn ? rules::demangled(fn) : std::string("??")) + " (" + mod + ")";
}

int on_frame(Dwfl_Frame* frame, void* arg) {
  auto* frames = static_cast<std::pair<Unwind*, std::vector<std::string>*>*>(arg);
  Dwarf_Addr pc = 0;
  bool activation = false;
  if (!dwfl_frame_pc(frame, &pc, &activation)) return DWARF_CB_ABORT;
  // A return address points after the call: look up the call itself.
  frames->second->push_back(frame_text(frames->first->dwfl, activation ? pc : pc - 1));
  return frames->second->size() >= frames->first->max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

int on_thread(Dwfl_Thread* thread, void* arg) {
  auto* u = static_cast<Unwind*>(arg);
  std::vector<std::string> frames;
  std::pair<Unwind*, std::vector<std::string>*> ctx{u, &frames};
  dwfl_thread_getframes(thread, on_frame, &ctx);
  (*u->out)[dwfl_thread_tid(thread)] = std::move(frames);
  return u->out->size() >= u->max_threads ? DWARF_CB_ABORT : DWARF_CB_OK;
}

}  // namespace

std::map<long, std::vector<std::string>> native_stacks(long pid, std::string* error) {
  std::map<long, std::vector<std::string>> out;
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo,
                                           nullptr, &debuginfo_path};
  Dwfl* dwfl = dwfl_begin(&callbacks);
  if (!dwfl) {
    *error = dwfl_errmsg(-1);
    return out;
  }
  if (dwfl_linux_proc_report(dwfl, static_cast<pid_t>(pid)) != 0 ||
      dwfl_report_end(dwfl, nullptr, nullptr) != 0) {
    *error = std::string("cannot read the modules of pid ") + std::to_string(pid) + ": " +
             dwfl_errmsg(-1);
    dwfl_end(dwfl);
    return out;
  }
  const int attach = dwfl_linux_proc_attach(dwfl, static_cast<pid_t>(pid), false);
  if (attach != 0) {
    *error = "cannot attach to pid " + std::to_string(pid) + ": " +
             (attach > 0 ? errno_text(attach) : std::string(dwfl_errmsg(-1)));
    dwfl_end(dwfl);
    return out;
  }
  Unwind u;
  u.dwfl = dwfl;
  u.out = &out;
  dwfl_getthreads(dwfl, on_thread, &u);
  dwfl_end(dwfl);  // detaches: the threads run on
  return out;
}

bool native_stacks_available() { return true; }

#else

bool native_stacks_available() { return false; }

std::map<long, std::vector<std::string>> native_stacks(long, std::string* error) {
  *error = "this mldoctor was built without elfutils' libdw: no native stacks";
  return {};
}

#endif

}  // namespace mld::run
