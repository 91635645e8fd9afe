// trace-dir.cc — where `run`'s shims write their events: the user's
// --trace-dir (a private directory of this user, empty of earlier events, as
// the events name every library and variable of the job) or a fresh one
// under $TMPDIR, removed afterwards (only the event files, then the empty
// directory: never anything else that might be there).
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include "run/run.h"

namespace mld::run {

// The trace directory: the user's (created 0700, or an existing private one
// of ours) or a fresh one under $TMPDIR that is removed afterwards.
bool prepare_trace_dir(const std::string& wanted, std::string& dir, bool& temporary,
                       std::string& error) {
  if (wanted.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/mldoctor-run-XXXXXX";
    if (!mkdtemp(templ.data())) {
      error = "cannot create a trace directory in " + templ.substr(0, templ.rfind('/')) + ": " +
              errno_text(errno);
      return false;
    }
    dir = templ;
    temporary = true;
    return true;
  }
  char real[4096];
  if (mkdir(wanted.c_str(), 0700) != 0 && errno != EEXIST) {
    error = "--trace-dir " + wanted + ": " + errno_text(errno);
    return false;
  }
  struct stat st {};
  if (lstat(wanted.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    error = "--trace-dir " + wanted + ": not a directory";
    return false;
  }
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
    error = "--trace-dir " + wanted +
            ": must be a private directory of this user (mode 0700); events name "
            "every library and variable of the job";
    return false;
  }
  // Events of an earlier run would be read as this job's (and a reused pid
  // would append to its file).
  if (std::optional<std::vector<std::string>> names = host::Host::live().list_dir(wanted))
    for (const std::string& n : *names)
      if (n.ends_with(".jsonl")) {
        error = "--trace-dir " + wanted + " holds the events of an earlier run (" + n +
                "): use an empty directory";
        return false;
      }
  dir = realpath(wanted.c_str(), real) ? std::string(real) : wanted;
  temporary = false;
  return true;
}

void remove_trace_dir(const std::string& dir) {
  // Only the event files the shims write, then the (then empty) directory.
  if (std::optional<std::vector<std::string>> names = host::Host::live().list_dir(dir))
    for (const std::string& n : *names)
      if (n.ends_with(".jsonl")) unlink((dir + "/" + n).c_str());
  rmdir(dir.c_str());
}

}  // namespace mld::run
