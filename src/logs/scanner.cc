// scanner.cc — one pass over a log. Input arrives in arbitrary blocks; the
// scanner hands Vectorscan whole-line segments straight from the caller's
// buffer (a memory-mapped file is never copied unless it holds ANSI escapes),
// keeping only a partial last line. Vectorscan runs in streaming mode, so a
// line longer than any buffer still matches. For each candidate line the
// scanner counts newlines up to it (line numbers cost nothing where nothing
// matches), confirms the hit with PCRE2, applies `replaces`, de-duplicates by
// rule and subject, and keeps the first occurrence's context and follow-up
// line. The last lines of the input are kept for end-of-log rules.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "logs/logs-internal.h"

namespace mld::logs {
namespace {

constexpr size_t kMaxCarry = 1 << 20;   // a longer line is scanned in fragments
constexpr size_t kSegment = 128 << 10;  // whole lines scanned per call: fits in L2
constexpr size_t kTailLines = 256;      // kept for end-of-log rules and context
constexpr size_t kTailLineBytes = 4096;

struct RawMatch {
  u32 id;
  u64 end;       // segment-relative, one past the match
  u64 line = 0;  // newlines in the segment before the line that holds it (number_hits)
};

struct TailLine {
  u64 number;
  std::string text;
};

struct Pending {
  size_t finding;
  u64 line;       // line of the first occurrence
  u64 next_line;  // next line to take as after-context
  u32 after_needed;
  u32 signature;  // signature index whose followed_by is awaited
  bool want_follow;
  u64 follow_deadline;  // last line on which the follow-up may come
  size_t resume_at;     // in the creating segment: offset of the next line
};

bool blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

// Stage one of a segment, which may run on any thread: ANSI escapes removed,
// Vectorscan's candidate hits collected, newlines counted.
struct Chunk {
  std::string_view data;        // what was scanned: the input, or `own`
  std::unique_ptr<char[]> own;  // ANSI-free copy when the input had escapes
  size_t own_capacity = 0;
  std::vector<RawMatch> raw;  // hits, at most one per pattern and line
  u64 newlines = 0;
};

// Vectorscan callback state for one scan call.
struct HitCollector {
  std::string_view data;
  u64 base = 0;                   // offset of data[0] in Vectorscan's coordinates
  std::vector<u64> next_newline;  // per pattern: where its current line ends
  std::vector<RawMatch>* raw = nullptr;
  const std::vector<u8>* frame_trigger = nullptr;  // Matcher::Impl::hs_frame_trigger

