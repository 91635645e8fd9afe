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
#include <charconv>
#include <climits>

#include "run/run.h"

namespace mld::run {

std::string_view load_kind_name(LoadKind k) {
  switch (k) {
    case LoadKind::Startup: return "startup";
    case LoadKind::Dlopen: return "dlopen";
    case LoadKind::Needed: return "needed";
  }
  return "?";
}

namespace {

// One event line: a flat JSON object of strings, integers, null, booleans
// and arrays of strings — all the shims ever write. Parsed by hand (the
// report of a torch job reads ~1,300 lines; nlohmann::json took 8 ms of
// mldoctor's 11); anything outside that subset rejects the line, which is
// then counted as unreadable. Strings may hold raw bytes that are not UTF-8
// (paths): those bytes become U+FFFD.
struct Value {
  enum Kind { Null, Bool, Int, String, Strings } kind = Null;
  long long i = 0;
  std::string s;
  std::vector<std::string> items;
};

struct Event {
  std::vector<std::pair<std::string, Value>> fields;

  const Value* find(std::string_view key) const {
    for (const auto& [k, v] : fields)
      if (k == key) return &v;
    return nullptr;
  }
  std::string str(std::string_view key) const {
    const Value* v = find(key);
    return v && v->kind == Value::String ? v->s : std::string();
  }
  std::optional<long long> num(std::string_view key) const {
    const Value* v = find(key);
    if (!v || v->kind != Value::Int) return std::nullopt;
    return v->i;
  }
  const std::vector<std::string>* strings(std::string_view key) const {
    const Value* v = find(key);
    return v && v->kind == Value::Strings ? &v->items : nullptr;
  }
};

class LineParser {
 public:
  explicit LineParser(std::string_view line) : s_(line) {}

  bool parse(Event& out) {
    ws();
    if (!eat('{')) return false;
    ws();
    if (eat('}')) return end();
    for (;;) {
      std::string key;
      ws();
      if (!string(key)) return false;
      ws();
      if (!eat(':')) return false;
      ws();
      Value v;
      if (!value(v)) return false;
      out.fields.emplace_back(std::move(key), std::move(v));
      ws();
      if (eat(',')) continue;
      if (eat('}')) return end();
      return false;
    }
  }

 private:
  bool end() {
    ws();
    return i_ == s_.size();
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) i_++;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      i_++;
      return true;
    }
    return false;
  }
  bool literal(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }

  bool hex4(u32& v) {
    if (i_ + 4 > s_.size()) return false;
    v = 0;
    for (int k = 0; k < 4; k++) {
      const char c = s_[i_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<u32>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<u32>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<u32>(c - 'A' + 10);
      else
        return false;
    }
    return true;
  }
  bool string(std::string& out) {
    if (!eat('"')) return false;
    bool high = false;
    while (i_ < s_.size()) {
      const char c = s_[i_++];
      if (c == '"') {
        if (high) out = repair_utf8(out);
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (static_cast<unsigned char>(c) >= 0x80) high = true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          u32 cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            u32 lo = 0;
            if (!hex4(lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xD800 && cp <= 0xDFFF) {
            cp = 0xFFFD;  // a lone surrogate
          }
          append_utf8(out, cp);
          break;
        }
        default: return false;
      }
    }
    return false;
  }
  bool value(Value& v) {
    if (i_ >= s_.size()) return false;
    const char c = s_[i_];
    if (c == '"') {
      v.kind = Value::String;
      return string(v.s);
    }
    if (c == '[') {
      i_++;
      v.kind = Value::Strings;
      ws();
      if (eat(']')) return true;
      for (;;) {
        ws();
        std::string item;
        if (!string(item)) return false;
        v.items.push_back(std::move(item));
        ws();
        if (eat(',')) continue;
        return eat(']');
      }
    }
    if (literal("null")) return true;
    if (literal("true") || literal("false")) {
      v.kind = Value::Bool;
      return true;
    }
    // An integer that fits a long long; no fractions or exponents.
    const bool neg = eat('-');
    const size_t start = i_;
    unsigned long long u = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (u > (~0ull - 9) / 10) return false;
      u = u * 10 + static_cast<unsigned>(s_[i_++] - '0');
    }
    if (i_ == start || u > static_cast<unsigned long long>(LLONG_MAX)) return false;
    v.kind = Value::Int;
    v.i = neg ? -static_cast<long long>(u) : static_cast<long long>(u);
    return true;
  }

