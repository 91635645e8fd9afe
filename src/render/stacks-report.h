// stacks-report.h — `mldoctor stacks`: each process's threads with their
// Python frames (as py-spy dump prints them), what each thread waits in, and
// native frames when they were taken; as text and as the mldoctor.stacks/1
// document.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>

#include "run/run.h"

namespace mld::render {

void print_stacks(std::FILE* out, const run::HangSample& sample, bool color);
nlohmann::json stacks_json(const run::HangSample& sample);
// The Python stacks of one process as `py-spy dump` prints them (a rank's
// lines behind "[rankN]: " as torch prefixes them), for the log rules'
// stack signatures: a wait the rules know in a pasted dump is known the
// same way in a live job. "" when no thread has Python frames.
std::string pyspy_text(const detect::ProcessSample& process);

}  // namespace mld::render
