// run-command.h — runs a shell command for a test oracle (readelf, ld.so,
// LD_DEBUG) and captures its standard output and exit status.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace mld::test {

struct CommandResult {
  int status = -1;  // exit status, -1 when it did not exit normally
  std::string out;
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult c;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return c;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) c.out.append(buf, n);
  int st = pclose(p);
  c.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return c;
}

}  // namespace mld::test
