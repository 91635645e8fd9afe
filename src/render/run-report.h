// run-report.h — `mldoctor run`'s report: the traced processes as text and
// as the objects of the mldoctor.run/1 document, and the job's end status.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "run/run.h"

namespace mld::render {

// "SIGKILL"
std::string signal_text(int sig);
// "exit 1", "killed by SIGSEGV (core dumped)", "did not start: ..."
std::string status_text(const run::LaunchResult& r);
// One traced process, indented, for the text report.
void print_process(std::FILE* out, const host::Host& host, const run::TracedProcess& p,
                   const std::string& indent);
// One traced process of mldoctor.run/1.
nlohmann::json process_json(const run::TracedProcess& p);

}  // namespace mld::render
