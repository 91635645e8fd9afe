// trace.cc — reads the shims' event files back into one model of the job.
//
// The audit module reports what ld.so does in the order it does it
// (research/glibc-tls-audit.md §4), and the model is rebuilt from that
// order:
//   search(orig, by=R) [search(candidate)...] [activity add] open(P) ...
// names each new object and the object R that asked for it. Before
// `preinit` every load belongs to start-up. After it, a request outside an
// add..consistent bracket is a dlopen() root, and requests inside the
// bracket are its dependencies. A request that no open follows did not find
// its file; objects closed right after the bracket that mapped them were
// removed by a failed dlopen (ld.so 2.36 signals consistent *before*
// relocation, so the rollback comes as a second bracket: close.. delete..
// consistent). The program's dlerror() text, when it asked, is attached to
// the failure that precedes it on the same thread.
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run/run.h"

namespace mld::run {

using nlohmann::json;

std::string_view load_kind_name(LoadKind k) {
  switch (k) {
    case LoadKind::Startup: return "startup";
    case LoadKind::Dlopen: return "dlopen";
    case LoadKind::Needed: return "needed";
  }
  return "?";
}

namespace {

std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<long long> num(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<long long>();
}

// The search a new object answers.
struct Request {
  std::string name;
  std::string by;
  LoadKind kind = LoadKind::Dlopen;
  std::vector<std::string> candidates;
  bool answered = false;
  u64 t = 0;
  long tid = 0;
};

class Rebuilder {
 public:
  explicit Rebuilder(TracedProcess& p) : p_(p) {}

  void event(const json& e) {
    const std::string ev = str(e, "ev");
    const u64 t = static_cast<u64>(num(e, "t").value_or(0));
    const long tid = static_cast<long>(num(e, "tid").value_or(0));
    if (ev != "close" && ev != "activity") bracket_just_ended_ = false;
    if (!p_.first_t || t < p_.first_t) p_.first_t = t;
    p_.last_t = std::max(p_.last_t, t);

    if (ev == "start") {
      finish_request();
      Image im;
      im.exe = str(e, "exe");
      im.ppid = static_cast<long>(num(e, "ppid").value_or(0));
      im.glibc = str(e, "glibc");
      im.t = t;
      if (auto it = e.find("argv"); it != e.end() && it->is_array())
        for (const json& a : *it)
          if (a.is_string()) im.argv.push_back(a.get<std::string>());
      p_.images.push_back(std::move(im));
      preinit_ = false;
      in_bracket_ = false;
      last_bracket_opens_.clear();
      exiting_ = false;
    } else if (ev == "preinit") {
      finish_request();
      preinit_ = true;
    } else if (ev == "search") {
      search(e, t, tid);
    } else if (ev == "activity") {
      activity(str(e, "what"));
    } else if (ev == "open") {
      open(e, t);
    } else if (ev == "close") {
      close(str(e, "path"), t, tid);
    } else if (ev == "dlerror") {
      dlerror(str(e, "message"), str(e, "caller"), t, tid);
    } else if (ev == "threads") {
      ThreadCall c;
      c.fn = str(e, "fn");
      c.value = num(e, "value").value_or(0);
      c.before = num(e, "before");
      c.after = num(e, "after");
      c.result = num(e, "result");
      if (c.before && *c.before < 0) c.before.reset();
      if (c.after && *c.after < 0) c.after.reset();
      c.caller = str(e, "caller");
      c.runtime = str(e, "runtime");
      c.t = t;
      c.tid = tid;
      p_.thread_calls.push_back(std::move(c));
    } else if (ev == "env") {
      EnvChange c;
      c.op = str(e, "op");
      c.name = str(e, "name");
      if (auto it = e.find("value"); it != e.end() && it->is_string()) c.value = it->get<std::string>();
      c.caller = str(e, "caller");
      c.t = t;
      p_.env_changes.push_back(std::move(c));
    } else if (ev == "fork") {
      ForkEvent f;
      f.child = static_cast<long>(num(e, "child").value_or(0));
      f.threads = static_cast<long>(num(e, "threads").value_or(0));
      if (auto it = e.find("openmp"); it != e.end() && it->is_array())
        for (const json& a : *it)
          if (a.is_string()) f.openmp.push_back(a.get<std::string>());
      f.caller = str(e, "caller");
      f.t = t;
      p_.forks.push_back(std::move(f));
    } else if (ev == "runtime") {
      RuntimeState r;
      r.path = str(e, "path");
      r.kind = str(e, "kind");
      r.threads = num(e, "threads");
      r.config = str(e, "config");
      p_.runtimes.push_back(std::move(r));
      exiting_ = true;
    } else if (ev == "exit") {
      finish_request();
      p_.exited = true;
      exiting_ = true;
    }
  }

