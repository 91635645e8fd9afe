// logs-test.cc — the log scanner on hostile input: arbitrary feed splits,
// ANSI colour, '\r' progress bars, NUL bytes and invalid UTF-8, a line of
// tens of megabytes, rank prefixes, de-duplication, context, follow-up
// lines, `replaces`, end-of-log rules and gzip input. Rules are written in the
// test so the behaviour under test does not move with the knowledge base.
#include "logs/logs.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <map>

#include "rules/rules.h"

namespace mld {
namespace {

std::shared_ptr<const logs::Matcher> test_matcher() {
  static const char* kRules[][2] = {
      {"TST010", R"(id = "TST010"
severity = "error"
title = "Duplicate runtime"
explanation = "e"
references = ["https://example.org/1"]
[fix]
text = "one runtime"
env = ["X=1"]
[[signature]]
pattern = 'OMP: Error #15: Initializing (\S+), but found (\S+) already initialized'
message = "{1} initialised while {2} already was"
[[example]]
log = "OMP: Error #15: Initializing a, but found b already initialized."
source = "https://example.org/1"
[[negative]]
log = "n"
why = "w"
)"},
      {"TST011", R"(id = "TST011"
severity = "error"
title = "NCCL system error"
explanation = "e"
references = ["https://example.org/2"]
[fix]
text = "f"
[[signature]]
pattern = 'NCCL error in: \S+, unhandled system error'
followed_by = 'Last error:'
within = 3
[[example]]
log = "NCCL error in: x.cpp:1, unhandled system error"
source = "https://example.org/2"
[[negative]]
log = "n"
why = "w"
)"},
      {"TST012", R"(id = "TST012"
severity = "warning"
title = "Missing library"
explanation = "e"
references = ["https://example.org/3"]
[fix]
text = "f"
[[signature]]
pattern = '(lib[\w.+-]+\.so[\w.]*): cannot open shared object file'
message = "{1} not found"
[[example]]
log = "libx.so.1: cannot open shared object file"
source = "https://example.org/3"
[[negative]]
log = "n"
why = "w"
)"},
      {"TST013", R"(id = "TST013"
severity = "error"
title = "Missing CUDA runtime"
explanation = "e"
references = ["https://example.org/4"]
replaces = ["TST012"]
[fix]
text = "f"
[[signature]]
pattern = '(libcudart\.so[\d.]*): cannot open shared object file'
message = "{1} missing"
[[example]]
log = "libcudart.so.11.0: cannot open shared object file"
source = "https://example.org/4"
[[negative]]
log = "n"
why = "w"
)"},
      {"TST014", R"(id = "TST014"
severity = "error"
title = "Build stalled"
explanation = "e"
references = ["https://example.org/5"]
[fix]
text = "f"
[[signature]]
pattern = 'Using (\S+) as PyTorch extensions root'
message = "stalled waiting in {1}"
at_end = true
[[signature]]
pattern = 'Building extension module \w+'
at_end = true
[[example]]
log = "Using /x as PyTorch extensions root..."
source = "https://example.org/5"
[[negative]]
log = "n"
why = "w"
)"},
  };
  rules::RuleSet set;
  std::vector<rules::RuleError> errors;
  for (auto& [id, text] : kRules) {
    auto r = rules::parse_rule(text, std::string(id) + ".toml", errors);
    EXPECT_TRUE(r) << id;
    if (r) set.add(*r, errors);
  }
  for (auto& e : errors) ADD_FAILURE() << e.origin << ": " << e.message;
  auto m = logs::Matcher::compile(set, errors);
  for (auto& e : errors) ADD_FAILURE() << e.origin << ": " << e.message;
  return m;
}

struct Result {
  std::vector<Finding> findings;
  u64 lines;
};

// Feeds `text` in pieces of `piece` bytes (0: all at once).
Result scan(const std::string& text, size_t piece = 0, u32 context = 0, unsigned threads = 1) {
  static auto m = test_matcher();
  logs::Scanner s(m, {context, "log", threads});
  if (piece == 0) piece = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += piece)
    s.feed(
        ByteView(reinterpret_cast<const u8*>(text.data()) + i, std::min(piece, text.size() - i)));
  s.finish();
  Result r{{}, s.lines()};
  for (const logs::LogFinding* f : s.findings()) r.findings.push_back(f->finding);
  return r;
}

const std::string kOmp =
    "OMP: Error #15: Initializing libiomp5.so, but found libomp.so already initialized.";

TEST(LogScanner, FindsWithLineNumberAndCaptures) {
  Result r = scan("a\nb\n" + kOmp + "\nc\n");
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].rule, "TST010");
  EXPECT_EQ(r.findings[0].message, "libiomp5.so initialised while libomp.so already was");
  EXPECT_EQ(r.findings[0].evidence[0].line, 3u);
  EXPECT_EQ(r.findings[0].fix, "one runtime");
  EXPECT_EQ(r.findings[0].env_fix, std::vector<std::string>{"X=1"});
  EXPECT_EQ(r.lines, 4u);
}

