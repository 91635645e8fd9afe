// interpreter.cc — which Python a job would run, and that interpreter's own
// view of itself. DESIGN §3.3 orders the candidates (--python, $VIRTUAL_ENV,
// $CONDA_PREFIX, python3 on $PATH). The live interpreter is asked once, with
// `python -S -c` and a probe that imports only sys, os, stat, site and
// sysconfig and runs site.main() itself: sys.path depends on site-packages,
// `.pth` files, PYTHONPATH and the user site, so `-I` (or `-S` alone) would
// describe a different interpreter than the job's; running site itself lets
// the probe skip a `.pth` file that is a FIFO instead of waiting on it.
// Under --root nothing can be run, so the same facts are rebuilt from the
// layout the way CPython's getpath and site.py build them (venv's pyvenv.cfg,
// lib/python3.X, Debian's dist-packages scheme, `.pth` path lines).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "elf/elf.h"
#include "pyenv/pyenv.h"

namespace mld::pyenv {

std::string_view interpreter_source_name(InterpreterSource s) {
  switch (s) {
    case InterpreterSource::Flag: return "--python";
    case InterpreterSource::VirtualEnv: return "$VIRTUAL_ENV";
    case InterpreterSource::CondaPrefix: return "$CONDA_PREFIX";
    case InterpreterSource::PathSearch: return "python3 on PATH";
    case InterpreterSource::Fallback: return "/usr/bin/python3";
  }
  return "?";
}

namespace {

bool is_regular(const host::Host& host, const std::string& path) {
  return host.stat(path).kind == host::FileKind::Regular;
}

bool is_dir(const host::Host& host, const std::string& p) {
  return host.stat(p).kind == host::FileKind::Directory;
}

}  // namespace

InterpreterChoice choose_interpreter(const host::Host& host,
                                     const std::optional<std::string>& flag_python) {
  InterpreterChoice c;
  c.python3_on_path = host.find_on_path("python3");
  if (flag_python) {
    std::string p = *flag_python;
    // A bare name ("python3.12") is looked up on PATH, as a shell would.
    if (p.find('/') == std::string::npos) {
      std::optional<std::string> found = host.find_on_path(p);
      if (!found) throw PyenvError("--python " + p + ": not found on PATH");
      p = *found;
    }
    host::FileStat st = host.stat(p);
    if (st.kind != host::FileKind::Regular)
      throw PyenvError("--python " + p + ": " +
                       (st.kind == host::FileKind::Directory ? std::string("is a directory")
                        : st.error                           ? errno_text(st.error)
                                                             : std::string("not a regular file")));
    c.path = p;
    c.source = InterpreterSource::Flag;
    c.reason = "--python";
    return c;
  }
  struct EnvCandidate {
    const char* var;
    InterpreterSource source;
  };
  for (EnvCandidate e : {EnvCandidate{"VIRTUAL_ENV", InterpreterSource::VirtualEnv},
                         EnvCandidate{"CONDA_PREFIX", InterpreterSource::CondaPrefix}}) {
    std::optional<std::string> prefix = host.getenv(e.var);
    if (!prefix || prefix->empty()) continue;
    for (const char* exe : {"bin/python", "bin/python3"}) {
      std::string p = host::join_path(*prefix, exe);
      if (is_regular(host, p)) {
        c.path = p;
        c.source = e.source;
        c.reason = std::string("$") + e.var + "/" + exe;
        return c;
      }
    }
  }
  if (c.python3_on_path) {
    c.path = *c.python3_on_path;
    c.source = InterpreterSource::PathSearch;
    c.reason = "python3 on PATH";
    return c;
  }
  if (is_regular(host, "/usr/bin/python3")) {
    c.path = "/usr/bin/python3";
    c.source = InterpreterSource::Fallback;
    c.reason = "/usr/bin/python3 (no python3 on PATH)";
    return c;
  }
  throw PyenvError(
      "no Python interpreter: --python not given, $VIRTUAL_ENV and "
      "$CONDA_PREFIX unset or without bin/python, no python3 on PATH");
}

// ─── pyenv shims ────────────────────────────────────────────────────────────

namespace {

// pyenv-version-file-read: the first word of each line, blank lines and
// "#" comments skipped, words that could leave versions/ ("..", a "/")
// ignored, joined with ':'. At most 64 KiB is read.
std::string version_file_words(std::string_view text) {
  std::string out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    line = trim(line);
    size_t end = line.find_first_of(" \t\r");
    std::string_view word = line.substr(0, end);
    if (word.empty() || word.front() == '#' || word == ".." ||
        word.find('/') != std::string_view::npos)
      continue;
    out += (out.empty() ? "" : ":") + std::string(word);
  }
  return out;
}

// "3.11.7" < "3.11.10": dotted numbers compared as numbers.
bool version_less(std::string_view a, std::string_view b) {
  while (!a.empty() || !b.empty()) {
    u64 x = 0, y = 0;
    size_t i = 0, j = 0;
    while (i < a.size() && a[i] != '.' && i < 18) x = x * 10 + static_cast<u64>(a[i++] - '0');
    while (j < b.size() && b[j] != '.' && j < 18) y = y * 10 + static_cast<u64>(b[j++] - '0');
    if (x != y) return x < y;
    a.remove_prefix(std::min(a.size(), i + 1));
    b.remove_prefix(std::min(b.size(), j + 1));
  }
  return false;
}

bool is_executable_file(const host::Host& host, const std::string& path) {
  host::FileStat st = host.stat(path);
  return st.kind == host::FileKind::Regular && (st.mode & 0111) != 0;
}

// pyenv-prefix / pyenv-latest: the installed version directory an entry
// names: itself, without a "python-" prefix, else the newest installed
// <entry>.N (numbers only: "3.11" is not "3.11-dev").
std::optional<std::string> installed_version(const host::Host& host, const std::string& versions,
                                             const std::string& entry) {
  std::string bare = entry.starts_with("python-") ? entry.substr(7) : entry;
  for (const std::string& v : {entry, bare})
    if (!v.empty() && is_dir(host, host::join_path(versions, v))) return v;
  std::optional<std::string> best;
  if (std::optional<std::vector<std::string>> names = host.list_dir(versions))
    for (const std::string& n : *names) {
      if (!n.starts_with(bare + ".") || n.size() == bare.size() + 1) continue;
      if (n.substr(bare.size() + 1).find_first_not_of("0123456789.") != std::string::npos) continue;
      if (!best || version_less(*best, n)) best = n;
    }
  return best;
}

}  // namespace