  static int on_match(unsigned id, unsigned long long, unsigned long long to, unsigned, void* ctx) {
    auto* c = static_cast<HitCollector*>(ctx);
    if (to < c->next_newline[id]) return 0;  // this pattern already hit this line
    const u64 rel = to - c->base;
    const size_t p = rel == 0 ? 0 : static_cast<size_t>(rel - 1);
    const char* const data = c->data.data();
    const char* const end = data + c->data.size();
    const char* nl = p < c->data.size()
                         ? static_cast<const char*>(std::memchr(data + p, '\n', c->data.size() - p))
                         : nullptr;
    c->next_newline[id] = c->base + (nl ? static_cast<u64>(nl - data) + 1 : c->data.size());
    // A frame line whose next line cannot continue a dump starts none: a
    // logger's lone "File ..." line is dropped here, on the scanning thread.
    // Most are rejected on the next line's first bytes alone, before the
    // frame line itself is looked at (this runs once per frame-like line).
    if (c->frame_trigger && (*c->frame_trigger)[id] && nl && nl + 1 < end) {
      const char* next = nl + 1;
      // Its first bytes say enough (a prefix, an indent, a first token).
      const size_t look = std::min<size_t>(static_cast<size_t>(end - next), 160);
      const void* nl2 = std::memchr(next, '\n', look);
      const std::string_view next_line(
          next, static_cast<size_t>((nl2 ? static_cast<const char*>(nl2) : next + look) - next));
      if (!may_continue_dump(next_line)) return 0;
      const void* before = p ? memrchr(data, '\n', p) : nullptr;
      const char* here = before ? static_cast<const char*>(before) + 1 : data;
      if (!frame_continues(std::string_view(here, static_cast<size_t>(nl - here)), next_line))
        return 0;
    }
    c->raw->push_back({id, rel, 0});
    return 0;
  }
};

void strip_if_needed(std::string_view input, Chunk& c) {
  c.data = input;
  if (std::memchr(input.data(), 0x1b, input.size())) {
    if (c.own_capacity < input.size()) {
      c.own.reset(new char[input.size()]);
      c.own_capacity = input.size();
    }
    size_t n = strip_ansi_to(ByteView(reinterpret_cast<const u8*>(input.data()), input.size()),
                             c.own.get());
    c.data = std::string_view(c.own.get(), n);
  }
}

// Orders a segment's hits and gives each the line it is on, counting the
// newlines once, in the same pass that counts the segment's: on the scanning
// thread, not on the one that confirms hits in order.
void number_hits(Chunk& c) {
  std::stable_sort(c.raw.begin(), c.raw.end(),
                   [](const RawMatch& a, const RawMatch& b) { return a.end < b.end; });
  const std::string_view data = c.data;
  size_t counted = 0;
  u64 lines = 0;
  for (RawMatch& r : c.raw) {
    size_t p = r.end == 0 ? 0 : static_cast<size_t>(r.end - 1);
    if (p >= data.size()) p = data.empty() ? 0 : data.size() - 1;
    size_t before = p == 0 ? std::string_view::npos : data.rfind('\n', p - 1);
    size_t line_start = before == std::string_view::npos ? 0 : before + 1;
    if (line_start > counted) {
      lines += count_newlines(data.substr(counted, line_start - counted));
      counted = line_start;
    }
    r.line = lines;
  }
  c.newlines = lines + count_newlines(data.substr(counted));
}

// Whole lines: block mode, any thread, its own scratch.
void prepare_lines(const Matcher::Impl& m, hs_scratch_t* scratch, std::string_view input,
                   Chunk& c) {
  strip_if_needed(input, c);
  c.raw.clear();
  if (m.db && !c.data.empty()) {
    HitCollector hc{c.data, 0, std::vector<u64>(m.hs_exprs.size(), 0), &c.raw, &m.hs_frame_trigger};
    for (size_t off = 0; off < c.data.size();) {  // hs_scan takes at most 4 GiB; cut at a newline
      size_t len = std::min<size_t>(c.data.size() - off, size_t{1} << 31);
      if (off + len < c.data.size()) {
        size_t nl = c.data.rfind('\n', off + len - 1);
        if (nl != std::string_view::npos && nl >= off) len = nl + 1 - off;
      }
      hc.data = c.data.substr(off, len);
      hc.base = 0;
      std::vector<RawMatch> part;
      hc.raw = &part;
      std::fill(hc.next_newline.begin(), hc.next_newline.end(), 0);
      hs_error_t rc = hs_scan(m.db, hc.data.data(), static_cast<unsigned>(len), 0, scratch,
                              HitCollector::on_match, &hc);
      if (rc != HS_SUCCESS) throw IoError("Vectorscan: scan failed (" + std::to_string(rc) + ")");
      for (RawMatch& r : part) c.raw.push_back({r.id, r.end + off, 0});
      off += len;
    }
  }
  number_hits(c);
}

}  // namespace

// Worker threads for stage one. The calling thread works too; stage two
// (confirmation, findings) stays on the calling thread, in input order.
class SegmentPool {
 public:
  SegmentPool(const Matcher::Impl& m, unsigned extra_threads) : m_(m) {
    for (unsigned i = 0; i < extra_threads; i++) {
      hs_scratch_t* scratch = nullptr;
      if (m.db && hs_alloc_scratch(m.db, &scratch) != HS_SUCCESS) break;
      scratches_.push_back(scratch);
      threads_.emplace_back([this, scratch] { work_loop(scratch); });
    }
  }
  ~SegmentPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (std::thread& t : threads_) t.join();
    for (hs_scratch_t* s : scratches_)
      if (s) hs_free_scratch(s);
  }

  // Stage one of every segment on all threads, and `consume(chunks[i],
  // last)` in order on this one as soon as segment i is ready: the calling
  // thread prepares segments too while it waits, and the others go on
  // preparing while it consumes, so no thread idles until the block's last
  // segment. A segment whose stage one failed ends the run with its error.
  template <class Consume>
  void run(const std::vector<std::string_view>& segments, std::vector<Chunk>& chunks,
           hs_scratch_t* own, Consume&& consume) {
    const size_t n = segments.size();
    if (ready_capacity_ < n) {
      ready_.reset(new std::atomic<int>[n]);
      ready_capacity_ = n;
    }
    for (size_t i = 0; i < n; i++) ready_[i].store(kPending, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mu_);
      segments_ = &segments;
      chunks_ = &chunks;
      next_ = 0;
      error_ = nullptr;
      generation_++;
    }
    cv_work_.notify_all();
    // The other threads must be out of the segments before this returns,
    // also when `consume` throws.
    auto settle = [&] {
      next_ = n;  // no segment is started after this
      std::unique_lock<std::mutex> lock(mu_);
      cv_done_.wait(lock, [&] { return busy_ == 0; });
      segments_ = nullptr;
    };
    try {
      bool failed = false;
      for (size_t i = 0; i < n && !failed; i++) {
        for (;;) {
          int state = ready_[i].load(std::memory_order_acquire);
          if (state != kPending) {
            failed = state == kFailed;
            break;
          }
          size_t j = next_.fetch_add(1);
          if (j < n)
            prepare(own, j);
          else
            ready_[i].wait(kPending, std::memory_order_acquire);
        }
        if (!failed) consume(chunks[i], i + 1 == n);
      }
    } catch (...) {
      settle();
      throw;
    }
    settle();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr int kPending = 0, kReady = 1, kFailed = 2;

  void prepare(hs_scratch_t* scratch, size_t i) {
    int state = kReady;
    try {
      prepare_lines(m_, scratch, (*segments_)[i], (*chunks_)[i]);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      state = kFailed;
    }
    ready_[i].store(state, std::memory_order_release);
    ready_[i].notify_one();
  }

  void run_tasks(hs_scratch_t* scratch) {
    for (;;) {
      size_t i = next_.fetch_add(1);
      if (i >= segments_->size()) break;
      prepare(scratch, i);
    }
  }