TEST(LogScanner, AnySplitOfTheInputGivesTheSameFindings) {
  std::string text;
  for (int i = 0; i < 50; i++) text += "noise line " + std::to_string(i) + "\n";
  text += "[rank2]:" + kOmp + "\n" +
          "x\nNCCL error in: a.cpp:5, unhandled system error\nLast error:\nsocket\n" +
          "libfoo.so.3: cannot open shared object file\n";
  Result whole = scan(text);
  ASSERT_EQ(whole.findings.size(), 3u);
  for (size_t piece : {1, 2, 3, 7, 64, 1000}) {
    Result split = scan(text, piece);
    ASSERT_EQ(split.findings.size(), whole.findings.size()) << "piece " << piece;
    for (size_t i = 0; i < whole.findings.size(); i++) {
      EXPECT_EQ(split.findings[i].message, whole.findings[i].message) << "piece " << piece;
      EXPECT_EQ(split.findings[i].evidence.size(), whole.findings[i].evidence.size())
          << "piece " << piece;
      EXPECT_EQ(split.findings[i].evidence[0].line, whole.findings[i].evidence[0].line)
          << "piece " << piece;
    }
  }
}

TEST(LogScanner, ThreadsGiveTheSameFindingsAsOne) {
  std::string text;
  for (int i = 0; i < 60000; i++) {
    text += "[rank" + std::to_string(i % 8) + "]: step " + std::to_string(i) +
            " loss 0.25 \x1b[32mok\x1b[0m\n";
    if (i % 997 == 0) text += "[rank" + std::to_string(i % 8) + "]:" + kOmp + "\n";
    if (i % 1499 == 0)
      text += "lib" + std::to_string(i) + ".so.1: cannot open shared object file\n";
    if (i % 4001 == 0) text += "NCCL error in: a.cpp:5, unhandled system error\nx\nLast error:\n";
  }
  Result one = scan(text, 1 << 20, 1, 1);
  for (unsigned threads : {2u, 3u, 8u}) {
    Result many = scan(text, 1 << 20, 1, threads);
    ASSERT_EQ(many.findings.size(), one.findings.size());
    EXPECT_EQ(many.lines, one.lines);
    for (size_t i = 0; i < one.findings.size(); i++) {
      EXPECT_EQ(many.findings[i].message, one.findings[i].message);
      EXPECT_EQ(many.findings[i].count, one.findings[i].count);
      EXPECT_EQ(many.findings[i].last_line, one.findings[i].last_line);
      ASSERT_EQ(many.findings[i].evidence.size(), one.findings[i].evidence.size());
      for (size_t k = 0; k < one.findings[i].evidence.size(); k++)
        EXPECT_EQ(many.findings[i].evidence[k].text, one.findings[i].evidence[k].text);
    }
  }
  EXPECT_GT(one.findings.size(), 40u);
}