std::optional<PyenvShim> read_pyenv_shim(const host::Host& host, const std::string& path) {
  // A shim is a few hundred bytes of bash; anything else (an ELF
  // interpreter, a FIFO) is not read at all.
  host::FileStat st = host.stat(path);
  if (st.kind != host::FileKind::Regular || st.size > (64 << 10)) return std::nullopt;
  std::optional<std::string> text = host.read_file(path, 64 << 10);
  if (!text || !text->starts_with("#!") ||
      (text->find("pyenv\" exec") == std::string::npos &&
       text->find("pyenv exec") == std::string::npos))
    return std::nullopt;
  PyenvShim shim;
  shim.program = std::string(base_name(path));
  // `export PYENV_ROOT="/root/.pyenv"`, written by pyenv-rehash.
  if (size_t at = text->find("export PYENV_ROOT="); at != std::string::npos) {
    std::string_view v = std::string_view(*text).substr(at + 18);
    v = v.substr(0, v.find('\n'));
    v = trim(v);
    if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
      v = v.substr(1, v.size() - 2);
    shim.pyenv_root = std::string(v);
  }
  if (shim.pyenv_root.empty()) shim.pyenv_root = host.getenv("PYENV_ROOT").value_or("");
  if (shim.pyenv_root.empty()) shim.pyenv_root = host::dir_name(host::dir_name(path));
  const std::string versions_dir = host::join_path(shim.pyenv_root, "versions");

  std::string wanted;
  if (std::optional<std::string> v = host.getenv("PYENV_VERSION"); v && !v->empty()) {
    wanted = *v;
    shim.version_origin = "$PYENV_VERSION";
  } else {
    std::string file = host::join_path(shim.pyenv_root, "version");
    if (host.stat(file).kind == host::FileKind::Regular)
      if (std::optional<std::string> t = host.read_file(file, 64 << 10))
        wanted = version_file_words(*t);
    if (!wanted.empty()) shim.version_origin = file;
  }

  // pyenv-which: each entry in turn, then "system".
  std::vector<std::string> entries;
  for (size_t i = 0; i <= wanted.size();) {
    size_t colon = std::min(wanted.find(':', i), wanted.size());
    if (colon > i) entries.push_back(wanted.substr(i, colon - i));
    i = colon + 1;
  }
  entries.push_back("system");
  std::vector<std::string> not_installed;
  for (const std::string& e : entries) {
    if (e == "system") {
      const std::string shims = host::join_path(shim.pyenv_root, "shims");
      const std::string path = host.getenv("PATH").value_or("");
      std::string_view rest = path;
      while (!shim.target) {
        size_t colon = rest.find(':');
        std::string dir(rest.substr(0, colon));
        if (!dir.empty() && dir.front() == '/' && host::normalize_path(dir) != shims) {
          std::string p = host::join_path(dir, shim.program);
          if (is_executable_file(host, p)) shim.target = p;
        }
        if (colon == std::string_view::npos) break;
        rest.remove_prefix(colon + 1);
      }
    } else if (std::optional<std::string> v = installed_version(host, versions_dir, e)) {
      std::string p = host::join_path(host::join_path(versions_dir, *v), "bin/" + shim.program);
      if (is_executable_file(host, p)) shim.target = p;
      if (shim.target) shim.version = *v;
    } else {
      not_installed.push_back(e);
    }
    if (shim.target) {
      if (shim.version.empty()) shim.version = e;
      break;
    }
  }
  if (!shim.target) {
    shim.error = "pyenv: " + shim.program + ": command not found";
    for (const std::string& v : not_installed)
      shim.error += "; version `" + v + "' is not installed (set by " + shim.version_origin + ")";
  }
  return shim;
}

