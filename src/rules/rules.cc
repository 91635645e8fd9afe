// rules.cc — parses and validates rule files (TOML, docs/rule-format.md).
// Validation is strict on purpose: unknown keys are typos, a rule without an
// explanation, a fix or a source for its examples is not a rule a user can
// act on, and ids are API, so their shape is fixed.
#include "rules/rules.h"

#include <cxxabi.h>
#include <dirent.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

namespace mld::rules {
namespace {

bool valid_id(std::string_view id) {
  size_t letters = 0;
  while (letters < id.size() && id[letters] >= 'A' && id[letters] <= 'Z') letters++;
  if (letters < 2 || letters > 5 || id.size() != letters + 3) return false;
  for (size_t i = letters; i < id.size(); i++)
    if (id[i] < '0' || id[i] > '9') return false;
  return true;
}

std::string stem_of(std::string_view origin) {
  size_t slash = origin.rfind('/');
  std::string_view name = slash == std::string_view::npos ? origin : origin.substr(slash + 1);
  if (name.ends_with(".toml")) name.remove_suffix(5);
  return std::string(name);
}

// Collects problems for one file; every accessor records what is wrong with
// the key it reads instead of stopping at the first problem.
class Reader {
 public:
  Reader(std::string_view origin, std::vector<RuleError>& errors)
      : origin_(origin), errors_(errors) {}

  void problem(std::string message) {
    errors_.push_back({origin_, std::move(message)});
    failed_ = true;
  }
  bool failed() const { return failed_; }

  // Rejects keys of `table` not in `known`.
  void only_keys(const toml::table& table, std::initializer_list<std::string_view> known,
                 std::string_view where) {
    for (const auto& [key, node] : table) {
      if (std::find(known.begin(), known.end(), key.str()) == known.end())
        problem(std::string(where) + "unknown key '" + std::string(key.str()) + "'");
    }
  }

  std::string string(const toml::table& t, std::string_view key, bool required,
                     std::string_view where) {
    const toml::node* n = t.get(key);
    if (!n) {
      if (required) problem(std::string(where) + "missing '" + std::string(key) + "'");
      return {};
    }
    if (const auto* s = n->as_string()) return s->get();
    problem(std::string(where) + "'" + std::string(key) + "' must be a string");
    return {};
  }

  bool boolean(const toml::table& t, std::string_view key, std::string_view where) {
    const toml::node* n = t.get(key);
    if (!n) return false;
    if (const auto* b = n->as_boolean()) return b->get();
    problem(std::string(where) + "'" + std::string(key) + "' must be true or false");
    return false;
  }

  std::vector<std::string> strings(const toml::table& t, std::string_view key,
                                   std::string_view where) {
    std::vector<std::string> out;
    const toml::node* n = t.get(key);
    if (!n) return out;
    const toml::array* a = n->as_array();
    if (!a) {
      problem(std::string(where) + "'" + std::string(key) + "' must be an array of strings");
      return out;
    }
    for (const toml::node& e : *a) {
      if (const auto* s = e.as_string())
        out.push_back(s->get());
      else
        problem(std::string(where) + "'" + std::string(key) + "' must hold only strings");
    }
    return out;
  }

  // An array of tables ([[name]]); each element passed to `each`.
  template <typename F>
  void tables(const toml::table& t, std::string_view key, F each) {
    const toml::node* n = t.get(key);
    if (!n) return;
    const toml::array* a = n->as_array();
    if (!a) {
      problem("'" + std::string(key) + "' must be an array of tables ([[" + std::string(key) +
              "]])");
      return;
    }
    size_t i = 0;
    for (const toml::node& e : *a) {
      std::string where = std::string(key) + "[" + std::to_string(i++) + "]: ";
      if (const toml::table* tt = e.as_table())
        each(*tt, where);
      else
        problem(where + "must be a table");
    }
  }