// Line numbers come from counting newlines in bulk (vector code, only up to
// each hit): every finding's line must be the one a plain count gives, on
// lines of every length, across segment and block boundaries.
TEST(LogScanner, LineNumbersAreExactAcrossSegments) {
  std::string text;
  std::map<std::string, u64> expected;  // message -> line
  u64 line = 0;
  unsigned seed = 12345;
  auto next = [&] { return seed = seed * 1103515245u + 12345u, (seed >> 8) & 0xffff; };
  while (text.size() < (3u << 20)) {
    line++;
    if (next() % 211 == 0) {
      std::string lib = "lib" + std::to_string(line) + ".so.1";
      text += "\x1b[31m" + lib + ": cannot open shared object file\x1b[0m\n";
      expected[lib + " not found"] = line;
      continue;
    }
    size_t len = next() % 300;
    for (size_t k = 0; k < len; k++) text += static_cast<char>('a' + (k * 7 + line) % 26);
    if (len % 5 == 0) text += "\r";
    text += "\n";
  }
  for (unsigned threads : {1u, 2u})
    for (size_t piece : {size_t{1} << 20, size_t{4093}}) {
      Result r = scan(text, piece, 0, threads);
      ASSERT_EQ(r.findings.size(), expected.size()) << threads << " threads, piece " << piece;
      EXPECT_EQ(r.lines, line);
      for (const Finding& f : r.findings) {
        ASSERT_TRUE(expected.count(f.message)) << f.message;
        EXPECT_EQ(f.evidence[0].line, expected[f.message])
            << f.message << ", " << threads << " threads, piece " << piece;
      }
    }
}

TEST(LogScanner, AnsiColourCodesDoNotHideAMatch) {
  Result r = scan(
      "\x1b[1;31mOMP: Error #15: \x1b[0mInitializing a.so, but found b.so already "
      "initialized.\x1b[0m\n");
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].evidence[0].text,
            "OMP: Error #15: Initializing a.so, but found b.so already initialized.");
}

// Vectorscan scans for a literal every match must contain (the longest one
// the pattern spells out) instead of the pattern; PCRE2 confirms. Patterns
// whose syntax makes a naive reading wrong must still find their line.
TEST(LogScanner, LiteralPrefilterNeverLosesAMatch) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(ab?cdefgh ijklmnop)", "x acdefgh ijklmnop y"},
      {R"(colou?r mismatch detected here)", "color mismatch detected here"},
      {R"(x{2}yyyyyyyyy zzz)", "xxyyyyyyyyy zzz"},
      {R"((?i)case insensitive needle)", "CASE INSENSITIVE NEEDLE"},
      {R"(short|alternative at the top level)", "a short one"},
      {R"(\Qa+b literal text\E)", "a+b literal text"},
      {R"(abc\d+ def ghij klmnop)", "abc12 def ghij klmnop"},
      {R"((?:group one)? trailing literal text)", " trailing literal text"},
      {R"([[:alpha:]]+ failed badly here)", "x failed badly here"},
      {R"(\x41\x42C literal via hex escapes)", "ABC literal via hex escapes"},
      {R"(tab\tseparated fields here)", "tab\tseparated fields here"},
      {R"(repeat+ed letters in a row)", "repeatttted letters in a row"},
      {R"((a(b)c|d) nested groups then text)", "d nested groups then text"},
      {R"([]x] bracket first in a class list)", "] bracket first in a class list"},
      {R"(\cAcontrol then literal text)",
       "\x01"
       "control then literal text"},
      {R"(lazy quantifier a*?bcdefghij klm)", "lazy quantifier bcdefghij klm"},
      {R"(braces a{1,3}bcdefghijk)", "braces aaabcdefghijk"},
  };
  for (auto& [pattern, line] : cases) {
    std::string toml = std::string("id = \"TST090\"\nseverity = \"error\"\ntitle = \"t\"\n") +
                       "explanation = \"e\"\nreferences = [\"https://example.org/9\"]\n" +
                       "[fix]\ntext = \"f\"\n[[signature]]\npattern = '''" + pattern + "'''\n" +
                       "[[example]]\nlog = \"x\"\nsource = \"https://example.org/9\"\n" +
                       "[[negative]]\nlog = \"n\"\nwhy = \"w\"\n";
    std::vector<rules::RuleError> errors;
    auto rule = rules::parse_rule(toml, "TST090.toml", errors);
    ASSERT_TRUE(rule) << pattern << ": " << (errors.empty() ? "" : errors[0].message);
    rules::RuleSet set;
    set.add(*rule, errors);
    auto m = logs::Matcher::compile(set, errors);
    ASSERT_TRUE(errors.empty()) << pattern << ": " << errors[0].message;
    for (unsigned threads : {1u, 2u}) {
      logs::Scanner s(m, {0, "log", threads});
      std::string text = std::string("noise\n") + line + "\nmore noise\n";
      s.feed(ByteView(reinterpret_cast<const u8*>(text.data()), text.size()));
      s.finish();
      ASSERT_EQ(s.findings().size(), 1u) << pattern;
      EXPECT_EQ(s.findings()[0]->first_line, 2u) << pattern;
    }
  }
}