// ─── probing the live interpreter ───────────────────────────────────────────

namespace {

// The probe. It must stay cheap and side-effect free: no platform, no user
// package, and no json (importing it costs a third of the probe's
// start-up): the answer is written as JSON by hand, every non-ASCII
// character escaped. Strings that are not valid UTF-8 (surrogate-escaped
// bytes in paths) travel as {"hex": ...} so the JSON stays valid.
// It runs under -S and calls site.main() itself, which is what the start-up
// does without -S (site's documented entry point), with site.addpackage
// wrapped: a .pth file that is not a regular file (a FIFO would stop the
// start-up until something writes; a device would be read) is skipped and
// reported with its st_mode. A directory named *.pth is left to site, which
// skips it. At a real start-up site runs before -c puts "" first on
// sys.path (site would make it the current directory), so "" is set aside
// meanwhile.
constexpr const char* kProbeScript = R"PY(import sys, os, stat, site
u = []
def a(d, n, k, f=site.addpackage):
    x = os.path.join(d, n)
    try: m = os.stat(x).st_mode
    except OSError: m = 0
    if m and not stat.S_ISREG(m) and not stat.S_ISDIR(m):
        u.append([x, m]); return k
    return f(d, n, k)
site.addpackage = a
h = sys.path[:1] == ['']
if h: del sys.path[0]
site.main()
if h: sys.path.insert(0, '')
import sysconfig
def p(s):
    if s is None: return None
    try:
        s.encode('utf-8'); return s
    except UnicodeEncodeError:
        return {'hex': s.encode('utf-8', 'surrogateescape').hex()}
def q(s):
    o = ['"']
    for c in s:
        n = ord(c)
        if c == '"' or c == '\\': o.append('\\' + c)
        elif 0x20 <= n < 0x7f: o.append(c)
        elif n > 0xffff:
            n -= 0x10000; o.append('\\u%04x\\u%04x' % (0xd800 + (n >> 10), 0xdc00 + (n & 0x3ff)))
        else: o.append('\\u%04x' % n)
    o.append('"'); return ''.join(o)
def j(x):
    if x is None: return 'null'
    if isinstance(x, int): return str(x)
    if isinstance(x, str): return q(x)
    if isinstance(x, dict): return '{' + ','.join(q(k) + ':' + j(x[k]) for k in x) + '}'
    return '[' + ','.join(j(v) for v in x) + ']'
v = sys.version_info
sys.stdout.write(j({'mldoctor_probe': 1,
  'version_info': [v.major, v.minor, v.micro, v.releaselevel],
  'executable': p(sys.executable), 'prefix': p(sys.prefix),
  'base_prefix': p(sys.base_prefix), 'path': [p(x) for x in sys.path],
  'ext_suffix': sysconfig.get_config_var('EXT_SUFFIX'),
  'soabi': sysconfig.get_config_var('SOABI'),
  'platform': sysconfig.get_platform(),
  'unread_pth': [[p(x), m] for x, m in u]}))
)PY";

