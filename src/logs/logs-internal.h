// logs-internal.h — the compiled matcher shared by scanner.cc and matcher.cc:
// one Vectorscan database over every mid-log signature and follow-up pattern,
// and a JIT-compiled PCRE2 program per pattern for confirmation and captures.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <hs.h>
#include <pcre2.h>

#include <functional>
#include <mutex>

#include "logs/logs.h"

namespace mld::logs {

struct StackTrigger;

// The text encoding of a log, found from its first bytes (encoding.cc):
// UTF-16 (by its byte-order mark, or ASCII-range text with a NUL in every
// other byte) is decoded to UTF-8; anything else passes through as bytes.
class TextDecoder {
 public:
  enum class Encoding { Undecided, Bytes, Utf16LE, Utf16BE };
  // The next bytes of the input; returns the text to scan, in two pieces
  // (the held-back first bytes, then the rest of the block as it lies),
  // valid until the next call; empty while the first bytes are held back to
  // be recognised.
  struct Text {
    std::string_view first, second;
  };
  Text decode(std::string_view in);
  // The end of input: what was held back.
  std::string_view finish();
  // "UTF-16LE"/"UTF-16BE" when the input was decoded, else null.
  const char* name() const;
  bool passes_bytes_through() const { return encoding_ == Encoding::Bytes; }

 private:
  void transcode(std::string_view in);
  void put_unit(u32 unit);
  Encoding encoding_ = Encoding::Undecided;
  bool bom_ = false;
  std::string held_;  // undecided first bytes, or an odd byte between blocks
  u32 high_surrogate_ = 0;
  std::string out_;
};

// One compiled pattern: a signature's own pattern, or its followed_by, or a
// line that may start a stack dump (rule and signature null).
struct CompiledPattern {
  const rules::Rule* rule = nullptr;
  const rules::Signature* signature = nullptr;
  bool follow_up = false;   // the signature's followed_by pattern
  u32 signature_index = 0;  // index into Matcher::Impl::signatures
  pcre2_code* code = nullptr;
  const StackTrigger* stack_trigger = nullptr;  // stack_dump_triggers() entry
};

// A rule's stack signature, compiled.
struct CompiledStack {
  const rules::Rule* rule = nullptr;
  const rules::StackSignature* signature = nullptr;
  pcre2_code* frame = nullptr;
  pcre2_code* under = nullptr;  // null: no caller required
};

struct Matcher::Impl {
  rules::RuleSet rules;                   // owned copy: patterns point into it
  std::vector<CompiledPattern> patterns;  // Vectorscan id = index
  std::vector<u32> at_end;                // pattern indexes of at_end signatures (PCRE2 only)
  std::vector<CompiledStack> stacks;      // stack signatures; triggers are in `patterns`
  u32 signature_count = 0;
  hs_database_t* db = nullptr;  // block mode; null when there are no mid-log patterns
  ~Impl();

  // The same patterns in streaming mode, for lines longer than a buffer;
  // compiled on first use (most logs never need it).
  hs_database_t* stream_db() const;

  // What `db` was compiled from: expression i matches for every pattern
  // index in hs_groups[i] (identical patterns are compiled once).
  std::vector<std::string> hs_exprs;
  std::vector<unsigned> hs_flags;
  std::vector<std::vector<u32>> hs_groups;
  // Per expression: it only matches frame lines of stack dumps (a match
  // counts when the next line can continue a dump).
  std::vector<u8> hs_frame_trigger;
  u64 fingerprint = 0;
  std::string loaded_target;  // precompiled target in use, or empty

  void collect_expressions();
  bool compile_block(std::vector<rules::RuleError>& errors);
  bool load_precompiled(const Precompiled& pre);

