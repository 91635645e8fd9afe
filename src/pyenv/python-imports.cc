// python-imports.cc — what `import pkg` executes, read from Python source
// without running it: the import statements each module runs at import
// time, followed depth first the way Python executes them (a module's body
// runs to completion at its first import; a module already started is not
// run again, which is how cycles end). The walk goes through the import
// system, not through one package: `from scipy.sparse import csr_matrix` in
// sklearn enters scipy (its __init__ first), then scipy.sparse; modules are
// found as importlib's FileFinder finds them (package directory, then the
// interpreter's extension suffixes, then .py; namespace portions), relative
// imports resolve from the importing module's package, and `from m import x`
// imports m.x when m has such a submodule. The events it yields, in order —
// packages entered, module bodies started and finished, extension modules
// loaded — are the order in which the loader sees them.
//
// Only statements Python runs when the module is imported count: not those
// in a `def` body (run when called), not those under `if TYPE_CHECKING:`
// (false at run time; its `else:` does run). Both branches of any other
// `if`/`try` are taken: which one runs depends on the machine, and a load
// too many only adds a runtime the job may load anyway. A dynamic import is
// followed when its name is a string literal at module level:
// `importlib.import_module("x")`, `__import__("x")`, and a call of a
// module-level function that imports its first parameter
// (`__all__ = clone_module("numpy", globals())`, star-importing it when the
// function exec()s `from {...} import *`); a computed name is not seen.
//
// The tokenizer knows what can hide an import keyword: strings (all quote
// forms, prefixes, triple-quoted across lines), comments, bracketed and
// backslash-continued lines, and `;`-separated statements.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "elf/elf.h"
#include "pyenv/pyenv.h"

namespace mld::pyenv {

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A dotted name of identifiers: "a", "a.b_c". Identifiers with non-ASCII
// letters are legal Python but never name a package worth replaying.
bool dotted_name(std::string_view s) {
  if (s.empty()) return false;
  bool start = true;
  for (char c : s) {
    if (c == '.') {
      if (start) return false;
      start = true;
    } else if (ident_char(c)) {
      if (start && std::isdigit(static_cast<unsigned char>(c))) return false;
      start = false;
    } else {
      return false;
    }
  }
  return !start;
}

// Splits on `sep` and trims each part.
std::vector<std::string_view> split_trimmed(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); i++)
    if (i == s.size() || s[i] == sep) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  return out;
}

// "a.b as c" -> "a.b".
std::string_view before_as(std::string_view item) {
  std::string_view t = trim(item);
  for (size_t i = 0; i + 3 < t.size(); i++)
    if ((t[i] == ' ' || t[i] == '\t') && t[i + 1] == 'a' && t[i + 2] == 's' &&
        (t[i + 3] == ' ' || t[i + 3] == '\t'))
      return trim(t.substr(0, i));
  return t;
}

bool starts_with_word(std::string_view s, std::string_view word) {
  return s.starts_with(word) && (s.size() == word.size() || !ident_char(s[word.size()]));
}

// One simple statement (strings already blanked): `import ...` or
// `from ... import ...`; anything else adds nothing.
void parse_statement(std::string_view stmt, size_t line, std::vector<ImportStatement>& out) {
  stmt = trim(stmt);
  if (starts_with_word(stmt, "import")) {
    for (std::string_view item : split_trimmed(stmt.substr(6), ',')) {
      std::string_view name = before_as(item);
      // `import a . b` is legal; spaces around dots are rare enough to drop.
      if (dotted_name(name)) out.push_back({0, std::string(name), {}, line});
    }
    return;
  }
  if (!starts_with_word(stmt, "from")) return;
  std::string_view rest = trim(stmt.substr(4));
  int level = 0;
  while (!rest.empty() && rest.front() == '.' && level < 64) {
    level++;
    rest.remove_prefix(1);
  }
  rest = trim(rest);
  // The module part ends at the `import` keyword.
  size_t at = std::string_view::npos;
  for (size_t i = 0; i + 6 <= rest.size(); i++)
    if ((i == 0 || rest[i - 1] == ' ' || rest[i - 1] == '\t') &&
        starts_with_word(rest.substr(i), "import")) {
      at = i;
      break;
    }
  if (at == std::string_view::npos) return;
  std::string_view module = trim(rest.substr(0, at));
  if (!module.empty() && !dotted_name(module)) return;
  if (module.empty() && level == 0) return;
  std::string_view names = trim(rest.substr(at + 6));
  if (!names.empty() && names.front() == '(') names.remove_prefix(1);
  if (!names.empty() && names.back() == ')') names.remove_suffix(1);
  ImportStatement s{level, std::string(module), {}, line};
  for (std::string_view item : split_trimmed(names, ',')) {
    std::string_view n = before_as(item);
    if (n == "*" || dotted_name(n)) s.names.emplace_back(n);
  }
  out.push_back(std::move(s));
}