struct ChildResult {
  bool started = false;
  int spawn_error = 0;
  bool timed_out = false;
  int status = 0;
  std::string out, err;
};

// posix_spawn with stdin from /dev/null and both outputs captured, killed
// with its whole process group (SIGKILL, then reaped) when it outlives the
// deadline. Output beyond 16 MiB
// is dropped: the probe prints a few KiB.
ChildResult run_child(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env,
                      std::chrono::milliseconds timeout) {
  ChildResult r;
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    r.spawn_error = errno;
    return r;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.spawn_error = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    return r;
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> cenv;
  for (std::string& s : env_strings) cenv.push_back(s.data());
  cenv.push_back(nullptr);
  // Its own process group: on timeout the whole group is killed, so a
  // wrapper script's children (a conda activation, a module system's
  // shell) do not outlive the probe.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, cargv[0], &fa, &attr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (rc != 0) {
    r.spawn_error = rc;
    close(out_pipe[0]);
    close(err_pipe[0]);
    return r;
  }
  r.started = true;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  constexpr size_t kMaxOutput = 16u << 20;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  char buf[65536];
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    int n = poll(fds, 2, static_cast<int>(std::min<i64>(left.count(), 1000)));
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        if (sinks[i]->size() < kMaxOutput) sinks[i]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
      }
    }
  }
  for (pollfd& f : fds)
    if (f.fd >= 0) close(f.fd);
  if (r.timed_out) kill(-pid, SIGKILL);
  // A child that closed its outputs but keeps running still counts against
  // the deadline.
  while (true) {
    pid_t w = waitpid(pid, &r.status, r.timed_out ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (w == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        r.timed_out = true;
        kill(-pid, SIGKILL);
      } else {
        usleep(2000);
      }
    }
  }
  return r;
}

std::string tail_lines(std::string_view s, size_t max_chars) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  if (s.size() > max_chars) s = s.substr(s.size() - max_chars);
  return std::string(s);
}

// A probe string: plain, or {"hex": "..."} for bytes that are not UTF-8.
std::string probe_string(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("hex") && j["hex"].is_string()) {
    std::string hex = j["hex"].get<std::string>(), out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
      out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
  }
  if (j.is_null()) return "";
  throw PyenvError("unexpected value in the probe's answer: " + j.dump());
}

