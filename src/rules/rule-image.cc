// rule-image.cc — the builtin rules as the build parsed them, in a flat
// binary form. Parsing the 150-odd rule files as TOML was most of every
// command's start-up (about 9 ms of 13 for `logs` on the 2-core machine of
// docs/benchmarks.md); the build tool (tools/compile-rules.cc) writes this
// image once and the binary reads it back in a fraction of a millisecond.
// The image is only a cache of the embedded TOML: it is used when it holds
// exactly the embedded rule files, in order, and otherwise ignored.
//
// Format: "MLDRULES4", then per rule its fields in declaration order.
// Strings and lists are a little-endian u32 count followed by their items.
#include <cstring>

#include "rules/rules.h"

namespace mld::rules {
namespace {

constexpr std::string_view kMagic = "MLDRULES4";

class Writer {
 public:
  void number(u32 v) {
    for (int i = 0; i < 4; i++) out_ += static_cast<char>((v >> (8 * i)) & 0xff);
  }
  void text(std::string_view s) {
    number(static_cast<u32>(s.size()));
    out_ += s;
  }
  void texts(const std::vector<std::string>& list) {
    number(static_cast<u32>(list.size()));
    for (const std::string& s : list) text(s);
  }
  void flag(bool b) { out_ += b ? '\1' : '\0'; }
  std::string take() { return std::move(out_); }
  void raw(std::string_view s) { out_ += s; }

 private:
  std::string out_;
};

// Reads what Writer wrote; any inconsistency (a length past the end, a flag
// that is not 0 or 1) makes ok() false and every later read empty.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  bool at_end() const { return in_.empty(); }
  bool expect(std::string_view s) {
    if (!ok_ || !in_.starts_with(s)) return ok_ = false;
    in_.remove_prefix(s.size());
    return true;
  }
  u32 number() {
    if (!ok_ || in_.size() < 4) return fail(), 0;
    u32 v = 0;
    for (int i = 0; i < 4; i++)
      v |= static_cast<u32>(static_cast<unsigned char>(in_[i])) << (8 * i);
    in_.remove_prefix(4);
    return v;
  }
  std::string text() {
    u32 n = number();
    if (!ok_ || in_.size() < n) return fail(), std::string();
    std::string s(in_.substr(0, n));
    in_.remove_prefix(n);
    return s;
  }
  std::vector<std::string> texts() {
    u32 n = number();
    std::vector<std::string> list;
    for (u32 i = 0; i < n && ok_; i++) list.push_back(text());
    return list;
  }
  bool flag() {
    if (!ok_ || in_.empty() || static_cast<unsigned char>(in_[0]) > 1) return fail(), false;
    bool b = in_[0] == '\1';
    in_.remove_prefix(1);
    return b;
  }
  // A count of items, each at least `min_bytes` long: a corrupt count
  // cannot make the reader reserve more than the input could hold.
  u32 count(size_t min_bytes) {
    u32 n = number();
    if (ok_ && static_cast<u64>(n) * min_bytes > in_.size()) fail();
    return ok_ ? n : 0;
  }

 private:
  void fail() { ok_ = false; }
  std::string_view in_;
  bool ok_ = true;
};

void write_example(Writer& w, const Example& e) {
  w.text(e.log);
  w.text(e.source);
  w.text(e.why);
}

Example read_example(Reader& r) {
  Example e;
  e.log = r.text();
  e.source = r.text();
  e.why = r.text();
  return e;
}

bool valid_severity(u32 v) { return v <= static_cast<u32>(Severity::Error); }

}  // namespace

