// check-report.h — the report of `mldoctor check` for people: the header rows
// of the text and Markdown output (the findings follow, printed by
// report.h). Its JSON document, mldoctor.check/1, is written next to its
// reader in fleet/ (fleet/check-document.cc).
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "check/check.h"

namespace mld::render {

// ("Host", "Debian GNU/Linux 12 (bookworm) · Linux 6.1 · glibc 2.36"), ...
// A row with an empty key continues the one above (the other interpreters
// under "Packages"); `markdown` puts their commands in code spans.
using HeaderRow = std::pair<std::string, std::string>;
std::vector<HeaderRow> check_header(const check::CheckReport& r, bool markdown = false);

// The whole report: header, GPU topology (two GPUs or more), findings, and
// the summary line with the next command to run (with the interpreter that
// has torch when the checked one has no known package).
// `fix_command` is the `mldoctor fix` that repeats this check (its --python,
// --import, --root...), shown in the summary line for eval "$(...)".
void print_check_text(std::FILE* out, const check::CheckReport& r, bool color,
                      const std::string& fix_command = "mldoctor fix");
void print_check_markdown(std::FILE* out, const check::CheckReport& r);

}  // namespace mld::render