// A logical line: its indentation, its text with comments removed and every
// string literal replaced by "", and the physical line it starts on.
struct LogicalLine {
  size_t indent = 0;
  std::string text;
  size_t line = 0;
  // Each string literal's text between its quotes (escapes kept as written),
  // in order: the n-th `""` of `text` is literals[n].
  std::vector<std::string> literals;
};

std::vector<LogicalLine> logical_lines(std::string_view src) {
  std::vector<LogicalLine> out;
  LogicalLine cur;
  size_t line = 1;
  int depth = 0;         // (), [], {}
  bool at_start = true;  // measuring indentation
  size_t i = 0;
  auto finish = [&] {
    if (!trim(cur.text).empty()) out.push_back(std::move(cur));
    cur = LogicalLine{};
    at_start = true;
    depth = 0;
  };
  while (i < src.size()) {
    char c = src[i];
    if (at_start) {
      if (c == ' ') {
        cur.indent++;
        i++;
        continue;
      }
      if (c == '\t') {
        cur.indent = (cur.indent / 8 + 1) * 8;
        i++;
        continue;
      }
      if (c == '\f') {
        i++;
        continue;
      }
      at_start = false;
      cur.line = line;
    }
    if (c == '\n') {
      line++;
      i++;
      if (depth > 0) {
        cur.text += ' ';
        continue;
      }
      finish();
      cur.indent = 0;
      continue;
    }
    if (c == '#') {
      while (i < src.size() && src[i] != '\n') i++;
      continue;
    }
    if (c == '\\' && i + 1 < src.size() && (src[i + 1] == '\n' || src[i + 1] == '\r')) {
      // A continuation: "\\\n" or "\\\r\n" (lines are counted by '\n'; a lone
      // '\r' is blank space here, as everywhere in this scanner).
      const bool crlf = src[i + 1] == '\r' && i + 2 < src.size() && src[i + 2] == '\n';
      if (src[i + 1] == '\n' || crlf) line++;
      i += crlf ? 3 : 2;
      cur.text += ' ';
      continue;
    }
    if (c == '\'' || c == '"') {
      const bool triple = i + 2 < src.size() && src[i + 1] == c && src[i + 2] == c;
      const size_t quote = triple ? 3 : 1;
      i += quote;
      const size_t content = i;
      size_t content_end = src.size();
      while (i < src.size()) {
        if (src[i] == '\\' && i + 1 < src.size()) {
          if (src[i + 1] == '\n') line++;
          i += 2;
          continue;
        }
        if (src[i] == '\n') {
          if (!triple) {
            content_end = i;
            break;  // an unterminated string ends at the line
          }
          line++;
        }
        if (src[i] == c &&
            (!triple || (i + 2 < src.size() && src[i + 1] == c && src[i + 2] == c))) {
          content_end = i;
          i += quote;
          break;
        }
        i++;
      }
      cur.text += "\"\"";
      cur.literals.emplace_back(src.substr(content, std::min(content_end, src.size()) - content));
      continue;
    }
    if (c == '(' || c == '[' || c == '{') depth++;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
    if (c != '\r') cur.text += c;
    i++;
  }
  finish();
  return out;
}

// The position of the `:` that ends a compound statement's header, at
// bracket depth 0 and not a walrus `:=`; npos when there is none.
size_t header_colon(std::string_view text) {
  int depth = 0;
  for (size_t i = 0; i < text.size(); i++) {
    char c = text[i];
    if (c == '(' || c == '[' || c == '{') depth++;
    if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
    if (c == ':' && depth == 0 && (i + 1 >= text.size() || text[i + 1] != '=')) return i;
  }
  return std::string_view::npos;
}

