// dlopen.cc — a sequence of dlopen(name, RTLD_NOW | RTLD_LOCAL) calls into a
// simulated process, and what each does to the static TLS area: which call
// fails with "cannot allocate memory in static TLS block", naming which
// module, and which GLIBC_TUNABLES setting would have let every call load.
//
// Modelled on glibc 2.36 (older behaviour behind version checks):
//   * elf/dl-open.c dl_open_worker_begin: map the object and its
//     dependencies (Loader::dlopen does that part), assign TLS module ids at
//     map time (elf/dl-load.c, _dl_assign_tls_modid: the lowest free id above
//     the startup modules), then relocate the objects not yet relocated in
//     reverse l_initfini order, i.e. dependencies first. l_initfini is the
//     breadth-first searchlist sorted by elf/dl-sort-maps.c (the DFS sort
//     from 2.35, the original "move behind the last user" sort before).
//     From 2.39 (78ca44da01) the namespace's libc_map is relocated first;
//     in the base namespace it was relocated at startup, so that changes
//     nothing here.
//   * elf/dl-reloc.c and sysdeps/*/dl-machine.h: an initial-exec relocation
//     (R_X86_64_TPOFF64, R_AARCH64_TLS_TPREL, R_386_TLS_TPOFF) runs
//     CHECK_STATIC_TLS on the module that *defines* the symbol, which
//     allocates static TLS or fails the dlopen naming that module; a TLSDESC
//     relocation runs TRY_STATIC_TLS, which takes static TLS only from the
//     optional budget and otherwise silently falls back to dynamic TLS.
//     Under RTLD_NOW every release processes TLSDESC relocations at dlopen
//     time (2.34 made that unconditional; earlier only lazy binding deferred
//     them).
//   * symbol lookup (elf/dl-lookup.c): a relocation against symbol 0 or a
//     local symbol refers to the object itself; otherwise the scope is the
//     global scope (the executable's searchlist, i.e. the startup objects)
//     followed by the dlopened object's own breadth-first searchlist.
//   * symbol versions (elf/dl-open.c dl_open_worker_begin, before any
//     relocation): the version needs of every newly mapped object are
//     checked (elf/dl-version.c); the first unmet one fails the call with
//     "<provider>: version `X' not found (required by <object>)".
//   * failure (elf/dl-open.c _dl_open, elf/dl-close.c _dl_close_worker): every
//     object of the call is unloaded again and its static TLS is given back
//     only where dl-close.c can (StaticTlsArena::release_all); the optional
//     budget it used stays spent.
//   * glibc 2.10–2.21 (elf/dl-open.c, removed by f8aeae3473): once a thread
//     exists, a dlopen that gives static TLS to a not yet relocated module
//     whose module id exceeds DTV_SURPLUS (14) fails with "cannot load any
//     more object with static TLS".
//
// Not modelled: a module whose TLS was already touched through
// __tls_get_addr (FORCED_DYNAMIC_TLS_OFFSET: a later initial-exec reference
// fails whatever the room), symbol versions and protected visibility in the
// TLS symbol lookup, DT_SYMBOLIC, RTLD_GLOBAL, and the TLS of LD_AUDIT
// modules themselves (their libc copies are counted).
#include <algorithm>
#include <map>
#include <set>

#include "loader/loader.h"

namespace mld::loader {

namespace {

constexpr u64 kDtvSurplus = 14;  // DTV_SURPLUS, sysdeps/generic/ldsodefs.h

// ─── What the model needs from each ELF file, decoded once ──────────────────

struct TlsReloc {
  elf::TlsRelocKind kind = elf::TlsRelocKind::InitialExec;
  std::string_view name;  // empty: the object's own block
  bool self = false;      // symbol 0 or a local symbol: the object itself
  bool weak = false;      // an undefined weak reference (may stay unresolved)
};

struct TlsFacts {
  std::optional<elf::TlsSegment> tls;
  std::vector<TlsReloc> relocs;            // IE and TLSDESC, in processing order
  std::vector<std::string_view> tls_defs;  // defined STT_TLS symbols, sorted
};

class FactCache {
 public:
  const TlsFacts& get(const Object& o) {
    static const TlsFacts kNone;
    if (!o.elf || o.faked) return kNone;
    auto it = cache_.find(o.elf.get());
    if (it != cache_.end()) return it->second;
    TlsFacts f;
    try {
      decode(*o.elf, &f);
    } catch (const ParseError&) {
      // A malformed table: treat the object as having no TLS references
      // rather than guessing (the reader's own checks report the file).
      f.relocs.clear();
      f.tls_defs.clear();
    }
    return cache_.emplace(o.elf.get(), std::move(f)).first->second;
  }

