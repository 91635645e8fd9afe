// matcher.cc — compiles the knowledge base's log signatures. Vectorscan finds
// candidate lines for all patterns in one pass (its literal matchers are what
// make a multi-gigabyte log take seconds); PCRE2 confirms each candidate on
// its own line and extracts captures. A pattern Vectorscan cannot compile
// exactly is compiled in its prefilter mode (a superset), which the PCRE2
// confirmation makes exact again.
#include <algorithm>
#include <cstdlib>
#include <map>

#include "logs/logs-internal.h"

namespace mld::logs {

Matcher::Impl::~Impl() {
  if (db) hs_free_database(db);
  if (stream_db_) hs_free_database(stream_db_);
  for (CompiledPattern& p : patterns)
    if (p.code) pcre2_code_free(p.code);
  for (CompiledStack& st : stacks) {
    if (st.frame) pcre2_code_free(st.frame);
    if (st.under) pcre2_code_free(st.under);
  }
}

Matcher::~Matcher() = default;

std::string Matcher::precompiled_target() const { return impl_->loaded_target; }

namespace {

pcre2_code* compile_pcre2(const std::string& pattern, bool caseless, std::string* error) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  u32 options = PCRE2_MULTILINE | (caseless ? PCRE2_CASELESS : 0);
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 options, &code, &offset, nullptr);
  if (!re) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(code, buf, sizeof buf);
    *error = "pattern '" + pattern + "' at offset " + std::to_string(offset) + ": " +
             reinterpret_cast<const char*>(buf);
    return nullptr;
  }
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  return re;
}

}  // namespace

hs_database_t* Matcher::Impl::stream_db() const {
  std::call_once(stream_once_, [this] {
    if (hs_exprs.empty()) return;
    // The block-mode database accepted these exact patterns and flags.
    stream_db_ = compile_database(hs_exprs, hs_flags, HS_MODE_STREAM, nullptr, nullptr);
  });
  return stream_db_;
}