enum class Block { Runs, Deferred };  // Deferred: a def body or `if TYPE_CHECKING:`

Block block_kind(std::string_view header) {
  if (starts_with_word(header, "def") || starts_with_word(header, "async")) return Block::Deferred;
  if (starts_with_word(header, "if")) {
    std::string_view cond = trim(header.substr(2));
    if (cond == "TYPE_CHECKING" || cond == "typing.TYPE_CHECKING" || cond == "_TYPE_CHECKING")
      return Block::Deferred;
  }
  return Block::Runs;
}

bool compound_keyword(std::string_view text) {
  for (std::string_view k : {"if", "elif", "else", "try", "except", "finally", "for", "while",
                             "with", "def", "async", "class", "match", "case"})
    if (starts_with_word(text, k)) return true;
  return false;
}

// Statements of one logical line, split on `;` (strings are blanked, so a
// `;` here is a separator or inside brackets).
template <typename Each>
void for_each_statement(std::string_view text, Each each) {
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); i++) {
    if (i < text.size()) {
      char c = text[i];
      if (c == '(' || c == '[' || c == '{') depth++;
      if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
      if (c != ';' || depth != 0) continue;
    }
    each(text.substr(start, i - start), start);
    start = i + 1;
  }
}

// How many `""` (blanked literals) `text` holds before `end`.
size_t literals_before(std::string_view text, size_t end) {
  size_t n = 0;
  for (size_t i = 0; i + 1 < end && i + 1 < text.size(); i++)
    if (text[i] == '"' && text[i + 1] == '"') {
      n++;
      i++;
    }
  return n;
}

// A call whose first argument is a plain string literal: `f("numpy", ...)`,
// `importlib.import_module("x")`, in any expression of a module-level
// statement (`__all__ = clone_module("numpy", globals())`). A prefixed
// literal (f"", b"", r"") is not a name the call can be read for.
struct LiteralCall {
  std::string callee;  // dotted, as written
  std::string literal;
};

std::vector<LiteralCall> literal_calls(std::string_view stmt, size_t stmt_at,
                                       const LogicalLine& l) {
  std::vector<LiteralCall> out;
  for (size_t open = stmt.find('('); open != std::string_view::npos;
       open = stmt.find('(', open + 1)) {
    size_t b = open;
    while (b > 0 && (ident_char(stmt[b - 1]) || stmt[b - 1] == '.')) b--;
    std::string_view callee = stmt.substr(b, open - b);
    if (!dotted_name(callee)) continue;
    size_t a = open + 1;
    while (a < stmt.size() && (stmt[a] == ' ' || stmt[a] == '\t')) a++;
    if (stmt.substr(a, 2) != "\"\"") continue;
    size_t after = a + 2;
    while (after < stmt.size() && (stmt[after] == ' ' || stmt[after] == '\t')) after++;
    if (after >= stmt.size() || (stmt[after] != ',' && stmt[after] != ')')) continue;
    const size_t index = literals_before(l.text, stmt_at + a);
    if (index < l.literals.size()) out.push_back({std::string(callee), l.literals[index]});
  }
  return out;
}

// What `import` runs: import statements and literal calls, in source order.
struct ModuleStep {
  ImportStatement statement;  // for a call: the literal in `module`
  std::string callee;         // empty: an import statement
};

// A module-level function that imports its first parameter:
// `def clone_module(mod_name, globals_): mod = importlib.import_module(mod_name)`;
// `star` when its body also exec()s `from {...} import *` (scipy's
// array_api_compat clones numpy that way in Debian unstable: the import system
// then imports every submodule numpy.__all__ names).
struct ImportHelper {
  bool star = false;
};

struct ModuleScan {
  std::vector<ModuleStep> steps;
  std::map<std::string, ImportHelper> helpers;
};

// "def f(a: str, b=1, /, *c)" -> "a"; empty when the first parameter is
// not a plain positional one.
std::string first_parameter(std::string_view header) {
  size_t open = header.find('('), close = header.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) return {};
  std::string_view params = header.substr(open + 1, close - open - 1);
  size_t end = 0;
  while (end < params.size() && ident_char(params[end])) end++;
  std::string_view first = params.substr(0, end);
  if (first.empty() || !dotted_name(first)) return {};
  return std::string(first);
}