TEST(LogText, StripAnsiKeepsTextAndNewlinesAndAppends) {
  auto strip = [](std::string_view in, std::string out = "") {
    logs::strip_ansi(ByteView(reinterpret_cast<const u8*>(in.data()), in.size()), out);
    return out;
  };
  EXPECT_EQ(strip("plain\nline\n"), "plain\nline\n");
  EXPECT_EQ(strip("\x1b[1;31mred\x1b[0m and \x1b[Kclear\n"), "red and clear\n");
  EXPECT_EQ(strip("\x1b]0;title\x07text\n\x1b]8;;http://x\x1b\\link\n"), "text\nlink\n");
  EXPECT_EQ(strip("\x1b]0;unterminated\nnext\n"), "\nnext\n");  // an OSC stops at a newline
  EXPECT_EQ(strip("a\x1b(Bb\x1b\n"), "ab\n");                   // two-byte; ESC before '\n'
  EXPECT_EQ(strip("end\x1b"), "end");
  EXPECT_EQ(strip("\x1b[", "kept:"), "kept:");
  EXPECT_EQ(strip("x\x1b[2Jy", "kept:"), "kept:xy");
}

TEST(LogScanner, ProgressBarsNulBytesAndInvalidUtf8) {
  std::string text = "epoch 1: 10%|#  |\r epoch 1: 20%|## |\r[rank5]:" + kOmp + "\r\n";
  static constexpr char kJunk[] = "bin\0ary\xff\xfe junk\n";
  text += std::string(kJunk, sizeof kJunk - 1);  // the NUL inside, not the terminating one
  text += "\xc3(libz\x80.so: cannot open shared object file\n";
  Result r = scan(text);
  ASSERT_EQ(r.findings.size(), 1u);  // "libz\x80.so" is no library name
  EXPECT_EQ(r.findings[0].evidence[0].text, "[rank5]:" + kOmp);
  EXPECT_EQ(r.findings[0].ranks, std::vector<u32>{5});
  std::string shown = logs::printable_line(std::string("a\0b\xff\x1b[0m", 8), 0);
  EXPECT_EQ(shown, "a\\x00b\\xff\\x1b[0m");
}

// A log written by PowerShell's `>` (UTF-16LE with a byte-order mark), or
// UTF-16 without one, is decoded: same findings and line numbers as its
// UTF-8 text, in any split of the input (odd offsets cut code units and
// surrogate pairs). A log that merely starts with NUL bytes is not UTF-16.
std::string utf16(const std::u16string& text, bool little_endian, bool bom) {
  std::string out;
  if (bom) out += little_endian ? "\xff\xfe" : "\xfe\xff";
  for (char16_t c : text) {
    char lo = static_cast<char>(c & 0xff), hi = static_cast<char>(c >> 8);
    out += little_endian ? lo : hi;
    out += little_endian ? hi : lo;
  }
  return out;
}

TEST(LogScanner, Utf16LogsAreDecodedInAnySplit) {
  const std::u16string text =
      u"PS C:\\Users\\me> python train.py\r\n\u6a21\u578b \U0001F600 loading\r\n"
      u"OMP: Error #15: Initializing libiomp5md.dll, but found libiomp5md.dll already "
      u"initialized.\r\nlast\r\n";
  for (bool le : {true, false})
    for (bool bom : {true, false}) {
      const std::string bytes = utf16(text, le, bom);
      for (size_t piece : {0, 1, 2, 3, 7, 63, 65}) {
        static auto m = test_matcher();
        logs::Scanner s(m, {0, "log", 1});
        size_t step = piece ? piece : bytes.size();
        for (size_t i = 0; i < bytes.size(); i += step)
          s.feed(ByteView(reinterpret_cast<const u8*>(bytes.data()) + i,
                          std::min(step, bytes.size() - i)));
        s.finish();
        SCOPED_TRACE(std::string(le ? "LE" : "BE") + (bom ? " with BOM" : " without BOM") +
                     ", piece " + std::to_string(piece));
        EXPECT_EQ(s.encoding(), le ? "UTF-16LE" : "UTF-16BE");
        EXPECT_EQ(s.lines(), 4u);
        ASSERT_EQ(s.findings().size(), 1u);
        EXPECT_EQ(s.findings()[0]->finding.evidence[0].line, 3u);
        EXPECT_EQ(s.findings()[0]->finding.message,
                  "libiomp5md.dll initialised while libiomp5md.dll already was");
      }
    }
  // Not UTF-16: NUL padding before text, and a short 8-bit log.
  for (std::string bytes :
       {std::string(1000, '\0') + kOmp + "\n", kOmp + "\n", std::string("ab")}) {
    static auto m = test_matcher();
    logs::Scanner s(m, {0, "log", 1});
    s.feed(ByteView(reinterpret_cast<const u8*>(bytes.data()), bytes.size()));
    s.finish();
    EXPECT_EQ(s.encoding(), "");
    EXPECT_EQ(s.findings().size(), bytes.size() > 2 ? 1u : 0u);
  }
  // A run of one control byte is shown once, with its length.
  EXPECT_EQ(logs::printable_line(std::string(300, '\0') + "x", 301), "\\x00\u00d7300x");
}

