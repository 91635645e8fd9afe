// watchdog.cc — telling a hung job from a slow one, and saying why it hangs.
//
// Progress is measured from outside, without touching the job: CPU time
// (utime+stime of every process of the tree, /proc/<pid>/stat), bytes
// written (/proc/<pid>/io wchar: terminal, pipes and files alike) and the
// size of the trace. A job that polls a lock every 0.1 s (torch's FileBaton,
// seed 002) uses well under a tick per second and writes nothing, so it
// counts as idle, and so do ranks hung in a collective whose gloo and store
// threads wake now and then (up to 2 ticks a second plus one per process:
// launch.cc); a build or a training step, which keeps a CPU busy, does not.
//
// On a hang every thread's state, wchan and current system call, each
// process's open files, sockets (as addresses, an IPv4-mapped one as IPv4,
// the MASTER_PORT of the process's environment named as the c10d store's)
// and /proc/locks entries are read, and the
// known lock files (torch extension builds) are read through src/jit; the
// detectors (RUN002, and the lock rules) decide from those facts: a lock no
// live process holds is the answer for seed 002.
#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <sstream>

#include "detect/detect.h"
#include "jit/jit.h"
#include "pystack/pystack.h"
#include "run/run.h"

namespace mld::run {

namespace {

std::optional<std::string> read_small(const host::Host& host, const std::string& path) {
  return host.read_file(path, 64 << 10);
}

std::vector<std::string> split_ws(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Fields of /proc/<pid>/stat after the command (which may hold spaces and
// parentheses): field 3 (state) is [0].
std::vector<std::string> stat_fields(const std::string& stat) {
  size_t close = stat.rfind(')');
  if (close == std::string::npos) return {};
  return split_ws(stat.substr(close + 1));
}

bool is_number(const std::string& s) {
  return !s.empty() && s.size() < 10 && s.find_first_not_of("0123456789") == std::string::npos;
}

// x86_64 numbers of the calls a stuck process usually sits in.
std::string syscall_name(long nr) {
#if defined(__x86_64__)
  static const std::map<long, std::string> names = {
      {0, "read"},          {1, "write"},         {7, "poll"},
      {23, "select"},       {34, "pause"},        {35, "nanosleep"},
      {42, "connect"},      {43, "accept"},       {45, "recvfrom"},
      {47, "recvmsg"},      {61, "wait4"},        {72, "fcntl"},
      {73, "flock"},        {202, "futex"},       {230, "clock_nanosleep"},
      {232, "epoll_wait"},  {247, "waitid"},      {270, "pselect6"},
      {271, "ppoll"},       {281, "epoll_pwait"}, {288, "accept4"},
      {441, "epoll_pwait2"}};
  if (auto it = names.find(nr); it != names.end()) return it->second;
#endif
  return "syscall " + std::to_string(nr);
}

// An address of /proc/net/tcp or tcp6 ("0100007F:7530") as people write it:
// 127.0.0.1:30000, [2001:db8::1]:443, and an IPv4-mapped IPv6 address
// (a dual-stack listener such as torch's TCPStore) as the IPv4 it carries.
// The kernel prints each 32-bit word of the address as a number in this
// machine's byte order (little-endian on the machines mldoctor supports).
std::optional<std::pair<std::string, unsigned>> proc_net_address(const std::string& a) {
  const size_t colon = a.find(':');
  if (colon == std::string::npos) return std::nullopt;
  const std::string ip = a.substr(0, colon);
  if (ip.size() != 8 && ip.size() != 32) return std::nullopt;
  unsigned char bytes[16];
  for (size_t w = 0; w < ip.size() / 8; w++) {
    char* end = nullptr;
    const std::string word = ip.substr(w * 8, 8);
    const unsigned long v = std::strtoul(word.c_str(), &end, 16);
    if (end != word.c_str() + 8) return std::nullopt;
    for (int b = 0; b < 4; b++) bytes[w * 4 + b] = static_cast<unsigned char>(v >> (8 * b));
  }
  char* end = nullptr;
  const unsigned long port = std::strtoul(a.c_str() + colon + 1, &end, 16);
  if (end == a.c_str() + colon + 1 || *end != '\0' || port > 65535) return std::nullopt;
  const unsigned char* v4 = bytes;
  if (ip.size() == 32) {
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (std::memcmp(bytes, mapped, 12) != 0) {
      char text[INET6_ADDRSTRLEN];
      if (!inet_ntop(AF_INET6, bytes, text, sizeof text)) return std::nullopt;
      return std::make_pair("[" + std::string(text) + "]", static_cast<unsigned>(port));
    }
    v4 = bytes + 12;
  }
  return std::make_pair(std::to_string(v4[0]) + "." + std::to_string(v4[1]) + "." +
                            std::to_string(v4[2]) + "." + std::to_string(v4[3]),
                        static_cast<unsigned>(port));
}

struct Socket {
  std::string description;  // "tcp 127.0.0.1:29500 -> 127.0.0.1:41234"
  std::string state;        // "ESTABLISHED"; empty for unix sockets
  unsigned local_port = 0, remote_port = 0;
};

// socket inode -> socket, from /proc/net/{tcp,tcp6,unix}.
std::map<std::string, Socket> socket_table(const host::Host& host) {
  std::map<std::string, Socket> out;
  static const char* tcp_states[] = {"?",          "ESTABLISHED", "SYN_SENT",  "SYN_RECV",
                                     "FIN_WAIT1",  "FIN_WAIT2",   "TIME_WAIT", "CLOSE",
                                     "CLOSE_WAIT", "LAST_ACK",    "LISTEN",    "CLOSING"};
  for (const char* proto : {"tcp", "tcp6"}) {
    std::optional<std::string> t = host.read_file(std::string("/proc/net/") + proto, 4 << 20);
    if (!t) continue;
    std::istringstream in(*t);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::vector<std::string> f = split_ws(line);
      if (f.size() < 10) continue;
      auto local = proc_net_address(f[1]), remote = proc_net_address(f[2]);
      char* end = nullptr;
      const unsigned long st = std::strtoul(f[3].c_str(), &end, 16);
      if (!local || !remote || end == f[3].c_str()) continue;
      Socket so;
      // Both families read as "tcp": a v4-mapped address is shown as IPv4.
      so.description = "tcp " + local->first + ":" + std::to_string(local->second) + " -> " +
                       remote->first + ":" + std::to_string(remote->second);
      so.state = st < std::size(tcp_states) ? tcp_states[st] : "?";
      so.local_port = local->second;
      so.remote_port = remote->second;
      out[f[9]] = so;
    }
  }
  if (std::optional<std::string> t = host.read_file("/proc/net/unix", 4 << 20)) {
    std::istringstream in(*t);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::vector<std::string> f = split_ws(line);
      if (f.size() < 7) continue;
      out[f[6]].description = "unix " + (f.size() > 7 ? f[7] : std::string("(unnamed)"));
    }
  }
  return out;
}

// The value of `name` in a process's initial environment (the NUL-separated
// text of /proc/<pid>/environ), if set.
std::optional<std::string> environ_value(std::string_view env, std::string_view name) {
  for (size_t i = 0; i < env.size();) {
    size_t end = env.find('\0', i);
    if (end == std::string_view::npos) end = env.size();
    std::string_view entry = env.substr(i, end - i);
    if (entry.size() > name.size() && entry.starts_with(name) && entry[name.size()] == '=')
      return std::string(entry.substr(name.size() + 1));
    i = end + 1;
  }
  return std::nullopt;
}

// The Python stack of each thread of a CPython process; a process that is
// not CPython gets nothing, one that is but cannot be read says why.
void add_python_stacks(ProcessSample& ps) {
  const pystack::Process py = pystack::read_stacks(ps.pid);
  ps.cpython = py.cpython;
  ps.python_version = py.version;
  ps.python_interpreter = py.runtime_object;
  ps.python_error = py.error;
  for (const pystack::Thread& t : py.threads) {
    auto it = std::find_if(ps.threads.begin(), ps.threads.end(),
                           [&](const ThreadSample& s) { return t.tid != 0 && s.tid == t.tid; });
    if (it == ps.threads.end()) {
      // A thread state whose kernel thread is not known (or has gone).
      if (t.frames.empty()) continue;
      char id[32];
      std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>(t.thread_id));
      ThreadSample extra;
      extra.tid = t.tid;
      extra.comm = std::string("Python thread ") + id;
      ps.threads.push_back(std::move(extra));
      it = ps.threads.end() - 1;
    }
    it->python_thread_id = t.thread_id;
    for (const pystack::Frame& f : t.frames) it->python.push_back({f.function, f.file, f.line});
    it->python_note = t.note;
  }
}

}  // namespace

