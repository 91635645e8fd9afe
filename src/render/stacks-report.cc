// stacks-report.cc — the output of `mldoctor stacks`. A thread with Python
// frames is printed as py-spy dump prints one (innermost first, "function
// (file:line)", files of installed packages shortened after site-packages/),
// headed by what the kernel says it waits in; threads without Python frames
// (OpenMP, NCCL, gloo workers) are counted by what they wait in, so 64 idle
// pool threads take one line.
#include "render/stacks-report.h"

#include <map>

namespace mld::render {

namespace {

std::string wait_text(const detect::ThreadSample& t) {
  std::string w = t.syscall.empty() ? std::string(1, t.state) : t.syscall;
  if (!t.wchan.empty()) w += " in " + t.wchan;
  return w;
}

const char* bold(bool color) { return color ? "\033[1m" : ""; }
const char* plain(bool color) { return color ? "\033[0m" : ""; }

}  // namespace

void print_stacks(std::FILE* out, const run::HangSample& sample, bool color) {
  bool first = true;
  for (const detect::ProcessSample& p : sample.processes) {
    if (!first) std::fputc('\n', out);
    first = false;
    std::fprintf(out, "%sProcess %ld%s: %s\n", bold(color), p.pid, plain(color), p.command.c_str());
    if (p.threads.empty()) {
      std::fprintf(out, "  not running (no /proc/%ld)\n", p.pid);
      continue;
    }
    if (!p.without_stacks.empty()) {
      std::fprintf(out, "  %s\n", p.without_stacks.c_str());
      continue;
    }
    if (p.rank) std::fprintf(out, "  rank %u (%s)\n", *p.rank, p.rank_variable.c_str());
    if (p.cpython)
      std::fprintf(out, "  CPython %s (%s)\n", p.python_version.c_str(),
                   p.python_interpreter.c_str());
    if (!p.python_error.empty())
      std::fprintf(out, "  no Python stacks: %s\n", p.python_error.c_str());
    std::map<std::string, int> others;
    for (const detect::ThreadSample& t : p.threads) {
      if (t.python.empty()) {
        others[wait_text(t)]++;
        continue;
      }
      std::fprintf(out, "\n  %sThread %ld%s \"%s\"%s: %s\n", bold(color), t.tid, plain(color),
                   t.comm.c_str(), t.tid == p.pid ? " (main)" : "", wait_text(t).c_str());
      for (const detect::PythonFrame& f : t.python)
        std::fprintf(out, "    %s\n", detect::python_frame_text(f).c_str());
      if (!t.python_note.empty()) std::fprintf(out, "    (%s)\n", t.python_note.c_str());
      if (!t.stack.empty()) {
        std::fprintf(out, "    native:\n");
        for (const std::string& f : t.stack) std::fprintf(out, "      %s\n", f.c_str());
      }
    }
    if (!others.empty()) {
      int n = 0;
      for (const auto& [w, k] : others) n += k;
      std::fprintf(out, "\n  %d thread%s without Python frames:", n, n == 1 ? "" : "s");
      const char* sep = " ";
      for (const auto& [w, k] : others) {
        std::fprintf(out, "%s%d in %s", sep, k, w.c_str());
        sep = ", ";
      }
      std::fputc('\n', out);
      for (const detect::ThreadSample& t : p.threads) {
        if (!t.python.empty() || t.stack.empty()) continue;
        std::fprintf(out, "    thread %ld \"%s\": %s\n", t.tid, t.comm.c_str(),
                     wait_text(t).c_str());
        for (const std::string& f : t.stack) std::fprintf(out, "      %s\n", f.c_str());
      }
    }
    if (!p.stacks_error.empty())
      std::fprintf(out, "  no native stacks: %s\n", p.stacks_error.c_str());
  }
}

std::string pyspy_text(const detect::ProcessSample& p) {
  std::string out;
  const std::string prefix = p.rank ? "[rank" + std::to_string(*p.rank) + "]: " : "";
  for (const detect::ThreadSample& t : p.threads) {
    if (t.python.empty()) continue;
    if (out.empty()) {
      out += prefix + "Process " + std::to_string(p.pid) + ": " + p.command + "\n";
      out += prefix + "Python v" + p.python_version + " (" + p.python_interpreter + ")\n";
    }
    out += prefix + "Thread " + std::to_string(t.tid) +
           (t.syscall == "running" ? " (active): \"" : " (idle): \"") +
           (t.tid == p.pid ? "MainThread" : t.comm) + "\"\n";
    for (const detect::PythonFrame& f : t.python)
      out += prefix + "    " + detect::python_frame_text(f) + "\n";
  }
  return out;
}

nlohmann::json stacks_json(const run::HangSample& sample) {
  using nlohmann::json;
  json processes = json::array();
  for (const detect::ProcessSample& p : sample.processes) {
    json threads = json::array();
    for (const detect::ThreadSample& t : p.threads) {
      json frames = json::array();
      for (const detect::PythonFrame& f : t.python)
        frames.push_back({{"function", f.function},
                          {"file", f.file},
                          {"line", f.line > 0 ? json(f.line) : json(nullptr)}});
      json thread = {
          {"tid", t.tid},
          {"python_thread_id", t.python_thread_id ? json(t.python_thread_id) : json(nullptr)},
          {"name", t.comm},
          {"main", t.tid == p.pid},
          {"state", std::string(1, t.state)},
          {"syscall", t.syscall},
          {"wchan", t.wchan},
          {"python", frames},
          {"native", t.stack}};
      if (!t.python_note.empty()) thread["python_note"] = t.python_note;
      threads.push_back(std::move(thread));
    }
    json proc = {{"pid", p.pid},
                 {"command", p.command},
                 {"running", !p.threads.empty()},
                 {"rank", p.rank ? json(*p.rank) : json(nullptr)},
                 {"cpython", p.cpython},
                 {"threads", threads}};
    if (p.cpython) {
      proc["python_version"] = p.python_version;
      proc["interpreter"] = p.python_interpreter;
    }
    if (!p.python_error.empty()) proc["python_error"] = p.python_error;
    if (!p.stacks_error.empty()) proc["native_error"] = p.stacks_error;
    if (!p.without_stacks.empty()) proc["without_stacks"] = p.without_stacks;
    processes.push_back(std::move(proc));
  }
  return {{"schema", "mldoctor.stacks/1"}, {"processes", processes}};
}

}  // namespace mld::render