  void end() { finish_request(); }

 private:
  void search(const json& e, u64 t, long tid) {
    const std::string how = str(e, "how");
    if (how != "orig") {
      if (req_) req_->candidates.push_back(str(e, "name"));
      return;
    }
    finish_request();
    Request r;
    r.name = str(e, "name");
    r.by = str(e, "by");
    r.kind = !preinit_ ? LoadKind::Startup : in_bracket_ ? LoadKind::Needed : LoadKind::Dlopen;
    r.t = t;
    r.tid = tid;
    req_ = std::move(r);
  }

  void activity(const std::string& what) {
    if (what == "add") {
      in_bracket_ = true;
      if (!closing_) last_bracket_opens_.clear();
    } else if (what == "delete") {
      closing_ = true;
    } else if (what == "consistent") {
      finish_request();
      in_bracket_ = false;
      if (closing_) {
        closing_ = false;
        last_bracket_opens_.clear();
      }
      bracket_just_ended_ = true;
    }
  }

  void open(const json& e, u64 t) {
    LoadedObject o;
    o.path = str(e, "path");
    o.lmid = static_cast<long>(num(e, "lmid").value_or(0));
    o.runtime = str(e, "runtime");
    o.t = t;
    o.kind = preinit_ ? LoadKind::Needed : LoadKind::Startup;
    if (req_ && !req_->answered) {
      o.requested = req_->name;
      o.requester = req_->by;
      o.kind = req_->kind;
      req_->answered = true;
    } else if (preinit_) {
      o.kind = LoadKind::Dlopen;
    }
    if (num(e, "program").value_or(0)) o.requested.clear();
    last_bracket_opens_.push_back(p_.objects.size());
    bracket_just_ended_ = false;
    p_.objects.push_back(std::move(o));
  }

  void close(const std::string& path, u64 t, long tid) {
    if (exiting_) return;  // the teardown of exit, not a dlclose
    finish_request();
    // The last open of this path that is still loaded.
    for (size_t i = p_.objects.size(); i-- > 0;) {
      LoadedObject& o = p_.objects[i];
      if (o.path != path || o.closed) continue;
      o.closed = true;
      // Closed in the bracket right after the one that mapped it: ld.so's
      // rollback of a dlopen that failed after mapping.
      const bool rollback =
          (in_bracket_ || bracket_just_ended_) &&
          std::find(last_bracket_opens_.begin(), last_bracket_opens_.end(), i) != last_bracket_opens_.end();
      if (rollback) {
        o.removed_by_failure = true;
        FailedLoad* f = rollback_failure(o, t, tid);
        f->removed.push_back(o.path);
      }
      break;
    }
  }