 private:
  std::string origin_;
  std::vector<RuleError>& errors_;
  bool failed_ = false;
};

// toml++ 3.3 (Debian 12) reaches __builtin_unreachable() when it asks
// whether some non-ASCII characters are whitespace (U+00A1..U+0499,
// U+2C5E..U+3057 but U+3000, U+FC06..U+FEFE; marzer/tomlplusplus#190, #295):
// undefined behaviour on a user's rule file. It asks of every character
// outside strings and comments, where TOML allows no non-ASCII anyway, and in
// a """ string of the character after a backslash and of the first ones of a
// line continued by a backslash. This scan finds such a character before
// toml++ sees the text. It follows toml++ on where a string starts: a quote
// inside a bare value (`x = 1="é"`, `1["é"]`, `1."é"`) starts none, toml++
// reads on to the next space, ',', ']', '}' or '#' (found by rules-fuzz).
struct TomlHazard {
  size_t offset;
  const char* what;
};

bool toml_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool non_ascii(char c) { return static_cast<unsigned char>(c) >= 0x80; }

// Skips the string that opens at t[i]: returns the offset after it, or where
// an unterminated one-line string ends, or where `hazard` is.
size_t skip_toml_string(std::string_view t, size_t i, std::optional<TomlHazard>& hazard) {
  const char q = t[i];
  const std::string_view triple = q == '"' ? "\"\"\"" : "'''";
  const bool multi = t.substr(i, 3) == triple;
  i += multi ? 3 : 1;
  while (i < t.size()) {
    if (q == '"' && t[i] == '\\') {
      size_t j = i + 1;
      if (multi && j < t.size() && non_ascii(t[j])) {
        hazard = TomlHazard{j, "a non-ASCII character after a backslash"};
        return j;
      }
      if (multi && j < t.size() && toml_space(t[j])) {  // a line-ending backslash
        while (j < t.size() && toml_space(t[j])) j++;
        if (j < t.size() && non_ascii(t[j])) {
          hazard = TomlHazard{j,
                              "a non-ASCII character first on a line continued by a backslash "
                              "(write it as \\uXXXX)"};
          return j;
        }
        i = j;
        continue;
      }
      i += 2;
      continue;
    }
    if (t[i] == q && (!multi || t.substr(i, 3) == triple)) {
      i += multi ? 3 : 1;
      while (multi && i < t.size() && t[i] == q) i++;  // up to two more quotes
      return i;
    }
    if (!multi && t[i] == '\n') return i;  // unterminated: toml++ reports it
    i++;
  }
  return i;
}

std::optional<TomlHazard> toml_hazard(std::string_view t) {
  enum class Expect { Key, Value, Nothing };  // what toml++ reads next
  Expect expect = Expect::Key;
  std::string open;   // '[' arrays, '{' inline tables, 'h' table headers
  bool bare = false;  // in a bare value: a number, date, boolean or junk
  std::optional<TomlHazard> hazard;
  size_t i = 0;
  while (i < t.size()) {
    const char c = t[i];
    if (non_ascii(c)) return TomlHazard{i, "a non-ASCII character outside a string or comment"};
    if (bare) {
      if (!toml_space(c) && c != ',' && c != ']' && c != '}' && c != '#') {
        i++;
        continue;
      }
      bare = false;
      expect = Expect::Nothing;
    }
    switch (c) {
      case '#':
        while (i < t.size() && t[i] != '\n') i++;
        continue;
      case '\n':
        if (open.empty() || open.back() == 'h') {
          open.clear();
          expect = Expect::Key;
        }
        break;
      case ' ':
      case '\t':
      case '\r': break;
      case '"':
      case '\'':
        if (expect == Expect::Nothing) break;  // no string to toml++ but an error
        i = skip_toml_string(t, i, hazard);
        if (hazard) return hazard;
        if (expect == Expect::Value) expect = Expect::Nothing;
        continue;
      case '=':
        if (expect == Expect::Key)
          expect = Expect::Value;
        else if (expect == Expect::Value)
          bare = true;
        break;
      case '[':
        if (expect == Expect::Key)
          open.push_back('h');
        else if (expect == Expect::Value)
          open.push_back('[');
        break;
      case '{':
        if (expect == Expect::Value) {
          open.push_back('{');
          expect = Expect::Key;
        }
        break;
      case ']':
      case '}':
        if (!open.empty() && (c == '}') == (open.back() == '{')) open.pop_back();
        expect = Expect::Nothing;
        break;
      case ',':
        expect = open.empty() || open.back() == 'h' ? Expect::Nothing
                 : open.back() == '['               ? Expect::Value
                                                    : Expect::Key;
        break;
      default:
        if (expect == Expect::Value) bare = true;
    }
    i++;
  }
  return std::nullopt;
}

Example read_example(Reader& r, const toml::table& t, std::string_view where, bool positive) {
  Example e;
  if (positive)
    r.only_keys(t, {"log", "source"}, where);
  else
    r.only_keys(t, {"log", "why"}, where);
  e.log = r.string(t, "log", true, where);
  if (positive)
    e.source = r.string(t, "source", true, where);
  else
    e.why = r.string(t, "why", true, where);
  if (e.log.find_first_not_of(" \t\r\n") == std::string::npos)
    r.problem(std::string(where) + "empty log");
  return e;
}

// A repository as GitHub spells it: owner/name, no scheme, no extra slash.
bool valid_repository(std::string_view repo) {
  size_t slash = repo.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == repo.size() ||
      repo.find('/', slash + 1) != std::string_view::npos)
    return false;
  for (char c : repo)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == '/'))
      return false;
  return true;
}

