// rules-test.cc — the generic knowledge-base test: every builtin rule parses
// and carries docs, a fix and references; ids are unique; every log rule's
// positive examples produce that rule through the real matcher (Vectorscan +
// PCRE2, the same path as `mldoctor logs`), and every negative example
// produces no rule at all. Also the rule-file validator's error paths.
#include "rules/rules.h"

#include <gtest/gtest.h>

#include <set>

#include "logs/logs.h"

namespace mld {
namespace {

std::vector<Finding> scan(const std::shared_ptr<const logs::Matcher>& m, const std::string& text) {
  logs::Scanner s(m, {});
  s.feed(ByteView(reinterpret_cast<const u8*>(text.data()), text.size()));
  s.finish();
  std::vector<Finding> out;
  for (const logs::LogFinding* f : s.findings()) out.push_back(f->finding);
  return out;
}

TEST(BuiltinRules, AllParseWithUniqueIds) {
  std::vector<rules::RuleError> errors;
  std::set<std::string> ids;
  size_t parsed = 0;
  for (const rules::EmbeddedRule& e : rules::embedded_rules()) {
    auto r = rules::parse_rule(e.text, std::string("rules/") + e.name, errors);
    if (!r) continue;
    parsed++;
    EXPECT_TRUE(ids.insert(r->id).second) << "duplicate id " << r->id;
  }
  for (const rules::RuleError& e : errors) ADD_FAILURE() << e.origin << ": " << e.message;
  EXPECT_EQ(parsed, rules::embedded_rules().size());
  EXPECT_EQ(rules::RuleSet::builtin().all().size(), parsed);
  EXPECT_GE(parsed, 7u);
}

TEST(BuiltinRules, EveryRuleHasDocsAndFix) {
  for (const rules::Rule& r : rules::RuleSet::builtin().all()) {
    EXPECT_FALSE(r.title.empty()) << r.id;
    EXPECT_GE(r.explanation.size(), 80u) << r.id << ": explanation too thin to act on";
    EXPECT_FALSE(r.references.empty()) << r.id;
    EXPECT_TRUE(!r.fix.text.empty() || !r.fix.env.empty() || !r.fix.commands.empty()) << r.id;
    for (const std::string& id : r.replaces)
      EXPECT_NE(rules::RuleSet::builtin().find(id), nullptr) << r.id << " replaces unknown " << id;
  }
}

TEST(BuiltinRules, ExamplesMatchTheirRuleAndNegativesMatchNothing) {
  std::vector<rules::RuleError> errors;
  auto matcher = logs::Matcher::compile(rules::RuleSet::builtin(), errors);
  for (const rules::RuleError& e : errors) ADD_FAILURE() << e.origin << ": " << e.message;
  size_t positives = 0, negatives = 0;
  for (const rules::Rule& r : rules::RuleSet::builtin().all()) {
    for (const rules::Example& ex : r.examples) {
      positives++;
      std::vector<Finding> got = scan(matcher, ex.log);
      bool found =
          std::any_of(got.begin(), got.end(), [&](const Finding& f) { return f.rule == r.id; });
      std::string others;
      for (const Finding& f : got) others += f.rule + " ";
      EXPECT_TRUE(found) << r.id << ": example does not produce the rule (got: " << others << ")\n"
                         << ex.log;
    }
    for (const rules::Example& ex : r.negatives) {
      negatives++;
      for (const Finding& f : scan(matcher, ex.log))
        ADD_FAILURE() << r.id << ": negative example produces " << f.rule << " (" << f.message
                      << ")\n"
                      << ex.log;
    }
  }
  std::printf("checked %zu positive and %zu negative examples\n", positives, negatives);
}

// The binary reads the builtin rules from an image the build wrote instead
// of parsing TOML: reading it back must give every field as parsed, and an
// image cut short or damaged anywhere must be refused, never half-read.
TEST(BuiltinRules, ImageReadsBackExactlyAndDamageIsRefused) {
  const std::vector<rules::Rule>& parsed = rules::RuleSet::builtin().all();
  const std::string image = rules::rule_image(parsed);
  auto back = rules::read_rule_image(image);
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), parsed.size());
  for (size_t i = 0; i < parsed.size(); i++) EXPECT_TRUE((*back)[i] == parsed[i]) << parsed[i].id;
  for (size_t cut = 0; cut < image.size(); cut += 997)
    EXPECT_FALSE(rules::read_rule_image(std::string_view(image).substr(0, cut))) << cut;
  EXPECT_FALSE(rules::read_rule_image(image + "x"));
  std::string damaged = image;
  damaged[9] = '\xff';  // the rule count: far more than the bytes could hold
  EXPECT_FALSE(rules::read_rule_image(damaged));
  EXPECT_FALSE(rules::read_rule_image("MLDRULES0"));
}

