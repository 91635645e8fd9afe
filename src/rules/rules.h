// rules.h — the knowledge base: one Rule per file under rules/ (TOML; format
// in docs/rule-format.md), compiled into the binary and extendable with a
// user's --rules-dir. A rule is either evaluated by a named C++ detector over
// facts, or carries log signatures that the log matcher (logs/) compiles.
// This layer only parses and validates; it neither matches nor prints.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/base.h"
#include "findings/findings.h"

namespace mld::rules {

struct Signature {
  std::string pattern;  // Vectorscan/PCRE2 common subset
  std::string message;  // template with {N} capture references, or empty
  std::string subject;  // template; empty: the rendered message
  bool case_insensitive = false;
  std::string followed_by;  // a later line attached as evidence, or empty
  u32 within = 20;          // lines after the match in which followed_by may come
  bool at_end = false;      // only when the log ends with this line (a stall)
  bool operator==(const Signature&) const = default;
};

// A wait recognised in a stack dump of a hung job (py-spy dump, faulthandler,
// gdb/pstack, a traceback printed at Ctrl-C): a thread whose stack holds a
// frame matching `frame` (matched against "function (file:line)" for Python
// frames, "function (library)" for native ones), with a caller frame
// matching `under` when given.
struct StackSignature {
  std::string frame;    // PCRE2 over the normalised frame text
  std::string under;    // optional: an outer (calling) frame of the same thread
  std::string message;  // template with {N} captures of `frame`, or empty
  std::string subject;  // template; empty: the rendered message
  bool operator==(const StackSignature&) const = default;
};

struct Example {
  std::string log;     // one or more lines
  std::string source;  // positive examples: where it was seen
  std::string why;     // negatives: why it must not match
  bool operator==(const Example&) const = default;
};

// Where an emitter prints a log rule's message: the format string in a public
// repository at a tag, or, for a closed-source emitter (Intel MKL), in the
// binary a Debian package ships at a package version. Signatures are derived from these (literals
// kept, placeholders typed, any prefix tolerated), and the rule check instantiates each one with
// sample values and requires the rule to name it.
enum class FormatSyntax {
  Printf,   // C printf (%s, %d, %1$s, %.*s, %m, %%) and Python's %-format (%(name)s)
  Brace,    // Python str.format / f-strings / fmt / c10::str pieces: {}, {0}, {name!r}, {:.2f}
  Literal,  // no placeholders
};
struct Source {
  std::string repository;  // GitHub "owner/name" ("llvm/llvm-project"); empty with `package`
  std::string package;     // or a Debian binary package whose binary holds the format
  std::string path;        // file in the repository (in the package: the binary)
  u32 line = 0;            // line of the format string at `tag` (0 in a binary)
  std::string tag;         // release tag or commit the line was read at (package version)
  std::string format;      // the message as the emitter formats it (escapes resolved)
  FormatSyntax syntax = FormatSyntax::Printf;
  std::vector<std::string> values;  // sample arguments in order; empty: typed defaults
  bool operator==(const Source&) const = default;
};

// The source's URL at its tag and line.
std::string source_url(const Source& s);

// `format` with every placeholder replaced by an argument: values[i] for the
// i-th argument (positional %N$ and {N} by their number), else a sample of
// the placeholder's type ("sample" for strings, 3 for integers, 1f for hex,
// 1.50 for floats, 0x7f3a2c001000 for pointers, an errno text for %m).
// nullopt with `error` set when the format is malformed for its syntax or
// the values do not fit.
std::optional<std::string> instantiate_format(const Source& source, std::string* error);

struct Fix {
  std::string text;              // Markdown
  std::vector<std::string> env;  // "NAME=value"
  std::vector<std::string> commands;
  bool operator==(const Fix&) const = default;
};

struct Rule {
  std::string id;  // "OMP010"
  Severity severity = Severity::Warning;
  // Fact rules: the severity when the detector reports the rule's escalation
  // condition (written in the explanation), e.g. OMP001's abort.
  std::optional<Severity> escalated_severity;
  std::string title;
  std::string explanation;  // Markdown
  std::vector<std::string> references;
  Fix fix;
  std::string detector;                // fact-based rules
  std::vector<Signature> signatures;   // log rules
  std::vector<StackSignature> stacks;  // log rules: waits in stack dumps
  std::vector<Source> sources;         // log rules: where the emitters print the message
  std::vector<std::string> replaces;   // more generic rules this one explains (hides on a line)
  // Log rules: the finding reports a wrapper around a cause (an exception
  // class, a launcher's summary, a generic NCCL result), which any error
  // finding of a non-envelope rule in the same log explains (see incidents).
  bool envelope = false;
  // Log rules: what to collect next when the log shows only this (an
  // envelope, a kill): where the cause is written ("the kernel log of that
  // node", "the failing rank's own output"), as one short paragraph.
  std::string collect;
  std::vector<Example> examples;
  std::vector<Example> negatives;
  bool withdrawn = false;
  bool builtin = false;
  std::string origin;  // "rules/OMP010.toml" or the user's file path

  // A log rule: it has line signatures or stack signatures.
  bool is_log_rule() const { return !signatures.empty() || !stacks.empty(); }