// A Debian package name (Debian Policy 5.6.1): lower-case letters, digits,
// '+', '-', '.', at least two characters, starting with a letter or digit.
bool valid_debian_package(std::string_view name) {
  if (name.size() < 2 || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.'))
      return false;
  return true;
}

Source read_source(Reader& r, const toml::table& t, const std::string& where) {
  Source s;
  r.only_keys(t, {"repository", "package", "path", "line", "tag", "format", "syntax", "values"},
              where);
  // A closed-source emitter is cited by the Debian package that ships the
  // binary holding the format string, at the package's version: no line.
  s.package = r.string(t, "package", false, where);
  s.repository = r.string(t, "repository", s.package.empty(), where);
  if (!s.package.empty() && !s.repository.empty())
    r.problem(where + "give either 'repository' or 'package', not both");
  if (!s.package.empty() && !valid_debian_package(s.package))
    r.problem(where + "package '" + s.package + "' is not a Debian package name");
  s.path = r.string(t, "path", true, where);
  s.tag = r.string(t, "tag", true, where);
  s.format = r.string(t, "format", true, where);
  s.values = r.strings(t, "values", where);
  if (!s.repository.empty() && !valid_repository(s.repository))
    r.problem(where + "repository '" + s.repository + "' is not a GitHub owner/name");
  if (s.path.starts_with("/") || s.path.find("..") != std::string::npos)
    r.problem(where + "path must be relative to the repository: " + s.path);
  if (const toml::node* n = t.get("line")) {
    const auto* i = n->as_integer();
    if (!s.package.empty())
      r.problem(where + "a binary in a package has no 'line'");
    else if (!i || i->get() < 1 || i->get() > 10000000)
      r.problem(where + "'line' must be a line number");
    else
      s.line = static_cast<u32>(i->get());
  } else if (s.package.empty()) {
    r.problem(where + "missing 'line'");
  }
  const std::string syntax = r.string(t, "syntax", false, where);
  if (syntax == "brace")
    s.syntax = FormatSyntax::Brace;
  else if (syntax == "literal")
    s.syntax = FormatSyntax::Literal;
  else if (!syntax.empty() && syntax != "printf")
    r.problem(where + "syntax '" + syntax + "' is not printf, brace or literal");
  if (s.format.find_first_not_of(" \t\r\n") == std::string::npos) {
    if (t.get("format")) r.problem(where + "empty format");
  } else {
    std::string error;
    if (!instantiate_format(s, &error)) r.problem(where + "format: " + error);
  }
  return s;
}

}  // namespace