// A version number: a JSON integer from 0 to INT_MAX. get<int>() converts
// whatever number it is given, and a float outside int's range is undefined
// behaviour (found by pyenv-fuzz).
int probe_int(const nlohmann::json& j) {
  if (j.is_number_unsigned() && j.get<uint64_t>() <= static_cast<uint64_t>(INT_MAX))
    return static_cast<int>(j.get<uint64_t>());
  throw PyenvError("unexpected value in the probe's answer: " + j.dump());
}

}  // namespace

PythonFacts probe_interpreter(const host::Host& host, const std::string& python,
                              const ProbeOptions& options) {
  if (!host.is_live_root())
    throw PyenvError(python + ": cannot run an interpreter under --root " + host.root());
  ChildResult r =
      run_child({python, "-S", "-c", kProbeScript}, host.environment(), options.timeout);
  std::string who = python + ": ";
  if (!r.started) throw PyenvError(who + "cannot run: " + errno_text(r.spawn_error));
  if (r.timed_out) {
    const auto ms = options.timeout.count();
    const std::string limit =
        ms % 1000 ? std::to_string(ms) + " ms" : std::to_string(ms / 1000) + " s";
    throw ProbeTimeout(who + "the interpreter did not answer within " + limit +
                       " and was killed; a Python start-up waits like this on something "
                       "sitecustomize, usercustomize or a .pth file's import line runs (a "
                       "network mount, a lock, a FIFO)");
  }
  if (WIFSIGNALED(r.status))
    throw PyenvError(who + "killed by signal " + std::to_string(WTERMSIG(r.status)) + " (" +
                     strsignal(WTERMSIG(r.status)) + ") at startup" +
                     (r.err.empty() ? "" : ": " + tail_lines(r.err, 600)));
  if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0)
    throw PyenvError(who + "exited with status " + std::to_string(WEXITSTATUS(r.status)) +
                     " at startup" + (r.err.empty() ? "" : ": " + tail_lines(r.err, 600)));
  PythonFacts facts = parse_probe_answer(r.out, who);
  host.record_fact(probe_fact_name(python), r.out);
  return facts;
}

std::string probe_fact_name(std::string_view python) {
  std::string name = "python-probe";
  if (python.empty() || python[0] != '/') name += "/";
  return name + std::string(python);
}

