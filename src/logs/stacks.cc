// stacks.cc — stack dumps in logs, read as threads of frames. What a user in
// a hang pastes is a stack dump: `py-spy dump` (threads of "function
// (file:line)" frames, innermost first), faulthandler's `dump_traceback` or
// `dump_traceback_later` ("Timeout (0:30:00)!", then `File "...", line N in
// f` innermost first), gdb/pstack `thread apply all bt` ("#3  0x... in
// c10d::TCPStore::doWait(...) () from libtorch_cpu.so"), or the traceback
// Python prints when the job is interrupted (`File "...", line N, in f`,
// innermost last, then `KeyboardInterrupt`). Each format is recognised line by
// line; a thread is complete at the next thread header, at the end of a
// traceback, or at the end of the dump, and is handed to the caller then, so
// a dump of thousands of threads is never held whole.
//
// A thread is a hang snapshot when it comes from py-spy, faulthandler or gdb,
// or from a traceback that ends in an interrupt (KeyboardInterrupt, torch
// elastic's SignalException) or that the log cuts off; a traceback of an
// exception says where an error was raised, not where a job waits.
//
// Launchers prefix lines with the rank ("[rank3]:", "[default3]:", "3: ",
// "[1,3]<stdout>:"); a dump is read within one prefix, so the interleaved
// output of other ranks neither ends nor joins it.
#include <algorithm>
#include <cctype>

#include "logs/logs-internal.h"

namespace mld::logs {
namespace {

constexpr size_t kMaxFrames = 4096;    // per thread; deeper frames are dropped
constexpr u32 kMaxForeignLines = 2;    // unrecognised lines tolerated inside a dump
constexpr size_t kMaxFrameText = 512;  // bytes of a frame's normalised text
constexpr size_t kMaxEvidenceText = 400;

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view ltrim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && (is_space(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool all_hex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c));
  });
}

std::string clip(std::string_view s, size_t n) { return std::string(s.substr(0, n)); }

std::string normalise_path(std::string_view path) {
  std::string out(path);
  if (out.find('\\') != std::string::npos) std::replace(out.begin(), out.end(), '\\', '/');
  return out;
}

// `File "path", line N, in func` (traceback) or `File "path", line N in func`
// (faulthandler).
bool parse_file_frame(std::string_view t, bool* traceback, std::string* text) {
  t = ltrim(t);
  if (!t.starts_with("File \"")) return false;
  size_t q = t.find('"', 6);
  if (q == std::string_view::npos) return false;
  std::string_view path = t.substr(6, q - 6);
  std::string_view rest = t.substr(q + 1);
  if (!rest.starts_with(", line ")) return false;
  rest.remove_prefix(7);
  size_t d = 0;
  while (d < rest.size() && rest[d] >= '0' && rest[d] <= '9') d++;
  if (d == 0) return false;
  std::string_view line = rest.substr(0, d);
  rest = rest.substr(d);
  if (rest.starts_with(", in "))
    *traceback = true, rest.remove_prefix(5);
  else if (rest.starts_with(" in "))
    *traceback = false, rest.remove_prefix(4);
  else
    return false;
  std::string_view func = rtrim(rest);
  if (func.empty()) return false;
  *text = clip(std::string(func) + " (" + normalise_path(path) + ":" + std::string(line) + ")",
               kMaxFrameText);
  return true;
}

// py-spy: "    func (file.py:12)" or a native "    func (libc.so.6)", indented.
bool parse_pyspy_frame(std::string_view t, std::string* text) {
  if (t.empty() || !is_space(t.front())) return false;
  t = rtrim(ltrim(t));
  if (t.size() < 4 || t.back() != ')') return false;
  size_t open = t.rfind(" (");
  if (open == std::string_view::npos || open == 0) return false;
  std::string_view where = t.substr(open + 2, t.size() - open - 3);
  if (where.empty() || where.find(' ') != std::string_view::npos) return false;
  // Python frames name a file and a line; native ones a library.
  size_t colon = where.rfind(':');
  bool python = colon != std::string_view::npos && all_digits(where.substr(colon + 1));
  bool native = where.find(".so") != std::string_view::npos ||
                where.find(".dll") != std::string_view::npos ||
                where.find(".dylib") != std::string_view::npos ||
                where.find("python") != std::string_view::npos;
  if (!python && !native) return false;
  *text = clip(normalise_path(t), kMaxFrameText);
  return true;
}