// Whether `text` passes `param` as the first argument of import_module() or
// __import__().
bool imports_parameter(std::string_view text, const std::string& param) {
  for (std::string_view fn : {"import_module(", "__import__("})
    for (size_t at = text.find(fn); at != std::string_view::npos; at = text.find(fn, at + 1)) {
      if (at > 0 && ident_char(text[at - 1])) continue;
      size_t a = at + fn.size();
      while (a < text.size() && (text[a] == ' ' || text[a] == '\t')) a++;
      if (!starts_with_word(text.substr(a), param)) continue;
      size_t after = a + param.size();
      while (after < text.size() && (text[after] == ' ' || text[after] == '\t')) after++;
      if (after < text.size() && (text[after] == ',' || text[after] == ')')) return true;
    }
  return false;
}

// Whether a line exec()s a star import of a formatted module name.
bool execs_star_import(const LogicalLine& l) {
  if (l.text.find("exec(") == std::string::npos) return false;
  return std::any_of(l.literals.begin(), l.literals.end(), [](const std::string& lit) {
    return lit.find("from {") != std::string::npos && lit.find("import *") != std::string::npos;
  });
}

ModuleScan scan_module(std::string_view source) {
  ModuleScan out;
  struct Open {
    size_t indent;
    Block kind;
  };
  std::vector<Open> blocks;
  // The module-level def being read, when its first parameter may be imported.
  struct Def {
    size_t indent = 0;
    std::string name, param;
    ImportHelper helper;
    bool imports = false;
  };
  std::optional<Def> def;
  auto close_def = [&] {
    if (def && def->imports) out.helpers[def->name] = def->helper;
    def.reset();
  };
  auto read_def_body = [&](std::string_view text, const LogicalLine& l) {
    if (!def) return;
    def->imports |= imports_parameter(text, def->param);
    def->helper.star |= execs_star_import(l);
  };
  auto statements = [&](std::string_view text, const LogicalLine& l) {
    for_each_statement(text, [&](std::string_view stmt, size_t) {
      std::vector<ImportStatement> found;
      parse_statement(stmt, l.line, found);
      for (ImportStatement& s : found) out.steps.push_back({std::move(s), {}});
    });
    const size_t text_at = static_cast<size_t>(text.data() - l.text.data());
    for_each_statement(text, [&](std::string_view stmt, size_t at) {
      for (LiteralCall& c : literal_calls(stmt, text_at + at, l))
        if (dotted_name(c.literal))
          out.steps.push_back({{0, std::move(c.literal), {}, l.line}, std::move(c.callee)});
    });
  };
  for (const LogicalLine& l : logical_lines(source)) {
    while (!blocks.empty() && blocks.back().indent >= l.indent) blocks.pop_back();
    if (def && l.indent <= def->indent) close_def();
    const bool deferred = std::any_of(blocks.begin(), blocks.end(),
                                      [](const Open& o) { return o.kind == Block::Deferred; });
    std::string_view text = trim(l.text);
    if (deferred) read_def_body(text, l);
    if (!compound_keyword(text)) {
      if (!deferred) statements(text, l);
      continue;
    }
    size_t colon = header_colon(text);
    if (colon == std::string_view::npos) {  // `match = 3`, `case(x)`: not a header
      if (!deferred) statements(text, l);
      continue;
    }
    std::string_view header = trim(text.substr(0, colon));
    Block kind = block_kind(header);
    std::string_view body = trim(text.substr(colon + 1));
    if (blocks.empty() && starts_with_word(header, "def")) {
      std::string_view rest = trim(header.substr(3));
      size_t end = 0;
      while (end < rest.size() && ident_char(rest[end])) end++;
      std::string param = first_parameter(header);
      if (end > 0 && !param.empty()) {
        def = Def{l.indent, std::string(rest.substr(0, end)), param, {}, false};
        if (!body.empty()) {  // `def f(m): return importlib.import_module(m)`
          read_def_body(body, l);
          close_def();
        }
      }
    }
    if (body.empty()) {
      blocks.push_back({l.indent, kind});
    } else if (!deferred && kind == Block::Runs) {
      statements(body, l);  // `try: import x`
    }
  }
  close_def();
  return out;
}

}  // namespace