PythonFacts parse_probe_answer(std::string_view out, const std::string& who) {
  // sitecustomize or a .pth file may print before the probe: the answer is
  // the last line.
  size_t start = out.rfind("{\"mldoctor_probe\"");
  if (start == std::string_view::npos)
    throw PyenvError(who + "the probe printed no answer: " + tail_lines(out, 200));
  nlohmann::json j = nlohmann::json::parse(out.substr(start), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    throw PyenvError(who + "the probe's answer is not JSON: " + tail_lines(out, 200));
  PythonFacts f;
  f.origin = FactsOrigin::Interpreter;
  try {
    const nlohmann::json& vi = j.at("version_info");
    f.major = probe_int(vi.at(0));
    f.minor = probe_int(vi.at(1));
    f.micro = probe_int(vi.at(2));
    f.release_level = vi.at(3).get<std::string>();
    f.version =
        std::to_string(f.major) + "." + std::to_string(f.minor) + "." + std::to_string(f.micro);
    f.executable = probe_string(j.at("executable"));
    f.prefix = probe_string(j.at("prefix"));
    f.base_prefix = probe_string(j.at("base_prefix"));
    for (const nlohmann::json& e : j.at("path")) f.sys_path.push_back(probe_string(e));
    f.ext_suffix = probe_string(j.at("ext_suffix"));
    f.soabi = probe_string(j.at("soabi"));
    std::string platform = probe_string(j.at("platform"));  // "linux-x86_64"
    size_t dash = platform.find('-');
    f.machine = dash == std::string::npos ? platform : platform.substr(dash + 1);
    // Answers recorded by 0.2.0 have no "unread_pth". site.py may visit a
    // directory twice (a venv's lib64 -> lib): each file once.
    if (j.contains("unread_pth"))
      for (const nlohmann::json& e : j.at("unread_pth")) {
        ScanProblem p =
            unread_pth_problem(probe_string(e.at(0)), static_cast<u32>(probe_int(e.at(1))));
        if (std::none_of(f.unread_pth.begin(), f.unread_pth.end(),
                         [&](const ScanProblem& q) { return q.path == p.path; }))
          f.unread_pth.push_back(std::move(p));
      }
  } catch (const nlohmann::json::exception& e) {
    throw PyenvError(who + "the probe's answer lacks a field: " + e.what());
  } catch (const std::invalid_argument&) {
    throw PyenvError(who + "the probe's answer holds a malformed hex string");
  }
  return f;
}

ScanProblem unread_pth_problem(const std::string& path, u32 mode) {
  std::string what = "not a regular file (" + std::string(file_type_name(mode)) + "): not read";
  if (S_ISFIFO(mode))
    what += "; site.py waits on it at every start-up of this Python until something writes to it";
  else if (S_ISCHR(mode) || S_ISBLK(mode))
    what += "; site.py reads the device at every start-up of this Python";
  return {path, what};
}

// ─── layout inference ───────────────────────────────────────────────────────

namespace {

struct PyvenvCfg {
  std::string dir;  // where pyvenv.cfg lives: the venv's sys.prefix
  std::string home;
  bool include_system_site = false;
  std::string version;
};

// site.py's venv(): "key = value" lines, keys lower-cased.
std::optional<PyvenvCfg> read_pyvenv_cfg(const host::Host& host, const std::string& bin_dir) {
  for (const std::string& dir : {host::dir_name(bin_dir), bin_dir}) {
    // Only a regular file is opened: a FIFO named pyvenv.cfg would block.
    std::string cfg_path = host::join_path(dir, "pyvenv.cfg");
    if (!is_regular(host, cfg_path)) continue;
    std::optional<std::string> text = host.read_file(cfg_path, 64 << 10);
    if (!text) continue;
    PyvenvCfg cfg;
    cfg.dir = dir;
    std::string_view rest = *text;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
      size_t eq = line.find('=');
      if (eq == std::string_view::npos) continue;
      std::string key(trim(line.substr(0, eq)));
      std::transform(key.begin(), key.end(), key.begin(), ::tolower);
      std::string value(trim(line.substr(eq + 1)));
      if (key == "home")
        cfg.home = value;
      else if (key == "include-system-site-packages")
        cfg.include_system_site = value == "true" || value == "True";
      else if (key == "version" || key == "version_info")
        cfg.version = value;
    }
    return cfg;
  }
  return std::nullopt;
}

// "3.11" from "python3.11" or "3.11.2".
std::optional<std::pair<int, int>> parse_major_minor(std::string_view s) {
  if (s.starts_with("python")) s.remove_prefix(6);
  int major = 0, minor = 0;
  size_t i = 0;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i])))
    major = major * 10 + (s[i++] - '0');
  if (i == 0 || i >= s.size() || s[i] != '.') return std::nullopt;
  size_t j = ++i;
  while (i < s.size() && isdigit(static_cast<unsigned char>(s[i])))
    minor = minor * 10 + (s[i++] - '0');
  if (i == j || minor > 999) return std::nullopt;
  if (i < s.size() && s[i] != '.' && s[i] != 't') return std::nullopt;  // 3.13t: free-threaded
  return std::pair{major, minor};
}

std::string_view machine_from_elf(u16 e_machine) {
  switch (e_machine) {
    case elf::EM_X86_64: return "x86_64";
    case elf::EM_AARCH64: return "aarch64";
    case elf::EM_PPC64: return "ppc64le";
    case elf::EM_S390: return "s390x";
    case elf::EM_RISCV: return "riscv64";
    case elf::EM_386: return "i686";
    default: return "";
  }
}