// gdb/pstack: "#3  0x00007f.. in c10d::TCPStore::doWait(...) () from /x/libtorch_cpu.so"
// or "#1  __libc_recv (fd=98, ...) at ../sysdeps/unix/sysv/linux/recv.c:28".
bool parse_gdb_frame(std::string_view t, std::string* text) {
  t = rtrim(t);
  if (t.size() < 3 || t[0] != '#') return false;
  size_t i = 1;
  while (i < t.size() && t[i] >= '0' && t[i] <= '9') i++;
  if (i == 1 || i >= t.size() || !is_space(t[i])) return false;
  std::string_view rest = ltrim(t.substr(i));
  if (rest.starts_with("0x")) {
    size_t in = rest.find(" in ");
    if (in == std::string_view::npos) return false;
    if (!all_hex(rest.substr(2, in - 2))) return false;
    rest = rest.substr(in + 4);
  }
  std::string where;
  size_t from = rest.rfind(" from ");
  size_t at = rest.rfind(" at ");
  if (from != std::string_view::npos) {
    where = std::string(rest.substr(from + 6));
    rest = rest.substr(0, from);
  } else if (at != std::string_view::npos) {
    where = std::string(rest.substr(at + 4));
    rest = rest.substr(0, at);
  }
  // The function ends where its argument list " (" begins.
  size_t args = rest.find(" (");
  std::string_view func = rtrim(args == std::string_view::npos ? rest : rest.substr(0, args));
  if (func.empty()) return false;
  where = normalise_path(where);
  size_t slash = where.rfind('/');
  if (from != std::string_view::npos && slash != std::string::npos) where = where.substr(slash + 1);
  *text = clip(std::string(func) + (where.empty() ? "" : " (" + where + ")"), kMaxFrameText);
  return true;
}

// "Thread 46930 (idle): "MainThread"" (py-spy), "Thread 15 (Thread 0x7f.. (LWP
// 20292)):" (gdb), "Thread 0x00007f.. (most recent call first):",
// "Current thread 0x.. (most recent call first):", "Stack (most recent call
// first):" (faulthandler).
bool is_thread_header(std::string_view t) {
  t = rtrim(t);
  if (t.find("(most recent call first):") != std::string_view::npos)
    return t.starts_with("Thread 0x") || t.starts_with("Current thread 0x") ||
           t.starts_with("Stack (");
  if (!t.starts_with("Thread ")) return false;
  std::string_view id = t.substr(7);
  size_t sp = id.find(' ');
  if (sp == std::string_view::npos) return false;
  std::string_view num = id.substr(0, sp);
  if (!(all_digits(num) || (num.starts_with("0x") && all_hex(num.substr(2))))) return false;
  std::string_view rest = id.substr(sp + 1);
  return rest.starts_with("(idle") || rest.starts_with("(active") || rest.starts_with("(gil") ||
         rest.starts_with("(Thread 0x") || rest.starts_with("(LWP ") ||
         rest.starts_with("(process ");
}

// The line that ends a traceback: "KeyboardInterrupt", "torch.x.Error: ...";
// `name` (when not null) receives the class.
bool ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

bool is_exception_line(std::string_view t, std::string* name) {
  if (t.empty() || is_space(t.front())) return false;
  size_t i = 0;
  while (i < t.size() && (ident_char(t[i]) || t[i] == '.')) i++;
  if (i == 0 || (t[0] >= '0' && t[0] <= '9')) return false;
  std::string_view rest = rtrim(t.substr(i));
  if (!rest.empty() && rest.front() != ':') return false;
  // A class name: its last dotted component starts with a capital
  // ("KeyboardInterrupt", "torch.distributed.DistBackendError"), which a
  // logger's "host:pid" or "step:" prefix does not.
  std::string_view path = t.substr(0, i);
  size_t dot = path.rfind('.');
  std::string_view last = dot == std::string_view::npos ? path : path.substr(dot + 1);
  if (last.empty() || last.front() < 'A' || last.front() > 'Z') return false;
  if (name) *name = std::string(path);
  return true;
}

// A cut-off traceback shows where a thread was only when its innermost
// frame is a blocking call: the source line Python printed under it.
bool blocking_source(std::string_view source) {
  for (std::string_view call :
       {"sleep(", ".wait(", ".get(", ".recv", "_recv(", ".poll(", "_poll(", ".join(", ".acquire(",
        "select(", ".accept(", "waitpid(", ".barrier(", "synchronize("})
    if (source.find(call) != std::string_view::npos) return true;
  return false;
}