std::vector<ImportStatement> module_level_imports(std::string_view source) {
  std::vector<ImportStatement> out;
  for (ModuleStep& step : scan_module(source).steps)
    if (step.callee.empty()) out.push_back(std::move(step.statement));
  return out;
}

// ─── the walk ───────────────────────────────────────────────────────────────

struct ImportWalker::Impl {
  const host::Host& host;
  Resolve resolve;
  std::vector<ScanProblem>& problems;
  Listener listener;
  std::set<std::string> started;   // modules whose body ran (or is running)
  std::set<std::string> packages;  // top-level names already announced
  // Each module run: its module-level functions that import their argument.
  std::map<std::string, std::map<std::string, ImportHelper>> helpers_of;
  size_t files_read = 0;
  u64 bytes_read = 0;
  bool cut = false;
  int depth = 0;
  static constexpr int kMaxDepth = 400;

  void event(ImportEvent::Kind kind, const std::string& name, const std::string& via) {
    if (listener) listener({kind, name, via});
  }

  // A module as importlib's FileFinder finds it in its parent's directory:
  // a package directory (__init__ with a source or extension suffix) first,
  // then an extension module with one of the interpreter's suffixes, then
  // <name>.py; a directory without __init__ is a namespace portion.
  struct Found {
    const ImportedPackage* pkg = nullptr;
    std::string source;  // empty: no Python source
    bool is_package = false;
    const NativeFile* extension = nullptr;
  };
  Found find(const std::string& module) const {
    Found f;
    const std::string top = module.substr(0, module.find('.'));
    f.pkg = resolve(top);
    if (!f.pkg) return f;
    const ImportedPackage& pkg = *f.pkg;
    auto extension_named = [&](const std::string& name) -> const NativeFile* {
      for (const NativeFile& n : pkg.extension_modules)
        if (n.module == name && n.loadable_by_interpreter) return &n;
      return nullptr;
    };
    if (pkg.kind == ImportKind::Module) {
      if (module != top) return f;  // a module has no submodules
      if ((f.extension = extension_named(module))) return f;
      if (pkg.path.ends_with(".py")) f.source = pkg.path;
      return f;
    }
    std::string rel = module.size() > top.size() ? module.substr(top.size() + 1) : "";
    std::replace(rel.begin(), rel.end(), '.', '/');
    std::vector<std::string> roots =
        pkg.kind == ImportKind::Namespace ? pkg.namespace_portions : std::vector{pkg.path};
    if (rel.empty()) {
      if (pkg.kind == ImportKind::Namespace) {
        f.is_package = true;  // a namespace package: nothing runs
        return f;
      }
      if (host.stat(pkg.path + "/__init__.py").kind == host::FileKind::Regular)
        f.source = pkg.path + "/__init__.py";
      else
        f.extension = extension_named(module + ".__init__");
      f.is_package = true;
      return f;
    }
    for (const std::string& root : roots) {
      const std::string base = host::join_path(root, rel);
      if (host.stat(base + "/__init__.py").kind == host::FileKind::Regular) {
        f.source = base + "/__init__.py";
        f.is_package = true;
        return f;
      }
      if (const NativeFile* init = extension_named(module + ".__init__");
          init && init->path.starts_with(base + "/")) {
        f.extension = init;
        f.is_package = true;
        return f;
      }
      if (const NativeFile* n = extension_named(module);
          n && n->path.starts_with(host::dir_name(base) + "/")) {
        f.extension = n;
        return f;
      }
      if (host.stat(base + ".py").kind == host::FileKind::Regular) {
        f.source = base + ".py";
        return f;
      }
    }
    for (const std::string& root : roots)
      if (host.stat(host::join_path(root, rel)).kind == host::FileKind::Directory) {
        f.is_package = true;  // a namespace subpackage: nothing runs
        return f;
      }
    return f;
  }

  bool exists(const std::string& module) const {
    Found f = find(module);
    return !f.source.empty() || f.extension || f.is_package;
  }