  // The failure a rollback belongs to: the dlopen root of that bracket.
  FailedLoad* rollback_failure(const LoadedObject& o, u64 t, long tid) {
    if (!p_.failed.empty() && p_.failed.back().t == rollback_t_ && rollback_t_ != 0) return &p_.failed.back();
    FailedLoad f;
    const LoadedObject* root = &o;
    for (size_t i : last_bracket_opens_)
      if (p_.objects[i].kind == LoadKind::Dlopen) {
        root = &p_.objects[i];
        break;
      }
    f.name = root->requested.empty() ? root->path : root->requested;
    f.requester = root->requester;
    f.kind = root->kind;
    f.t = t;
    f.tid = tid;
    rollback_t_ = t;
    p_.failed.push_back(std::move(f));
    return &p_.failed.back();
  }

  void dlerror(const std::string& message, const std::string& caller, u64 t, long tid) {
    finish_request();
    p_.dlerrors.push_back({message, caller, t, tid});
    // Attach to the latest failure on this thread that has no text yet.
    for (size_t i = p_.failed.size(); i-- > 0;) {
      FailedLoad& f = p_.failed[i];
      if (f.tid != tid && f.tid != 0) continue;
      if (f.message.empty()) f.message = message;
      break;
    }
  }

  // A request that no open answered: its file was not found (or was not
  // usable: wrong class, bad ELF) — ld.so tried each candidate.
  void finish_request() {
    if (!req_) return;
    Request r = std::move(*req_);
    req_.reset();
    if (r.answered) return;
    FailedLoad f;
    f.name = r.name;
    f.requester = r.by;
    f.kind = r.kind;
    f.candidates = std::move(r.candidates);
    f.t = r.t;
    f.tid = r.tid;
    p_.failed.push_back(std::move(f));
  }

  TracedProcess& p_;
  std::optional<Request> req_;
  bool preinit_ = false;
  bool in_bracket_ = false;
  bool closing_ = false;
  bool exiting_ = false;
  bool bracket_just_ended_ = false;
  u64 rollback_t_ = 0;
  std::vector<size_t> last_bracket_opens_;
};

}  // namespace

TracedProcess parse_process_events(std::string_view jsonl, long pid) {
  TracedProcess p;
  p.pid = pid;
  Rebuilder rebuild(p);
  size_t i = 0;
  while (i < jsonl.size()) {
    size_t nl = jsonl.find('\n', i);
    const bool complete = nl != std::string_view::npos;
    std::string_view line = jsonl.substr(i, complete ? nl - i : std::string_view::npos);
    i = complete ? nl + 1 : jsonl.size();
    if (line.empty()) continue;
    json e = json::parse(line, nullptr, false);
    if (e.is_discarded()) e = json::parse(repair_utf8(line), nullptr, false);
    if (e.is_discarded() || !e.is_object() || !complete) {
      p.bad_lines++;
      continue;
    }
    rebuild.event(e);
  }
  rebuild.end();
  // A process with events but no start of its own was forked by a traced
  // parent (fork() does not run the audit module again).
  return p;
}

Trace read_trace(const std::string& dir) {
  Trace trace;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    trace.errors.push_back(dir + ": " + errno_text(errno));
    return trace;
  }
  std::vector<std::pair<long, std::string>> files;
  while (dirent* ent = readdir(d)) {
    std::string name = ent->d_name;
    if (!name.ends_with(".jsonl")) continue;
    std::string stem = name.substr(0, name.size() - 6);
    if (stem.empty() || stem.size() > 9 || stem.find_first_not_of("0123456789") != std::string::npos) continue;
    files.emplace_back(std::stol(stem), dir + "/" + name);
  }
  closedir(d);
  for (const auto& [pid, path] : files) {
    std::ifstream in(path, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) {
      trace.errors.push_back(path + ": " + errno_text(errno));
      continue;
    }
    trace.processes.emplace(pid, parse_process_events(text, pid));
  }
  // Fork children: their parent's fork event names them.
  for (auto& [pid, p] : trace.processes)
    for (const ForkEvent& f : p.forks)
      if (auto it = trace.processes.find(f.child); it != trace.processes.end() && f.child != pid)
        it->second.forked_from = pid;
  return trace;
}

}  // namespace mld::run