  void work_loop(hs_scratch_t* scratch) {
    u64 seen = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_work_.wait(lock, [&] { return stop_ || (generation_ != seen && segments_); });
        if (stop_) return;
        seen = generation_;
        busy_++;
      }
      run_tasks(scratch);
      std::lock_guard<std::mutex> lock(mu_);
      busy_--;
      cv_done_.notify_all();
    }
  }

  const Matcher::Impl& m_;
  std::vector<std::thread> threads_;
  std::vector<hs_scratch_t*> scratches_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::vector<std::string_view>* segments_ = nullptr;
  std::vector<Chunk>* chunks_ = nullptr;
  std::atomic<size_t> next_{0};
  std::unique_ptr<std::atomic<int>[]> ready_;  // per segment: kPending, kReady, kFailed
  size_t ready_capacity_ = 0;
  unsigned busy_ = 0;
  u64 generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

struct Scanner::State {
  std::shared_ptr<const Matcher> matcher;
  const Matcher::Impl& m;
  ScanOptions options;
  hs_scratch_t* scratch = nullptr;         // block mode
  hs_scratch_t* stream_scratch = nullptr;  // streaming mode, for lines longer than a buffer
  hs_stream_t* line_stream = nullptr;      // open while inside such a line
  u64 line_stream_base = 0;                // bytes of that line already scanned
  std::vector<u64> stream_next_newline;
  pcre2_match_data* match_data = nullptr;

  std::string carry;                    // partial last line
  Chunk chunk;                          // reused by the sequential path
  std::unique_ptr<SegmentPool> pool;    // when options.threads > 1
  std::vector<std::string_view> batch;  // segments of one feed() block
  std::vector<Chunk> batch_chunks;
  u64 bytes = 0;          // bytes fed by the caller
  u64 newlines = 0;       // '\n' seen in scanned segments
  bool mid_line = false;  // the next segment continues a line
  bool finished = false;

  std::deque<LogFinding> findings;
  std::unordered_map<std::string, size_t> by_key;
  std::vector<Pending> pending;
  std::vector<size_t> fresh;  // completed, not yet taken
  std::deque<TailLine> tail;
  u64 stall_reported_at = ~u64{0};  // input size at the last stall report
  TextDecoder decoder;              // UTF-16 logs are scanned as UTF-8

  // Scans text (after decoding), keeping a partial last line.
  void feed_text(std::string_view data);

  State(std::shared_ptr<const Matcher> mt, ScanOptions opts)
      : matcher(std::move(mt)), m(matcher->impl()), options(std::move(opts)) {
    if (m.db && hs_alloc_scratch(m.db, &scratch) != HS_SUCCESS)
      throw IoError("Vectorscan: cannot allocate scratch space");
    match_data = pcre2_match_data_create(20, nullptr);
    if (!m.stacks.empty())
      stack_reader =
          std::make_unique<StackReader>([this](const StackThread& t) { on_stack_thread(t); });
    if (options.threads > 1 && m.db)
      pool = std::make_unique<SegmentPool>(m, std::min(options.threads, 64u) - 1);
  }
  ~State() {
    pool.reset();
    if (line_stream) hs_close_stream(line_stream, stream_scratch, nullptr, nullptr);
    if (stream_scratch) hs_free_scratch(stream_scratch);
    if (scratch) hs_free_scratch(scratch);
    if (match_data) pcre2_match_data_free(match_data);
  }

  // A piece of a line too long to hold (or the end of one): streaming mode, so
  // a match across the pieces is still found. Offsets are relative to `input`.
  void prepare_long_line_piece(std::string_view input, Chunk& c, bool line_ends) {
    strip_if_needed(input, c);
    c.raw.clear();
    hs_database_t* sdb = m.stream_db();
    if (sdb) {
      if (!line_stream) {
        if (!stream_scratch && hs_alloc_scratch(sdb, &stream_scratch) != HS_SUCCESS)
          throw IoError("Vectorscan: cannot allocate scratch space");
        if (hs_open_stream(sdb, 0, &line_stream) != HS_SUCCESS)
          throw IoError("Vectorscan: cannot open a stream");
        line_stream_base = 0;
        stream_next_newline.assign(m.hs_exprs.size(), 0);
      }
      HitCollector hc{c.data, line_stream_base, std::move(stream_next_newline), &c.raw, nullptr};
      hs_error_t rc =
          hs_scan_stream(line_stream, c.data.data(), static_cast<unsigned>(c.data.size()), 0,
                         stream_scratch, HitCollector::on_match, &hc);
      stream_next_newline = std::move(hc.next_newline);
      if (rc != HS_SUCCESS) throw IoError("Vectorscan: scan failed (" + std::to_string(rc) + ")");
      line_stream_base += c.data.size();
      if (line_ends) {
        hs_close_stream(line_stream, stream_scratch, nullptr, nullptr);
        line_stream = nullptr;
      }
    }
    number_hits(c);
  }

  // The sequential path: one segment of whole lines, or a long line's piece.
  void process(std::string_view input, bool last_of_block = true) {
    bool ends_line = !input.empty() && input.back() == '\n';
    if (line_stream || !ends_line)
      prepare_long_line_piece(input, chunk, ends_line);
    else
      prepare_lines(m, scratch, input, chunk);
    consume(chunk, last_of_block);
  }