std::string rule_image(const std::vector<Rule>& rules) {
  Writer w;
  w.raw(kMagic);
  w.number(static_cast<u32>(rules.size()));
  for (const Rule& r : rules) {
    w.text(r.id);
    w.number(static_cast<u32>(r.severity));
    w.flag(r.escalated_severity.has_value());
    w.number(r.escalated_severity ? static_cast<u32>(*r.escalated_severity) : 0);
    w.text(r.title);
    w.text(r.explanation);
    w.texts(r.references);
    w.text(r.fix.text);
    w.texts(r.fix.env);
    w.texts(r.fix.commands);
    w.text(r.detector);
    w.number(static_cast<u32>(r.signatures.size()));
    for (const Signature& s : r.signatures) {
      w.text(s.pattern);
      w.text(s.message);
      w.text(s.subject);
      w.flag(s.case_insensitive);
      w.text(s.followed_by);
      w.number(s.within);
      w.flag(s.at_end);
    }
    w.number(static_cast<u32>(r.stacks.size()));
    for (const StackSignature& s : r.stacks) {
      w.text(s.frame);
      w.text(s.under);
      w.text(s.message);
      w.text(s.subject);
    }
    w.number(static_cast<u32>(r.sources.size()));
    for (const Source& s : r.sources) {
      w.text(s.repository);
      w.text(s.package);
      w.text(s.path);
      w.number(s.line);
      w.text(s.tag);
      w.text(s.format);
      w.number(static_cast<u32>(s.syntax));
      w.texts(s.values);
    }
    w.texts(r.replaces);
    w.flag(r.envelope);
    w.text(r.collect);
    w.number(static_cast<u32>(r.examples.size()));
    for (const Example& e : r.examples) write_example(w, e);
    w.number(static_cast<u32>(r.negatives.size()));
    for (const Example& e : r.negatives) write_example(w, e);
    w.flag(r.withdrawn);
    w.flag(r.builtin);
    w.text(r.origin);
  }
  return w.take();
}

std::optional<std::vector<Rule>> read_rule_image(std::string_view image) {
  Reader r(image);
  if (!r.expect(kMagic)) return std::nullopt;
  std::vector<Rule> rules;
  const u32 n = r.count(16);
  rules.reserve(n);
  for (u32 i = 0; i < n && r.ok(); i++) {
    Rule rule;
    rule.id = r.text();
    u32 severity = r.number();
    bool escalated = r.flag();
    u32 escalated_to = r.number();
    if (!valid_severity(severity) || !valid_severity(escalated_to)) return std::nullopt;
    rule.severity = static_cast<Severity>(severity);
    if (escalated) rule.escalated_severity = static_cast<Severity>(escalated_to);
    rule.title = r.text();
    rule.explanation = r.text();
    rule.references = r.texts();
    rule.fix.text = r.text();
    rule.fix.env = r.texts();
    rule.fix.commands = r.texts();
    rule.detector = r.text();
    for (u32 k = r.count(22); k > 0 && r.ok(); k--) {
      Signature s;
      s.pattern = r.text();
      s.message = r.text();
      s.subject = r.text();
      s.case_insensitive = r.flag();
      s.followed_by = r.text();
      s.within = r.number();
      s.at_end = r.flag();
      rule.signatures.push_back(std::move(s));
    }
    for (u32 k = r.count(16); k > 0 && r.ok(); k--) {
      StackSignature s;
      s.frame = r.text();
      s.under = r.text();
      s.message = r.text();
      s.subject = r.text();
      rule.stacks.push_back(std::move(s));
    }
    for (u32 k = r.count(32); k > 0 && r.ok(); k--) {
      Source s;
      s.repository = r.text();
      s.package = r.text();
      s.path = r.text();
      s.line = r.number();
      s.tag = r.text();
      s.format = r.text();
      u32 syntax = r.number();
      if (syntax > static_cast<u32>(FormatSyntax::Literal)) return std::nullopt;
      s.syntax = static_cast<FormatSyntax>(syntax);
      s.values = r.texts();
      rule.sources.push_back(std::move(s));
    }
    rule.replaces = r.texts();
    rule.envelope = r.flag();
    rule.collect = r.text();
    for (u32 k = r.count(12); k > 0 && r.ok(); k--) rule.examples.push_back(read_example(r));
    for (u32 k = r.count(12); k > 0 && r.ok(); k--) rule.negatives.push_back(read_example(r));
    rule.withdrawn = r.flag();
    rule.builtin = r.flag();
    rule.origin = r.text();
    rules.push_back(std::move(rule));
  }
  if (!r.ok() || !r.at_end()) return std::nullopt;
  return rules;
}

}  // namespace mld::rules