std::optional<Rule> parse_rule(std::string_view text, std::string_view origin,
                               std::vector<RuleError>& errors) {
  if (std::optional<TomlHazard> bad = toml_hazard(text)) {
    size_t line = 1 + static_cast<size_t>(std::count(
                          text.begin(), text.begin() + static_cast<long>(bad->offset), '\n'));
    errors.push_back({std::string(origin), "line " + std::to_string(line) + ": " + bad->what});
    return std::nullopt;
  }
  toml::table doc;
  try {
    doc = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << "line " << e.source().begin.line << ": " << e.description();
    errors.push_back({std::string(origin), msg.str()});
    return std::nullopt;
  }
  Reader r(origin, errors);
  Rule rule;
  rule.origin = std::string(origin);
  r.only_keys(doc,
              {"id", "severity", "escalated_severity", "title", "explanation", "references", "fix",
               "detector", "replaces", "envelope", "collect", "signature", "stack", "source",
               "example", "negative", "withdrawn"},
              "");
  rule.id = r.string(doc, "id", true, "");
  if (!rule.id.empty()) {
    if (!valid_id(rule.id))
      r.problem("id '" + rule.id + "' is not 2-5 capital letters and 3 digits");
    else if (!origin.empty() && stem_of(origin) != rule.id)
      r.problem("id '" + rule.id + "' differs from the file name");
  }
  std::string severity = r.string(doc, "severity", true, "");
  if (!severity.empty()) {
    if (auto s = parse_severity(severity))
      rule.severity = *s;
    else
      r.problem("severity '" + severity + "' is not error, warning or info");
  }
  std::string escalated = r.string(doc, "escalated_severity", false, "");
  if (!escalated.empty()) {
    rule.escalated_severity = parse_severity(escalated);
    if (!rule.escalated_severity)
      r.problem("escalated_severity '" + escalated + "' is not error, warning or info");
  }
  rule.title = r.string(doc, "title", true, "");
  if (!rule.title.empty() &&
      (rule.title.back() == '.' || rule.title.find('\n') != std::string::npos))
    r.problem("title must be one line without a final period");
  rule.explanation = r.string(doc, "explanation", true, "");
  rule.references = r.strings(doc, "references", "");
  if (rule.references.empty()) r.problem("at least one reference is required");
  for (const std::string& ref : rule.references)
    if (!ref.starts_with("https://") && !ref.starts_with("http://"))
      r.problem("reference is not a URL: " + ref);
  rule.withdrawn = r.boolean(doc, "withdrawn", "");
  rule.detector = r.string(doc, "detector", false, "");
  rule.replaces = r.strings(doc, "replaces", "");
  rule.envelope = r.boolean(doc, "envelope", "");
  rule.collect = r.string(doc, "collect", false, "");

  if (const toml::table* fix = doc["fix"].as_table()) {
    r.only_keys(*fix, {"text", "env", "commands"}, "fix: ");
    rule.fix.text = r.string(*fix, "text", false, "fix: ");
    rule.fix.env = r.strings(*fix, "env", "fix: ");
    rule.fix.commands = r.strings(*fix, "commands", "fix: ");
    for (const std::string& e : rule.fix.env) {
      // "NAME=value" sets, "-NAME" unsets.
      const bool unset = !e.empty() && e[0] == '-';
      size_t eq = e.find('=');
      if (unset ? (e.size() < 2 || eq != std::string::npos) : (eq == 0 || eq == std::string::npos))
        r.problem("fix: env entry is neither NAME=value nor -NAME: " + e);
    }
    if (rule.fix.text.empty() && rule.fix.env.empty() && rule.fix.commands.empty())
      r.problem("fix: needs text, env or commands");
  } else {
    r.problem("missing [fix] table");
  }

  r.tables(doc, "signature", [&](const toml::table& t, const std::string& where) {
    Signature s;
    r.only_keys(
        t, {"pattern", "message", "subject", "case_insensitive", "followed_by", "within", "at_end"},
        where);
    s.pattern = r.string(t, "pattern", true, where);
    s.message = r.string(t, "message", false, where);
    s.subject = r.string(t, "subject", false, where);
    s.case_insensitive = r.boolean(t, "case_insensitive", where);
    s.followed_by = r.string(t, "followed_by", false, where);
    s.at_end = r.boolean(t, "at_end", where);
    if (const toml::node* w = t.get("within")) {
      const auto* i = w->as_integer();
      if (!i || i->get() < 1 || i->get() > 100000)
        r.problem(where + "'within' must be an integer from 1 to 100000");
      else
        s.within = static_cast<u32>(i->get());
    }
    if (s.at_end && !s.followed_by.empty())
      r.problem(where + "an at_end signature cannot have followed_by");
    if (s.pattern.find('\n') != std::string::npos) r.problem(where + "a pattern never spans lines");
    rule.signatures.push_back(std::move(s));
  });
  r.tables(doc, "stack", [&](const toml::table& t, const std::string& where) {
    StackSignature s;
    r.only_keys(t, {"frame", "under", "message", "subject"}, where);
    s.frame = r.string(t, "frame", true, where);
    s.under = r.string(t, "under", false, where);
    s.message = r.string(t, "message", false, where);
    s.subject = r.string(t, "subject", false, where);
    if (s.frame.find('\n') != std::string::npos || s.under.find('\n') != std::string::npos)
      r.problem(where + "a frame pattern never spans lines");
    rule.stacks.push_back(std::move(s));
  });
  r.tables(doc, "source", [&](const toml::table& t, const std::string& where) {
    rule.sources.push_back(read_source(r, t, where));
  });
  r.tables(doc, "example", [&](const toml::table& t, const std::string& where) {
    rule.examples.push_back(read_example(r, t, where, true));
  });
  r.tables(doc, "negative", [&](const toml::table& t, const std::string& where) {
    rule.negatives.push_back(read_example(r, t, where, false));
  });

  if (!rule.withdrawn) {
    if (rule.detector.empty() == !rule.is_log_rule())
      r.problem("a rule has either a detector or signatures, not both and not neither");
    if (rule.is_log_rule()) {
      if (rule.examples.empty()) r.problem("a log rule needs at least one [[example]]");
      if (rule.negatives.empty()) r.problem("a log rule needs at least one [[negative]]");
    } else if (!rule.sources.empty()) {
      r.problem("[[source]] is for log rules: it cites where a logged message is printed");
    } else if (!rule.collect.empty()) {
      r.problem("collect is for log rules: what to collect when a log shows only this");
    }
  }
  for (const Example& e : rule.examples)
    if (!e.source.empty() && std::find(rule.references.begin(), rule.references.end(), e.source) ==
                                 rule.references.end())
      r.problem("example source is not among the references: " + e.source);
  for (const std::string& id : rule.replaces)
    if (!valid_id(id) || id == rule.id) r.problem("replaces names an invalid id: " + id);
  if (rule.escalated_severity && rule.detector.empty())
    r.problem("escalated_severity is for fact rules (those with a detector)");

  if (r.failed()) return std::nullopt;
  return rule;
}