// site.addsitedir: the directory, then the path lines of its *.pth files in
// name order (relative to the directory, added only when they exist and are
// not already present). "import" lines run code we cannot run: recorded.
void add_site_dir(const host::Host& host, const std::string& dir, PythonFacts& f) {
  if (!is_dir(host, dir)) return;
  if (std::find(f.sys_path.begin(), f.sys_path.end(), dir) == f.sys_path.end())
    f.sys_path.push_back(dir);
  std::optional<std::vector<std::string>> names = host.list_dir(dir);
  if (!names) return;
  for (const std::string& name : *names) {
    if (!name.ends_with(".pth") || name.starts_with(".")) continue;
    std::string pth = host::join_path(dir, name);
    std::optional<std::string> text = host.read_file(pth, 1 << 20);
    if (!text) {
      // Refused unopened (host::Host::read_file), as the probe skips it.
      if (host::FileStat st = host.stat(pth); st.kind == host::FileKind::Other)
        f.unread_pth.push_back(unread_pth_problem(pth, st.mode));
      continue;
    }
    std::string_view rest = *text;
    while (!rest.empty()) {
      size_t nl = rest.find('\n');
      std::string_view line = rest.substr(0, nl);
      rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
      while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
      if (line.empty() || line.front() == '#') continue;
      if (line.starts_with("import ") || line.starts_with("import\t")) {
        f.unexecuted_pth_imports.push_back({pth, std::string(line.substr(0, 200))});
        continue;
      }
      std::string entry = host::normalize_path(line.front() == '/' ? std::string(line)
                                                                   : host::join_path(dir, line));
      if (is_dir(host, entry) &&
          std::find(f.sys_path.begin(), f.sys_path.end(), entry) == f.sys_path.end())
        f.sys_path.push_back(entry);
    }
  }
}

}  // namespace