  std::string where(const Found& f, size_t line) const {
    const std::string& site = f.pkg->site_dir;
    std::string rel = f.source.starts_with(site + "/") ? f.source.substr(site.size() + 1)
                                                       : std::string(base_name(f.source));
    return rel + ":" + std::to_string(line);
  }

  // `import a.b.c`: a, a.b, a.b.c run in that order.
  void import_dotted(const std::string& module, const std::string& via) {
    const std::string top = module.substr(0, module.find('.'));
    if (packages.insert(top).second) event(ImportEvent::Kind::Package, top, via);
    for (size_t dot = module.find('.');; dot = module.find('.', dot + 1)) {
      run(module.substr(0, dot), via);
      if (dot == std::string::npos) break;
    }
  }

  void import(const std::string& module, const std::vector<std::string>& names,
              const std::string& via) {
    import_dotted(module, via);
    // `from m import x`: x is imported as a submodule when m has one.
    for (const std::string& n : names)
      if (n == "*")
        star_submodules(module, via);
      else if (!started.count(module + "." + n) && exists(module + "." + n))
        run(module + "." + n, via);
  }

  // `from pkg import *`: importlib's _handle_fromlist imports every name of
  // pkg.__all__ that is not yet an attribute as the submodule pkg.name. An
  // `__all__` is often computed (numpy 2 builds it from a set that names
  // "f2py", "ctypeslib", "polynomial", and scipy's array_api_compat does
  // `from numpy import *`, which is how sklearn reaches numpy.f2py and its
  // charset_normalizer), so every quoted identifier of a package __init__
  // that defines __all__ and names one of its submodules is imported, in the
  // order they appear: a name that never reaches __all__ adds a load too many,
  // never one too few.
  void star_submodules(const std::string& module, const std::string& via) {
    Found f = find(module);
    if (!f.pkg || !f.is_package || f.source.empty()) return;
    std::optional<std::string> text = host.read_file(f.source, 8u << 20, nullptr);
    if (!text || text->find("__all__") == std::string::npos) return;
    const std::string& t = *text;
    std::set<std::string> tried;
    for (size_t i = 0; i < t.size(); i++) {
      const char q = t[i];
      if (q != '"' && q != '\'') continue;
      size_t end = i + 1;
      while (end < t.size() && ident_char(t[end])) end++;
      if (end >= t.size() || t[end] != q || end == i + 1) continue;
      const std::string name = t.substr(i + 1, end - i - 1);
      i = end;
      if (std::isdigit(static_cast<unsigned char>(name[0])) || !tried.insert(name).second) continue;
      const std::string sub = module + "." + name;
      if (!started.count(sub) && exists(sub)) run(sub, via);
    }
  }

  void run(const std::string& module, const std::string& via) {
    if (started.count(module)) return;
    Found f = find(module);
    if (!f.pkg) return;  // not followed: the standard library, or nothing there
    started.insert(module);
    if (f.extension) {
      // dlopen, then PyInit runs (its own imports happen there).
      event(ImportEvent::Kind::Extension, module, via);
      pyinit_imports(module, *f.extension);
      event(ImportEvent::Kind::ModuleDone, module, via);
      return;
    }
    if (f.source.empty()) return;
    if (depth > kMaxDepth || files_read >= kMaxModules || bytes_read >= kMaxBytes) {
      if (!cut)
        problems.push_back({f.source, "import walk stopped after " + std::to_string(files_read) +
                                          " modules: later imports are not replayed in order"});
      cut = true;
      return;
    }
    std::string why;
    std::optional<std::string> text = host.read_file(f.source, 8u << 20, &why);
    if (!text) {
      problems.push_back({f.source, why + ": not read; its imports are not followed"});
      return;
    }
    files_read++;
    bytes_read += text->size();
    event(ImportEvent::Kind::Module, module, via);
    depth++;
    // The package a relative import starts from.
    const std::string here =
        f.is_package ? module : module.substr(0, std::min(module.rfind('.'), module.size()));
    ModuleScan scan = scan_module(*text);
    // Names this module's `from X import f` bound: f -> X, for its calls.
    std::map<std::string, std::string> bound;
    for (ModuleStep& step : scan.steps) {
      const ImportStatement& s = step.statement;
      if (!step.callee.empty()) {
        call_import(step.callee, s.module, scan.helpers, bound, where(f, s.line));
        continue;
      }
      std::string base;
      if (s.level > 0) {
        base = here;
        for (int up = 1; up < s.level; up++) {
          size_t dot = base.rfind('.');
          if (dot == std::string::npos) {
            base.clear();
            break;
          }
          base.resize(dot);
        }
        if (base.empty()) continue;  // beyond the top: ImportError at run time
        if (!s.module.empty()) base += "." + s.module;
      } else {
        base = s.module;
      }
      for (const std::string& n : s.names) bound[n] = base;
      import(base, s.names, where(f, s.line));
    }
    helpers_of.emplace(module, std::move(scan.helpers));
    depth--;
    event(ImportEvent::Kind::ModuleDone, module, via);
  }