TEST(LogScanner, DeduplicatesWithCountsAndRanks) {
  std::string text;
  for (int rank : {3, 0, 1, 2, 7}) text += "[rank" + std::to_string(rank) + "]:" + kOmp + "\n";
  text += "[default4]:" + kOmp + "\n";
  Result r = scan(text);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].count, 6u);
  EXPECT_EQ(r.findings[0].last_line, 6u);
  EXPECT_EQ(r.findings[0].ranks, (std::vector<u32>{0, 1, 2, 3, 4, 7}));
}

TEST(LogScanner, ContextLinesAroundTheFirstOccurrence) {
  Result r = scan("one\ntwo\nthree\n" + kOmp + "\nfive\nsix\nseven\n", 0, 2);
  ASSERT_EQ(r.findings.size(), 1u);
  const auto& ev = r.findings[0].evidence;
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].text, "two");
  EXPECT_TRUE(ev[0].context);
  EXPECT_EQ(ev[2].line, 4u);
  EXPECT_FALSE(ev[2].context);
  EXPECT_EQ(ev[4].text, "six");
  // The same across feeds of one byte (context spanning segments).
  Result split = scan("one\ntwo\nthree\n" + kOmp + "\nfive\nsix\nseven\n", 1, 2);
  ASSERT_EQ(split.findings.size(), 1u);
  ASSERT_EQ(split.findings[0].evidence.size(), 5u);
  EXPECT_EQ(split.findings[0].evidence[0].text, "two");
  EXPECT_EQ(split.findings[0].evidence[4].text, "six");
}

TEST(LogScanner, FollowUpLineWithinItsWindowOnly) {
  Result near =
      scan("NCCL error in: a.cpp:5, unhandled system error\nx\nLast error:\nsocket timeout\n");
  ASSERT_EQ(near.findings.size(), 1u);
  ASSERT_EQ(near.findings[0].evidence.size(), 2u);
  EXPECT_EQ(near.findings[0].evidence[1].text, "Last error:");
  EXPECT_EQ(near.findings[0].evidence[1].line, 3u);
  Result far = scan("NCCL error in: a.cpp:5, unhandled system error\n1\n2\n3\n4\nLast error:\n");
  ASSERT_EQ(far.findings.size(), 1u);
  EXPECT_EQ(far.findings[0].evidence.size(), 1u);
}

TEST(LogScanner, SpecificRuleReplacesGenericOnTheSameLine) {
  Result r = scan(
      "libcudart.so.11.0: cannot open shared object file\nlibfoo.so.2: cannot open shared object "
      "file\n");
  ASSERT_EQ(r.findings.size(), 2u);
  EXPECT_EQ(r.findings[0].rule, "TST013");
  EXPECT_EQ(r.findings[1].rule, "TST012");
  EXPECT_EQ(r.findings[1].message, "libfoo.so.2 not found");
}

