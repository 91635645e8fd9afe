// rules-test.cc — the generic knowledge-base test: every builtin rule parses
// and carries docs, a fix and references; ids are unique; every log rule's
// positive examples produce that rule through the real matcher (Vectorscan +
// PCRE2, the same path as `mldoctor logs`), every negative example produces
// no rule at all, and every format string a rule cites from its emitter's
// source, filled with sample values after each prefix real logs carry, makes
// the rule the first incident's cause. Also the format-string filler and the
// rule-file validator's error paths.
#include "rules/rules.h"

#include <gtest/gtest.h>

#include <set>

#include "logs/logs.h"

namespace mld {
namespace {

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

// Examples, negatives and the emitters' own format strings, through the real
// matcher (the check `mldoctor rules --check` runs).
TEST(BuiltinRules, ExamplesNegativesAndCitedFormatStringsProduceTheirRule) {
  std::vector<rules::RuleError> errors;
  auto matcher = logs::Matcher::compile(rules::RuleSet::builtin(), errors);
  for (const rules::RuleError& e : errors) ADD_FAILURE() << e.origin << ": " << e.message;
  logs::RuleCheckResult res = logs::check_rules(rules::RuleSet::builtin(), matcher);
  for (const logs::RuleCheckProblem& p : res.problems) ADD_FAILURE() << p.rule << ": " << p.what;
  EXPECT_GE(res.rules, 80u);
  EXPECT_GE(res.examples, res.rules);
  EXPECT_GE(res.negatives, res.rules);
  std::printf("checked %zu positive and %zu negative examples, %zu format strings (%zu lines)\n",
              res.examples, res.negatives, res.sources, res.source_lines);
}

// Every log rule with line signatures cites where its message is printed: a
// repository at a tag, or for a closed emitter (MKL) a Debian package's
// binary at a package version.
TEST(BuiltinRules, EveryLogRuleCitesTheSourceOfItsMessage) {
  std::vector<rules::RuleError> errors;
  auto matcher = logs::Matcher::compile(rules::RuleSet::builtin(), errors);
  logs::RuleCheckResult res = logs::check_rules(rules::RuleSet::builtin(), matcher);
  for (const std::string& id : res.unsourced)
    ADD_FAILURE() << id << " cites no [[source]] of its message";
  std::printf("%zu of %zu log rules cite the source of their message\n",
              res.rules - res.unsourced.size(), res.rules);
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

rules::Source format_source(std::string format, rules::FormatSyntax syntax,
                            std::vector<std::string> values = {}) {
  rules::Source s;
  s.format = std::move(format);
  s.syntax = syntax;
  s.values = std::move(values);
  return s;
}

TEST(FormatStrings, PrintfConversionsGetTypedSamplesOrTheGivenValues) {
  using rules::FormatSyntax;
  std::string error;
  auto fill = [&](std::string f, std::vector<std::string> v = {}) {
    return rules::instantiate_format(format_source(f, FormatSyntax::Printf, v), &error)
        .value_or("<" + error + ">");
  };
  EXPECT_EQ(fill("%s:%d:%d [%d] NCCL WARN Call to %s failed : %m"),
            "sample:3:3 [3] NCCL WARN Call to sample failed : Connection refused");
  EXPECT_EQ(fill("OMP: Error #15: Initializing %1$s, but found %2$s already initialized.",
                 {"libiomp5.so", "libomp.so"}),
            "OMP: Error #15: Initializing libiomp5.so, but found libomp.so already initialized.");
  EXPECT_EQ(fill("%2$s then %1$s", {"a", "b"}), "b then a");
  EXPECT_EQ(fill("%-10s|%5.2f|%lu|%zu|%llx|%p|%c|100%%|%.*s"),
            "sample|1.50|3|3|1f|0x7f3a2c001000|x|100%|sample");
  EXPECT_EQ(fill("%(name)s exited with %(code)d"), "sample exited with 3");
  EXPECT_EQ(fill("value %r"), "value 'sample'");
  EXPECT_EQ(fill("no placeholders"), "no placeholders");
  // Values must be one per argument.
  EXPECT_FALSE(
      rules::instantiate_format(format_source("%s and %s", FormatSyntax::Printf, {"a"}), &error));
  EXPECT_NE(error.find("takes 2 argument"), std::string::npos) << error;
  EXPECT_FALSE(
      rules::instantiate_format(format_source("%s", FormatSyntax::Printf, {"a", "b"}), &error));
  EXPECT_FALSE(rules::instantiate_format(format_source("50%", FormatSyntax::Printf), &error));
  EXPECT_FALSE(rules::instantiate_format(format_source("%y", FormatSyntax::Printf), &error));
  EXPECT_NE(error.find("unknown conversion '%y'"), std::string::npos) << error;
}

TEST(FormatStrings, BraceFieldsGetTypedSamplesOrTheGivenValues) {
  using rules::FormatSyntax;
  std::string error;
  auto fill = [&](std::string f, std::vector<std::string> v = {}) {
    return rules::instantiate_format(format_source(f, FormatSyntax::Brace, v), &error)
        .value_or("<" + error + ">");
  };
  EXPECT_EQ(fill("Watchdog caught collective operation timeout: WorkNCCL(SeqNum={}, "
                 "OpType={}, Timeout(ms)={}) ran for {} milliseconds before timing out.",
                 {"7", "ALLREDUCE", "600000", "600055"}),
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
            "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600055 milliseconds before timing out.");
  EXPECT_EQ(fill("{name!r} took {secs:.2f} s, {n:d} {{x}}"), "'sample' took 1.50 s, 3 {x}");
  EXPECT_EQ(fill("{1} {0}", {"a", "b"}), "b a");
  EXPECT_FALSE(rules::instantiate_format(format_source("{oops", FormatSyntax::Brace), &error));
  EXPECT_FALSE(rules::instantiate_format(format_source("a } b", FormatSyntax::Brace), &error));
  EXPECT_FALSE(
      rules::instantiate_format(format_source("lit", FormatSyntax::Literal, {"a"}), &error));
}

// A minimal valid log rule `id`, to which a test appends [[source]] tables.
std::string log_rule_head(const std::string& id) {
  return "id = \"" + id +
         "\"\nseverity = \"error\"\ntitle = \"t\"\nexplanation = \"e\"\n"
         "references = [\"https://example.org/9\"]\n[fix]\ntext = \"f\"\n"
         "[[signature]]\npattern = 'x'\n[[example]]\nlog = \"x\"\n"
         "source = \"https://example.org/9\"\n[[negative]]\nlog = \"y\"\nwhy = \"w\"\n";
}

TEST(RuleParser, SourceTablesAreValidated) {
  const std::string head = log_rule_head("OMP099");
  std::vector<rules::RuleError> errors;
  auto good = rules::parse_rule(head +
                                    "[[source]]\nrepository = \"llvm/llvm-project\"\n"
                                    "path = \"openmp/runtime/src/i18n/en_US.txt\"\nline = 12\n"
                                    "tag = \"llvmorg-18.1.8\"\nformat = \"x %s\"\n",
                                "", errors);
  ASSERT_TRUE(good) << (errors.empty() ? "" : errors[0].message);
  ASSERT_EQ(good->sources.size(), 1u);
  EXPECT_EQ(rules::source_url(good->sources[0]),
            "https://github.com/llvm/llvm-project/blob/llvmorg-18.1.8/openmp/runtime/src/i18n/"
            "en_US.txt#L12");
  errors.clear();
  EXPECT_FALSE(rules::parse_rule(head + "[[source]]\nrepository = \"https://github.com/a/b\"\n"
                                        "path = \"/abs\"\ntag = \"v1\"\nformat = \"%q\"\n"
                                        "syntax = \"go\"\nextra = 1\n",
                                 "", errors));
  std::string all;
  for (const rules::RuleError& e : errors) all += e.message + "\n";
  for (const char* want : {"not a GitHub owner/name", "path must be relative", "missing 'line'",
                           "syntax 'go'", "unknown key 'extra'"})
    EXPECT_NE(all.find(want), std::string::npos) << want << "\n" << all;
}

// A closed emitter is cited by a Debian package's binary at its version:
// no repository, no line.
TEST(RuleParser, BinarySourcesNameAPackage) {
  const std::string head = log_rule_head("MKL099");
  std::vector<rules::RuleError> errors;
  auto good = rules::parse_rule(head +
                                    "[[source]]\npackage = \"libmkl-core\"\n"
                                    "path = \"usr/lib/x86_64-linux-gnu/libmkl_core.so\"\n"
                                    "tag = \"2020.4.304-4\"\nformat = \"x %s\"\n",
                                "", errors);
  ASSERT_TRUE(good) << (errors.empty() ? "" : errors[0].message);
  ASSERT_EQ(good->sources.size(), 1u);
  EXPECT_EQ(good->sources[0].line, 0u);
  EXPECT_EQ(rules::source_url(good->sources[0]), "https://snapshot.debian.org/binary/libmkl-core/");
  std::string image = rules::rule_image({*good});
  auto back = rules::read_rule_image(image);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->at(0).sources, good->sources);
  errors.clear();
  EXPECT_FALSE(rules::parse_rule(head + "[[source]]\npackage = \"Lib_MKL\"\n"
                                        "repository = \"a/b\"\npath = \"p\"\nline = 3\n"
                                        "tag = \"1\"\nformat = \"x\"\n",
                                 "", errors));
  std::string all;
  for (const rules::RuleError& e : errors) all += e.message + "\n";
  for (const char* want : {"either 'repository' or 'package'", "not a Debian package name",
                           "a binary in a package has no 'line'"})
    EXPECT_NE(all.find(want), std::string::npos) << want << "\n" << all;
}

// `collect` (what to collect next when a log shows only this) belongs to log
// rules, and survives the rule image.
TEST(RuleParser, CollectIsForLogRules) {
  const std::string log_rule =
      "id = \"DIST099\"\nseverity = \"error\"\ntitle = \"t\"\nexplanation = \"e\"\n"
      "references = [\"https://example.org/9\"]\ncollect = \"each rank's own log\"\n"
      "envelope = true\n[fix]\ntext = \"f\"\n[[signature]]\npattern = 'x'\n"
      "[[example]]\nlog = \"x\"\nsource = \"https://example.org/9\"\n"
      "[[negative]]\nlog = \"y\"\nwhy = \"w\"\n";
  std::vector<rules::RuleError> errors;
  auto good = rules::parse_rule(log_rule, "", errors);
  ASSERT_TRUE(good) << (errors.empty() ? "" : errors[0].message);
  EXPECT_EQ(good->collect, "each rank's own log");
  auto back = rules::read_rule_image(rules::rule_image({*good}));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->at(0).collect, "each rank's own log");
  Finding f = rules::finding_from(Detection{"DIST099", "s", "m", {}, "", {}, false}, *good);
  EXPECT_EQ(f.collect, "each rank's own log");
  errors.clear();
  EXPECT_FALSE(
      rules::parse_rule("id = \"ENV099\"\nseverity = \"info\"\ntitle = \"t\"\n"
                        "explanation = \"e\"\nreferences = [\"https://x\"]\n"
                        "detector = \"d\"\ncollect = \"c\"\n[fix]\ntext = \"f\"\n",
                        "", errors));
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].message.find("collect is for log rules"), std::string::npos)
      << errors[0].message;
}

TEST(Template, SubstitutesCaptures) {
  EXPECT_EQ(rules::render_template("{1} vs {2} {9} {x}", {"all", "a", "b"}), "a vs b {9} {x}");
}

}  // namespace
}  // namespace mld