  // A module-level call with a literal first argument that imports it:
  // importlib.import_module("x") and __import__("x") (absolute names only:
  // a relative one depends on its `package=` argument), or a function of
  // this module, or bound by `from X import f`, that imports its first
  // parameter (an import helper, above).
  void call_import(const std::string& callee, const std::string& literal,
                   const std::map<std::string, ImportHelper>& local,
                   const std::map<std::string, std::string>& bound, const std::string& via) {
    if (callee == "importlib.import_module" || callee == "import_module" ||
        callee == "__import__" || callee == "builtins.__import__") {
      import(literal, {}, via);
      return;
    }
    const ImportHelper* helper = nullptr;
    if (auto it = local.find(callee); it != local.end()) {
      helper = &it->second;
    } else if (auto b = bound.find(callee); b != bound.end()) {
      auto m = helpers_of.find(b->second);
      if (m != helpers_of.end()) {
        auto h = m->second.find(callee);
        if (h != m->second.end()) helper = &h->second;
      }
    }
    if (!helper) return;
    if (helper->star)
      import(literal, {"*"}, via);
    else
      import(literal, {}, via);
  }

  // An extension module's PyInit imports from C what no statement shows:
  // Cython's cimport of another Cython module (scipy.linalg.cython_blas),
  // PyImport_ImportModule("apt_pkg"). Their names are NUL-terminated strings
  // of its .rodata, but so are the names a module imports later, when one of
  // its functions is first called (numba._helperlib looks up
  // scipy.linalg.cython_lapack only when a LAPACK routine runs: a real
  // `import numba` never maps scipy.linalg, and importing it at _helperlib's
  // load puts every later numba module out of the real dlopen order). So a
  // string counts only with evidence that module initialisation uses it:
  //  - a Cython module (its init names "cython_runtime") imports its cimported
  //    modules, by these C strings, while its module body runs;
  //  - otherwise (x86-64) the string is the target of a RIP-relative `lea` in
  //    PyInit_<name>'s own code, bounded by the symbol's size (apt_inst's
  //    PyInit loads "apt_pkg", _dbus_glib_bindings' "_dbus_bindings");
  //  - on other machines, where this code is not read, every such string
  //    counts (more, never fewer).
  // Each one that names a module the import system finds (outside the
  // standard library) is imported here, in the order the code or the strings
  // name them.
  void pyinit_imports(const std::string& module, const NativeFile& ext) {
    std::vector<std::string> names;
    try {
      elf::ElfFile e = elf::ElfFile::parse(host.open_sparse(ext.path));
      std::optional<elf::FileRange> at_ro = e.progbits_range(".rodata");
      if (!at_ro || at_ro->size > (u64{256} << 20)) return;
      ByteView ro = e.source().range(at_ro->offset, at_ro->size, ".rodata");
      std::string_view text(reinterpret_cast<const char*>(ro.data()), ro.size());
      bool cython = false;
      std::map<u64, std::string> candidates;    // file offset of the string -> name
      std::map<std::string_view, bool> judged;  // a name found by the import system?
      for (size_t at = 0; at < text.size();) {
        size_t end = text.find('\0', at);
        if (end == std::string_view::npos) end = text.size();
        std::string_view str = text.substr(at, end - at);
        const u64 offset = at_ro->offset + at;
        at = end + 1;
        cython |= str == "cython_runtime";
        if (str.size() < 2 || str.size() > 200 || str == module || !dotted_name(str)) continue;
        auto [it, fresh] = judged.emplace(str, false);
        if (fresh) {
          const std::string name(str);
          it->second =
              !started.count(name) && resolve(name.substr(0, name.find('.'))) && exists(name);
        }
        if (it->second) candidates.emplace(offset, std::string(str));
      }
      if (candidates.empty()) return;
      if (cython || e.e_machine() != elf::EM_X86_64) {
        std::set<std::string> taken;
        for (const auto& [offset, name] : candidates)
          if (taken.insert(name).second) names.push_back(name);
      } else {
        names = pyinit_references(e, module, candidates);
      }
    } catch (const ParseError&) {
      return;  // the package scan names a damaged module
    } catch (const IoError&) {
      return;
    }
    const std::string via = "PyInit of " + module;
    for (const std::string& n : names) import(n, {}, via);
  }