TEST(LogScanner, EndOfLogRuleOnlyWhenTheLogEndsThere) {
  std::string head =
      "start\nUsing /root/.cache/torch_extensions/py311_cpu as PyTorch extensions root...\n";
  Result stalled = scan(head + "Building extension module fused_adam...\n\n  \n");
  ASSERT_EQ(stalled.findings.size(), 1u);
  EXPECT_EQ(stalled.findings[0].rule, "TST014");
  EXPECT_EQ(stalled.findings[0].message,
            "stalled waiting in /root/.cache/torch_extensions/py311_cpu");
  ASSERT_EQ(stalled.findings[0].evidence.size(), 2u);
  EXPECT_EQ(stalled.findings[0].evidence[1].line, 3u);
  Result unterminated = scan(head.substr(0, head.size() - 1));  // no final newline
  EXPECT_EQ(unterminated.findings.size(), 1u);
  Result went_on = scan(head + "Loading extension module fused_adam...\nepoch 1\n");
  EXPECT_TRUE(went_on.findings.empty());
  // The same chain fed in pieces (tail kept across blocks), after a long log.
  std::string noise;
  for (int i = 0; i < 20000; i++) noise += "epoch " + std::to_string(i) + " loss 0.5\n";
  for (size_t piece : {7, 4096, 300000}) {
    Result split = scan(noise + head + "Building extension module fused_adam...\n", piece);
    ASSERT_EQ(split.findings.size(), 1u) << piece;
    ASSERT_EQ(split.findings[0].evidence.size(), 2u) << piece;
    EXPECT_EQ(split.findings[0].evidence[0].line, 20002u) << piece;
  }
}

TEST(LogScanner, HugeLineStillMatchesAndIsTruncatedInEvidence) {
  std::string text(30u << 20, 'x');
  text += " " + kOmp + "\nafter\n";
  Result r = scan(text, 4 << 20);
  ASSERT_EQ(r.findings.size(), 1u);
  EXPECT_EQ(r.findings[0].evidence[0].line, 1u);
  EXPECT_LE(r.findings[0].evidence[0].text.size(), 420u);
  EXPECT_NE(r.findings[0].evidence[0].text.find("already initialized"), std::string::npos);
  EXPECT_EQ(r.lines, 2u);
}

TEST(LogScanner, RankPrefixes) {
  EXPECT_EQ(logs::line_rank("[rank12]: x"), 12u);
  EXPECT_EQ(logs::line_rank("[default3]:x"), 3u);
  EXPECT_EQ(logs::line_rank("rank7: x"), 7u);
  EXPECT_EQ(logs::line_rank("  5: text"), 5u);
  EXPECT_EQ(logs::line_rank("[rank]: x"), std::nullopt);
  EXPECT_EQ(logs::line_rank("2024: year"), 2024u);  // srun label shape; a date would need "YYYY-"
  EXPECT_EQ(logs::line_rank("12:30:01 x"), std::nullopt);
}

TEST(LogInput, GzipIsReadByMagicAndCorruptionIsAnError) {
  std::string path = testing::TempDir() + "/mld-logs-test.gz";
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_TRUE(gz);
  std::string text = "noise\n" + kOmp + "\n";
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  static auto m = test_matcher();
  {
    logs::Scanner s(m, {0, path});
    logs::scan_input(path, s, {});
    s.finish();
    ASSERT_EQ(s.findings().size(), 1u);
    EXPECT_EQ(s.findings()[0]->first_line, 2u);
  }
  // Truncate the compressed file: an error, with what was read kept.
  ASSERT_EQ(truncate(path.c_str(), 20), 0);
  logs::Scanner s(m, {0, path});
  EXPECT_THROW(logs::scan_input(path, s, {}), IoError);
  unlink(path.c_str());
}