  std::string_view s_;
  size_t i_ = 0;
};

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

  void event(const Event& e) {
    const std::string ev = e.str("ev");
    const u64 t = static_cast<u64>(e.num("t").value_or(0));
    const long tid = static_cast<long>(e.num("tid").value_or(0));
    if (ev != "close" && ev != "activity") bracket_just_ended_ = false;
    if (ev != "chroot") pending_chroot_.reset();  // written after it: the root still had the dir
    if (!p_.first_t || t < p_.first_t) p_.first_t = t;
    p_.last_t = std::max(p_.last_t, t);

    if (ev == "start") {
      finish_request();
      pending_exec_.reset();
      Image im;
      im.exe = e.str("exe");
      im.ppid = static_cast<long>(e.num("ppid").value_or(0));
      im.glibc = e.str("glibc");
      im.t = t;
      if (const std::vector<std::string>* argv = e.strings("argv")) im.argv = *argv;
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
      activity(e.str("what"));
    } else if (ev == "open") {
      open(e, t);
    } else if (ev == "close") {
      close(e.str("path"), t, tid);
    } else if (ev == "dlerror") {
      dlerror(e.str("message"), e.str("caller"), t, tid);
    } else if (ev == "threads") {
      ThreadCall c;
      c.fn = e.str("fn");
      c.value = e.num("value").value_or(0);
      c.before = e.num("before");
      c.after = e.num("after");
      c.result = e.num("result");
      if (c.before && *c.before < 0) c.before.reset();
      if (c.after && *c.after < 0) c.after.reset();
      c.caller = e.str("caller");
      c.runtime = e.str("runtime");
      c.t = t;
      c.tid = tid;
      p_.thread_calls.push_back(std::move(c));
    } else if (ev == "device") {
      device(e, t, tid);
    } else if (ev == "env") {
      EnvChange c;
      c.op = e.str("op");
      c.name = e.str("name");
      if (const Value* v = e.find("value"); v && v->kind == Value::String) c.value = v->s;
      c.caller = e.str("caller");
      c.t = t;
      p_.env_changes.push_back(std::move(c));
    } else if (ev == "fork") {
      ForkEvent f;
      f.child = static_cast<long>(e.num("child").value_or(0));
      f.threads = static_cast<long>(e.num("threads").value_or(0));
      if (const std::vector<std::string>* omp = e.strings("openmp")) f.openmp = *omp;
      f.caller = e.str("caller");
      f.t = t;
      p_.forks.push_back(std::move(f));
    } else if (ev == "runtime") {
      RuntimeState r;
      r.path = e.str("path");
      r.kind = e.str("kind");
      r.threads = e.num("threads");
      r.config = e.str("config");
      p_.runtimes.push_back(std::move(r));
      exiting_ = true;
    } else if (ev == "exit") {
      finish_request();
      p_.exited = true;
      exiting_ = true;
    } else if (ev == "exec") {
      ExecCall x;
      x.call = e.str("call");
      x.path = e.str("path");
      x.caller = e.str("caller");
      x.env_known = e.find("audit") != nullptr;
      x.audit = static_cast<int>(e.num("audit").value_or(-1));
      x.preload = static_cast<int>(e.num("preload").value_or(-1));
      x.trace_dir = static_cast<int>(e.num("trace_dir").value_or(-1));
      x.root_changed = static_cast<int>(e.num("root_changed").value_or(-1));
      x.t = t;
      pending_exec_ = std::move(x);
    } else if (ev == "exec_failed") {
      pending_exec_.reset();
    } else if (ev == "chroot") {
      pending_chroot_ = RootChange{e.str("path"), e.str("cwd"), e.str("caller"), t};
    }
  }

  void end() {
    finish_request();
    p_.untraced_exec = std::move(pending_exec_);
    p_.unseen_after_chroot = std::move(pending_chroot_);
  }

 private:
  // A "device" event: a CUDA call, or the start or the return of an NCCL
  // init (the return completes the latest open start of that function on
  // the same thread).
  void device(const Event& e, u64 t, long tid) {
    const std::string fn = e.str("fn");
    const std::string state = e.str("state");
    if (state == "returned") {
      for (size_t i = p_.device_calls.size(); i-- > 0;) {
        DeviceCall& c = p_.device_calls[i];
        if (c.fn != fn || c.tid != tid || c.ret) continue;
        c.ret = e.num("ret");
        c.comm = static_cast<u64>(e.num("comm").value_or(0));
        return;
      }
      return;  // its start was lost (a cut line): nothing to complete
    }
    DeviceCall c;
    c.fn = fn;
    c.caller = e.str("caller");
    c.lib = e.str("lib");
    c.ret = e.num("ret");
    c.device = e.num("device");
    c.ctx = static_cast<u64>(e.num("ctx").value_or(0));
    c.nccl_rank = e.num("nccl_rank");
    c.nranks = e.num("nranks");
    c.comm_id = e.str("id");
    c.parent = static_cast<u64>(e.num("parent").value_or(0));
    c.color = e.num("color");
    c.key = e.num("key");
    const std::string devices = e.str("devices");
    for (size_t i = 0; i < devices.size();) {
      size_t j = devices.find(',', i);
      if (j == std::string::npos) j = devices.size();
      long long d = 0;
      const auto [end, ec] = std::from_chars(devices.data() + i, devices.data() + j, d);
      if (ec == std::errc() && end == devices.data() + j) c.devices.push_back(d);
      i = j + 1;
    }
    c.cuda_device = e.num("cuda_device");
    c.cuda_device_unknown = e.str("cuda_device_unknown");
    auto env = [&](std::string_view key) -> std::optional<std::string> {
      const Value* v = e.find(key);
      if (!v || v->kind != Value::String) return std::nullopt;
      return v->s;
    };
    c.cuda_visible_devices = env("CUDA_VISIBLE_DEVICES");
    c.local_rank = env("LOCAL_RANK");
    c.rank = env("RANK");
    c.world_size = env("WORLD_SIZE");
    c.t = t;
    c.tid = tid;
    p_.device_calls.push_back(std::move(c));
  }

  void search(const Event& e, u64 t, long tid) {
    const std::string how = e.str("how");
    if (how != "orig") {
      if (req_) req_->candidates.push_back(e.str("name"));
      return;
    }
    finish_request();
    Request r;
    r.name = e.str("name");
    r.by = e.str("by");
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

  void open(const Event& e, u64 t) {
    LoadedObject o;
    o.path = e.str("path");
    o.lmid = static_cast<long>(e.num("lmid").value_or(0));
    o.runtime = e.str("runtime");
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
    if (e.num("program").value_or(0)) o.requested.clear();
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
      const bool rollback = (in_bracket_ || bracket_just_ended_) &&
                            std::find(last_bracket_opens_.begin(), last_bracket_opens_.end(), i) !=
                                last_bracket_opens_.end();
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
    if (!p_.failed.empty() && p_.failed.back().t == rollback_t_ && rollback_t_ != 0)
      return &p_.failed.back();
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
  std::optional<ExecCall> pending_exec_;      // an exec after which no image has started yet
  std::optional<RootChange> pending_chroot_;  // a chroot that is the last event so far
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
    Event e;
    if (!complete || !LineParser(line).parse(e)) {
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
    if (stem.empty() || stem.size() > 9 ||
        stem.find_first_not_of("0123456789") != std::string::npos)
      continue;
    files.emplace_back(std::stol(stem), dir + "/" + name);
  }
  closedir(d);
  for (const auto& [pid, path] : files) {
    // Only the shims' regular files: a FIFO planted in a trace directory is
    // refused, not waited on.
    std::string why;
    std::optional<std::string> text = read_regular_file(path, u64{1} << 32, &why);
    if (!text) {
      trace.errors.push_back(path + ": " + why);
      continue;
    }
    trace.processes.emplace(pid, parse_process_events(*text, pid));
  }
  // Fork children: their parent's fork event names them.
  for (auto& [pid, p] : trace.processes)
    for (const ForkEvent& f : p.forks)
      if (auto it = trace.processes.find(f.child); it != trace.processes.end() && f.child != pid)
        it->second.forked_from = pid;
  return trace;
}

}  // namespace mld::run