 private:
  mutable std::once_flag stream_once_;
  mutable hs_database_t* stream_db_ = nullptr;
};

// hs_compile_multi with ids 0..n-1; null with the message (and the failing
// expression) on error.
hs_database_t* compile_database(const std::vector<std::string>& exprs,
                                const std::vector<unsigned>& flags, unsigned mode,
                                const hs_platform_info_t* platform, std::string* error,
                                int* bad = nullptr);

// strip_ansi into `out`, which has room for in.size() bytes; returns the
// length written (the scanner's path: no string to grow, nothing zeroed).
size_t strip_ansi_to(ByteView in, char* out);

// The longest run of plain characters every match of a log pattern
// contains ("" when the pattern's top level is not simple enough to tell):
// what Vectorscan scans for instead of a pattern whose own literal is
// common (matcher.cc).
std::string required_literal(std::string_view pattern);

// Number of '\n' bytes in `data` (vectorised: this runs over every byte).
u64 count_newlines(std::string_view data);

// ─── stacks.cc ──────────────────────────────────────────────────────────────

// A line that may start a stack dump (compiled with the signatures when any
// rule has stack signatures; StackReader confirms): a dump's header, or one
// of its frames (an excerpt may start mid-dump).
struct StackTrigger {
  std::string pattern;
  bool header = false;
};
const std::vector<StackTrigger>& stack_dump_triggers();

// Whether `line` can follow the first line of a dump (an indented frame or
// source line, a frame, a thread header, an exception line): a cheap test
// that spares the reader lone frame lines a logger printed among others.
bool may_continue_dump(std::string_view line);
// The same for a frame line `frame` (the trigger) and the line after it: a
// traceback frame needs its indented source line (or an exception) next.
// Never true where may_continue_dump(next) is false, so callers may test
// that first.
bool frame_continues(std::string_view frame, std::string_view next);

// Length of a launcher's rank prefix at the start of `line` ("[rank3]:",
// "[default3]:", "rank3:", "3: ", "[1,3]<stdout>:"), 0 when none.
size_t rank_prefix_length(std::string_view line);

enum class StackFormat { Traceback, Faulthandler, PySpy, Gdb };

struct StackFrame {
  std::string text;    // "wait (torch/utils/file_baton.py:42)", "c10d::TCPStore::doGet(...)
                       // (libtorch_cpu.so)"
  u64 line = 0;        // in the log
  std::string raw;     // the log line, printable
  std::string source;  // tracebacks: the source line printed under the frame
};

// One thread of a dump, innermost frame first.
struct StackThread {
  StackFormat format = StackFormat::Traceback;
  std::string name;    // its header line ("Thread 46930 (idle): \"MainThread\""), or empty
  std::string prefix;  // the rank prefix of its lines
  std::vector<StackFrame> frames;
  std::string exception;   // tracebacks: the exception that ended it
  bool hang = false;       // a snapshot of a waiting thread (see stacks.cc)
  bool truncated = false;  // deeper frames were dropped
};

// Reads stack dumps line by line, handing each thread over as it completes.
class StackReader {
 public:
  explicit StackReader(std::function<void(const StackThread&)> on_thread);
  bool active() const { return active_; }
  // One line: `first` when a trigger matched it (a dump may start here).
  // Returns false when the line is not part of a dump (the dump, if any,
  // ended before it).
  bool feed(std::string_view line, u64 number, bool first);
  // The dump ends (the input ended: `at_end_of_input`).
  void end(bool at_end_of_input);

 private:
  enum class LineKind {
    Blank,
    TracebackHeader,
    ThreadHeader,
    TracebackFrame,
    FaultFrame,
    PySpyFrame,
    GdbFrame,
    GdbContinuation,
    Indented,
    Exception,
    Chatter,
    Other
  };
  LineKind classify(std::string_view t, std::string* text, std::string* exception) const;
  void start(std::string_view prefix);
  void finish_thread(bool cut);
  bool give_up_or_skip(LineKind kind);

  std::function<void(const StackThread&)> on_thread_;
  bool active_ = false;
  u32 foreign_ = 0;
  u32 blanks_ = 0;
  bool interrupted_ = false;  // a traceback of this dump ended in an interrupt
  bool crashed_ = false;      // faulthandler reports a crash ("Fatal Python error:")
  u32 threads_seen_ = 0;      // threads completed in this dump
  bool tentative_ = false;    // opened by a frame line the next line must confirm
  std::string tentative_line_;
  LineKind last_ = LineKind::Other;
  StackThread thread_;
};

}  // namespace mld::logs