// A large file is scanned from a mapping: the same findings as the same
// bytes fed from memory, on both sides of every block boundary.
TEST(LogInput, MappedFileGivesTheSameFindingsAsFedBytes) {
  std::string text;
  for (int i = 0; text.size() < (36u << 20); i++) {  // over two blocks of the mapping
    text += "step " + std::to_string(i) + " loss 0.25 \x1b[32mok\x1b[0m\n";
    if (i % 100003 == 0)
      text += "lib" + std::to_string(i) + ".so.1: cannot open shared object file\n";
  }
  text += kOmp;  // no final newline
  std::string path = testing::TempDir() + "/mld-logs-mapped.log";
  {
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_TRUE(f);
    ASSERT_EQ(fwrite(text.data(), 1, text.size(), f), text.size());
    fclose(f);
  }
  static auto m = test_matcher();
  // Mapped throughout; mapped for the first block, then read from there on
  // (the path taken where touching a mapping was measured slow); read.
  for (const char* max_ns : {"", "0", "-1"})
    for (unsigned threads : {1u, 2u}) {
      setenv("MLDOCTOR_LOG_MAP_MAX_NS", max_ns, 1);
      logs::Scanner s(m, {1, path, threads});
      logs::scan_input(path, s, {});
      s.finish();
      unsetenv("MLDOCTOR_LOG_MAP_MAX_NS");
      Result fed = scan(text, 0, 1, threads);
      ASSERT_EQ(s.findings().size(), fed.findings.size()) << "max ns '" << max_ns << "'";
      EXPECT_EQ(s.lines(), fed.lines);
      EXPECT_EQ(s.bytes(), text.size());
      for (size_t i = 0; i < fed.findings.size(); i++) {
        EXPECT_EQ(s.findings()[i]->finding.message, fed.findings[i].message);
        const std::vector<Evidence>& mapped = s.findings()[i]->finding.evidence;
        ASSERT_EQ(mapped.size(), fed.findings[i].evidence.size());
        for (size_t k = 0; k < mapped.size(); k++) {
          EXPECT_EQ(mapped[k].line, fed.findings[i].evidence[k].line);
          EXPECT_EQ(mapped[k].text, fed.findings[i].evidence[k].text);
        }
      }
    }
  unlink(path.c_str());
}

// logrotate's copytruncate empties a log while it is being read: the scan
// must not die of SIGBUS on the mapping's vanished pages. What was read is
// kept, the input is an error that says what happened, and SIGBUS is left
// as it was.
TEST(LogInput, FileTruncatedWhileMappedIsAnErrorNotACrash) {
  std::string text;
  std::string late_lib;
  for (int i = 0; text.size() < (48u << 20); i++) {
    text += "noise line " + std::to_string(i) + "\n";
    if (i == 1000) text += kOmp + "\n";  // in the first block
    if (text.size() > (40u << 20) && late_lib.empty()) {
      late_lib = "lib" + std::to_string(i) + ".so.1";
      text += late_lib + ": cannot open shared object file\n";
    }
  }
  std::string path = testing::TempDir() + "/mld-logs-truncated.log";
  {
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_TRUE(f);
    ASSERT_EQ(fwrite(text.data(), 1, text.size(), f), text.size());
    fclose(f);
  }
  struct sigaction before {};
  sigaction(SIGBUS, nullptr, &before);
  static auto m = test_matcher();
  // The guard is what is tested: map whatever page touches cost on this
  // machine (a slow or loaded one would otherwise read after block one).
  setenv("MLDOCTOR_LOG_MAP_MAX_NS", "1e12", 1);
  logs::Scanner s(m, {0, path, 2});
  logs::ReadOptions ro;
  int blocks = 0;
  ro.on_progress = [&] {
    if (++blocks == 1) {
      ASSERT_EQ(truncate(path.c_str(), 24 << 20), 0);  // mid-way through the next block
    }
  };
  try {
    logs::scan_input(path, s, ro);
    unsetenv("MLDOCTOR_LOG_MAP_MAX_NS");
    FAIL() << "no error for a file truncated under the scan";
  } catch (const IoError& e) {
    unsetenv("MLDOCTOR_LOG_MAP_MAX_NS");
    EXPECT_NE(std::string(e.what()).find("truncated while it was read"), std::string::npos)
        << e.what();
  }
  s.finish();
  ASSERT_GE(s.findings().size(), 1u);
  EXPECT_EQ(s.findings()[0]->finding.rule, "TST010");
  for (const logs::LogFinding* f : s.findings())
    EXPECT_EQ(f->finding.message.find(late_lib), std::string::npos);
  struct sigaction after {};
  sigaction(SIGBUS, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  unlink(path.c_str());
}

TEST(LogInput, DirectoryAndMissingFileAreClearErrors) {
  static auto m = test_matcher();
  logs::Scanner s(m, {});
  try {
    logs::scan_input("/", s, {});
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos);
  }
  try {
    logs::scan_input("/nonexistent/log", s, {});
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("No such file"), std::string::npos);
  }
}

}  // namespace
}  // namespace mld