bool interrupt(std::string_view exception) {
  return exception == "KeyboardInterrupt" || exception.ends_with(".SignalException") ||
         exception == "SignalException" || exception.ends_with(".KeyboardInterrupt");
}

}  // namespace

size_t indent_of(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
  return i;
}

bool frame_continues(std::string_view frame, std::string_view next) {
  frame.remove_prefix(rank_prefix_length(frame));
  // A traceback frame ("File ..., line N, in f") is followed by its source
  // line, indented deeper, unless Python had no source for it (a frozen
  // module); a logger's lone frame line is not.
  size_t at = frame.find("File \"");
  if (at != std::string_view::npos && frame.find(", in ", at) != std::string_view::npos &&
      frame.find("<frozen ") == std::string_view::npos) {
    std::string_view n = next.substr(rank_prefix_length(next));
    if (indent_of(n) > indent_of(frame) && indent_of(n) < n.size()) return true;
    return is_exception_line(n, nullptr) || n.starts_with("Traceback (most recent call last):");
  }
  return may_continue_dump(next);
}

bool may_continue_dump(std::string_view line) {
  line.remove_prefix(rank_prefix_length(line));
  if (line.empty()) return true;  // a blank line inside a dump
  char c = line.front();
  if (c == ' ' || c == '\t' || c == '#') return true;
  for (std::string_view start : {"File \"", "Thread ", "Current thread", "Traceback", "Stack ("})
    if (line.starts_with(start)) return true;
  return is_exception_line(line, nullptr);
}

size_t rank_prefix_length(std::string_view line) {
  // Every prefix starts with '[', "rank" or a digit: most lines leave here.
  if (line.empty()) return 0;
  const char c0 = line.front();
  if (c0 != '[' && c0 != 'r' && (c0 < '0' || c0 > '9')) return 0;
  size_t i = 0;
  auto digits = [&](size_t at) {
    size_t j = at;
    while (j < line.size() && j - at < 7 && line[j] >= '0' && line[j] <= '9') j++;
    return j - at;
  };
  // torch's "[rank3]: " separates the prefix with one space, which the
  // line's own indentation follows.
  for (std::string_view p : {"[rank", "[default"}) {
    if (!line.starts_with(p)) continue;
    size_t n = digits(p.size());
    i = p.size() + n;
    if (n && line.substr(i).starts_with("]:"))
      return i + 2 + (line.substr(i + 2).starts_with(" ") ? 1 : 0);
    return 0;
  }
  if (line.starts_with("rank")) {
    size_t n = digits(4);
    return n && line.substr(4 + n).starts_with(":") ? 5 + n : 0;
  }
  if (line.starts_with("[1,") || line.starts_with("[0,")) {  // Open MPI --tag-output
    size_t n = digits(3);
    i = 3 + n;
    for (std::string_view tag : {"]<stdout>:", "]<stderr>:"})
      if (n && line.substr(i).starts_with(tag)) return i + tag.size();
    return 0;
  }
  size_t n = digits(0);  // srun --label: "3: "
  if (n && line.substr(n).starts_with(": ")) return n + 2;
  return 0;
}

const std::vector<StackTrigger>& stack_dump_triggers() {
  // Lines that can start a dump; the reader confirms them. These run over
  // every byte of every log: literals are what Vectorscan finds cheapest.
  // A frame line starts a dump only when the line after it can continue one
  // (may_continue_dump), checked where the match is found.
  static const std::vector<StackTrigger> triggers = {
      {R"(Traceback \(most recent call last\):)", true},
      {R"(Fatal Python error: )", true},
      {R"(^Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!)", true},
      {R"(\(most recent call first\):)", true},
      {R"(Thread (?:\d+|0x[0-9A-Fa-f]+) \((?:idle|active|gil|Thread 0x|LWP ))", true},
      {R"(File ")", false},
      {R"(^[ \t]+\S[^\n]* \(lib[^()\n ]*\.so[.\d]*\)[ \t\r]*$)", false},
      // gdb and pstack: "#3  0x00007f3a... in f ()". Addresses are padded to
      // 16 digits, so a user-space one starts 0x0000: written this way,
      // Vectorscan looks for "0x0000", not for the " in " that every other
      // line of a log holds (docs/benchmarks.md has the figures).
      {R"(^#\d+ +0x0000[0-9a-f]+ in )", false},
      {R"(^#0 +\w)", false},
  };
  return triggers;
}