  // PCRE2 on one line; captures[0] is the whole match. Returns the offset of
  // the match end, or npos.
  size_t confirm(const CompiledPattern& p, std::string_view line,
                 std::vector<std::string>& captures) {
    int rc = pcre2_match(p.code, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0, 0,
                         match_data, nullptr);
    if (rc <= 0) return std::string_view::npos;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_data);
    captures.clear();
    for (int i = 0; i < rc; i++) {
      if (ov[2 * i] == PCRE2_UNSET)
        captures.emplace_back();
      else
        captures.emplace_back(
            printable_line(line.substr(ov[2 * i], ov[2 * i + 1] - ov[2 * i]), 0, 200));
    }
    return ov[1];
  }

  Evidence line_evidence(std::string_view line, u64 number, size_t focus, bool context) {
    Evidence e;
    e.text = printable_line(line, focus);
    e.file = options.source;
    e.line = number;
    e.context = context;
    return e;
  }

  // Up to n lines before the line starting at data[start] (line `number`).
  void lines_before(std::string_view data, size_t start, u64 number, u32 n,
                    std::vector<Evidence>& out) {
    std::vector<Evidence> got;
    size_t pos = start;
    u64 num = number;
    while (got.size() < n && pos > 0) {
      size_t end = pos - 1;  // the '\n' ending the previous line
      size_t begin = end == 0 ? 0 : data.rfind('\n', end - 1);
      begin = begin == std::string_view::npos ? 0 : begin + 1;
      got.push_back(line_evidence(data.substr(begin, end - begin), --num, 0, true));
      pos = begin;
    }
    if (pos == 0 && !mid_line_at_segment_start) {
      for (auto it = tail.rbegin(); it != tail.rend() && got.size() < n; ++it)
        if (it->number == num - 1) got.push_back(line_evidence(it->text, --num, 0, true));
    }
    out.insert(out.end(), got.rbegin(), got.rend());
  }
  bool mid_line_at_segment_start = false;

  // Stack dumps: the reader, fed from trigger lines on (see stacks.cc).
  std::unique_ptr<StackReader> stack_reader;
  struct StackStart {
    size_t offset;  // of the line in the segment
    u64 line;
  };
  std::vector<StackStart> stack_starts;  // of the segment being consumed
  void walk_stacks(std::string_view data);
  void on_stack_thread(const StackThread& thread);

  // The finding of (rule, subject): a further occurrence merged into it
  // (false), or a new one with its rule, message and first line (true).
  std::pair<LogFinding*, bool> occurrence(const rules::Rule& rule, const std::string& subject,
                                          const std::string& message, u64 number,
                                          std::optional<u32> rank) {
    auto [it, inserted] = by_key.try_emplace(rule.id + '\0' + subject, findings.size());
    if (!inserted) {
      LogFinding& lf = findings[it->second];
      lf.count++;
      lf.last_line = std::max(lf.last_line, number);
      lf.finding.count = lf.count;
      lf.finding.last_line = lf.last_line;
      if (rank && !std::binary_search(lf.ranks.begin(), lf.ranks.end(), *rank)) {
        lf.ranks.insert(std::upper_bound(lf.ranks.begin(), lf.ranks.end(), *rank), *rank);
        lf.finding.ranks = lf.ranks;
      }
      return {&lf, false};
    }
    LogFinding& lf = findings.emplace_back();
    lf.first_line = lf.last_line = number;
    lf.count = 1;
    if (rank) lf.ranks.push_back(*rank);
    Finding& f = lf.finding;
    f.rule = rule.id;
    f.severity = rule.severity;
    f.subject = subject;
    f.message = message;
    f.last_line = number;
    f.ranks = lf.ranks;
    rules::complete_from_rule(f, m.rules);
    return {&lf, true};
  }

  LogFinding& record(const rules::Rule& rule, const rules::Signature& sig, u32 sig_index,
                     const std::vector<std::string>& captures, std::string_view line, u64 number,
                     size_t focus, std::string_view data, size_t line_start, bool at_end) {
    std::string message =
        sig.message.empty() ? rule.title : rules::render_template(sig.message, captures);
    std::string subject =
        sig.subject.empty() ? message : rules::render_template(sig.subject, captures);
    // The rank prefix of the '\r' segment that holds the match (progress bars share lines).
    size_t cr =
        focus == 0 || focus > line.size() ? std::string_view::npos : line.rfind('\r', focus - 1);
    std::optional<u32> rank = line_rank(cr == std::string_view::npos ? line : line.substr(cr + 1));
    auto [lfp, fresh_finding] = occurrence(rule, subject, message, number, rank);
    LogFinding& lf = *lfp;
    if (!fresh_finding) return lf;
    Finding& f = lf.finding;
    if (!at_end && options.context > 0)
      lines_before(data, line_start, number, options.context, f.evidence);
    f.evidence.push_back(line_evidence(line, number, focus, false));
    size_t index = findings.size() - 1;
    bool want_follow = !sig.followed_by.empty();
    if (!at_end && (options.context > 0 || want_follow)) {
      size_t line_end = data.find('\n', line_start);
      size_t resume = line_end == std::string_view::npos ? data.size() : line_end + 1;
      pending.push_back({index, number, number + 1, options.context, sig_index, want_follow,
                         number + sig.within, resume});
    } else {
      fresh.push_back(index);
    }
    return lf;
  }

  // `last_of_block`: no segment of the caller's current block follows, so the
  // tail must be complete (finish() or a stall check may come next).
  void consume(Chunk& c, bool last_of_block);
  void take_after_context(std::string_view data, u64 first_line);
  void close_pending(u64 last_complete_line, bool all);
  void update_tail(std::string_view data, u64 first_line, size_t keep);
  void evaluate_at_end();
};

