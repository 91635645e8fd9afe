// tls-room.cc — keeping the job's static TLS room what it is without `run`.
//
// An LD_AUDIT module changes how much static TLS a process can still give to
// dlopen()ed initial-exec modules (seed 001's failure): ld.so lays the area
// out before the program's libraries are mapped, glibc 2.32+ (and Debian
// 11's 2.31, which carries that series) add surplus for each audit
// namespace, and the module's own libc copy takes part of it back. The sum
// differs per release and per distribution patch: measured, Debian 11 leaves
// 48 bytes *more* room under the shims (a failure within 48 bytes would not
// happen under `run`), Debian 13 and unstable 16 bytes less. So it is not
// computed here: the probe (src/trace/tls-probe.c) is started in the job's
// environment with and without the shims, traced into a directory of its
// own as the job will be, and reports its area; the difference of the two
// is what the shims change.
//
// What decides the difference is the layout of the program's own startup
// modules (glibc rounds the executable's and its libraries' blocks plus the
// surplus up to 64 bytes, differently with and without LD_AUDIT): measured in
// Debian 13, 40 bytes *less* room for a libc-only program and 16 bytes *more*
// for python3.13, whose executable has TLS of its own. So the change for the
// job's program is computed by the loader model (src/loader, the static TLS
// layout proven against each root's real dlopen() by roots-static-tls),
// for the program the command execs (a script's interpreter), and the probe
// is the model's check on this very machine: the model's figure for the
// probe must equal the probe's own. Where it does not (a glibc patched in a
// way the model does not know), the probe's figure is used and the report
// says so. An excess is taken back by preloading reserve objects
// (src/trace/tls-reserve.c) of 16 to 512 bytes, one per set bit of the
// excess rounded up to 16. A smaller room is left alone (no object can give
// room back) and said. Processes of the job that exec another program get
// the same reserve: exact for the command's program, not for theirs.
#include <dirent.h>
#include <fcntl.h>
#include <gnu/libc-version.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "elf/elf.h"
#include "loader/loader.h"
#include "run/run.h"

