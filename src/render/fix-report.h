// fix-report.h — the output of `mldoctor fix`.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check/check.h"

namespace mld::render {

// mldoctor.fix/1 (docs/json-schema.md).
nlohmann::json fix_document(const std::vector<check::FixSetting>& settings);
// Shell code that applies `settings`; `shell` is "bash" (also zsh, sh) or "fish".
void print_fix_shell(std::FILE* out, const std::vector<check::FixSetting>& settings,
                     const std::string& shell);

}  // namespace mld::render