std::string process_command(const host::Host& host, long pid) {
  std::optional<std::string> cmd = read_small(host, "/proc/" + std::to_string(pid) + "/cmdline");
  if (!cmd) return "";
  std::vector<std::string> argv;
  for (size_t i = 0; i < cmd->size();) {
    size_t end = cmd->find('\0', i);
    if (end == std::string::npos) end = cmd->size();
    argv.push_back(cmd->substr(i, end - i));
    i = end + 1;
  }
  return command_line(argv, 200);
}

std::vector<long> processes_holding(const host::Host& host, const std::vector<std::string>& targets,
                                    long except) {
  std::vector<long> out;
  if (targets.empty()) return out;
  std::optional<std::vector<std::string>> procs = host.list_dir("/proc");
  if (!procs) return out;
  for (const std::string& name : *procs) {
    if (!is_number(name) || std::stol(name) == except) continue;
    const std::string fd_dir = "/proc/" + name + "/fd";
    std::optional<std::vector<std::string>> fds = host.list_dir(fd_dir);
    if (!fds) continue;
    for (const std::string& fd : *fds) {
      std::optional<std::string> target = host.read_link(fd_dir + "/" + fd);
      if (target && std::find(targets.begin(), targets.end(), *target) != targets.end()) {
        out.push_back(std::stol(name));
        break;
      }
    }
    if (out.size() >= 16) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<long> process_tree(const host::Host& host, long root) {
  std::vector<long> out{root};
  for (size_t i = 0; i < out.size() && out.size() < 4096; i++) {
    const std::string task_dir = "/proc/" + std::to_string(out[i]) + "/task";
    std::optional<std::vector<std::string>> tasks = host.list_dir(task_dir);
    if (!tasks) continue;
    for (const std::string& tid : *tasks) {
      std::optional<std::string> children = read_small(host, task_dir + "/" + tid + "/children");
      if (!children) continue;
      for (const std::string& c : split_ws(*children))
        if (is_number(c)) {
          long pid = std::stol(c);
          if (std::find(out.begin(), out.end(), pid) == out.end()) out.push_back(pid);
        }
    }
  }
  return out;
}

Progress measure_progress(const host::Host& host, const std::vector<long>& pids,
                          const std::string& trace_dir) {
  Progress p;
  for (long pid : pids) {
    const std::string dir = "/proc/" + std::to_string(pid);
    if (std::optional<std::string> stat = read_small(host, dir + "/stat")) {
      std::vector<std::string> f = stat_fields(*stat);
      // utime, stime are fields 14 and 15: [11], [12] after the command.
      if (f.size() > 12 && is_number(f[11]) && is_number(f[12]))
        p.cpu_ticks += std::stoull(f[11]) + std::stoull(f[12]);
    }
    if (std::optional<std::string> io = read_small(host, dir + "/io")) {
      size_t at = io->find("wchar:");
      if (at != std::string::npos)
        p.bytes_written += std::strtoull(io->c_str() + at + 6, nullptr, 10);
    }
  }
  if (!trace_dir.empty())
    if (std::optional<std::vector<std::string>> files = host.list_dir(trace_dir))
      for (const std::string& f : *files) p.trace_bytes += host.stat(trace_dir + "/" + f).size;
  return p;
}

HangSample sample_processes(const host::Host& host, const std::vector<long>& pids,
                            double idle_seconds, const SampleOptions& options) {
  HangSample s;
  s.idle_seconds = idle_seconds;
  std::map<std::string, Socket> sockets = socket_table(host);
  std::optional<std::string> locks = read_small(host, "/proc/locks");
  for (long pid : pids) {
    ProcessSample ps;
    ps.pid = pid;
    const std::string dir = "/proc/" + std::to_string(pid);
    ps.command = process_command(host, pid);
    if (std::optional<std::string> stat = read_small(host, dir + "/stat")) {
      std::vector<std::string> f = stat_fields(*stat);
      if (f.size() > 1 && is_number(f[1])) ps.ppid = std::stol(f[1]);
    }
    if (std::optional<std::string> stat = read_small(host, dir + "/stat"))
      ps.without_stacks = pystack::without_stacks(pid, *stat);
    if (std::optional<std::vector<std::string>> tasks = host.list_dir(dir + "/task")) {
      for (const std::string& tid : *tasks) {
        if (!is_number(tid)) continue;
        ThreadSample t;
        t.tid = std::stol(tid);
        const std::string tdir = dir + "/task/" + tid;
        if (auto c = read_small(host, tdir + "/comm")) t.comm = std::string(trim(*c));
        if (auto st = read_small(host, tdir + "/stat")) {
          std::vector<std::string> f = stat_fields(*st);
          if (!f.empty() && !f[0].empty()) t.state = f[0][0];
        }
        if (auto w = read_small(host, tdir + "/wchan"))
          t.wchan = std::string(trim(*w)) == "0" ? "" : std::string(trim(*w));
        if (auto sc = read_small(host, tdir + "/syscall")) {
          std::vector<std::string> f = split_ws(*sc);
          if (!f.empty() && f[0] == "running")
            t.syscall = "running";
          else if (!f.empty() && f[0] != "-1" && is_number(f[0]))
            t.syscall = syscall_name(std::stol(f[0]));
        }
        ps.threads.push_back(std::move(t));
        if (ps.threads.size() >= 256) break;
      }
    }
    // Native stacks: only of the live machine (not under --root) and of
    // processes that are ours to attach to; a zombie or a kernel thread has
    // none, and its reason says so.
    const bool stacks = ps.without_stacks.empty();
    if (stacks && host.is_live_root() && options.native_stacks) {
      std::map<long, std::vector<std::string>> stacks = native_stacks(pid, &ps.stacks_error);
      for (ThreadSample& t : ps.threads)
        if (auto it = stacks.find(t.tid); it != stacks.end()) t.stack = std::move(it->second);
    }
    // Python stacks, read from the interpreter's memory (the job runs on).
    if (stacks && host.is_live_root() && options.python_stacks) add_python_stacks(ps);
    // Its rank, as the launcher set it: torchrun/torch.distributed, Open MPI,
    // MPICH/Hydra, Slurm. (Another user's environment is not readable.)
    const std::string env = host.read_file(dir + "/environ", 1 << 20).value_or("");
    for (const char* variable : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
      std::optional<std::string> v = environ_value(env, variable);
      if (v && !v->empty() && v->size() <= 7 && std::all_of(v->begin(), v->end(), ::isdigit)) {
        ps.rank = static_cast<u32>(std::stoul(*v));
        ps.rank_variable = variable;
        break;
      }
    }
    std::optional<unsigned> master_port;
    if (std::optional<std::string> v = environ_value(env, "MASTER_PORT"))
      if (!v->empty() && v->size() <= 5 && std::all_of(v->begin(), v->end(), ::isdigit))
        master_port = static_cast<unsigned>(std::stoul(*v));
    if (std::optional<std::vector<std::string>> fds = host.list_dir(dir + "/fd")) {
      for (const std::string& fd : *fds) {
        std::optional<std::string> target = host.read_link(dir + "/fd/" + fd);
        if (!target) continue;
        if (target->starts_with("socket:[")) {
          const std::string inode = target->substr(8, target->size() - 9);
          if (auto it = sockets.find(inode); it != sockets.end() && ps.sockets.size() < 32) {
            // The rendezvous port, named: torch's c10d store listens on MASTER_PORT.
            const Socket& so = it->second;
            std::string text = so.description;
            if (master_port && *master_port != 0 &&
                (so.local_port == *master_port || so.remote_port == *master_port))
              text += " (MASTER_PORT: the c10d store)";
            if (!so.state.empty()) text += " " + so.state;
            ps.sockets.push_back(text);
          }
        } else if (target->starts_with("/") && !target->starts_with("/dev/") &&
                   !target->starts_with("/proc/")) {
          if (ps.open_files.size() < 64) ps.open_files.push_back(*target);
        }
      }
    }
    if (locks) {
      std::istringstream in(*locks);
      std::string line;
      while (std::getline(in, line)) {
        std::vector<std::string> f = split_ws(line);
        // "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF", or with "->" for a waiter.
        size_t pid_at = f.size() > 1 && f[1] == "->" ? 5 : 4;
        if (f.size() > pid_at && f[pid_at] == std::to_string(pid))
          ps.locks.push_back(std::string(trim(line)));
      }
    }
    s.processes.push_back(std::move(ps));
  }
  return s;
}

namespace {

// Whether the job may wait on an extension build lock: a thread is in
// torch's FileBaton (its Python stack says so), or no Python stack could be
// read to tell. A stale lock of some other extension in the caches is no
// cause of a job that hangs elsewhere.
bool may_wait_on_build_lock(const HangSample& sample) {
  bool python = false;
  for (const ProcessSample& p : sample.processes)
    for (const ThreadSample& t : p.threads) {
      python |= !t.python.empty();
      for (const detect::PythonFrame& f : t.python)
        if (f.file.ends_with("torch/utils/file_baton.py")) return true;
    }
  return !python;
}

}  // namespace

void analyse_hang(const HangSample& sample, const host::Host& host, const std::string& cwd,
                  const rules::RuleSet* rules, FindingSink& sink) {
  detect::Facts facts;
  facts.hang = &sample;
  // Known lock files: a torch extension build lock (seed 002).
  jit::JitOptions jo;
  jo.cwd = cwd;
  std::optional<jit::JitReport> locks;
  if (may_wait_on_build_lock(sample)) {
    try {
      locks = jit::scan_locks(host, jo);
      facts.jit = &*locks;
    } catch (const std::exception& e) {
      facts.jit_error = e.what();
    }
  }
  std::vector<Finding> found =
      detect::findings(detect::run_detectors(facts), rules ? *rules : rules::RuleSet());
  // The hang first, then each lock's finding in the order of its build
  // directory.
  auto order = [&](const Finding& f) -> size_t {
    if (!locks) return 0;
    std::optional<size_t> i = jit::lock_index(*locks, f.subject);
    return i ? *i + 1 : 0;
  };
  std::stable_sort(found.begin(), found.end(),
                   [&](const Finding& a, const Finding& b) { return order(a) < order(b); });
  for (Finding& f : found) sink.add(std::move(f));
}

}  // namespace mld::run