PythonFacts infer_from_layout(const host::Host& host, const std::string& python) {
  PythonFacts f;
  f.origin = FactsOrigin::Layout;
  f.executable = python;
  std::string bin_dir = host::dir_name(python);
  std::optional<PyvenvCfg> venv = read_pyvenv_cfg(host, bin_dir);
  f.prefix = venv ? venv->dir : host::dir_name(bin_dir);
  f.base_prefix =
      venv && !venv->home.empty() ? host::dir_name(host::normalize_path(venv->home)) : f.prefix;

  // The version: pyvenv.cfg, the interpreter's own name or symlink target
  // ("python3.11"), else the only lib/python3.X holding an os.py.
  std::optional<std::pair<int, int>> mm;
  if (venv && !venv->version.empty()) mm = parse_major_minor(venv->version);
  if (!mm) mm = parse_major_minor(python.substr(python.rfind('/') + 1));
  if (!mm) {
    std::string p = python;
    for (int hops = 0; hops < 8 && !mm; hops++) {
      std::optional<std::string> target = host.read_link(p);
      if (!target) break;
      p = target->front() == '/' ? *target : host::join_path(host::dir_name(p), *target);
      mm = parse_major_minor(p.substr(p.rfind('/') + 1));
    }
  }
  std::string lib = host::join_path(f.base_prefix, "lib");
  if (!mm) {
    std::vector<std::pair<int, int>> found;
    if (std::optional<std::vector<std::string>> names = host.list_dir(lib))
      for (const std::string& n : *names)
        if (std::optional<std::pair<int, int>> v = parse_major_minor(n))
          if (is_regular(host, host::join_path(host::join_path(lib, n), "os.py")))
            found.push_back(*v);
    if (found.size() == 1)
      mm = found[0];
    else if (found.size() > 1)
      throw PyenvError(python + ": several Pythons under " + lib +
                       " and no version in the interpreter's name; use --python with "
                       "a pythonX.Y name");
  }
  if (!mm) throw PyenvError(python + ": no lib/python3.X under " + f.base_prefix);
  f.major = mm->first;
  f.minor = mm->second;
  f.version = std::to_string(f.major) + "." + std::to_string(f.minor);
  std::string xy = std::to_string(f.major) + "." + std::to_string(f.minor);
  std::string stdlib = host::join_path(lib, "python" + xy);
  std::string dynload = host::join_path(stdlib, "lib-dynload");

  // EXT_SUFFIX from a lib-dynload module ("_ssl.cpython-311-x86_64-linux-gnu.so"),
  // the machine from the interpreter's ELF header.
  std::string tag = ".cpython-" + std::to_string(f.major) + std::to_string(f.minor);
  if (std::optional<std::vector<std::string>> names = host.list_dir(dynload))
    for (const std::string& n : *names) {
      size_t at = n.find(tag);
      if (at != std::string::npos && n.ends_with(".so")) {
        f.ext_suffix = n.substr(at);
        break;
      }
    }
  if (std::optional<std::string> head = host.read_file(python, 64);
      head && head->size() >= 20 && elf::has_elf_magic(ByteView(*head))) {
    ByteView v(*head);
    f.machine = std::string(machine_from_elf(v.u16_at(18, v.u8_at(5) == 2)));
  }
  if (f.machine.empty() && !f.ext_suffix.empty()) {
    // ".cpython-311-x86_64-linux-gnu.so" -> "x86_64"
    std::string_view s = f.ext_suffix;
    size_t a = s.find('-', 1);
    size_t b = a == std::string_view::npos ? a : s.find('-', a + 1);
    if (b != std::string_view::npos) f.machine = std::string(s.substr(a + 1, b - a - 1));
  }
  if (f.ext_suffix.empty())
    f.ext_suffix = tag + "-" + (f.machine.empty() ? "x86_64" : f.machine) + "-linux-gnu.so";
  f.soabi = f.ext_suffix.substr(1, f.ext_suffix.size() - 4);

  // getpath: the script directory ("" for -c), PYTHONPATH, the zip, stdlib,
  // lib-dynload; then site.py.
  f.sys_path.push_back("");
  if (std::optional<std::string> pp = host.getenv("PYTHONPATH")) {
    std::string_view rest = *pp;
    while (true) {
      size_t colon = rest.find(':');
      std::string_view e = rest.substr(0, colon);
      if (!e.empty()) f.sys_path.push_back(host::normalize_path(e));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  f.sys_path.push_back(
      host::join_path(lib, "python" + std::to_string(f.major) + std::to_string(f.minor) + ".zip"));
  f.sys_path.push_back(stdlib);
  f.sys_path.push_back(dynload);

  bool debian = f.base_prefix == "/usr" && is_dir(host, "/usr/lib/python3/dist-packages");
  bool system_site = !venv || venv->include_system_site;
  // site.py: the user site unless disabled (a venv without system site
  // packages disables it), then the venv's and the system site-packages.
  std::optional<std::string> home = host.getenv("HOME");
  std::optional<std::string> no_user = host.getenv("PYTHONNOUSERSITE");
  bool user_site = system_site && home && !home->empty() && !(no_user && !no_user->empty());
  if (user_site)
    add_site_dir(host, host::join_path(*home, ".local/lib/python" + xy + "/site-packages"), f);
  if (venv) add_site_dir(host, host::join_path(f.prefix, "lib/python" + xy + "/site-packages"), f);
  if (system_site) {
    if (debian) {
      add_site_dir(host, "/usr/local/lib/python" + xy + "/dist-packages", f);
      add_site_dir(host, "/usr/lib/python3/dist-packages", f);
      add_site_dir(host, "/usr/lib/python" + xy + "/dist-packages", f);
    } else {
      add_site_dir(host, host::join_path(f.base_prefix, "lib/python" + xy + "/site-packages"), f);
    }
  }
  return f;
}

}  // namespace mld::pyenv