bool Rule::explains(std::string_view other) const {
  return std::find(replaces.begin(), replaces.end(), other) != replaces.end();
}

bool Rule::explains(const Rule& other, Severity severity) const {
  if (&other == this || other.id == id) return false;
  if (explains(other.id)) return true;
  return other.envelope && !envelope && severity == Severity::Error;
}

const Rule* RuleSet::find(std::string_view id) const {
  auto it = std::lower_bound(rules_.begin(), rules_.end(), id,
                             [](const Rule& r, std::string_view key) { return r.id < key; });
  return it != rules_.end() && it->id == id ? &*it : nullptr;
}

bool RuleSet::add(Rule rule, std::vector<RuleError>& errors) {
  auto it = std::lower_bound(rules_.begin(), rules_.end(), rule.id,
                             [](const Rule& r, const std::string& key) { return r.id < key; });
  if (it != rules_.end() && it->id == rule.id) {
    errors.push_back({rule.origin, "id " + rule.id + " is already used by " + it->origin});
    return false;
  }
  rules_.insert(it, std::move(rule));
  return true;
}

namespace {
std::string_view builtin_image;
}  // namespace

void use_builtin_rule_image(std::string_view image) { builtin_image = image; }

const RuleSet& RuleSet::builtin() {
  static const RuleSet set = [] {
    RuleSet s;
    std::vector<RuleError> errors;
    // The build's image, when it is one of exactly the embedded files.
    if (!builtin_image.empty()) {
      if (auto rules = read_rule_image(builtin_image)) {
        std::vector<std::string> have, want;
        for (const Rule& r : *rules) have.push_back(r.origin);
        for (const EmbeddedRule& e : embedded_rules())
          want.push_back(std::string("rules/") + e.name);
        std::sort(have.begin(), have.end());
        std::sort(want.begin(), want.end());
        bool all_builtin =
            std::all_of(rules->begin(), rules->end(), [](const Rule& r) { return r.builtin; });
        if (have == want && all_builtin) {
          for (Rule& r : *rules) s.add(std::move(r), errors);
          if (errors.empty()) return s;
          s = RuleSet();
          errors.clear();
        }
      }
    }
    for (const EmbeddedRule& e : embedded_rules()) {
      std::string origin = std::string("rules/") + e.name;
      if (auto rule = parse_rule(e.text, origin, errors)) {
        rule->builtin = true;
        s.add(std::move(*rule), errors);
      }
    }
    // The build's rule test rejects invalid builtin rules; a broken one here
    // means a binary built without running it. Say so, keep the valid ones.
    for (const RuleError& e : errors)
      std::fprintf(stderr, "mldoctor: internal error: builtin rule %s: %s\n", e.origin.c_str(),
                   e.message.c_str());
    return s;
  }();
  return set;
}

