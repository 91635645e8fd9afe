// other-user.h — runs a test's check as another user, for what only an
// unprivileged user meets (EACCES on an unreadable file or directory): root
// reads everything, so as root the check runs in a forked child that became
// user 65534 (nobody); as anyone else it runs in place.
#pragma once

#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>

namespace mld::test {

// `check` returns "" when all is as expected, else what was wrong. Returns
// its answer; nullopt when the child could not become user 65534 (the
// caller skips, saying so). The child's message is printed to stderr.
template <typename Check>
std::optional<std::string> as_unprivileged_user(Check check) {
  if (geteuid() != 0) return check();
  pid_t pid = fork();
  if (pid < 0) return "fork failed";
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
    std::string why = check();
    if (!why.empty()) std::fprintf(stderr, "%s\n", why.c_str());
    _exit(why.empty() ? 0 : 1);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return "the child did not exit";
  if (WEXITSTATUS(status) == 77) return std::nullopt;
  return WEXITSTATUS(status) == 0 ? "" : "failed as user 65534: see the child's message above";
}

}  // namespace mld::test