TEST(RuleTemplates, CapturesAndDemangledNames) {
  std::vector<std::string> caps = {"all", "libx.so", "_ZN3c104cuda9SetDeviceEi", "plain_c_name",
                                   "_Zgarbage"};
  EXPECT_EQ(rules::render_template("{1} needs {2:demangled}", caps),
            "libx.so needs c10::cuda::SetDevice(int) (_ZN3c104cuda9SetDeviceEi)");
  // Names that are not mangled, or do not demangle, stay as written.
  EXPECT_EQ(rules::render_template("{3:demangled} {4:demangled}", caps), "plain_c_name _Zgarbage");
  // Unknown groups and unknown filters are left as they are.
  EXPECT_EQ(rules::render_template("{7} {1:upper}", caps), "{7} {1:upper}");
}

TEST(RuleParser, ReportsEveryProblem) {
  std::vector<rules::RuleError> errors;
  auto r = rules::parse_rule(R"(
id = "BAD01"
severity = "fatal"
title = "Ends with a period."
explanation = "x"
references = ["not a url"]
colour = "red"
[[signature]]
pattern = 'x'
at_end = true
followed_by = 'y'
)",
                             "rules/BAD01.toml", errors);
  EXPECT_FALSE(r);
  std::string all;
  for (const rules::RuleError& e : errors) all += e.message + "\n";
  for (const char* want : {"is not 2-5 capital letters and 3 digits", "severity 'fatal'",
                           "final period", "not a URL", "unknown key 'colour'", "missing [fix]",
                           "cannot have followed_by", "needs at least one [[example]]"})
    EXPECT_NE(all.find(want), std::string::npos) << "missing problem: " << want << "\nall:\n"
                                                 << all;
}