namespace {

u64 fnv1a(u64 h, std::string_view bytes) {
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

hs_database_t* compile_database(const std::vector<std::string>& exprs,
                                const std::vector<unsigned>& flags, unsigned mode,
                                const hs_platform_info_t* platform, std::string* error, int* bad) {
  std::vector<const char*> cexprs;
  std::vector<unsigned> ids;
  for (size_t i = 0; i < exprs.size(); i++) {
    cexprs.push_back(exprs[i].c_str());
    ids.push_back(static_cast<unsigned>(i));
  }
  hs_compile_error_t* err = nullptr;
  hs_database_t* db = nullptr;
  if (hs_compile_multi(cexprs.data(), flags.data(), ids.data(), static_cast<unsigned>(ids.size()),
                       mode, platform, &db, &err) == HS_SUCCESS)
    return db;
  if (error) *error = err && err->message ? err->message : "unknown Vectorscan error";
  if (bad) *bad = err ? err->expression : -1;
  hs_free_compile_error(err);
  return nullptr;
}

// The longest run of plain characters that every match of `pattern` must
// contain, read at the top level only (an alternation there, an inline
// option or anything unexpected gives up: empty). Quantified atoms, groups,
// classes, anchors and escapes like \d end a run; a '+' keeps its atom.
std::string required_literal(std::string_view pattern) {
  std::string best, run;
  auto end_run = [&] {
    if (run.size() > best.size()) best = run;
    run.clear();
  };
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  const size_t n = pattern.size();
  // Steps `at` from a '[' past its class; false for what is not read here
  // (a POSIX class, an unterminated class).
  auto skip_class = [&](size_t& at) {
    at++;
    if (at < n && pattern[at] == '^') at++;
    if (at < n && pattern[at] == ']') at++;
    while (at < n && pattern[at] != ']') {
      if (pattern[at] == '[') return false;
      at += pattern[at] == '\\' ? 2 : 1;
    }
    if (at >= n) return false;
    at++;
    return true;
  };
  size_t i = 0;
  while (i < n) {
    const char c = pattern[i];
    // One atom: a literal byte (`lit` >= 0) or something else (-1).
    int lit = -1;
    if (c == '(') {
      if (i + 1 < n && pattern[i + 1] == '?' && !(i + 2 < n && pattern[i + 2] == ':'))
        return "";  // (?i), lookarounds, named groups: not read
      if (i + 1 < n && pattern[i + 1] == '*') return "";  // (*VERB)
      int depth = 0;
      while (i < n) {  // past the group, its classes and escapes
        if (pattern[i] == '\\') {
          i += 2;
        } else if (pattern[i] == '[') {
          if (!skip_class(i)) return "";
        } else if (pattern[i] == '(') {
          depth++;
          i++;
        } else if (pattern[i] == ')') {
          i++;
          if (--depth == 0) break;
        } else {
          i++;
        }
      }
      if (depth != 0) return "";
    } else if (c == '[') {
      if (!skip_class(i)) return "";
    } else if (c == '|' || c == ')') {
      return "";
    } else if (c == '\\') {
      if (i + 1 >= n) return "";
      const char e = pattern[i + 1];
      i += 2;
      const bool alnum = (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9');
      if (e == 'x') {
        if (!(i + 1 < n && hex(pattern[i]) >= 0 && hex(pattern[i + 1]) >= 0)) return "";
        lit = hex(pattern[i]) * 16 + hex(pattern[i + 1]);
        i += 2;
      } else if (e == 't') {
        lit = '\t';
      } else if (!alnum) {
        lit = static_cast<unsigned char>(e);  // \. \( \[ \\ \' ...
      } else if (std::string_view("dDwWsSbBhHvVnrfeaAzZG").find(e) == std::string_view::npos) {
        return "";  // \Q..\E, \c, \g, \k, \p, back-references...: not read
      }             // classes, anchors and control characters end a run
    } else if (c == '.' || c == '^' || c == '$') {
      i++;
    } else if (c == '?' || c == '*' || c == '+' || c == '{') {
      return "";  // a quantifier with no atom before it: not read
    } else {
      lit = static_cast<unsigned char>(c);
      i++;
    }
    // Its quantifier, if any.
    const char q = i < n ? pattern[i] : '\0';
    if (q == '?' || q == '*' || q == '{') {
      // Optional or counted: the run ends before the atom.
      if (q == '{') {
        size_t close = pattern.find('}', i);
        if (close == std::string_view::npos) return "";
        i = close + 1;
      } else {
        i++;
      }
      if (i < n && (pattern[i] == '?' || pattern[i] == '+')) i++;  // lazy, possessive
      end_run();
      continue;
    }
    if (q == '+') {
      i++;
      if (i < n && (pattern[i] == '?' || pattern[i] == '+')) i++;
      if (lit >= 0 && lit != '\n') run += static_cast<char>(lit);
      end_run();
      continue;
    }
    if (lit >= 0 && lit != '\n')
      run += static_cast<char>(lit);
    else
      end_run();
  }
  end_run();
  return best;
}

namespace {

// The expression Vectorscan scans for a signature: its longest required
// literal when that is long enough to be rarer than whatever Vectorscan
// would pick itself (measured: Vectorscan hashes the last bytes of the
// literal it picks, and "memory " or "line " from a rule's prefix hit on
// every line of an ordinary training log), else the pattern. PCRE2 confirms
// every candidate line with the full pattern, so a superset loses nothing.
std::string scan_expression(const std::string& pattern) {
  constexpr size_t kMinLiteral = 6;
  std::string literal = required_literal(pattern);
  if (literal.size() < kMinLiteral) return pattern;
  std::string expr;
  static const char digits[] = "0123456789abcdef";
  for (char ch : literal) {
    auto b = static_cast<unsigned char>(ch);
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b == ' ') {
      expr += ch;
    } else {
      expr += "\\x";
      expr += digits[b >> 4];
      expr += digits[b & 15];
    }
  }
  return expr;
}

}  // namespace

// The mid-log patterns as Vectorscan sees them: identical (pattern, flags)
// pairs share one expression (three NCCL rules wait for the same follow-up
// lines), and the fingerprint names the list for precompiled databases.
void Matcher::Impl::collect_expressions() {
  std::map<std::pair<std::string, unsigned>, u32> seen;
  for (u32 i = 0; i < patterns.size(); i++) {
    const CompiledPattern& p = patterns[i];
    if (p.signature && p.signature->at_end) continue;
    std::string expr = p.stack_trigger ? p.stack_trigger->pattern
                       : p.follow_up   ? scan_expression(p.signature->followed_by)
                                       : scan_expression(p.signature->pattern);
    unsigned flags =
        HS_FLAG_MULTILINE | (p.signature && p.signature->case_insensitive ? HS_FLAG_CASELESS : 0u);
    auto [it, inserted] = seen.try_emplace({expr, flags}, static_cast<u32>(hs_exprs.size()));
    if (inserted) {
      hs_exprs.push_back(expr);
      hs_flags.push_back(flags);
      hs_groups.emplace_back();
      hs_frame_trigger.push_back(1);
    }
    hs_groups[it->second].push_back(i);
    if (!p.stack_trigger || p.stack_trigger->header) hs_frame_trigger[it->second] = 0;
  }
  fingerprint = 14695981039346656037ull;
  for (size_t i = 0; i < hs_exprs.size(); i++) {
    fingerprint = fnv1a(fingerprint, hs_exprs[i]);
    fingerprint = fnv1a(fingerprint, std::to_string(hs_flags[i]) + "\n");
  }
}

// Block-mode database of the collected expressions. An expression Vectorscan
// cannot compile exactly is retried in prefilter mode; one it cannot compile
// at all is reported with its rule and left out.
bool Matcher::Impl::compile_block(std::vector<rules::RuleError>& errors) {
  while (!hs_exprs.empty()) {
    std::string message;
    int bad = -1;
    db = compile_database(hs_exprs, hs_flags, HS_MODE_BLOCK, nullptr, &message, &bad);
    if (db) return true;
    if (bad < 0 || static_cast<size_t>(bad) >= hs_exprs.size()) {
      errors.push_back({"rules", "Vectorscan cannot compile the log signatures: " + message});
      return false;
    }
    if (!(hs_flags[bad] & HS_FLAG_PREFILTER)) {
      hs_flags[bad] |= HS_FLAG_PREFILTER;
      continue;
    }
    for (u32 index : hs_groups[bad])
      errors.push_back(
          {patterns[index].rule ? patterns[index].rule->origin : std::string("stack-dump trigger"),
           "pattern '" + hs_exprs[bad] + "': " + message});
    hs_exprs.erase(hs_exprs.begin() + bad);
    hs_flags.erase(hs_flags.begin() + bad);
    hs_groups.erase(hs_groups.begin() + bad);
    hs_frame_trigger.erase(hs_frame_trigger.begin() + bad);
  }
  return true;
}

// Uses a database compiled at build time when it was made from exactly
// these expressions and this CPU can run it.
bool Matcher::Impl::load_precompiled(const Precompiled& pre) {
  if (pre.fingerprint != fingerprint || pre.flags.size() != hs_flags.size()) return false;
  for (const PrecompiledDatabase& d : pre.databases) {
    hs_database_t* candidate = nullptr;
    if (hs_deserialize_database(reinterpret_cast<const char*>(d.bytes), d.size, &candidate) !=
        HS_SUCCESS)
      continue;
    hs_scratch_t* probe =
        nullptr;  // a database for a CPU feature this host lacks cannot get scratch
    if (hs_alloc_scratch(candidate, &probe) != HS_SUCCESS) {
      hs_free_database(candidate);
      continue;
    }
    hs_free_scratch(probe);
    db = candidate;
    hs_flags = pre.flags;
    loaded_target = d.target;
    return true;
  }
  return false;
}

std::shared_ptr<const Matcher> Matcher::compile(const rules::RuleSet& rule_set,
                                                std::vector<rules::RuleError>& errors,
                                                const Precompiled* precompiled) {
  std::shared_ptr<Matcher> m(new Matcher());
  m->impl_ = std::make_unique<Impl>();
  Impl& impl = *m->impl_;
  impl.rules = rule_set;

  // PCRE2 first: it defines what a pattern means; a pattern it rejects is
  // dropped with its rule named.
  for (const rules::Rule& rule : impl.rules.all()) {
    if (rule.withdrawn) continue;
    for (const rules::Signature& sig : rule.signatures) {
      u32 index = impl.signature_count++;
      std::string error;
      auto add = [&](const std::string& pattern, bool follow_up) {
        pcre2_code* code = compile_pcre2(pattern, sig.case_insensitive, &error);
        if (!code) {
          errors.push_back({rule.origin, error});
          return false;
        }
        impl.patterns.push_back({&rule, &sig, follow_up, index, code});
        if (sig.at_end) impl.at_end.push_back(static_cast<u32>(impl.patterns.size() - 1));
        return true;
      };
      if (!add(sig.pattern, false)) continue;
      if (!sig.followed_by.empty()) add(sig.followed_by, true);
    }
    for (const rules::StackSignature& st : rule.stacks) {
      std::string error;
      CompiledStack cs{&rule, &st, compile_pcre2(st.frame, false, &error), nullptr};
      if (cs.frame && !st.under.empty()) cs.under = compile_pcre2(st.under, false, &error);
      if (!cs.frame || (!st.under.empty() && !cs.under)) {
        errors.push_back({rule.origin, error});
        if (cs.frame) pcre2_code_free(cs.frame);
        continue;
      }
      impl.stacks.push_back(cs);
    }
  }
  // Lines that may start a stack dump, scanned only when a rule reads dumps.
  if (!impl.stacks.empty())
    for (const StackTrigger& trigger : stack_dump_triggers()) {
      std::string error;
      pcre2_code* code = compile_pcre2(trigger.pattern, false, &error);
      if (!code) {
        errors.push_back({"stack-dump trigger", error});
        continue;
      }
      CompiledPattern p;
      p.code = code;
      p.stack_trigger = &trigger;
      impl.patterns.push_back(p);
    }
  impl.collect_expressions();
  if (!(precompiled && impl.load_precompiled(*precompiled))) impl.compile_block(errors);
  return m;
}

std::vector<SerializedDatabase> serialize_databases(const rules::RuleSet& rules,
                                                    std::vector<rules::RuleError>& errors,
                                                    u64* fingerprint,
                                                    std::vector<unsigned>* flags) {
  auto m = Matcher::compile(rules, errors);
  const Matcher::Impl& impl = m->impl();
  *fingerprint = impl.fingerprint;
  *flags = impl.hs_flags;
  // Targets from the most capable down; the loader takes the first this CPU runs.
  struct Target {
    const char* name;
    unsigned long long features;
  };
  const Target targets[] = {
      {"avx512vbmi", HS_CPU_FEATURES_AVX512VBMI | HS_CPU_FEATURES_AVX512 | HS_CPU_FEATURES_AVX2},
      {"avx512", HS_CPU_FEATURES_AVX512 | HS_CPU_FEATURES_AVX2},
      {"avx2", HS_CPU_FEATURES_AVX2},
      {"generic", 0}};
  std::vector<SerializedDatabase> out;
  if (impl.hs_exprs.empty()) return out;
  for (const Target& t : targets) {
    hs_platform_info_t platform{HS_TUNE_FAMILY_GENERIC, t.features, 0, 0};
    std::string error;
    hs_database_t* db =
        compile_database(impl.hs_exprs, impl.hs_flags, HS_MODE_BLOCK, &platform, &error, nullptr);
    if (!db) {
      errors.push_back(
          {"rules", std::string("Vectorscan cannot compile for ") + t.name + ": " + error});
      continue;
    }
    char* bytes = nullptr;
    size_t size = 0;
    if (hs_serialize_database(db, &bytes, &size) == HS_SUCCESS) {
      out.push_back({t.name, std::string(bytes, size)});
      std::free(bytes);
    }
    hs_free_database(db);
  }
  return out;
}

}  // namespace mld::logs
