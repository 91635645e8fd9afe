// format-strings.cc — the format strings emitters print their messages
// with, as a rule file cites them ([[source]]): C printf (glibc's loader,
// NCCL's WARN/INFO, LLVM OpenMP's message catalog with %1$s), Python's
// %-format and str.format/f-strings, and C++ message pieces written as {}
// (torch's c10::str, fmt). A log signature is right when it matches what
// the emitter prints for any argument, so the rule check (logs/) fills
// every placeholder with a value of its type and scans the result. This
// file only parses and fills; it never matches.
#include <cstdlib>

#include "rules/rules.h"

namespace mld::rules {
namespace {

// One placeholder: which argument (0-based) and what type of value it prints.
enum class ValueKind { String, Integer, Hex, Octal, Float, Pointer, Char, Errno, Repr };

std::string sample_of(ValueKind kind) {
  switch (kind) {
    case ValueKind::String: return "sample";
    case ValueKind::Integer: return "3";
    case ValueKind::Hex: return "1f";
    case ValueKind::Octal: return "17";
    case ValueKind::Float: return "1.50";
    case ValueKind::Pointer: return "0x7f3a2c001000";
    case ValueKind::Char: return "x";
    case ValueKind::Errno: return "Connection refused";
    case ValueKind::Repr: return "'sample'";
  }
  return "sample";
}

// Hands out arguments: the source's values in order (or by position), else
// typed samples. Records a mismatch between the values and the placeholders.
class Arguments {
 public:
  explicit Arguments(const std::vector<std::string>& values) : values_(values) {}

  std::string next(ValueKind kind) { return at(sequential_++, kind); }
  std::string at(size_t index, ValueKind kind) {
    used_ = std::max(used_, index + 1);
    if (values_.empty()) return sample_of(kind);
    if (index >= values_.size()) {
      short_ = true;
      return sample_of(kind);
    }
    if (kind == ValueKind::Repr) return "'" + values_[index] + "'";
    return values_[index];
  }
  // The values, when given, must be exactly one per argument.
  bool fits(std::string* error) const {
    if (values_.empty() || (!short_ && used_ == values_.size())) return true;
    if (error)
      *error = "the format takes " + std::to_string(used_) + " argument(s) but " +
               std::to_string(values_.size()) + " value(s) are given";
    return false;
  }