StackReader::StackReader(std::function<void(const StackThread&)> on_thread)
    : on_thread_(std::move(on_thread)) {}

StackReader::LineKind StackReader::classify(std::string_view t, std::string* text,
                                            std::string* exception) const {
  if (rtrim(t).empty()) return LineKind::Blank;
  bool tb = false;
  if (parse_file_frame(t, &tb, text)) return tb ? LineKind::TracebackFrame : LineKind::FaultFrame;
  std::string_view lt = ltrim(t);
  if (lt.find("Traceback (most recent call last):") != std::string_view::npos)
    return LineKind::TracebackHeader;
  if (is_thread_header(lt)) return LineKind::ThreadHeader;
  if (parse_gdb_frame(t, text)) return LineKind::GdbFrame;
  if (parse_pyspy_frame(t, text)) return LineKind::PySpyFrame;
  if (is_exception_line(t, exception)) return LineKind::Exception;
  // A gdb frame's location wrapped onto the next line.
  if (!t.empty() && is_space(t.front()) && (lt.starts_with("from ") || lt.starts_with("at ")))
    return LineKind::GdbContinuation;
  if (!t.empty() && is_space(t.front())) return LineKind::Indented;
  // Lines that belong to dumps without being frames.
  for (std::string_view known :
       {"Timeout (", "Fatal Python error", "Process ", "Python v",
        "Extension modules:", "During handling of the above exception",
        "The above exception was the direct cause", "[Previous line repeated", "[New ",
        "[Thread debugging", "[Inferior", "Using host libthread_db", "[Switching to thread", "^C"})
    if (lt.starts_with(known)) return LineKind::Chatter;
  return LineKind::Other;
}

void StackReader::finish_thread(bool cut) {
  if (!thread_.frames.empty()) {
    threads_seen_++;
    if (thread_.format == StackFormat::Traceback) {
      std::reverse(thread_.frames.begin(), thread_.frames.end());  // innermost first
      // Interrupted, or cut off by the end of the log while in a blocking
      // call or beside tracebacks that were interrupted (Ctrl-C prints one
      // per process).
      if (interrupt(thread_.exception)) interrupted_ = true;
      thread_.hang = interrupt(thread_.exception) ||
                     (thread_.exception.empty() && cut &&
                      (interrupted_ || blocking_source(thread_.frames.front().source)));
    } else {
      // faulthandler also dumps at a crash ("Fatal Python error:
      // Segmentation fault" before it): where a thread was when the process
      // died, not where it waits.
      thread_.hang = !(thread_.format == StackFormat::Faulthandler && crashed_);
    }
    on_thread_(thread_);
  }
  std::string prefix = std::move(thread_.prefix);
  thread_ = StackThread{};
  thread_.prefix = std::move(prefix);
}

void StackReader::start(std::string_view prefix) {
  active_ = true;
  foreign_ = 0;
  blanks_ = 0;
  interrupted_ = false;
  crashed_ = false;
  threads_seen_ = 0;
  tentative_ = false;
  last_ = LineKind::Other;
  thread_ = StackThread{};
  thread_.prefix = std::string(prefix);
}