RuleSet RuleSet::builtin_subset(const std::vector<std::string>& ids) {
  RuleSet s;
  std::vector<RuleError> errors;
  for (const EmbeddedRule& e : embedded_rules()) {
    std::string_view name = e.name;
    if (!name.ends_with(".toml")) continue;
    name.remove_suffix(5);
    if (std::find(ids.begin(), ids.end(), name) == ids.end() || s.find(name)) continue;
    if (auto rule = parse_rule(e.text, std::string("rules/") + e.name, errors)) {
      rule->builtin = true;
      s.add(std::move(*rule), errors);
    }
  }
  return s;
}

RuleSet RuleSet::with_user_dir(const std::string& dir, std::vector<RuleError>& errors,
                               bool with_builtin) {
  RuleSet s = with_builtin ? builtin() : RuleSet();
  DIR* d = opendir(dir.c_str());
  if (!d) {
    errors.push_back({dir, "cannot open rules directory: " + errno_text(errno)});
    return s;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 5 && name.ends_with(".toml")) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string path = dir + "/" + name;
    // A FIFO or a device named *.toml is refused unopened, not waited on.
    std::string why;
    std::optional<std::string> read = read_regular_file(path, (1u << 20) + 1, &why);
    if (!read) {
      errors.push_back({path, "cannot read: " + why});
      continue;
    }
    std::string text = std::move(*read);
    if (text.size() > (1u << 20)) {
      errors.push_back({path, "larger than 1 MiB; not a rule file"});
      continue;
    }
    if (auto rule = parse_rule(text, path, errors)) s.add(std::move(*rule), errors);
  }
  return s;
}

std::string demangled(const std::string& symbol) {
  // Itanium C++ ABI names ("_ZN3c104cuda9SetDeviceEi"), as libstdc++'s
  // demangler reads them; anything else unchanged.
  if (!symbol.starts_with("_Z")) return symbol;
  int status = 0;
  char* text = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !text) {
    std::free(text);
    return symbol;
  }
  std::string out(text);
  std::free(text);
  return out;
}