void Scanner::State::consume(Chunk& c, bool last_of_block) {
  const std::string_view data = c.data;
  std::vector<RawMatch>& raw = c.raw;
  mid_line_at_segment_start = mid_line;
  const u64 first_line = newlines + 1;  // number of the line data[0] belongs to
  // Walk the hits in order (number_hits sorted them), one line at a time.
  u64 line_no = first_line;
  std::vector<std::string> captures;
  struct Candidate {
    const CompiledPattern* p;
    std::vector<std::string> captures;
    size_t focus;
  };
  std::vector<Candidate> candidates;
  size_t i = 0;
  while (i < raw.size()) {
    size_t p = raw[i].end == 0 ? 0 : static_cast<size_t>(raw[i].end - 1);
    if (p >= data.size()) p = data.size() - 1;
    // The line holding byte p (a match ending on a '\n' belongs to the line it ends).
    size_t before = p == 0 ? std::string_view::npos : data.rfind('\n', p - 1);
    size_t line_start = before == std::string_view::npos ? 0 : before + 1;
    size_t line_end = data.find('\n', p);
    if (line_end == std::string_view::npos) line_end = data.size();
    line_no = first_line + raw[i].line;
    std::string_view line = data.substr(line_start, line_end - line_start);

    // Every hit ending on this line.
    size_t j = i;
    while (j < raw.size() && raw[j].end <= line_end + 1) j++;
    candidates.clear();
    for (size_t k = i; k < j; k++)
      for (u32 pattern_index : m.hs_groups[raw[k].id]) {
        const CompiledPattern& cp = m.patterns[pattern_index];
        if (cp.stack_trigger) {
          if (line_end < data.size() &&
              (stack_starts.empty() || stack_starts.back().offset != line_start))
            stack_starts.push_back({line_start, line_no});
          continue;
        }
        size_t focus = confirm(cp, line, captures);
        if (focus == std::string_view::npos) continue;
        if (cp.follow_up) {
          // A follow-up line completes the newest waiting first occurrence of its signature.
          for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
            if (it->want_follow && it->signature == cp.signature_index && it->line < line_no &&
                line_no <= it->follow_deadline) {
              findings[it->finding].finding.evidence.push_back(
                  line_evidence(line, line_no, focus, false));
              it->want_follow = false;
              break;
            }
          }
          continue;
        }
        candidates.push_back({&cp, captures, focus});
      }
    // A rule that names a more generic one in `replaces` hides it on this line;
    // several signatures of one rule on one line count once.
    for (size_t a = 0; a < candidates.size(); a++) {
      const rules::Rule* ra = candidates[a].p->rule;
      bool hidden = false;
      for (size_t b = 0; b < candidates.size() && !hidden; b++) {
        const rules::Rule* rb = candidates[b].p->rule;
        if (b < a && rb == ra) hidden = true;
        if (rb != ra && rb->explains(ra->id)) hidden = true;
      }
      if (hidden) continue;
      const CompiledPattern& cp = *candidates[a].p;
      record(*cp.rule, *cp.signature, cp.signature_index, candidates[a].captures, line, line_no,
             candidates[a].focus, data, line_start, false);
    }
    i = j;
  }
  walk_stacks(data);
  stack_starts.clear();
  newlines += c.newlines;
  take_after_context(data, first_line);
  // The tail serves the next segment's context lines and, after the block,
  // end-of-log rules: between segments of one block only `context` lines.
  if (last_of_block || options.context > 0)
    update_tail(data, first_line, last_of_block ? kTailLines : options.context);
  mid_line = !data.empty() && data.back() != '\n';
  close_pending(newlines, false);
}

// Feeds the stack reader the lines of a dump: from the segment start while a
// dump continues from the previous segment, and from each trigger line on.
// Only dump regions are walked line by line; the rest of the log is not.
void Scanner::State::walk_stacks(std::string_view data) {
  if (!stack_reader) return;
  if (mid_line_at_segment_start || (!data.empty() && data.back() != '\n')) {
    stack_reader->end(false);  // a line too long to be a frame: no dump goes through it
    return;
  }
  const u64 first_line = newlines + 1;
  size_t pos = 0;
  u64 num = first_line;
  size_t next = 0;
  bool first = false;
  while (pos < data.size()) {
    if (!stack_reader->active()) {
      while (next < stack_starts.size() && stack_starts[next].offset < pos) next++;
      if (next == stack_starts.size()) return;
      pos = stack_starts[next].offset;
      num = stack_starts[next].line;
      next++;
      first = true;
    }
    size_t end = data.find('\n', pos);
    if (end == std::string_view::npos) end = data.size();
    bool part = stack_reader->feed(data.substr(pos, end - pos), num, first);
    // A line that ended a dump may start the next one: look at it again as
    // a trigger (unless it was one already).
    if (!part && !first) continue;
    first = false;
    pos = end + 1;
    num++;
  }
}