bool StackReader::feed(std::string_view line, u64 number, bool first) {
  // A dump opened by a frame line (no header) holds only when the very next
  // line continues it (frame_continues, the test the scanning threads apply
  // to triggers where they can see the next line): the same answer however
  // the input was split.
  if (!first && tentative_) {
    tentative_ = false;
    if (!frame_continues(tentative_line_, line)) {
      thread_ = StackThread{};
      active_ = false;
      return false;
    }
  }
  size_t plen = rank_prefix_length(line);
  std::string_view prefix = line.substr(0, plen);
  std::string_view t = line.substr(plen);
  if (first) {
    if (active_) end(false);
    start(prefix);
  } else if (prefix != thread_.prefix) {
    if (plen > 0) return true;  // another rank's line, interleaved: not ours
    // An unprefixed line inside a prefixed dump counts as foreign.
  }
  std::string text, exception;
  LineKind kind = classify(t, &text, &exception);
  if (prefix != thread_.prefix) kind = LineKind::Other;
  // faulthandler's own first lines open a dump; other chatter does not.
  const bool opens = kind == LineKind::Chatter && (ltrim(t).starts_with("Fatal Python error") ||
                                                   ltrim(t).starts_with("Timeout ("));
  if (first && !opens &&
      (kind == LineKind::Other || kind == LineKind::Blank || kind == LineKind::Indented ||
       kind == LineKind::Exception || kind == LineKind::GdbContinuation ||
       kind == LineKind::Chatter)) {
    active_ = false;  // a trigger the line's format does not confirm
    return false;
  }
  if (first && (kind == LineKind::TracebackFrame || kind == LineKind::FaultFrame ||
                kind == LineKind::PySpyFrame || kind == LineKind::GdbFrame)) {
    tentative_ = true;
    tentative_line_ = std::string(line.substr(0, 4096));
  }

  auto add_frame = [&](StackFormat format) {
    if (!thread_.frames.empty() && thread_.format != format) finish_thread(false);
    if (thread_.frames.empty()) thread_.format = format;
    if (thread_.frames.size() < kMaxFrames)
      thread_.frames.push_back({std::move(text), number, clip(line, kMaxEvidenceText), {}});
    else
      thread_.truncated = true;
  };

  switch (kind) {
    case LineKind::TracebackHeader:
      finish_thread(false);
      thread_.format = StackFormat::Traceback;
      thread_.name = "traceback";
      break;
    case LineKind::ThreadHeader:
      finish_thread(false);
      thread_.name = clip(rtrim(ltrim(t)), 200);
      break;
    case LineKind::TracebackFrame: add_frame(StackFormat::Traceback); break;
    case LineKind::FaultFrame: add_frame(StackFormat::Faulthandler); break;
    case LineKind::PySpyFrame: add_frame(StackFormat::PySpy); break;
    case LineKind::GdbFrame: add_frame(StackFormat::Gdb); break;
    case LineKind::GdbContinuation:
      if (last_ != LineKind::GdbFrame || thread_.frames.empty()) return give_up_or_skip(kind);
      {
        // "   from /x/libtorch_cpu.so" completes the frame above.
        std::string_view lt = ltrim(rtrim(t));
        std::string where = normalise_path(lt.substr(lt.find(' ') + 1));
        size_t slash = where.rfind('/');
        if (lt.starts_with("from ") && slash != std::string::npos) where = where.substr(slash + 1);
        StackFrame& f = thread_.frames.back();
        if (f.text.find(" (") == std::string::npos)
          f.text = clip(f.text + " (" + where + ")", kMaxFrameText);
      }
      kind = LineKind::GdbFrame;  // a further continuation line may follow
      break;
    case LineKind::Indented:
      // A traceback's source line (and 3.11's ^^^ markers) under its frame.
      if (thread_.format != StackFormat::Traceback || thread_.frames.empty() ||
          (last_ != LineKind::TracebackFrame && last_ != LineKind::Indented))
        return give_up_or_skip(kind);
      if (last_ == LineKind::TracebackFrame)
        thread_.frames.back().source = clip(ltrim(rtrim(t)), 200);
      break;
    case LineKind::Exception:
      if (thread_.format == StackFormat::Traceback && !thread_.frames.empty()) {
        thread_.exception = exception;
        finish_thread(false);
        break;
      }
      return give_up_or_skip(kind);
    case LineKind::Blank:
      if (++blanks_ > 2) {
        end(false);
        return false;
      }
      last_ = kind;
      return true;
    case LineKind::Chatter: {
      std::string_view lt = ltrim(t);
      if (lt.starts_with("Fatal Python error")) crashed_ = true;
      if (lt.starts_with("Timeout (")) crashed_ = false;
      break;
    }
    case LineKind::Other: return give_up_or_skip(kind);
  }
  foreign_ = 0;
  blanks_ = 0;
  last_ = kind;
  return true;
}

// A line that does not belong: tolerated a few times (a "Process
// SpawnProcess-3:" line printed into a traceback by another process), then
// the dump ends.
bool StackReader::give_up_or_skip(LineKind kind) {
  // A lone frame line with no header is not yet a dump: it ends at the first
  // line that does not belong (a frame printed by a logger, a warning's
  // source line).
  const bool established = !thread_.name.empty() || thread_.frames.size() >= 2 || threads_seen_ > 0;
  if (++foreign_ > (established ? kMaxForeignLines : 0)) {
    end(false);
    return false;
  }
  last_ = kind;
  return true;
}

void StackReader::end(bool at_end_of_input) {
  if (!active_) return;
  finish_thread(at_end_of_input);
  active_ = false;
}

}  // namespace mld::logs