std::string render_template(std::string_view tmpl, const std::vector<std::string>& captures) {
  std::string out;
  out.reserve(tmpl.size() + 32);
  for (size_t i = 0; i < tmpl.size(); i++) {
    // "{N:demangled}": the capture as C++ source spells it, then as written.
    static constexpr std::string_view kDemangled = ":demangled}";
    if (tmpl[i] == '{' && i + 1 < tmpl.size() && tmpl[i + 1] >= '0' && tmpl[i + 1] <= '9' &&
        tmpl.substr(i + 2, kDemangled.size()) == kDemangled) {
      size_t n = static_cast<size_t>(tmpl[i + 1] - '0');
      if (n < captures.size()) {
        std::string d = demangled(captures[n]);
        out += d == captures[n] ? d : d + " (" + captures[n] + ")";
        i += 1 + kDemangled.size();
        continue;
      }
    }
    if (tmpl[i] == '{' && i + 2 < tmpl.size() && tmpl[i + 1] >= '0' && tmpl[i + 1] <= '9' &&
        tmpl[i + 2] == '}') {
      size_t n = static_cast<size_t>(tmpl[i + 1] - '0');
      if (n < captures.size()) {
        out += captures[n];
        i += 2;
        continue;
      }
    }
    out += tmpl[i];
  }
  return out;
}

std::string one_line_fix(std::string_view text) {
  while (!text.empty() && (text.front() == '\n' || text.front() == ' ')) text.remove_prefix(1);
  size_t end = text.find("\n\n");
  std::string out(text.substr(0, end));
  std::replace(out.begin(), out.end(), '\n', ' ');
  while (!out.empty() && out.back() == ' ') out.pop_back();
  // "Do this:" followed by a code block: the block's lines belong to the action.
  if (!out.empty() && out.back() == ':' && end != std::string_view::npos) {
    std::string_view rest = text.substr(end + 2);
    if (rest.starts_with("```")) {
      size_t body = rest.find('\n');
      size_t close = rest.find("\n```", body);
      if (body != std::string_view::npos && close != std::string_view::npos) {
        std::string_view code = rest.substr(body + 1, close - body - 1);
        std::string joined;
        size_t i = 0;
        while (i <= code.size()) {
          size_t nl = code.find('\n', i);
          if (nl == std::string_view::npos) nl = code.size();
          std::string_view line = code.substr(i, nl - i);
          if (!line.empty()) joined += (joined.empty() ? "" : "; ") + std::string(line);
          i = nl + 1;
        }
        out += " " + joined;
      }
    }
  }
  return out;
}

Finding finding_from(Detection d, const Rule& rule) {
  Finding f;
  f.rule = std::move(d.rule);
  f.severity = d.escalated && rule.escalated_severity ? *rule.escalated_severity : rule.severity;
  f.subject = std::move(d.subject);
  f.message = d.message.empty() ? rule.title : std::move(d.message);
  f.evidence = std::move(d.evidence);
  f.fix = d.fix.empty() ? one_line_fix(rule.fix.text) : std::move(d.fix);
  f.env_fix = d.env_fix.empty() ? rule.fix.env : std::move(d.env_fix);
  f.collect = one_line_fix(rule.collect);
  return f;
}

void drop_replaced(std::vector<Finding>& findings, const RuleSet& rules) {
  std::set<std::string> hidden;
  for (const Finding& f : findings) {
    const bool log_finding = !f.evidence.empty() && f.evidence.front().line;
    if (log_finding) continue;  // the scanner applied it on the line already
    if (const Rule* r = rules.find(f.rule)) hidden.insert(r->replaces.begin(), r->replaces.end());
  }
  if (!hidden.empty())
    std::erase_if(findings, [&](const Finding& f) { return hidden.count(f.rule) > 0; });
}

void complete_from_rule(Finding& f, const RuleSet& rules) {
  const Rule* r = rules.find(f.rule);
  if (!r) return;
  if (f.message.empty()) f.message = r->title;
  if (f.env_fix.empty()) f.env_fix = r->fix.env;
  if (f.fix.empty()) f.fix = one_line_fix(r->fix.text);
  if (f.collect.empty()) f.collect = one_line_fix(r->collect);
}

}  // namespace mld::rules
