// rules-fuzz.cc — the rule-file parser (TOML through toml++, then our
// validation) on arbitrary bytes: it may only accept a rule or report
// problems, never crash; an accepted rule's patterns go through Vectorscan and
// PCRE2 compilation and its examples through the scanner.
//
// Corpus (test/fuzz/corpus/rules/): the builtin rule files and broken
// variants (unknown keys, wrong types, unterminated strings).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "logs/logs.h"
#include "rules/rules.h"

using namespace mld;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<rules::RuleError> errors;
  auto rule = rules::parse_rule(text, "", errors);
  if (!rule) {
    if (errors.empty()) abort();  // a rejection always says why
    return 0;
  }
  // An accepted rule compiles (or its bad pattern is reported) and scans its
  // own examples without trouble.
  rules::RuleSet set;
  std::vector<rules::Example> examples = rule->examples;
  if (!set.add(std::move(*rule), errors)) abort();
  auto matcher = logs::Matcher::compile(set, errors);
  for (const rules::Example& e : examples) {
    logs::Scanner s(matcher, {1, "fuzz"});
    s.feed(ByteView(reinterpret_cast<const u8*>(e.log.data()), e.log.size()));
    s.finish();
  }
  return 0;
}