namespace mld::run {

namespace {

constexpr const char* kProbe = "mldoctor-tls-probe";
constexpr int kProbeTimeoutMs = 20000;  // a start takes ~5 ms; a loaded machine, much more
constexpr u64 kLargestReserve = 512;

double monotonic_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

struct ProbeArea {
  u64 size = 0, used = 0;
  i64 room() const { return static_cast<i64>(size) - static_cast<i64>(used); }
};

// Starts the probe with `env`, reads its one line; nullopt with *why when it
// did not answer (killed after kProbeTimeoutMs: it never blocks the job).
std::optional<ProbeArea> run_probe(const std::string& probe, const std::vector<std::string>& env,
                                   std::string* why) {
  std::vector<std::string> env_copy = env;
  std::vector<char*> envp;
  for (std::string& e : env_copy) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string path = probe;
  char* argv[] = {path.data(), nullptr};

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    *why = "pipe: " + errno_text(errno);
    return std::nullopt;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  // The job's signal dispositions are not the probe's business: defaults.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, path.c_str(), &actions, &attr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(out[1]);
  if (rc != 0) {
    close(out[0]);
    *why = "could not start " + path + ": " + errno_text(rc);
    return std::nullopt;
  }
  std::string text;
  const double deadline = monotonic_ms() + kProbeTimeoutMs;
  bool timed_out = false;
  for (;;) {
    const double left = deadline - monotonic_ms();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(left) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    char buf[256];
    const ssize_t k = read(out[0], buf, sizeof buf);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    if (text.size() < 4096) text.append(buf, static_cast<size_t>(k));
  }
  close(out[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    *why = path + " did not answer in " + std::to_string(kProbeTimeoutMs / 1000) + " s";
    return std::nullopt;
  }
  unsigned long long size = 0, used = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 ||
      std::sscanf(text.c_str(), "%llu %llu", &size, &used) != 2 || used > size) {
    *why = path + " could not read this architecture's static TLS area";
    return std::nullopt;
  }
  return ProbeArea{size, used};
}

// `env` with MLDOCTOR_TRACE_DIR pointing at `dir` instead.
std::vector<std::string> traced_into(std::vector<std::string> env, const std::string& dir) {
  for (std::string& v : env)
    if (v.starts_with("MLDOCTOR_TRACE_DIR=")) v = "MLDOCTOR_TRACE_DIR=" + dir;
  return env;
}

// The ELF program exec(argv0) runs: the file found as execvp finds it, or
// a script's interpreter (through /usr/bin/env too). nullopt: unknown.
std::optional<std::string> program_image(const host::Host& host, const std::string& argv0) {
  std::optional<std::string> path = argv0.find('/') != std::string::npos
                                        ? std::optional<std::string>(argv0)
                                        : host.find_on_path(argv0);
  for (int depth = 0; path && depth < 4; depth++) {
    std::optional<std::string> head = host.read_file(*path, 256);
    if (!head) return std::nullopt;
    if (!head->starts_with("#!")) return path;
    std::string line = head->substr(
        2, head->find('\n') == std::string::npos ? std::string::npos : head->find('\n') - 2);
    std::vector<std::string> words;
    for (size_t i = 0; i < line.size();) {
      const size_t b = line.find_first_not_of(" \t", i);
      if (b == std::string::npos) break;
      const size_t e = line.find_first_of(" \t", b);
      words.push_back(line.substr(b, e == std::string::npos ? std::string::npos : e - b));
      i = e == std::string::npos ? line.size() : e;
    }
    if (words.empty()) return std::nullopt;
    if (words[0].ends_with("/env") && words.size() > 1 && !words[1].starts_with("-"))
      path = host.find_on_path(words[1]);
    else
      path = words[0];
  }
  return std::nullopt;
}

// The loader model's room change for `program`: the static area left after
// start-up with one more audit namespace, minus without.
std::optional<i64> modelled_change(const host::Host& host, const std::string& program,
                                   std::string* why) {
  try {
    std::optional<loader::GlibcVersion> glibc = loader::parse_glibc_version(gnu_get_libc_version());
    if (!glibc) throw std::runtime_error("glibc release unknown");
    ShimComparison c = model_with_and_without_shims(host, program, *glibc, {}, 0);
    return (static_cast<i64>(c.under_run.static_size) -
            static_cast<i64>(c.under_run.startup_used)) -
           (static_cast<i64>(c.plain.static_size) - static_cast<i64>(c.plain.startup_used));
  } catch (const std::exception& e) {
    *why = program + ": " + e.what();
    return std::nullopt;
  }
}

}  // namespace

ShimComparison model_with_and_without_shims(const host::Host& host, const std::string& program,
                                            loader::GlibcVersion glibc,
                                            const std::vector<std::string>& roots, u64 reserve) {
  const u16 machine = elf::ElfFile::parse(host.open_sparse(program)).e_machine();
  loader::Loader ld(host, loader::SearchConfig::for_host(host, machine, true, glibc));
  std::optional<loader::StaticTlsParams> params =
      loader::StaticTlsParams::for_process(host, machine, glibc, nullptr);
  if (!params) throw std::runtime_error("static TLS is not modelled for this architecture");
  loader::StaticTlsParams traced = *params;
  traced.naudit += 1;
  traced.startup_reserve = reserve;
  loader::Process plain_process = ld.load_program(program);
  loader::Process traced_process = plain_process;
  ShimComparison c;
  c.plain = loader::simulate_dlopen_sequence(ld, plain_process, roots, *params);
  c.under_run = loader::simulate_dlopen_sequence(ld, traced_process, roots, traced);
  return c;
}

TlsRoomChange measure_tls_room_change(const host::Host& host, const std::string& program,
                                      const std::string& shim_dir, const std::string& trace_dir,
                                      const std::vector<std::string>& plain_env,
                                      const std::vector<std::string>& shim_env) {
  TlsRoomChange c;
  const std::string probe = shim_dir + "/" + kProbe;
  struct stat st;
  if (stat(probe.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    c.note = probe + " is missing";
    return c;
  }
  // The shims write the probe's events into a directory of its own, made
  // and emptied here: the job's trace never sees the probe.
  const std::string dir = trace_dir + "/tls-probe";
  if (mkdir(dir.c_str(), 0700) != 0) {
    c.note = "could not make " + dir + ": " + errno_text(errno);
    return c;
  }
  std::optional<ProbeArea> plain = run_probe(probe, plain_env, &c.note);
  std::optional<ProbeArea> traced;
  if (plain) traced = run_probe(probe, traced_into(shim_env, dir), &c.note);
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* ent = readdir(d)) {
      const std::string name = ent->d_name;
      if (name.ends_with(".jsonl")) unlinkat(dirfd(d), name.c_str(), 0);
    }
    closedir(d);
  }
  rmdir(dir.c_str());
  if (!plain || !traced) return c;
  c.room_without = plain->room();
  c.probe_bytes = traced->room() - plain->room();
  // The model is trusted for the job's program only where it gets the
  // probe's own figure right.
  std::string why;
  std::optional<i64> probe_model = modelled_change(host, probe, &why);
  std::optional<std::string> image = program_image(host, program);
  std::optional<i64> job_model;
  if (probe_model && *probe_model == *c.probe_bytes) {
    if (image)
      job_model = modelled_change(host, *image, &why);
    else
      why = program + ": not found as exec would find it";
  } else if (probe_model) {
    why = "the loader model gives " + std::to_string(*probe_model) + " bytes for the probe";
  }
  if (job_model) {
    c.bytes = job_model;
    c.program = *image;
  } else {
    c.bytes = c.probe_bytes;
    c.note = "computed for a program with libc's TLS only (" + why + ")";
  }
  if (*c.bytes <= 0) return c;
  u64 excess = (static_cast<u64>(*c.bytes) + 15) / 16 * 16;
  if (excess > 2 * kLargestReserve - 16) {
    c.note += std::string(c.note.empty() ? "" : "; ") + "the shims leave " +
              std::to_string(*c.bytes) + " bytes more static TLS room, more than run can take back";
    excess = 2 * kLargestReserve - 16;
  }
  for (u64 b = 16; b <= kLargestReserve; b *= 2)
    if (excess & b)
      c.reserve_objects.push_back(shim_dir + "/libmldoctor-tls-reserve-" + std::to_string(b) +
                                  ".so");
  c.reserved = excess;
  return c;
}

}  // namespace mld::run