TEST(RuleParser, TomlSyntaxErrorNamesTheLine) {
  std::vector<rules::RuleError> errors;
  EXPECT_FALSE(rules::parse_rule("id = \"X\"\n\ntitle = = 3\n", "rules/X.toml", errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("line 3"), std::string::npos) << errors[0].message;
}

TEST(RuleParser, NonAsciiOutsideStringsIsRejectedBeforeToml) {
  // toml++ 3.3 reaches __builtin_unreachable() on these (found by rules-fuzz).
  for (const char* text : {"sesir\xef\xbb\xbdvt~", "x = 1 \xc3\xa9", "\xe3\x80\x81 = 2"}) {
    std::vector<rules::RuleError> errors;
    EXPECT_FALSE(rules::parse_rule(text, "", errors));
    ASSERT_EQ(errors.size(), 1u);
    EXPECT_NE(errors[0].message.find("non-ASCII character outside a string"), std::string::npos);
  }
  // Inside strings and comments it is fine.
  std::vector<rules::RuleError> errors;
  rules::parse_rule(
      "# caf\xc3\xa9\ntitle = \"caf\xc3\xa9 \\\" \xef\xbb\xbd\"\nexplanation = '''\xc3\xa9'''\n",
      "", errors);
  for (const rules::RuleError& e : errors)
    EXPECT_EQ(e.message.find("non-ASCII"), std::string::npos) << e.message;
}

TEST(RuleParser, NonAsciiWhereTomlppClassifiesItIsRejectedBeforeToml) {
  // toml++ reads a bare value on to the next space, ',', ']', '}' or '#', and
  // a quote inside one starts no string (found by rules-fuzz, corpus
  // toml-unreachable-in-bare-value.toml); in a """ string it classifies the
  // character after a backslash and those after a line-ending backslash.
  for (const char* text : {"x = 1=\"\xd0\x9b\"\n", "x = 1[\"\xd0\x9b\"]\n", "x = 1.\"\xd0\x9b\"\n",
                           "x = [1'\xc2\xa7']\n", "x = {a = 2\"\xc2\xa7\"}\n",
                           "x = \"a\" \"\xc2\xa7\"\n", "id = 2\"c\x02:\xd0\x9b= \"\n"}) {
    std::vector<rules::RuleError> errors;
    EXPECT_FALSE(rules::parse_rule(text, "", errors));
    ASSERT_EQ(errors.size(), 1u) << text;
    EXPECT_NE(errors[0].message.find("line 1: a non-ASCII character outside a string"),
              std::string::npos)
        << errors[0].message;
  }
  for (const char* text :
       {"s = \"\"\"\\\n\xc2\xa7\"\"\"\n", "s = \"\"\"\\  \n \n\t\xe2\x80\x80\xc2\xa7\"\"\"\n",
        "s = \"\"\"\\\xc2\xa7\"\"\"\n"}) {
    std::vector<rules::RuleError> errors;
    EXPECT_FALSE(rules::parse_rule(text, "", errors));
    ASSERT_EQ(errors.size(), 1u) << text;
    EXPECT_NE(errors[0].message.find("non-ASCII character"), std::string::npos)
        << errors[0].message;
    EXPECT_NE(errors[0].message.find("backslash"), std::string::npos) << errors[0].message;
  }
  // Strings where TOML puts them still take any character.
  std::vector<rules::RuleError> errors;
  rules::parse_rule(
      "x=\"\xc3\xa9\"\n[a.\"\xc3\xa9\"]\ny = [\"\xc3\xa9\", # \xc3\xa9\n  '\xc3\xa9']\n"
      "z = {k = \"\xc3\xa9\", \"\xc3\xa9\" = 1}\ns = \"\"\"\\\n  a \xc2\xa7\"\"\"\n",
      "", errors);
  for (const rules::RuleError& e : errors)
    EXPECT_EQ(e.message.find("non-ASCII"), std::string::npos) << e.message;
}

TEST(RuleParser, IdMustMatchFileName) {
  std::vector<rules::RuleError> errors;
  EXPECT_FALSE(rules::parse_rule(R"(id = "ABC123"
severity = "info"
title = "t"
explanation = "e"
references = ["https://x"]
detector = "d"
[fix]
text = "f"
)",
                                 "dir/ABC124.toml", errors));
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].message.find("differs from the file name"), std::string::npos);
}

TEST(RuleSet, UserRuleCannotReuseBuiltinId) {
  rules::RuleSet set = rules::RuleSet::builtin();
  rules::Rule dup;
  dup.id = set.all().front().id;
  dup.origin = "mine.toml";
  std::vector<rules::RuleError> errors;
  EXPECT_FALSE(set.add(dup, errors));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("already used"), std::string::npos);
}

TEST(RuleSet, MissingUserDirIsAnError) {
  std::vector<rules::RuleError> errors;
  rules::RuleSet s = rules::RuleSet::with_user_dir("/nonexistent/rules", errors);
  EXPECT_EQ(errors.size(), 1u);
  EXPECT_EQ(s.all().size(), rules::RuleSet::builtin().all().size());
}

TEST(Fix, OneLineTakesTheFirstParagraphAndItsCodeBlock) {
  EXPECT_EQ(rules::one_line_fix("\nDo this\nnow.\n\nMore detail.\n"), "Do this now.");
  EXPECT_EQ(rules::one_line_fix("Bind the GPU:\n\n```python\na = 1\nb(a)\n```\n\nLater."),
            "Bind the GPU: a = 1; b(a)");
  EXPECT_EQ(rules::one_line_fix("Ends with colon:\n\nNo code."), "Ends with colon:");
}

TEST(Template, SubstitutesCaptures) {
  EXPECT_EQ(rules::render_template("{1} vs {2} {9} {x}", {"all", "a", "b"}), "a vs b {9} {x}");
}

}  // namespace
}  // namespace mld