// A thread of a dump: every stack signature whose frame (and caller) it
// holds, when it is a hang snapshot, is a finding.
void Scanner::State::on_stack_thread(const StackThread& thread) {
  if (!thread.hang) return;
  std::vector<std::string> captures;
  auto frame_matches = [&](pcre2_code* code, const StackFrame& f, bool keep) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(f.text.data()), f.text.size(), 0, 0,
                         match_data, nullptr);
    if (rc <= 0) return false;
    if (keep) {
      PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_data);
      captures.clear();
      for (int i = 0; i < rc; i++)
        captures.push_back(ov[2 * i] == PCRE2_UNSET
                               ? std::string()
                               : f.text.substr(ov[2 * i], ov[2 * i + 1] - ov[2 * i]));
    }
    return true;
  };
  // The thread waits at its innermost recognised frame: of every stack
  // signature that matches, the one matching deepest in the stack reports
  // (NCCL's init under init_process_group is a wait in NCCL, not in the
  // store); ties go to the earlier rule and signature.
  const CompiledStack* best = nullptr;
  size_t at = thread.frames.size(), caller = thread.frames.size();
  std::vector<std::string> best_captures;
  for (const CompiledStack& cs : m.stacks) {
    size_t hit = thread.frames.size(), up = thread.frames.size();
    for (size_t i = 0; i < thread.frames.size() && i < at && hit == thread.frames.size(); i++)
      if (frame_matches(cs.frame, thread.frames[i], true)) hit = i;
    if (hit == thread.frames.size()) continue;
    if (cs.under) {
      for (size_t j = hit + 1; j < thread.frames.size() && up == thread.frames.size(); j++)
        if (frame_matches(cs.under, thread.frames[j], false)) up = j;
      if (up == thread.frames.size()) continue;
    }
    best = &cs;
    at = hit;
    caller = up;
    best_captures = captures;
  }
  if (!best) return;
  captures = std::move(best_captures);
  const rules::Rule& rule = *best->rule;
  const rules::StackSignature& sig = *best->signature;
  std::string message =
      sig.message.empty() ? rule.title : rules::render_template(sig.message, captures);
  std::string subject =
      sig.subject.empty() ? message : rules::render_template(sig.subject, captures);
  const StackFrame& hit = thread.frames[at];
  auto [lfp, fresh_finding] = occurrence(rule, subject, message, hit.line, line_rank(hit.raw));
  if (!fresh_finding) return;
  Finding& f = lfp->finding;
  {
    Evidence e;
    e.file = options.source;
    e.line = hit.line;
    e.text = printable_line(hit.raw, 0);
    f.evidence.push_back(e);
    if (caller < thread.frames.size() && caller != at) {
      e.line = thread.frames[caller].line;
      e.text = printable_line(thread.frames[caller].raw, 0);
      f.evidence.push_back(e);
    }
    // The thread at a glance: the wait, its callers, the entry point.
    static const char* const kFormat[] = {"traceback", "faulthandler dump", "py-spy dump",
                                          "gdb backtrace"};
    std::string chain =
        (thread.name.empty() || thread.name == "traceback" ? std::string("thread") : thread.name) +
        " (" +
        (options.stacks_origin.empty() ? std::string(kFormat[static_cast<int>(thread.format)])
                                       : options.stacks_origin) +
        (thread.exception.empty() ? "" : ", " + thread.exception) + "): ";
    auto function_of = [](const std::string& text) {
      size_t p = text.find(" (");
      return p == std::string::npos ? text : text.substr(0, p);
    };
    const size_t last = thread.frames.size() - 1;
    for (size_t i = at; i <= last && i < at + 4; i++)
      chain += (i == at ? "" : " ← ") +
               (i == at || i == last ? thread.frames[i].text : function_of(thread.frames[i].text));
    if (at + 4 < last) chain += " ← …";
    if (at + 4 <= last) chain += " ← " + thread.frames[last].text;
    Evidence summary;
    summary.text = printable_line(chain, 0, 600);
    f.evidence.push_back(summary);
    fresh.push_back(findings.size() - 1);
  }
}

// Gives waiting first occurrences the lines after them that this segment holds.
void Scanner::State::take_after_context(std::string_view data, u64 first_line) {
  for (Pending& pd : pending) {
    if (pd.after_needed == 0) continue;
    size_t pos = 0;
    u64 num = first_line;
    if (pd.resume_at != std::string_view::npos) {  // created in this segment: start after its line
      pos = pd.resume_at;
      num = pd.next_line;
      pd.resume_at = std::string_view::npos;
    }
    while (pd.after_needed > 0 && pos < data.size()) {
      size_t end = data.find('\n', pos);
      if (end == std::string_view::npos) break;  // an incomplete line waits for the next segment
      if (num >= pd.next_line) {
        findings[pd.finding].finding.evidence.push_back(
            line_evidence(data.substr(pos, end - pos), num, 0, true));
        pd.next_line = num + 1;
        pd.after_needed--;
      }
      pos = end + 1;
      num++;
    }
  }
}