  // The candidates that PyInit_<last part of module>'s code addresses with
  // `lea reg, [rip + disp32]` (REX.W 8D, ModRM mod 00 r/m 101), in code order.
  std::vector<std::string> pyinit_references(const elf::ElfFile& e, const std::string& module,
                                             const std::map<u64, std::string>& candidates) {
    const std::string want = "PyInit_" + module.substr(module.rfind('.') + 1);
    std::vector<std::string> out;
    for (const elf::DynamicSymbol& s : e.dynamic_symbols()) {
      if (!s.defined() || s.name != want || s.size == 0 || s.size > (u64{1} << 20)) continue;
      std::optional<u64> code_at = e.vaddr_to_offset(s.value);
      if (!code_at || *code_at + s.size > e.source().size()) return out;
      ByteView code = e.source().range(*code_at, s.size, "PyInit code");
      std::set<std::string> taken;
      for (u64 i = 0; i + 7 <= code.size(); i++) {
        const u8 rex = code.data()[i];
        if ((rex & 0xF8) != 0x48 || code.data()[i + 1] != 0x8D ||
            (code.data()[i + 2] & 0xC7) != 0x05)
          continue;
        u32 disp = 0;
        for (int b = 0; b < 4; b++) disp |= u32{code.data()[i + 3 + b]} << (8 * b);
        const u64 target =
            s.value + i + 7 + static_cast<u64>(static_cast<i64>(static_cast<int32_t>(disp)));
        std::optional<u64> target_at = e.vaddr_to_offset(target);
        if (!target_at) continue;
        auto it = candidates.find(*target_at);
        if (it != candidates.end() && taken.insert(it->second).second) out.push_back(it->second);
      }
      return out;
    }
    return out;
  }

  static constexpr size_t kMaxModules = ImportWalker::kMaxModules;
  static constexpr u64 kMaxBytes = ImportWalker::kMaxBytes;
};

ImportWalker::ImportWalker(const host::Host& host, Resolve resolve,
                           std::vector<ScanProblem>& problems)
    : impl_(new Impl{host, std::move(resolve), problems, {}, {}, {}}) {}
ImportWalker::~ImportWalker() = default;
void ImportWalker::set_listener(Listener listener) { impl_->listener = std::move(listener); }
void ImportWalker::import(const std::string& module, const std::vector<std::string>& names,
                          const std::string& via) {
  impl_->import(module, names, via);
}
bool ImportWalker::started(const std::string& module) const {
  return impl_->started.count(module) > 0;
}
size_t ImportWalker::modules_read() const { return impl_->files_read; }
bool ImportWalker::cut() const { return impl_->cut; }

std::vector<ImportEvent> import_events(const host::Host& host, const ImportedPackage& pkg,
                                       std::vector<ScanProblem>& problems) {
  if (pkg.kind != ImportKind::Package) return {};
  std::vector<ImportEvent> events;
  ImportWalker walk(
      host, [&](const std::string& top) { return top == pkg.import_name ? &pkg : nullptr; },
      problems);
  walk.set_listener([&](const ImportEvent& e) {
    if (e.kind == ImportEvent::Kind::Extension ||
        (e.kind == ImportEvent::Kind::Package && e.name != pkg.import_name))
      events.push_back(e);
  });
  walk.import(pkg.import_name, {}, pkg.import_name + "/__init__.py");
  return events;
}

}  // namespace mld::pyenv