 private:
  const std::vector<std::string>& values_;
  size_t sequential_ = 0;
  size_t used_ = 0;
  bool short_ = false;
};

bool digit(char c) { return c >= '0' && c <= '9'; }

// Reads digits at f[i]; returns the number, -1 when there are none.
long read_number(std::string_view f, size_t& i) {
  if (i >= f.size() || !digit(f[i])) return -1;
  long n = 0;
  while (i < f.size() && digit(f[i]) && n < 100000) n = n * 10 + (f[i++] - '0');
  return n;
}

// %[N$][flags][width][.precision][length]conversion, and Python's %(name)s.
std::optional<std::string> fill_printf(std::string_view f, Arguments& args, std::string* error) {
  std::string out;
  for (size_t i = 0; i < f.size(); i++) {
    if (f[i] != '%') {
      out += f[i];
      continue;
    }
    const size_t start = i++;
    if (i < f.size() && f[i] == '%') {
      out += '%';
      continue;
    }
    if (i < f.size() && f[i] == '(') {  // Python: %(name)s
      size_t close = f.find(')', i);
      if (close == std::string_view::npos) {
        if (error) *error = "a '%(' at offset " + std::to_string(start) + " is never closed";
        return std::nullopt;
      }
      i = close + 1;
    }
    long position = -1;
    {
      size_t j = i;
      long n = read_number(f, j);
      if (n > 0 && j < f.size() && f[j] == '$') position = n - 1, i = j + 1;
    }
    while (i < f.size() && std::string_view("-+ #0'I").find(f[i]) != std::string_view::npos) i++;
    auto star = [&] {  // '*' or '*N$' consumes an int argument
      if (i < f.size() && f[i] == '*') {
        i++;
        size_t j = i;
        long n = read_number(f, j);
        if (n > 0 && j < f.size() && f[j] == '$')
          i = j + 1, args.at(static_cast<size_t>(n - 1), ValueKind::Integer);
        else
          args.next(ValueKind::Integer);
        return true;
      }
      return false;
    };
    if (!star()) read_number(f, i);
    if (i < f.size() && f[i] == '.') {
      i++;
      if (!star()) read_number(f, i);
    }
    while (i < f.size() && std::string_view("hlLqjzZt").find(f[i]) != std::string_view::npos) i++;
    if (i >= f.size()) {
      if (error) *error = "a '%' at offset " + std::to_string(start) + " has no conversion";
      return std::nullopt;
    }
    ValueKind kind;
    switch (f[i]) {
      case 'd':
      case 'i':
      case 'u': kind = ValueKind::Integer; break;
      case 'x':
      case 'X': kind = ValueKind::Hex; break;
      case 'o': kind = ValueKind::Octal; break;
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G':
      case 'a':
      case 'A': kind = ValueKind::Float; break;
      case 'p': kind = ValueKind::Pointer; break;
      case 'c':
      case 'C': kind = ValueKind::Char; break;
      case 's':
      case 'S': kind = ValueKind::String; break;
      case 'r': kind = ValueKind::Repr; break;  // Python's %r
      case 'm':
        out += sample_of(ValueKind::Errno);  // glibc: strerror(errno), no argument
        continue;
      default:
        if (error)
          *error = "unknown conversion '%" + std::string(1, f[i]) + "' at offset " +
                   std::to_string(start);
        return std::nullopt;
    }
    out += position >= 0 ? args.at(static_cast<size_t>(position), kind) : args.next(kind);
  }
  return out;
}

// {}, {0}, {name}, {name!r}, {0:.2f}, {{ and }}.
std::optional<std::string> fill_brace(std::string_view f, Arguments& args, std::string* error) {
  std::string out;
  for (size_t i = 0; i < f.size(); i++) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        i++;
        continue;
      }
      if (error) *error = "a lone '}' at offset " + std::to_string(i) + " (write }} for one)";
      return std::nullopt;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      i++;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string_view::npos) {
      if (error) *error = "a '{' at offset " + std::to_string(i) + " is never closed";
      return std::nullopt;
    }
    std::string_view field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string_view spec;
    if (size_t colon = field.find(':'); colon != std::string_view::npos)
      spec = field.substr(colon + 1), field = field.substr(0, colon);
    bool repr = false;
    if (size_t bang = field.find('!'); bang != std::string_view::npos)
      repr = field.substr(bang + 1) == "r", field = field.substr(0, bang);
    ValueKind kind = repr ? ValueKind::Repr : ValueKind::String;
    if (!spec.empty()) {
      switch (spec.back()) {
        case 'd':
        case 'n': kind = ValueKind::Integer; break;
        case 'x':
        case 'X': kind = ValueKind::Hex; break;
        case 'e':
        case 'f':
        case 'g':
        case '%': kind = ValueKind::Float; break;
        default: break;
      }
    }
    size_t j = 0;
    long n = read_number(field, j);
    if (n >= 0 && j == field.size())
      out += args.at(static_cast<size_t>(n), kind);
    else
      out += args.next(kind);
  }
  return out;
}

}  // namespace

std::string source_url(const Source& s) {
  // Every version of a Debian binary package, this one among them.
  if (!s.package.empty()) return "https://snapshot.debian.org/binary/" + s.package + "/";
  std::string url = "https://github.com/" + s.repository + "/blob/" + s.tag + "/" + s.path;
  if (s.line > 0) url += "#L" + std::to_string(s.line);
  return url;
}

std::optional<std::string> instantiate_format(const Source& source, std::string* error) {
  Arguments args(source.values);
  std::optional<std::string> out;
  switch (source.syntax) {
    case FormatSyntax::Printf: out = fill_printf(source.format, args, error); break;
    case FormatSyntax::Brace: out = fill_brace(source.format, args, error); break;
    case FormatSyntax::Literal:
      out = source.format;
      if (!source.values.empty()) {
        if (error) *error = "a literal format takes no values";
        return std::nullopt;
      }
      break;
  }
  if (!out || !args.fits(error)) return std::nullopt;
  return out;
}

}  // namespace mld::rules