// A first occurrence is complete when its after-context is taken and its
// follow-up came or can no longer come.
void Scanner::State::close_pending(u64 last_complete_line, bool all) {
  auto done = [&](const Pending& pd) {
    if (all) return true;
    if (pd.after_needed > 0) return false;
    return !pd.want_follow || last_complete_line >= pd.follow_deadline;
  };
  std::vector<size_t> completed;
  std::erase_if(pending, [&](const Pending& pd) {
    if (!done(pd)) return false;
    completed.push_back(pd.finding);
    return true;
  });
  std::sort(completed.begin(), completed.end());
  // Evidence in line order; a follow-up line that is also context is shown once, as evidence.
  for (size_t index : completed) {
    std::vector<Evidence>& ev = findings[index].finding.evidence;
    std::stable_sort(ev.begin(), ev.end(),
                     [](const Evidence& a, const Evidence& b) { return a.line < b.line; });
    for (size_t k = 0; k + 1 < ev.size();) {
      if (ev[k].line == ev[k + 1].line) {
        ev.erase(ev.begin() + static_cast<long>(ev[k].context ? k : k + 1));
      } else {
        k++;
      }
    }
  }
  fresh.insert(fresh.end(), completed.begin(), completed.end());
}

void Scanner::State::update_tail(std::string_view data, u64 first_line, size_t keep) {
  // Lines of this segment from the back, at most `keep` of them.
  if (data.empty()) return;
  std::vector<TailLine> lines;
  size_t end = data.size();
  u64 total_newlines_in_data = static_cast<u64>(newlines + 1 - first_line);
  u64 num = first_line + total_newlines_in_data;  // number of the line holding data's last byte
  if (!data.empty() && data.back() == '\n') {
    end = data.size() - 1;
    num -= 1;
  }
  while (lines.size() < keep) {
    size_t begin = end == 0 ? std::string_view::npos : data.rfind('\n', end - 1);
    begin = begin == std::string_view::npos ? 0 : begin + 1;
    std::string_view text = data.substr(begin, end - begin);
    if (text.size() > kTailLineBytes) text = text.substr(text.size() - kTailLineBytes);
    lines.push_back({num, std::string(text)});
    if (begin == 0) break;
    end = begin - 1;
    num--;
  }
  // A segment that continues a line extends the tail's last entry.
  if (!lines.empty() && !tail.empty() && tail.back().number == lines.back().number &&
      mid_line_at_segment_start) {
    std::string joined = tail.back().text + lines.back().text;
    if (joined.size() > kTailLineBytes) joined = joined.substr(joined.size() - kTailLineBytes);
    lines.back().text = std::move(joined);
    tail.pop_back();
  }
  // Segments that kept no tail leave a gap: older lines are then not adjacent.
  if (!lines.empty() && !tail.empty() && tail.back().number + 1 < lines.back().number) tail.clear();
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) tail.push_back(std::move(*it));
  while (tail.size() > std::max<size_t>(kTailLines, options.context)) tail.pop_front();
}

// End-of-log rules: the log ends with lines of a rule's at_end signatures —
// its own, or those of the rules it explains (Megatron's "compiling and
// loading fused kernels ..." followed by the build's own progress lines,
// which a stalled build lock leaves last) — and one of them is its own.
void Scanner::State::evaluate_at_end() {
  if (m.at_end.empty()) return;
  // A stall interrupted (Ctrl-C, a launcher's SIGINT) ends the log with the
  // interrupt's traceback, or with its beginning when the paste stops there:
  // the stall line is then the last line before it.
  auto last = tail.rbegin();
  {
    auto it = tail.rbegin();
    while (it != tail.rend() && blank(it->text)) ++it;
    bool interrupt = false;
    if (it != tail.rend()) {
      std::string_view t = it->text;
      t.remove_prefix(rank_prefix_length(t));
      while (!t.empty() && (t.back() == '\r' || t.back() == ' ')) t.remove_suffix(1);
      interrupt = t == "KeyboardInterrupt" || t.ends_with(": KeyboardInterrupt");
      if (interrupt) ++it;
    }
    // Frames and their source lines, up to the traceback's header.
    for (; it != tail.rend(); ++it) {
      std::string_view t = it->text;
      t.remove_prefix(rank_prefix_length(t));
      if (t.find("Traceback (most recent call last):") != std::string_view::npos) {
        last = std::next(it);
        break;
      }
      if (t.empty() || (t.front() != ' ' && t.front() != '\t')) break;  // not inside a traceback
    }
  }
  std::vector<std::string> captures;
  std::vector<const rules::Rule*> done;
  for (u32 first : m.at_end) {
    const rules::Rule* rule = m.patterns[first].rule;
    if (std::find(done.begin(), done.end(), rule) != done.end()) continue;
    done.push_back(rule);
    struct ChainLine {
      const TailLine* line;
      const CompiledPattern* p;
      std::vector<std::string> captures;
      size_t focus;
    };
    std::vector<ChainLine> chain;  // from the last line back
    bool own = false;
    for (auto back = last; back != tail.rend(); ++back) {
      if (blank(back->text)) continue;
      const CompiledPattern* hit = nullptr;
      size_t focus = std::string_view::npos;
      // Its own signatures first, then those of the rules it explains.
      for (int pass = 0; pass < 2 && !hit; pass++)
        for (u32 index : m.at_end) {
          const CompiledPattern& op = m.patterns[index];
          if (pass == 0 ? op.rule != rule : !rule->explains(op.rule->id)) continue;
          focus = confirm(op, back->text, captures);
          if (focus == std::string_view::npos) continue;
          hit = &op;
          break;
        }
      if (!hit) break;
      own = own || hit->rule == rule;
      chain.push_back({&*back, hit, captures, focus});
    }
    if (!own) continue;
    // The message comes from the earliest line of the chain that has one of
    // the rule's own messages; the finding is recorded at its last own line.
    const ChainLine* lead = nullptr;
    const ChainLine* last_own = nullptr;
    for (auto c = chain.rbegin(); c != chain.rend(); ++c) {
      if (c->p->rule != rule) continue;
      if (!lead || (lead->p->signature->message.empty() && !c->p->signature->message.empty()))
        lead = &*c;
      last_own = &*c;
    }
    LogFinding& lf =
        record(*rule, *lead->p->signature, lead->p->signature_index, lead->captures,
               last_own->line->text, last_own->line->number, last_own->focus, {}, 0, true);
    if (lf.count == 1 && chain.size() > 1) {
      Finding& f = lf.finding;
      f.evidence.clear();
      for (auto c = chain.rbegin(); c != chain.rend(); ++c)
        f.evidence.push_back(line_evidence(c->line->text, c->line->number, c->focus, false));
    }
  }
}

