// logs-internal.h — the compiled matcher shared by scanner.cc and matcher.cc:
// one Vectorscan database over every mid-log signature and follow-up pattern,
// and a JIT-compiled PCRE2 program per pattern for confirmation and captures.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <hs.h>
#include <pcre2.h>

#include <mutex>

#include "logs/logs.h"

namespace mld::logs {

// One compiled pattern: a signature's own pattern, or its followed_by.
struct CompiledPattern {
  const rules::Rule* rule = nullptr;
  const rules::Signature* signature = nullptr;
  bool follow_up = false;   // the signature's followed_by pattern
  u32 signature_index = 0;  // index into Matcher::Impl::signatures
  pcre2_code* code = nullptr;
};

struct Matcher::Impl {
  rules::RuleSet rules;                   // owned copy: patterns point into it
  std::vector<CompiledPattern> patterns;  // Vectorscan id = index
  std::vector<u32> at_end;                // pattern indexes of at_end signatures (PCRE2 only)
  u32 signature_count = 0;
  hs_database_t* db = nullptr;  // block mode; null when there are no mid-log patterns
  ~Impl();

  // The same patterns in streaming mode, for lines longer than a buffer;
  // compiled on first use (most logs never need it).
  hs_database_t* stream_db() const;

  // What `db` was compiled from: expression i matches for every pattern
  // index in hs_groups[i] (identical patterns are compiled once).
  std::vector<std::string> hs_exprs;
  std::vector<unsigned> hs_flags;
  std::vector<std::vector<u32>> hs_groups;
  u64 fingerprint = 0;
  std::string loaded_target;  // precompiled target in use, or empty

  void collect_expressions();
  bool compile_block(std::vector<rules::RuleError>& errors);
  bool load_precompiled(const Precompiled& pre);

 private:
  mutable std::once_flag stream_once_;
  mutable hs_database_t* stream_db_ = nullptr;
};

// hs_compile_multi with ids 0..n-1; null with the message (and the failing
// expression) on error.
hs_database_t* compile_database(const std::vector<std::string>& exprs,
                                const std::vector<unsigned>& flags, unsigned mode,
                                const hs_platform_info_t* platform, std::string* error,
                                int* bad = nullptr);

// Number of '\n' bytes in `data` (vectorised: this runs over every byte).
u64 count_newlines(std::string_view data);

}  // namespace mld::logs