  // `other` is one of the rules this one replaces.
  bool explains(std::string_view other) const;
  // Whether a finding of this rule at `severity` explains one of `other`:
  // `other` is named in `replaces`, or `other` is an envelope and this rule,
  // not an envelope itself, found an error.
  bool explains(const Rule& other, Severity severity) const;
  bool operator==(const Rule&) const = default;
};

// A rule-file problem: which file, what is wrong.
struct RuleError {
  std::string origin;
  std::string message;
};

// Parses and validates one rule file's text. Returns the rule, or nullopt with
// the problems appended to `errors` (every problem, not just the first). The
// id must match the file name of `origin` unless `origin` is empty.
std::optional<Rule> parse_rule(std::string_view text, std::string_view origin,
                               std::vector<RuleError>& errors);

class RuleSet {
 public:
  // The rules compiled into the binary, sorted by id. Parsed once, lazily.
  static const RuleSet& builtin();

  // Builtin rules (unless `with_builtin` is false) plus every *.toml directly
  // in `dir` (a user's rules). A user rule reusing a builtin id, or an
  // invalid file, is an error.
  static RuleSet with_user_dir(const std::string& dir, std::vector<RuleError>& errors,
                               bool with_builtin = true);

  // Only the builtin rules with these ids (parsing one is a fraction of a
  // millisecond, all of them several): for commands that complete a few
  // findings. Unknown ids are skipped.
  static RuleSet builtin_subset(const std::vector<std::string>& ids);

  const std::vector<Rule>& all() const { return rules_; }
  const Rule* find(std::string_view id) const;

  // Adds a rule; false (and an error) if its id is taken.
  bool add(Rule rule, std::vector<RuleError>& errors);

 private:
  std::vector<Rule> rules_;  // sorted by id
};

// Builtin rule sources: (file name, text) pairs generated at build time from
// rules/*.toml.
struct EmbeddedRule {
  const char* name;
  const char* text;
};
std::vector<EmbeddedRule> embedded_rules();

// The parsed form of `rules` as bytes (rule-image.cc), and back: nullopt for
// bytes that are not a whole image. The build writes the image of the
// builtin rules (tools/compile-rules.cc) so that a run need not parse TOML.
std::string rule_image(const std::vector<Rule>& rules);
std::optional<std::vector<Rule>> read_rule_image(std::string_view image);

// Gives RuleSet::builtin() the build's image, to use instead of parsing the
// embedded files when it holds exactly those files (any other image is
// ignored). Call before the first builtin(); the bytes must outlive it.
void use_builtin_rule_image(std::string_view image);

// The one place a fact detector's result becomes a finding, for every
// command: severity from the rule (escalated when the detection says so),
// the message, fix and environment settings from the rule where the
// detection left them empty.
Finding finding_from(Detection d, const Rule& rule);

// "This finding explains that one" (`replaces`, the one suppression of
// every rule): drops every finding whose rule a fact finding's rule
// replaces, anywhere in the report. In a log, the scanner applies the same
// field per line as it matches (Rule::explains). Order is kept.
void drop_replaced(std::vector<Finding>& findings, const RuleSet& rules);

// One incident: the finding that names its cause first, then what it
// explains. A log reports one failure several times — NCCL's WARN line, the
// exception torch raises around it, the launcher's summary — and the user
// needs the cause, not three rivals (incidents.cc).
struct Incident {
  const Finding* cause = nullptr;
  std::vector<const Finding*> also;     // the cause's rule again, other subjects
  std::vector<const Finding*> context;  // findings the cause explains (envelopes)
  Severity severity = Severity::Info;   // the highest of its members
  u64 first_line = 0;                   // the earliest evidence line of its members; 0: none
};

// Groups findings into incidents by Rule::explains(rule, severity): a finding
// another explains joins that one's incident (the explainer whose launcher
// ranks overlap, else the nearest by line), transitively; findings of one
// rule join the first one's incident. Incidents are ordered by severity,
// then by their first line. Findings of unknown rules are incidents alone.
std::vector<Incident> group_incidents(const std::vector<const Finding*>& findings,
                                      const RuleSet& rules);

// Completes a finding from its rule: title-less message, fix and env_fix are
// filled from the rule when the finding left them empty. No-op for unknown ids.
void complete_from_rule(Finding& f, const RuleSet& rules);

// The action of a Markdown fix text as one line: its first paragraph, with
// the code block that follows a paragraph ending in ':' joined by "; ".
std::string one_line_fix(std::string_view text);

// A mangled C++ name (Itanium ABI, "_ZN3c104cuda9SetDeviceEi") as source
// spells it ("c10::cuda::SetDevice(int)"); anything else unchanged.
std::string demangled(const std::string& symbol);

// Substitutes {N} in `tmpl` with captures[N] (N = 0..9), and {N:demangled}
// with the capture demangled, the mangled form after it in parentheses
// ("c10::cuda::SetDevice(int) (_ZN3c104cuda9SetDeviceEi)"); unknown stays as is.
std::string render_template(std::string_view tmpl, const std::vector<std::string>& captures);

}  // namespace mld::rules