 private:
  static void decode(const elf::ElfFile& e, TlsFacts* f) {
    f->tls = e.tls();
    if (f->tls && f->tls->blocksize == 0) f->tls.reset();
    std::vector<elf::TlsRelocation> relocs = e.tls_relocations();
    for (const elf::TlsRelocation& r : relocs) {
      if (r.kind == elf::TlsRelocKind::GeneralDynamic) continue;
      TlsReloc t;
      t.kind = r.kind;
      t.name = r.symbol_name;
      t.self = r.symbol_index == 0 || r.symbol_bind == elf::STB_LOCAL;
      t.weak = r.symbol_index != 0 && r.symbol_bind == elf::STB_WEAK && !r.symbol_defined_here;
      f->relocs.push_back(t);
    }
    // do_lookup_x ignores local symbols; only TLS definitions can be what
    // an initial-exec or TLSDESC reference binds to.
    if (f->tls) {
      f->tls_defs = e.tls_definitions();
      std::sort(f->tls_defs.begin(), f->tls_defs.end());
    }
  }

  std::map<const elf::ElfFile*, TlsFacts> cache_;
};

bool usable(const Object& o) { return !o.faked && !o.removed && o.elf != nullptr; }

// The direct dependencies of `idx` as its l_initfini[1..] lists them: the
// DT_NEEDED objects in order, each once, never itself.
std::vector<size_t> direct_deps(const Process& p, size_t idx, const std::vector<bool>& gone) {
  std::vector<size_t> out;
  for (const Resolution& r : p.objects[idx].needed) {
    if (!r.object || *r.object >= p.objects.size() || *r.object == idx) continue;
    size_t d = *r.object;
    if (p.objects[d].faked || gone[d]) continue;
    if (std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
  }
  return out;
}

// l_searchlist of `root`: breadth-first over DT_NEEDED (elf/dl-deps.c).
std::vector<size_t> searchlist(const Process& p, size_t root, const std::vector<bool>& gone) {
  std::vector<size_t> list = {root};
  std::vector<bool> seen(p.objects.size(), false);
  seen[root] = true;
  for (size_t qi = 0; qi < list.size(); qi++) {
    for (size_t d : direct_deps(p, list[qi], gone)) {
      if (seen[d]) continue;
      seen[d] = true;
      list.push_back(d);
    }
  }
  return list;
}

// _dl_sort_maps as _dl_map_object_deps calls it on a new searchlist: the
// result is l_initfini (users before the objects they need). maps[0] is the
// object being opened, whose own l_initfini is still empty during the sort.
// Objects that were themselves dlopen roots before have a full l_initfini in
// glibc; their direct dependencies are used here, which only matters for
// the relative order of objects that are all relocated already.
std::vector<size_t> sort_maps(const Process& p, const std::vector<size_t>& maps,
                              const std::vector<bool>& gone, GlibcVersion glibc) {
  const size_t n = maps.size();
  if (n <= 1) return maps;
  std::map<size_t, size_t> pos;
  for (size_t i = 0; i < n; i++) pos[maps[i]] = i;
  auto deps_of = [&](size_t obj) {
    std::vector<size_t> d;
    if (obj == maps[0]) return d;  // l_initfini not set yet
    for (size_t x : direct_deps(p, obj, gone))
      if (pos.count(x)) d.push_back(x);
    return d;
  };
  if (glibc >= GlibcVersion{2, 35}) {
    // _dl_sort_maps_dfs: depth-first from maps[n-1] down to maps[0], each
    // object placed (from the back) after all its dependencies; the main
    // program (index 0 of the process) is never entered as a dependency.
    std::vector<size_t> rpo(n);
    size_t head = n;
    std::vector<bool> visited(n, false);
    for (size_t i = n; i-- > 0 && head > 0;) {
      if (visited[i]) continue;
      // Iterative DFS: (object position, next dependency to look at).
      std::vector<std::pair<size_t, size_t>> stack = {{i, 0}};
      visited[i] = true;
      std::map<size_t, std::vector<size_t>> deps_cache;
      while (!stack.empty()) {
        size_t at = stack.back().first;
        std::vector<size_t>& deps = deps_cache.try_emplace(at, deps_of(maps[at])).first->second;
        size_t& next = stack.back().second;
        bool descended = false;
        while (next < deps.size()) {
          size_t d = pos[deps[next++]];
          if (visited[d] || maps[d] == 0) continue;
          visited[d] = true;
          stack.push_back({d, 0});
          descended = true;
          break;
        }
        if (descended) continue;
        if (head > 0) rpo[--head] = maps[at];
        stack.pop_back();
      }
    }
    return rpo;
  }
  // _dl_sort_maps_original with skip = 1: for each object, find the last
  // later object that needs it and move it behind that one; the `seen`
  // counters stop cycles from looping forever.
  std::vector<size_t> m(maps.begin() + 1, maps.end());
  const size_t k_n = m.size();
  std::vector<u32> seen(k_n, 0);
  auto needs = [&](size_t user, size_t obj) {
    std::vector<size_t> d = deps_of(user);
    return std::find(d.begin(), d.end(), obj) != d.end();
  };
  size_t i = 0;
  // Bounded: glibc's loop ends by its `seen` logic; the bound only guards
  // against a mistake here turning into a hang.
  for (u64 guard = 0; k_n > 1 && guard < 64 * k_n * k_n + 1024; guard++) {
    ++seen[i];
    size_t thisp = m[i];
    bool moved = false, cleared_jump = false;
    for (size_t k = k_n - 1; k > i; k--) {
      if (!needs(m[k], thisp)) continue;
      m.erase(m.begin() + static_cast<std::ptrdiff_t>(i));
      m.insert(m.begin() + static_cast<std::ptrdiff_t>(k), thisp);
      if (seen[i + 1] > k_n - i) {
        ++i;
        cleared_jump = true;
      } else {
        u32 this_seen = seen[i];
        seen.erase(seen.begin() + static_cast<std::ptrdiff_t>(i));
        seen.insert(seen.begin() + static_cast<std::ptrdiff_t>(k), this_seen);
      }
      moved = true;
      break;
    }
    if (!moved) {
      if (++i == k_n) break;
      cleared_jump = true;
    }
    if (cleared_jump) std::fill(seen.begin() + static_cast<std::ptrdiff_t>(i), seen.end(), 0);
  }
  std::vector<size_t> out = {maps[0]};
  out.insert(out.end(), m.begin(), m.end());
  return out;
}

// ─── The simulation ─────────────────────────────────────────────────────────

// The link map fields static TLS touches.
struct ModState {
  bool has_tls = false;
  TlsBlock block;
  std::optional<u64> offset;   // l_tls_offset once static; nullopt: NO_TLS_OFFSET
  u64 used_before = 0;         // GL(dl_tls_static_used) before the allocation
  bool relocated = false;      // l_relocated
  bool need_tls_init = false;  // l_need_tls_init (2.10–2.21 check)
  u64 modid = 0;               // l_tls_modid
};

// What one dlopen call did: the step and the objects to unload again.
struct StepResult {
  DlopenStep step;
  std::vector<size_t> unload;
};

class TlsSim {
 public:
  // `startup_count`: the objects with an index below it that are not
  // removed make up the process at startup.
  TlsSim(const Process& p, const StaticTlsParams& params, FactCache& facts, size_t startup_count)
      : p_(p), params_(params), facts_(facts), arena_(params, {}) {
    gone_.assign(p.objects.size(), false);
    for (size_t i = 0; i < p.objects.size(); i++) gone_[i] = p.objects[i].removed;
    mods_.resize(p.objects.size());
    std::vector<TlsBlock> blocks;
    for (size_t i = 0; i < std::min(startup_count, p.objects.size()); i++) {
      if (!usable(p.objects[i])) continue;
      startup_.push_back(i);
      init_mod(i);
      mods_[i].relocated = true;
      if (mods_[i].has_tls) {
        mods_[i].modid = ++static_nelem_;
        modids_.insert(mods_[i].modid);
      }
    }
    if (params.naudit == 0) {
      // init_tls after all startup objects are mapped: each gets its place.
      for (size_t i : startup_) {
        if (!mods_[i].has_tls) continue;
        blocks.push_back(mods_[i].block);
        mods_[i].offset = 0;  // placed; the value is never needed
      }
      arena_ = StaticTlsArena(params, blocks);
    } else {
      audit_startup();
    }
    startup_used_ = arena_.used();
  }

  const StaticTlsArena& arena() const { return arena_; }
  u64 startup_used() const { return startup_used_; }

  // One dlopen whose mapping step added `added` (indices, load order) or
  // failed with `load_error`.
  StepResult step(const std::string& name, const std::vector<size_t>& added,
                  const std::string& load_error) {
    StepResult res;
    res.step.object = name;
    if (!load_error.empty()) {
      res.step.ok = false;
      res.step.failure = StepFailure::Load;
      res.step.error = load_error;
      return res;
    }
    if (added.empty()) return res;  // already loaded: nothing happens
    for (size_t i = gone_.size(); i < p_.objects.size(); i++)
      gone_.push_back(p_.objects[i].removed);
    mods_.resize(p_.objects.size());
    std::vector<bool> is_new(p_.objects.size(), false);
    for (size_t i : added) {
      is_new[i] = true;
      gone_[i] = false;
      res.step.loaded.push_back(p_.objects[i].path);
      mods_[i] = ModState();
      init_mod(i);
      if (mods_[i].has_tls) mods_[i].modid = take_modid();
    }
    const size_t root = added.front();
    std::vector<size_t> local = searchlist(p_, root, gone_);
    std::vector<size_t> initfini = sort_maps(p_, local, gone_, params_.glibc);
    std::vector<size_t> scope = startup_;
    for (size_t i : local)
      if (std::find(scope.begin(), scope.end(), i) == scope.end()) scope.push_back(i);

    std::string error;
    for (size_t k = initfini.size(); k-- > 0 && error.empty();) {
      size_t obj = initfini[k];
      if (mods_[obj].relocated) continue;
      relocate(obj, scope, /*descriptors=*/true, &res.step, &error);
      mods_[obj].relocated = true;
    }
    // glibc 2.10–2.21: the DTV of other threads cannot grow here.
    if (error.empty() && params_.threads_running && params_.glibc >= GlibcVersion{2, 10} &&
        params_.glibc <= GlibcVersion{2, 21}) {
      for (size_t i : local) {
        if (!is_new[i] || !mods_[i].need_tls_init || !mods_[i].has_tls) continue;
        if (mods_[i].modid > kDtvSurplus) {
          error = "dlopen: cannot load any more object with static TLS";
          res.step.tls_module = p_.objects[i].path;
          break;
        }
      }
    }
    for (size_t i : added) mods_[i].need_tls_init = false;
    if (error.empty()) return res;

    // Roll back as _dl_close_worker(new, true) does, in l_initfini order.
    res.step.ok = false;
    res.step.failure = StepFailure::StaticTls;
    res.step.error = error;
    std::vector<StaticTlsArena::Released> freed;
    std::vector<size_t> order;
    for (size_t i : initfini)
      if (is_new[i]) order.push_back(i);
    for (size_t i : added)
      if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
    for (size_t i : order) {
      ModState& m = mods_[i];
      if (m.has_tls && m.offset) freed.push_back({m.block, *m.offset, m.used_before});
      if (m.modid) modids_.erase(m.modid);
      m = ModState();
      gone_[i] = true;
    }
    arena_.release_all(freed);
    res.unload = added;
    return res;
  }

 private:
  void init_mod(size_t i) {
    const TlsFacts& f = facts_.get(p_.objects[i]);
    ModState& m = mods_[i];
    if (f.tls) {
      m.has_tls = true;
      m.block.module = p_.objects[i].path;
      m.block.blocksize = f.tls->blocksize;
      m.block.align = f.tls->align;
      m.block.firstbyte_offset = f.tls->firstbyte_offset;
    }
  }

  // _dl_assign_tls_modid: the lowest id above the startup modules that no
  // module holds (ids freed by a failed dlopen leave gaps that are reused).
  u64 take_modid() {
    u64 id = static_nelem_ + 1;
    while (modids_.count(id)) id++;
    modids_.insert(id);
    return id;
  }

  // The object whose TLS a relocation of `obj` refers to.
  std::optional<size_t> resolve(size_t obj, const TlsReloc& r, const std::vector<size_t>& scope,
                                std::string* error) {
    if (r.self || r.name.empty()) return obj;
    for (size_t s : scope) {
      if (gone_[s] || !usable(p_.objects[s])) continue;
      const TlsFacts& f = facts_.get(p_.objects[s]);
      if (std::binary_search(f.tls_defs.begin(), f.tls_defs.end(), r.name)) return s;
    }
    if (!r.weak) *error = p_.objects[obj].path + ": undefined symbol: " + std::string(r.name);
    return std::nullopt;
  }

  // _dl_relocate_object, reduced to its TLS relocations.
  void relocate(size_t obj, const std::vector<size_t>& scope, bool descriptors, DlopenStep* step,
                std::string* error) {
    const TlsFacts& f = facts_.get(p_.objects[obj]);
    for (const TlsReloc& r : f.relocs) {
      bool ie = r.kind == elf::TlsRelocKind::InitialExec;
      if (!ie && !descriptors) continue;
      std::optional<size_t> def = resolve(obj, r, scope, error);
      if (!error->empty()) return;
      if (!def || !mods_[*def].has_tls) continue;
      ModState& m = mods_[*def];
      if (m.offset) continue;  // HAVE_STATIC_TLS
      u64 before = arena_.used();
      std::optional<u64> needed = arena_.bytes_needed(m.block);
      u64 left = arena_.bytes_left();
      std::optional<u64> off = arena_.try_allocate(m.block, /*optional=*/!ie);
      if (off) {
        m.offset = off;
        m.used_before = before;
        m.need_tls_init = !m.relocated;
      } else if (ie) {
        // _dl_allocate_static_tls: _dl_signal_error (0, map->l_name, ...).
        *error = p_.objects[*def].path + ": cannot allocate memory in static TLS block";
        if (step) {
          step->tls_module = p_.objects[*def].path;
          step->bytes_needed = needed.value_or(m.block.blocksize + m.block.firstbyte_offset);
          step->bytes_left = left;
        }
        return;
      }
    }
  }

  // With LD_AUDIT, init_tls runs before the preloads and DT_NEEDED objects
  // are mapped (elf/rtld.c): only the executable is laid out; each auditor's
  // own libc and then every startup object reached by an initial-exec
  // relocation take their static TLS from the surplus, like a dlopen. Each
  // auditor is assumed to link libc.so.6, as real ones do (measured: an
  // auditor without that DT_NEEDED brings no second libc and no 144 bytes).
  void audit_startup() {
    std::vector<TlsBlock> blocks;
    if (!startup_.empty() && startup_.front() == 0 && mods_[0].has_tls) {
      blocks.push_back(mods_[0].block);
      mods_[0].offset = 0;
    }
    arena_ = StaticTlsArena(params_, blocks);
    std::optional<size_t> libc;
    for (size_t i : startup_) {
      const Object& o = p_.objects[i];
      if (mods_[i].has_tls && o.elf->soname() && *o.elf->soname() == "libc.so.6") libc = i;
    }
    for (u64 a = 0; libc && a < params_.naudit; a++) arena_.try_allocate(mods_[*libc].block, false);
    if (params_.startup_reserve)
      arena_.try_allocate(TlsBlock{"reserve", params_.startup_reserve, 16, 0}, false);
    for (size_t i : startup_) mods_[i].relocated = i == 0;  // the executable is done
    std::vector<size_t> initfini = sort_maps(p_, startup_, gone_, params_.glibc);
    // Lazy binding (the startup default) defers TLSDESC before 2.34.
    bool descriptors = params_.glibc >= GlibcVersion{2, 34};
    for (size_t k = initfini.size(); k-- > 0;) {
      std::string error;  // a failure here stops the program at startup
      relocate(initfini[k], startup_, descriptors, nullptr, &error);
      mods_[initfini[k]].relocated = true;
    }
    for (size_t i : startup_) {
      mods_[i].relocated = true;
      mods_[i].need_tls_init = false;
    }
  }

  const Process& p_;
  StaticTlsParams params_;
  FactCache& facts_;
  StaticTlsArena arena_;
  std::vector<size_t> startup_;
  std::vector<bool> gone_;
  std::vector<ModState> mods_;
  std::set<u64> modids_;
  u64 static_nelem_ = 0;
  u64 startup_used_ = 0;
};

// The objects a Loader::dlopen call really added (it may also list objects
// that were loaded before).
std::vector<size_t> new_objects(const Process& p, const std::vector<size_t>& added, size_t before) {
  std::vector<size_t> out;
  for (size_t i : added)
    if (i >= before && i < p.objects.size() && usable(p.objects[i])) out.push_back(i);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The failed step when an object `mapped` needs a symbol version its
// provider lacks; nullopt when every non-weak need is met.
std::optional<DlopenStep> version_failure(const Process& p, const std::string& name,
                                          const std::vector<size_t>& mapped) {
  if (mapped.empty()) return std::nullopt;
  std::vector<VersionProblem> problems = check_versions(p, mapped);
  for (VersionProblem& vp : problems) {
    if (vp.kind != VersionProblem::NotFound) continue;
    DlopenStep st;
    st.object = name;
    st.ok = false;
    st.failure = StepFailure::Version;
    st.error = version_problem_text(p, vp);
    for (size_t i : mapped) st.loaded.push_back(p.objects[i].path);
    st.version_problems.push_back(std::move(vp));
    return st;
  }
  return std::nullopt;
}

DlopenSequence run_sequence(Loader& loader, Process& process, const std::vector<std::string>& names,
                            const StaticTlsParams& params, FactCache& facts) {
  DlopenSequence seq;
  seq.params = params;
  seq.surplus = params.surplus();
  TlsSim sim(process, params, facts, process.objects.size());
  seq.static_size = sim.arena().static_size();
  seq.startup_used = sim.startup_used();
  for (const std::string& name : names) {
    if (process.objects.empty()) {
      DlopenStep st;
      st.object = name;
      st.ok = false;
      st.error = name + ": no program was loaded to dlopen it into";
      seq.steps.push_back(st);
      continue;
    }
    size_t before = process.objects.size();
    std::string error;
    std::vector<size_t> added = loader.dlopen(process, name, std::nullopt, &error);
    std::vector<size_t> mapped =
        error.empty() ? new_objects(process, added, before) : std::vector<size_t>{};
    // dl_open_worker_begin checks the version needs of every object it
    // mapped, in searchlist order, before relocating anything: the first
    // unmet need fails the call, and _dl_close_worker unloads them all (their
    // TLS was never allocated).
    if (std::optional<DlopenStep> failed = version_failure(process, name, mapped)) {
      for (size_t i : mapped) process.objects[i].removed = true;
      seq.steps.push_back(std::move(*failed));
      continue;
    }
    StepResult r = sim.step(name, mapped, error);
    for (size_t i : r.unload) process.objects[i].removed = true;
    seq.steps.push_back(std::move(r.step));
  }
  return seq;
}

bool all_ok(const DlopenSequence& s) {
  for (const DlopenStep& st : s.steps)
    if (!st.ok) return false;
  return true;
}

std::string fix_text(const StaticTlsParams& params, u64 optional) {
  std::string s;
  if (params.rtld_nns != 4) s = "glibc.rtld.nns=" + std::to_string(params.rtld_nns) + ":";
  return s + "glibc.rtld.optional_static_tls=" + std::to_string(optional);
}

// The smallest glibc.rtld.optional_static_tls, in steps of 64 bytes (the
// x86 static TLS size moves in steps of TCB_ALIGNMENT = 64 anyway), under
// which every call of the sequence loads; nullopt if a call fails for
// another reason or no value helps (a block aligned above static_align).
std::optional<std::string> find_fix(Loader& loader, const Process& snapshot,
                                    const std::vector<std::string>& names,
                                    const StaticTlsParams& params, FactCache& facts) {
  // The objects each call maps when every call succeeds: mapping does not
  // depend on TLS, so it is done once and each trial only redoes the TLS.
  Process all = snapshot;
  const size_t startup_count = all.objects.size();
  if (all.objects.empty()) return std::nullopt;
  std::vector<std::vector<size_t>> loads;
  for (const std::string& name : names) {
    size_t before = all.objects.size();
    std::string error;
    std::vector<size_t> added = loader.dlopen(all, name, std::nullopt, &error);
    if (!error.empty()) return std::nullopt;
    loads.push_back(new_objects(all, added, before));
  }
  auto loads_with = [&](u64 optional) {
    StaticTlsParams p = params;
    p.optional_static_tls = optional;
    TlsSim sim(all, p, facts, startup_count);
    for (size_t k = 0; k < names.size(); k++)
      if (!sim.step(names[k], loads[k], "").step.ok) return false;
    return true;
  };
  // Above `hi` every block fits even with worst-case alignment slack, and
  // TLSDESC can never take more than the budget it adds.
  u64 hi = params.optional_static_tls;
  for (size_t i = startup_count; i < all.objects.size(); i++) {
    const TlsFacts& f = facts.get(all.objects[i]);
    if (f.tls) hi += f.tls->blocksize + std::max<u64>(f.tls->align, 1) + f.tls->firstbyte_offset;
  }
  hi = (hi + 64 + 63) / 64 * 64;
  auto verified = [&](u64 optional) {
    Process again = snapshot;
    StaticTlsParams p = params;
    p.optional_static_tls = optional;
    return all_ok(run_sequence(loader, again, names, p, facts));
  };
  if (hi / 64 <= 1024) {
    // Exact: the first multiple of 64 that works (more surplus can hurt a
    // little: TLSDESC modules take more of it, alignment slack moves).
    for (u64 c = 0; c <= hi; c += 64)
      if (loads_with(c) && verified(c)) return fix_text(params, c);
    return std::nullopt;
  }
  // Huge blocks: binary search, trusting that more surplus helps.
  if (!loads_with(hi)) return std::nullopt;
  u64 lo = 0, up = hi / 64;
  while (lo < up) {
    u64 mid = (lo + up) / 2;
    if (loads_with(mid * 64))
      up = mid;
    else
      lo = mid + 1;
  }
  if (verified(up * 64)) return fix_text(params, up * 64);
  return std::nullopt;
}

}  // namespace

std::string_view step_failure_name(StepFailure f) {
  switch (f) {
    case StepFailure::None: return "none";
    case StepFailure::Load: return "load";
    case StepFailure::Version: return "version";
    case StepFailure::StaticTls: return "static_tls";
  }
  return "none";
}

DlopenSequence simulate_dlopen_sequence(Loader& loader, Process& process,
                                        const std::vector<std::string>& names,
                                        const StaticTlsParams& params) {
  FactCache facts;
  Process snapshot = process;
  DlopenSequence seq = run_sequence(loader, process, names, params, facts);
  if (all_ok(seq) || !params.surplus_accounting()) return seq;
  // Only static TLS failures can be cured by a tunable.
  for (const DlopenStep& st : seq.steps)
    if (!st.ok && (st.tls_module.empty() || st.error.find("static TLS block") == std::string::npos))
      return seq;
  seq.tunables_fix = find_fix(loader, snapshot, names, params, facts);
  return seq;
}

}  // namespace mld::loader