Scanner::Scanner(std::shared_ptr<const Matcher> matcher, ScanOptions options)
    : s_(std::make_unique<State>(std::move(matcher), std::move(options))) {}

Scanner::~Scanner() = default;

void Scanner::feed(ByteView block) {
  State& s = *s_;
  if (s.finished) throw IoError("log scanner: feed() after finish()");
  std::string_view data(reinterpret_cast<const char*>(block.data()), block.size());
  s.bytes += data.size();
  if (s.decoder.passes_bytes_through()) {
    s.feed_text(data);
    return;
  }
  TextDecoder::Text text = s.decoder.decode(data);
  s.feed_text(text.first);
  s.feed_text(text.second);
}

void Scanner::State::feed_text(std::string_view data) {
  State& s = *this;
  while (!data.empty()) {
    if (!s.carry.empty() || data.find('\n') == std::string_view::npos) {
      // Complete the carried partial line first.
      size_t nl = data.find('\n');
      size_t take = nl == std::string_view::npos ? data.size() : nl + 1;
      s.carry.append(data.substr(0, take));
      data.remove_prefix(take);
      if (nl != std::string_view::npos || s.carry.size() >= kMaxCarry) {
        s.process(s.carry);
        s.carry.clear();
      }
      continue;
    }
    // Zero-copy: whole lines straight from the caller's buffer, in segments
    // small enough to stay in cache across the passes over them.
    size_t last_nl = data.rfind('\n');
    std::string_view lines = data.substr(0, last_nl + 1);
    s.batch.clear();
    while (!lines.empty()) {
      size_t len = lines.size();
      if (len > kSegment) {
        size_t nl = lines.rfind('\n', kSegment - 1);
        len = nl == std::string_view::npos ? lines.find('\n', kSegment) + 1 : nl + 1;
      }
      s.batch.push_back(lines.substr(0, len));
      lines.remove_prefix(len);
    }
    data.remove_prefix(last_nl + 1);
    size_t first = 0;
    if (s.line_stream)
      s.process(s.batch[first++]);  // the end of a long line: streaming mode, in order
    if (s.pool && s.batch.size() - first >= 2) {
      std::vector<std::string_view> rest(s.batch.begin() + static_cast<long>(first), s.batch.end());
      if (s.batch_chunks.size() < rest.size()) s.batch_chunks.resize(rest.size());
      s.pool->run(rest, s.batch_chunks, s.scratch,
                  [&s](Chunk& c, bool last) { s.consume(c, last); });
    } else {
      for (size_t i = first; i < s.batch.size(); i++)
        s.process(s.batch[i], i + 1 == s.batch.size());
    }
  }
}

void Scanner::finish() {
  State& s = *s_;
  if (s.finished) return;
  s.feed_text(s.decoder.finish());
  if (!s.carry.empty()) {
    s.carry.push_back('\n');  // the last line, unterminated: scan it as a line
    s.process(s.carry);
    s.carry.clear();
  }
  s.finished = true;
  if (s.stack_reader) s.stack_reader->end(true);
  if (s.stall_reported_at != s.bytes)
    s.evaluate_at_end();  // unless --follow already reported this end
  s.close_pending(s.newlines, true);
}

void Scanner::check_stall() {
  State& s = *s_;
  if (s.finished || s.bytes == s.stall_reported_at) return;
  s.stall_reported_at = s.bytes;
  s.evaluate_at_end();
}

std::vector<const LogFinding*> Scanner::take_new() {
  State& s = *s_;
  std::vector<const LogFinding*> out;
  std::sort(s.fresh.begin(), s.fresh.end());
  for (size_t i : s.fresh) out.push_back(&s.findings[i]);
  s.fresh.clear();
  return out;
}

std::vector<const LogFinding*> Scanner::findings() const {
  std::vector<const LogFinding*> out;
  for (const LogFinding& f : s_->findings) out.push_back(&f);
  std::stable_sort(out.begin(), out.end(), [](const LogFinding* a, const LogFinding* b) {
    return a->first_line < b->first_line;
  });
  return out;
}

u64 Scanner::bytes() const { return s_->bytes; }
std::string Scanner::encoding() const {
  const char* name = s_->decoder.name();
  return name ? name : "";
}
u64 Scanner::lines() const { return s_->newlines; }

}  // namespace mld::logs
