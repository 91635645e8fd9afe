// logs.h — the log matcher: every log signature of the knowledge base
// compiled into one Vectorscan database and scanned over a byte stream in one
// pass, each hit confirmed on its line with PCRE2 (which also extracts the
// capture groups the rule's message names). Findings are de-duplicated by
// rule and subject with counts, line numbers, launcher ranks, context lines
// and follow-up lines. End-of-log rules (a build that stalls) are evaluated on
// the input's tail.
//
// Input is bytes, not text: invalid UTF-8, NUL bytes, ANSI colour codes,
// '\r' progress bars and lines of any length are all handled.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/base.h"
#include "findings/findings.h"
#include "rules/rules.h"

namespace mld::logs {

// Vectorscan databases of the builtin rules, compiled and serialized at
// build time (tools/compile-rules.cc) for several CPU targets, so `logs`
// does not spend a tenth of a second compiling on every run.
struct PrecompiledDatabase {
  const char* target;  // "avx512", "avx2", "generic"
  const unsigned char* bytes;
  size_t size;
};
struct Precompiled {
  u64 fingerprint = 0;          // of the expressions and flags they were compiled from
  std::vector<unsigned> flags;  // final flags (prefilter fallbacks included)
  std::vector<PrecompiledDatabase> databases;  // most capable target first
};

// The compiled form of a rule set's signatures. Immutable and shareable.
class Matcher {
 public:
  // Compiles every signature of `rules`. A pattern that neither Vectorscan nor
  // PCRE2 accepts is reported in `errors` (with its rule's file) and left out.
  // `precompiled` is used instead of compiling when it was built from exactly
  // these signatures and this CPU can run one of its databases.
  static std::shared_ptr<const Matcher> compile(const rules::RuleSet& rules,
                                                std::vector<rules::RuleError>& errors,
                                                const Precompiled* precompiled = nullptr);

  // The precompiled target in use ("avx2"...), or empty when compiled here.
  std::string precompiled_target() const;
  ~Matcher();

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  Matcher() = default;
  std::unique_ptr<Impl> impl_;
};

// Build time: the block-mode database of `rules` serialized for each CPU
// target, with the fingerprint and flags a Precompiled needs.
struct SerializedDatabase {
  std::string target;
  std::string bytes;
};
std::vector<SerializedDatabase> serialize_databases(const rules::RuleSet& rules,
                                                    std::vector<rules::RuleError>& errors,
                                                    u64* fingerprint, std::vector<unsigned>* flags);

struct ScanOptions {
  u32 context = 0;       // lines of context before and after a first occurrence
  std::string source;    // file name for evidence ("-" for stdin)
  unsigned threads = 1;  // Vectorscan passes run on this many threads
  // Where the stack dumps of this input come from, said in a stack finding's
  // evidence instead of the dump's format ("py-spy dump"): `run` scans the
  // stacks it read itself ("mldoctor read the stacks of pid 12").
  std::string stacks_origin = {};
};

// One finding of a log scan with its occurrences.
struct LogFinding {
  Finding finding;  // evidence[0] is the first occurrence
  u64 first_line = 0;
  u64 last_line = 0;
  u64 count = 0;
  std::vector<u32> ranks;  // launcher ranks seen ("[rank3]:" prefixes), sorted
};

// Scans one input. feed() takes the input in any split (the scanner keeps
// partial lines); finish() marks the end of input.
class Scanner {
 public:
  Scanner(std::shared_ptr<const Matcher> matcher, ScanOptions options);
  ~Scanner();
  Scanner(const Scanner&) = delete;
  Scanner& operator=(const Scanner&) = delete;

  void feed(ByteView data);
  void finish();

  // For --follow: evaluates end-of-log rules on what was read so far, as if
  // the input ended now (a stall). Findings it adds are reported once.
  void check_stall();

  // Findings whose first occurrence became complete (context and follow-up
  // windows closed) since the last call, in order of first line.
  std::vector<const LogFinding*> take_new();

  // Every finding, in order of first line.
  std::vector<const LogFinding*> findings() const;

  u64 bytes() const;
  // The encoding the input was decoded from ("UTF-16LE", "UTF-16BE"), or
  // empty when it was scanned as the bytes it is (UTF-8 or 8-bit text).
  std::string encoding() const;
  u64 lines() const;  // complete lines seen (a final line without '\n' counts after finish())

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Reads `path` ("-" is standard input; gzip is recognised by its magic bytes)
// and feeds `scanner` until the end. With `follow`, keeps reading as the file
// grows (and across truncation or rotation) until `stop()` returns true,
// calling `on_idle()` after each idle `stall_seconds` so end-of-log rules can
// fire. Throws IoError on unreadable input.
struct ReadOptions {
  bool follow = false;
  double stall_seconds = 60;
  std::function<bool()> stop;         // follow: polled between reads
  std::function<void()> on_progress;  // after each block that produced findings
  std::function<void()> on_idle;      // follow: the input was idle for stall_seconds
  // A named pipe no program writes to yet: called once, a second into the
  // wait (reading starts when a writer comes).
  std::function<void()> on_waiting_for_writer;
};
void scan_input(const std::string& path, Scanner& scanner, const ReadOptions& options);

// A rule set checked against its own claims through this matcher
// (`mldoctor rules --check`; rule-check.cc): every positive example produces
// its rule, every negative example produces no rule, and every [[source]]
// format string, filled with sample values and printed after each prefix
// real logs put before a line, makes its rule the first incident's cause.
struct RuleCheckProblem {
  std::string rule;
  std::string what;
};
struct RuleCheckResult {
  size_t rules = 0;                    // log rules checked
  size_t examples = 0;                 // positive examples scanned
  size_t negatives = 0;                // negative examples scanned
  size_t sources = 0;                  // format strings cited
  size_t source_lines = 0;             // format strings x prefixes scanned
  std::vector<std::string> unsourced;  // log rules with line signatures but no [[source]]
  std::vector<RuleCheckProblem> problems;
};
RuleCheckResult check_rules(const rules::RuleSet& rules,
                            const std::shared_ptr<const Matcher>& matcher);

// Launcher rank written at the start of a line ("[rank3]:", "[default3]:",
// "rank3:", srun --label "3: "), if any.
std::optional<u32> line_rank(std::string_view line);

// Removes ANSI escape sequences (CSI, OSC, nF such as tput's "ESC ( B",
// two-byte ESC x) from `in`, appending to `out`. Newlines are never removed,
// so line numbers hold.
void strip_ansi(ByteView in, std::string& out);

// Printable form of a log line for evidence: the '\r' segment holding byte
// `focus` (or the last non-empty one), invalid UTF-8 and control bytes shown
// as \xNN, at most `max_bytes` bytes around `focus`.
std::string printable_line(std::string_view line, size_t focus, size_t max_bytes = 400);

}  // namespace mld::logs
