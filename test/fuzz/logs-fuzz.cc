// logs-fuzz.cc — the log input path on arbitrary bytes: the builtin
// knowledge base's matcher, the input fed in pieces whose sizes the input
// chooses, with context lines, then end of input. Nothing may crash or read
// out of bounds, evidence must be printable (no raw control bytes), and the
// findings must not depend on how the input was split. Incidents must hold
// every finding exactly once.
//
// Corpus (test/fuzz/corpus/logs/): log excerpts with ANSI colour, '\r'
// progress bars, NUL bytes and invalid UTF-8, rank prefixes, and the
// examples of rules that have follow-up and end-of-log signatures, stack
// dumps of every format and envelopes around causes.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "logs/logs.h"

using namespace mld;

namespace {

std::string digest(logs::Scanner& s) {
  std::string out;
  for (const logs::LogFinding* f : s.findings()) {
    out += f->finding.rule + "|" + f->finding.message + "|" + std::to_string(f->first_line) + "|" +
           std::to_string(f->count) + "\n";
    for (const Evidence& e : f->finding.evidence)
      for (unsigned char c : e.text)
        if (c < 0x20 || c == 0x7f) abort();  // evidence must never carry control bytes
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto matcher = [] {
    std::vector<rules::RuleError> errors;
    auto m = logs::Matcher::compile(rules::RuleSet::builtin(), errors);
    if (!errors.empty()) abort();
    return m;
  }();
  if (size < 2) return 0;
  size_t piece = 1 + data[0] % 97;
  u32 context = data[1] % 4;
  data += 2;
  size -= 2;

  logs::Scanner whole(matcher, {context, "fuzz"});
  whole.feed(ByteView(data, size));
  whole.finish();
  logs::Scanner split(matcher, {context, "fuzz"});
  for (size_t i = 0; i < size; i += piece)
    split.feed(ByteView(data + i, std::min(piece, size - i)));
  split.finish();
  if (digest(whole) != digest(split)) abort();
  if (whole.lines() != split.lines()) abort();

  std::vector<const Finding*> findings;
  for (const logs::LogFinding* f : whole.findings()) findings.push_back(&f->finding);
  std::vector<const Finding*> seen;
  for (const rules::Incident& inc : rules::group_incidents(findings, rules::RuleSet::builtin())) {
    seen.push_back(inc.cause);
    seen.insert(seen.end(), inc.also.begin(), inc.also.end());
    seen.insert(seen.end(), inc.context.begin(), inc.context.end());
  }
  std::sort(seen.begin(), seen.end());
  std::sort(findings.begin(), findings.end());
  if (seen != findings) abort();
  return 0;
}
