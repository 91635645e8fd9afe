/* audit.c — the rtld-audit module of `mldoctor run` (LD_AUDIT).
 *
 * It models what ld.so does in a traced process: every object it searches
 * for (with the object that asked: the cookie of la_objsearch is the
 * requesting map, the dlopen caller or the object whose DT_NEEDED it is),
 * every object it maps and unmaps, and the bracketing activity events that
 * tell a failed dlopen from a good one (research/glibc-tls-audit.md §4).
 *
 * Thread-count calls are observed through la_symbind64: when a caller binds
 * omp_set_num_threads (or MKL's and OpenBLAS's setters) the module hands
 * ld.so a wrapper that remembers the exact target ld.so resolved for that
 * caller, so the call lands in the same runtime as without the shim even
 * when several OpenMP runtimes are loaded, and no symbol is exported into
 * the process (an exported omp_set_num_threads would make "is an OpenMP
 * runtime loaded?" probes lie). Each wrapper slot is a separate function
 * with its own static record — no code is generated at run time.
 * The calls that bind a process to a GPU and create its NCCL communicators
 * are wrapped the same way, by device-calls.c, for bindings into a CUDA
 * runtime, driver or NCCL library.
 *
 * No thread-local storage and no malloc; see trace-writer.h.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <gnu/lib-names.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device-calls.h"
#include "libc-calls.h"
#include "trace-writer.h"

#define MLD_EXPORT __attribute__((visibility("default")))

/* ---- objects seen by la_objopen ------------------------------------- */

#define MAX_OBJECTS 8192
#define NAME_POOL (2u << 20)

struct object {
  struct link_map* map;
  const char* name; /* copied: link_map names die with dlclose */
  Lmid_t lmid;
  const char* runtime; /* gnu-openmp, kmp-openmp, mkl, openblas, other; NULL */
  int device;          /* defines a function of device-calls.h (libcudart, libcuda, libnccl) */
  int closed;
};

static struct object objects[MAX_OBJECTS];
static unsigned object_count;
static char name_pool[NAME_POOL];
static size_t name_pool_used;
static char exe_path[4096];

/* ld.so calls objsearch/objopen/objclose/activity with its load lock held,
 * so the object table needs no lock of its own; la_symbind64 (lazy binding)
 * runs without it and only reads records that are complete. */
static const char* keep_name(const char* s) {
  size_t n = strlen(s) + 1;
  if (name_pool_used + n > NAME_POOL) return "(name not kept)";
  char* p = name_pool + name_pool_used;
  memcpy(p, s, n);
  name_pool_used += n;
  return p;
}

static const struct object* object_of(uintptr_t cookie_value) {
  const struct object* o = (const struct object*)cookie_value;
  if (o < objects || o >= objects + MAX_OBJECTS) return NULL;
  return o;
}

static const char* name_of(uintptr_t* cookie) {
  const struct object* o = cookie ? object_of(*cookie) : NULL;
  return o ? o->name : NULL;
}

static void add_cmdline(struct mld_event* e) {
  char buf[4096];
  size_t n = 0;
  FILE* f = fopen("/proc/self/cmdline", "re");
  if (f) {
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
  }
  mld_event_strings(e, "argv", buf, n);
}

/* ---- la_version: the first call ------------------------------------ */

/* glibc 2.35+: la_symbind64 also sees BIND_NOW bindings, so the libc calls
 * are wrapped here; before, the LD_PRELOAD interposer does it. */
static int wrap_libc;
static const struct object* base_libc; /* the program's libc (LM_ID_BASE) */

static int glibc_at_least(const char* v, int major, int minor) {
  int ma = 0, mi = 0;
  while (*v >= '0' && *v <= '9') ma = ma * 10 + (*v++ - '0');
  if (*v == '.') v++;
  while (*v >= '0' && *v <= '9') mi = mi * 10 + (*v++ - '0');
  return ma > major || (ma == major && mi >= minor);
}

MLD_EXPORT unsigned int la_version(unsigned int version) {
  if (version == 0 || !mld_trace_init()) return 0; /* not traced: stay out */
  const char* calls = getenv("MLDOCTOR_LIBC_CALLS");
  wrap_libc =
      glibc_at_least(gnu_get_libc_version(), 2, 35) && !(calls && !strcmp(calls, "preload"));
  ssize_t n = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
  exe_path[n > 0 ? n : 0] = 0;
  struct mld_event e;
  mld_event_begin(&e, "start");
  mld_event_int(&e, "ppid", getppid());
  mld_event_str(&e, "exe", exe_path);
  mld_event_int(&e, "audit_version", version);
  mld_event_str(&e, "glibc", gnu_get_libc_version());
  add_cmdline(&e);
  mld_event_emit(&e);
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

/* ---- loads ------------------------------------------------------------ */

static const char* search_flag_name(unsigned int flag) {
  switch (flag) {
    case LA_SER_ORIG: return "orig";
    case LA_SER_LIBPATH: return "LD_LIBRARY_PATH";
    case LA_SER_RUNPATH: return "RUNPATH";
    case LA_SER_CONFIG: return "ld.so.cache";
    case LA_SER_DEFAULT: return "default";
    case LA_SER_SECURE: return "secure";
    default: return "other";
  }
}

/* ---- the loader's events, one write per bracket -------------------------
 *
 * After start-up, the events between an activity "add" and the next
 * "consistent" (the objects one dlopen maps, their searches and, for a
 * rollback, the closes between "delete" and "consistent") are held and
 * written in one write when the bracket ends: a torch import is ~30 such
 * writes instead of ~900. ld.so calls these callbacks with its load lock
 * held, so the buffer needs no lock. What a crash inside ld.so in the middle
 * of a load would lose is that load's events; errors of a load end the
 * bracket normally (rollback, then "consistent"), and constructors run after
 * it. Start-up events (before preinit) are written one by one: a missing
 * library there ends the process inside the bracket. A fork child drops
 * what its parent held and keeps its own. */
static char held[65536];
static size_t held_len;
static int holding;
static pid_t holding_pid;
static int started;             /* preinit seen */
static char*** program_environ; /* the program's libc's __environ */

static void flush_held(void) {
  if (held_len && getpid() == holding_pid) mld_write_lines(held, held_len);
  held_len = 0;
}

static void loader_event(struct mld_event* e) {
  if (!holding) {
    mld_event_emit(e);
    return;
  }
  if (holding_pid != getpid()) {
    /* Forked while another thread was inside a load: the parent's held
     * events are the parent's; this process's own start here. */
    held_len = 0;
    holding_pid = getpid();
  }
  mld_event_finish(e);
  if (held_len + e->len > sizeof held) flush_held();
  if (e->len > sizeof held) {
    mld_write_lines(e->text, e->len);
    return;
  }
  memcpy(held + held_len, e->text, e->len);
  held_len += e->len;
}

/* Called with the requested name (LA_SER_ORIG), then once per candidate
 * path. Only names of objects not yet loaded get here, so the ORIG event
 * of each new object names the object that asked for it. */
MLD_EXPORT char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag) {
  struct mld_event e;
  mld_event_begin(&e, "search");
  mld_event_str(&e, "name", name);
  mld_event_str(&e, "how", search_flag_name(flag));
  if (flag == LA_SER_ORIG) mld_event_str(&e, "by", name_of(cookie));
  loader_event(&e);
  return (char*)name;
}

/* ---- what an object defines, from its own dynamic section ------------- */

/* The dynamic section's addresses: ld.so has already added l_addr to them
 * where the section is writable (x86_64, aarch64), not where it is read-only
 * (the vDSO, some ports); a relocated address is never below l_addr. */
static const void* dyn_ptr(const struct link_map* map, ElfW(Addr) p) {
  return (const void*)(p < map->l_addr ? p + map->l_addr : p);
}

struct dynsyms {
  const uint32_t* gnu_hash;
  const uint32_t* sysv_hash;
  const ElfW(Sym) * symtab;
  const char* strtab;
};

static int read_dynsyms(const struct link_map* map, struct dynsyms* d) {
  memset(d, 0, sizeof *d);
  if (!map->l_ld) return 0;
  for (const ElfW(Dyn)* dyn = map->l_ld; dyn->d_tag != DT_NULL; dyn++) {
    switch (dyn->d_tag) {
      case DT_GNU_HASH: d->gnu_hash = dyn_ptr(map, dyn->d_un.d_ptr); break;
      case DT_HASH: d->sysv_hash = dyn_ptr(map, dyn->d_un.d_ptr); break;
      case DT_SYMTAB: d->symtab = dyn_ptr(map, dyn->d_un.d_ptr); break;
      case DT_STRTAB: d->strtab = dyn_ptr(map, dyn->d_un.d_ptr); break;
    }
  }
  return d->symtab && d->strtab && (d->gnu_hash || d->sysv_hash);
}

static int defined(const ElfW(Sym) * s) { return s->st_shndx != SHN_UNDEF && s->st_value != 0; }

/* The lookup ld.so does (DT_GNU_HASH, else DT_HASH), without versions. */
static int defines(const struct dynsyms* d, const char* name) {
  if (d->gnu_hash) {
    uint32_t h = 5381;
    for (const unsigned char* c = (const unsigned char*)name; *c; c++) h = h * 33 + *c;
    const uint32_t nbuckets = d->gnu_hash[0], symoffset = d->gnu_hash[1],
                   bloom_size = d->gnu_hash[2], shift = d->gnu_hash[3];
    if (nbuckets == 0 || bloom_size == 0) return 0;
    const ElfW(Addr)* bloom = (const ElfW(Addr)*)(d->gnu_hash + 4);
    const unsigned bits = sizeof(ElfW(Addr)) * 8;
    const ElfW(Addr) word = bloom[(h / bits) % bloom_size];
    const ElfW(Addr) mask =
        ((ElfW(Addr))1 << (h % bits)) | ((ElfW(Addr))1 << ((h >> shift) % bits));
    if ((word & mask) != mask) return 0;
    const uint32_t* buckets = (const uint32_t*)(bloom + bloom_size);
    const uint32_t* chain = buckets + nbuckets;
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset) return 0;
    for (;; i++) {
      const uint32_t h2 = chain[i - symoffset];
      if ((h | 1) == (h2 | 1) && !strcmp(name, d->strtab + d->symtab[i].st_name))
        return defined(&d->symtab[i]);
      if (h2 & 1) return 0;
    }
  }
  uint32_t h = 0;
  for (const unsigned char* c = (const unsigned char*)name; *c; c++) {
    h = (h << 4) + *c;
    const uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  const uint32_t nbucket = d->sysv_hash[0];
  if (nbucket == 0) return 0;
  const uint32_t* bucket = d->sysv_hash + 2;
  const uint32_t* chain = bucket + nbucket;
  for (uint32_t i = bucket[h % nbucket]; i != 0; i = chain[i])
    if (!strcmp(name, d->strtab + d->symtab[i].st_name)) return defined(&d->symtab[i]);
  return 0;
}

/* Which runtime an object is, by what it defines, so a renamed copy counts:
 * LLVM's and Intel's OpenMP define the __kmpc entry points (and GOMP_* for
 * compatibility), GNU's only GOMP_*. NULL for anything else. */
static const char* runtime_of(const struct dynsyms* d, int* has_setter) {
  *has_setter = defines(d, "omp_set_num_threads") || defines(d, "mkl_set_num_threads") ||
                defines(d, "MKL_Set_Num_Threads") || defines(d, "mkl_set_threading_layer") ||
                defines(d, "MKL_Set_Threading_Layer") || defines(d, "openblas_set_num_threads") ||
                defines(d, "goto_set_num_threads");
  if (!*has_setter) return NULL;
  if (defines(d, "__kmpc_fork_call")) return "kmp-openmp";
  if (defines(d, "GOMP_parallel")) return "gnu-openmp";
  if (defines(d, "mkl_set_num_threads") || defines(d, "MKL_Set_Num_Threads")) return "mkl";
  if (defines(d, "openblas_set_num_threads")) return "openblas";
  return "other";
}

/* A CUDA runtime, driver or NCCL library, by what it defines. */
static int device_library(const struct dynsyms* d) {
  for (int i = 0; i < DEVICE_FNS; i++)
    if (defines(d, mld_device_symbols[i])) return 1;
  return 0;
}

MLD_EXPORT unsigned int la_objopen(struct link_map* map, Lmid_t lmid, uintptr_t* cookie) {
  const char* name = map->l_name && map->l_name[0] ? map->l_name : NULL;
  int is_program = !name && object_count == 0;
  if (is_program) name = exe_path;
  /* Only bindings *into* a runtime that defines a setter pass la_symbind64:
   * ld.so skips the call for every other binding. */
  struct dynsyms d;
  int has_setter = 0;
  const char* runtime = read_dynsyms(map, &d) ? runtime_of(&d, &has_setter) : NULL;
  const int device = runtime == NULL && read_dynsyms(map, &d) && device_library(&d);
  const int is_base_libc = wrap_libc && !base_libc && lmid == LM_ID_BASE && runtime == NULL &&
                           read_dynsyms(map, &d) && defines(&d, "__libc_start_main") &&
                           defines(&d, "dlerror");
  unsigned i = __atomic_fetch_add(&object_count, 1, __ATOMIC_RELAXED);
  if (i < MAX_OBJECTS) {
    objects[i].map = map;
    objects[i].lmid = lmid;
    objects[i].name = keep_name(name ? name : "");
    objects[i].runtime = runtime;
    objects[i].device = device;
    objects[i].closed = 0;
    *cookie = (uintptr_t)&objects[i];
    if (is_base_libc) base_libc = &objects[i];
  }
  struct mld_event e;
  mld_event_begin(&e, "open");
  mld_event_str(&e, "path", name ? name : "");
  mld_event_int(&e, "lmid", (long long)lmid);
  if (is_program) mld_event_int(&e, "program", 1);
  if (runtime) mld_event_str(&e, "runtime", runtime);
  loader_event(&e);
  const int bind_to = has_setter || ((is_base_libc || device) && i < MAX_OBJECTS);
  return LA_FLG_BINDFROM | (bind_to ? LA_FLG_BINDTO : 0);
}

/* Set by the exit handler: from then on _dl_fini closes every object,
 * which says nothing (a third of a torch job's events). */
static int exiting;

MLD_EXPORT unsigned int la_objclose(uintptr_t* cookie) {
  if (exiting) return 0;
  struct object* o = (struct object*)object_of(*cookie);
  if (o) o->closed = 1;
  struct mld_event e;
  mld_event_begin(&e, "close");
  mld_event_str(&e, "path", name_of(cookie));
  loader_event(&e);
  return 0;
}

MLD_EXPORT void la_activity(uintptr_t* cookie, unsigned int flag) {
  if (exiting) return;  // _dl_fini's own bracket around the final closes
  if (flag != LA_ACT_CONSISTENT && started && !holding) {
    holding = 1;
    holding_pid = getpid();
  }
  struct mld_event e;
  mld_event_begin(&e, "activity");
  mld_event_str(&e, "what",
                flag == LA_ACT_ADD      ? "add"
                : flag == LA_ACT_DELETE ? "delete"
                                        : "consistent");
  loader_event(&e);
  if (flag == LA_ACT_CONSISTENT && holding) {
    flush_held();
    holding = 0;
  }
}

/* ---- thread-count calls ------------------------------------------------ */

enum setter {
  SET_OMP_THREADS,  /* void omp_set_num_threads(int) */
  SET_MKL_THREADS,  /* void mkl_set_num_threads(int), MKL_Set_Num_Threads */
  SET_MKL_LAYER,    /* int mkl_set_threading_layer(int), MKL_Set_Threading_Layer */
  SET_BLAS_THREADS, /* void openblas_set_num_threads(int), goto_set_num_threads */
  SETTER_KINDS
};

static const char* const setter_getter[SETTER_KINDS] = {
    "omp_get_max_threads", "mkl_get_max_threads", NULL, "openblas_get_num_threads"};

#define SLOTS 48

struct slot {
  int state; /* 0 free, 1 being filled, 2 ready */
  enum setter kind;
  const char* symbol;
  const struct object* caller;
  const struct object* runtime;
  void* target;
  int (*getter)(void);
  int getter_resolved;
};

static struct slot slots[SETTER_KINDS][SLOTS];

/* A function of a loaded object, outside ld.so's locks. A link map loaded as
 * a dependency has an empty search list, so it is no dlsym handle by
 * itself: dlmopen with RTLD_NOLOAD gives the handle of the loaded object
 * (nothing is loaded) and dlclose gives the reference back at once. */
static void* function_of(const struct object* o, const char* symbol) {
  void* handle = dlmopen(o->lmid, o->name, RTLD_LAZY | RTLD_NOLOAD);
  void* f = handle ? dlsym(handle, symbol) : NULL;
  if (handle) dlclose(handle);
  return f;
}

void* mld_object_function(const void* object, const char* symbol) {
  return function_of((const struct object*)object, symbol);
}

/* The runtime's own getter, looked up in the runtime the call lands in, on
 * first use. */
static int call_getter(struct slot* s) {
  if (!setter_getter[s->kind] || !s->runtime) return -1;
  if (!__atomic_load_n(&s->getter_resolved, __ATOMIC_ACQUIRE)) {
    s->getter = (int (*)(void))function_of(s->runtime, setter_getter[s->kind]);
    __atomic_store_n(&s->getter_resolved, 1, __ATOMIC_RELEASE);
  }
  return s->getter ? s->getter() : -1;
}

static void emit_call(const struct slot* s, int value, const char* before_key, int before,
                      const char* after_key, int after) {
  struct mld_event e;
  mld_event_begin(&e, "threads");
  mld_event_str(&e, "fn", s->symbol);
  mld_event_int(&e, "value", value);
  if (before_key) mld_event_int(&e, before_key, before);
  if (after_key) mld_event_int(&e, after_key, after);
  mld_event_str(&e, "caller", s->caller ? s->caller->name : NULL);
  mld_event_str(&e, "runtime", s->runtime ? s->runtime->name : NULL);
  mld_event_emit(&e);
}

/* void f(int): omp_set_num_threads, mkl_set_num_threads, openblas_set_num_threads */
static void set_count(struct slot* s, int n) {
  int before = call_getter(s);
  ((void (*)(int))s->target)(n);
  int after = call_getter(s);
  emit_call(s, n, "before", before, "after", after);
}

/* int mkl_set_threading_layer(int): no getter is called (any other MKL call
 * before it would fix the layer); the result is the layer MKL took. */
static int set_layer(struct slot* s, int layer) {
  int result = ((int (*)(int))s->target)(layer);
  emit_call(s, layer, NULL, 0, "result", result);
  return result;
}

#define REPEAT8(M, b) M(b##0) M(b##1) M(b##2) M(b##3) M(b##4) M(b##5) M(b##6) M(b##7)
#define REPEAT48(M) \
  REPEAT8(M, ) REPEAT8(M, 1) REPEAT8(M, 2) REPEAT8(M, 3) REPEAT8(M, 4) REPEAT8(M, 5)
#define LIST8(M, b) M(b##0), M(b##1), M(b##2), M(b##3), M(b##4), M(b##5), M(b##6), M(b##7)
#define LIST48(M) LIST8(M, ), LIST8(M, 1), LIST8(M, 2), LIST8(M, 3), LIST8(M, 4), LIST8(M, 5)

/* Slot numbers 0..7 are written "0".."7" and 10..57 as "10".."57": the
 * index of slot N in its table is N with the tens digit as the group. */
#define SLOT_INDEX(i) ((i) / 10 * 8 + (i) % 10)

#define DEFINE_COUNT(kind, i) \
  static void kind##_w##i(int n) { set_count(&slots[kind][SLOT_INDEX(i)], n); }
#define DEFINE_OMP(i) DEFINE_COUNT(SET_OMP_THREADS, i)
#define DEFINE_MKL(i) DEFINE_COUNT(SET_MKL_THREADS, i)
#define DEFINE_BLAS(i) DEFINE_COUNT(SET_BLAS_THREADS, i)
#define DEFINE_LAYER(i)                                        \
  static int SET_MKL_LAYER_w##i(int n) {                       \
    return set_layer(&slots[SET_MKL_LAYER][SLOT_INDEX(i)], n); \
  }
REPEAT48(DEFINE_OMP)
REPEAT48(DEFINE_MKL)
REPEAT48(DEFINE_BLAS)
REPEAT48(DEFINE_LAYER)

#define NAME_OMP(i) (void*)SET_OMP_THREADS_w##i
#define NAME_MKL(i) (void*)SET_MKL_THREADS_w##i
#define NAME_BLAS(i) (void*)SET_BLAS_THREADS_w##i
#define NAME_LAYER(i) (void*)SET_MKL_LAYER_w##i
static void* const wrappers[SETTER_KINDS][SLOTS] = {
    [SET_OMP_THREADS] = {LIST48(NAME_OMP)},
    [SET_MKL_THREADS] = {LIST48(NAME_MKL)},
    [SET_MKL_LAYER] = {LIST48(NAME_LAYER)},
    [SET_BLAS_THREADS] = {LIST48(NAME_BLAS)},
};

static int setter_kind(const char* n) {
  switch (n[0]) {
    case 'o':
      if (!strcmp(n, "omp_set_num_threads")) return SET_OMP_THREADS;
      if (!strcmp(n, "openblas_set_num_threads")) return SET_BLAS_THREADS;
      return -1;
    case 'm':
      if (!strcmp(n, "mkl_set_num_threads")) return SET_MKL_THREADS;
      if (!strcmp(n, "mkl_set_threading_layer")) return SET_MKL_LAYER;
      return -1;
    case 'M':
      if (!strcmp(n, "MKL_Set_Num_Threads")) return SET_MKL_THREADS;
      if (!strcmp(n, "MKL_Set_Threading_Layer")) return SET_MKL_LAYER;
      return -1;
    case 'g':
      if (!strcmp(n, "goto_set_num_threads")) return SET_BLAS_THREADS;
      return -1;
    default: return -1;
  }
}

static struct slot* slot_for(enum setter kind, const char* symbol, const struct object* caller,
                             const struct object* runtime, void* target) {
  for (int i = 0; i < SLOTS; i++) {
    struct slot* s = &slots[kind][i];
    int state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    if (state == 2 && s->caller == caller && s->target == target && !strcmp(s->symbol, symbol))
      return s;
    if (state != 0) continue;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&s->state, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      continue;
    s->kind = kind;
    s->symbol = symbol;
    s->caller = caller;
    s->runtime = runtime;
    s->target = target;
    __atomic_store_n(&s->state, 2, __ATOMIC_RELEASE);
    return s;
  }
  return NULL; /* all slots taken: the call goes unwrapped, straight to its target */
}

/* A binding into the program's libc: the calls of libc-calls.c get their
 * wrapper (one for all callers: the wrapper finds its caller from its
 * return address), everything else its own target. All bindings of one
 * name resolve to the same libc function, so one real pointer serves. */
static uintptr_t libc_binding(const char* name, uintptr_t target) {
  void* f = (void*)target;
  switch (name[0]) {
    case 'd':
      if (strcmp(name, "dlerror")) break;
      mld_real.dlerror = (char* (*)(void))f;
      return (uintptr_t)mld_wrap_dlerror;
    case 'f':
      if (strcmp(name, "fork")) break;
      mld_real.fork = (pid_t(*)(void))f;
      return (uintptr_t)mld_wrap_fork;
    case 's':
      if (strcmp(name, "setenv")) break;
      mld_real.setenv = (int (*)(const char*, const char*, int))f;
      return (uintptr_t)mld_wrap_setenv;
    case 'p':
      if (strcmp(name, "putenv")) break;
      mld_real.putenv = (int (*)(char*))f;
      return (uintptr_t)mld_wrap_putenv;
    case 'u':
      if (strcmp(name, "unsetenv")) break;
      mld_real.unsetenv = (int (*)(const char*))f;
      return (uintptr_t)mld_wrap_unsetenv;
    case 'c':
      if (strcmp(name, "chroot")) break;
      mld_real.chroot = (int (*)(const char*))f;
      return (uintptr_t)mld_wrap_chroot;
    case 'e':
      if (!strcmp(name, "execve")) {
        mld_real.execve = (int (*)(const char*, char* const[], char* const[]))f;
        return (uintptr_t)mld_wrap_execve;
      }
      if (!strcmp(name, "execv")) {
        mld_real.execv = (int (*)(const char*, char* const[]))f;
        return (uintptr_t)mld_wrap_execv;
      }
      if (!strcmp(name, "execvp")) {
        mld_real.execvp = (int (*)(const char*, char* const[]))f;
        return (uintptr_t)mld_wrap_execvp;
      }
      if (!strcmp(name, "execvpe")) {
        mld_real.execvpe = (int (*)(const char*, char* const[], char* const[]))f;
        return (uintptr_t)mld_wrap_execvpe;
      }
      break;
  }
  return target;
}

/* Every binding of a referencing object to a defining one passes here once
 * (lazily at first call, at load time for BIND_NOW objects from glibc 2.35,
 * and for dlsym). Anything but the setters returns its own target. */
MLD_EXPORT uintptr_t la_symbind64(Elf64_Sym* sym, unsigned int ndx, uintptr_t* refcook,
                                  uintptr_t* defcook, unsigned int* flags, const char* symname) {
  const struct object* runtime = object_of(*defcook);
  if (runtime && runtime == base_libc) return libc_binding(symname, sym->st_value);
  if (runtime && runtime->device) {
    /* The program's calls only: not a device library's calls into another
     * (NCCL's own into the CUDA runtime), nor ours (no caller record). */
    const struct object* caller = object_of(*refcook);
    const int fn = mld_device_fn_of(symname);
    if (fn < 0 || !caller || caller->device) return sym->st_value;
    return mld_device_bind(fn, symname, caller->name, runtime, runtime->name, sym->st_value);
  }
  int kind = setter_kind(symname);
  if (kind < 0) return sym->st_value;
  struct slot* s =
      slot_for((enum setter)kind, symname, object_of(*refcook), runtime, (void*)sym->st_value);
  if (!s) return sym->st_value;
  return (uintptr_t)wrappers[kind][s - slots[kind]];
}

/* ---- start of main, and exit ------------------------------------------ */

void mld_openmp_json(char* buf, size_t size) {
  size_t len = 0;
  buf[len++] = '[';
  unsigned n = object_count < MAX_OBJECTS ? object_count : MAX_OBJECTS;
  for (unsigned i = 0; i < n; i++) {
    const struct object* o = &objects[i];
    if (!o->runtime || o->closed ||
        (strcmp(o->runtime, "gnu-openmp") && strcmp(o->runtime, "kmp-openmp")))
      continue;
    struct mld_event one;
    one.len = 0;
    one.truncated = 0;
    mld_event_str(&one, "p", o->name);
    size_t k = one.len - 5; /* drop ,"p": */
    if (len + k + 3 >= size) break;
    if (len > 1) buf[len++] = ',';
    memcpy(buf + len, one.text + 5, k);
    len += k;
  }
  buf[len++] = ']';
  buf[len] = 0;
}

/* Runs among the program's exit handlers, before ld.so's _dl_fini runs any
 * destructor: each loaded OpenMP/BLAS runtime with the thread count it
 * would use next. Only getters that cannot change the process are called:
 * libgomp's (its constructor set up the ICVs) and OpenBLAS's (a variable);
 * LLVM/Intel libomp would run its serial initialisation (and its duplicate
 * runtime check, "OMP: Error #15") if it had not yet, and MKL would pick and
 * load its threading layer, so those are reported as loaded only. */
static void at_exit(void* unused) {
  (void)unused;
  unsigned n = object_count < MAX_OBJECTS ? object_count : MAX_OBJECTS;
  for (unsigned i = 0; i < n; i++) {
    const struct object* o = &objects[i];
    if (!o->runtime || o->closed || !strcmp(o->runtime, "other")) continue;
    long long threads = -1;
    const char* config = NULL;
    if (!strcmp(o->runtime, "gnu-openmp")) {
      int (*get)(void) = (int (*)(void))function_of(o, "omp_get_max_threads");
      if (get) threads = get();
    } else if (!strcmp(o->runtime, "openblas")) {
      int (*get)(void) = (int (*)(void))function_of(o, "openblas_get_num_threads");
      char* (*cfg)(void) = (char* (*)(void))function_of(o, "openblas_get_config");
      if (get) threads = get();
      if (cfg) config = cfg();
    }
    struct mld_event e;
    mld_event_begin(&e, "runtime");
    mld_event_str(&e, "path", o->name);
    mld_event_str(&e, "kind", o->runtime);
    if (threads >= 0) mld_event_int(&e, "threads", threads);
    if (config) mld_event_str(&e, "config", config);
    mld_event_emit(&e);
  }
  struct mld_event e;
  mld_event_begin(&e, "exit");
  mld_event_int(&e, "threads", mld_count_threads());
  mld_event_emit(&e);
  exiting = 1;
}

/* Called by __libc_start_main just before main, after it registered ld.so's
 * _dl_fini with the program's exit handlers: a handler registered now runs
 * before _dl_fini (they run in reverse order), so the runtimes it looks at
 * are not yet finalised. It is registered with the program's own libc (not
 * this module's copy, whose handlers exit() never runs), without a DSO
 * handle, so only exit() runs it. */
MLD_EXPORT void la_preinit(uintptr_t* cookie) {
  struct mld_event e;
  mld_event_begin(&e, "preinit");
  mld_event_emit(&e);
  started = 1;
  void* libc = dlmopen(LM_ID_BASE, LIBC_SO, RTLD_LAZY | RTLD_NOLOAD);
  int (*cxa_atexit)(void (*)(void*), void*, void*) =
      libc ? (int (*)(void (*)(void*), void*, void*))dlsym(libc, "__cxa_atexit") : NULL;
  if (libc) dlclose(libc);
  /* Looked up from the program (its global scope, the program first): a
   * program that names environ has its own copy (a copy relocation) and
   * libc's definition is then never written. */
  void* program = dlmopen(LM_ID_BASE, NULL, RTLD_LAZY | RTLD_NOLOAD);
  char*** environ_of_program = program ? (char***)dlsym(program, "__environ") : NULL;
  if (program) dlclose(program);
  if (environ_of_program) __atomic_store_n(&program_environ, environ_of_program, __ATOMIC_RELEASE);
  if (cxa_atexit) cxa_atexit(at_exit, NULL, NULL);
}

/* This module's own libc (another namespace) has its own environ: the
 * program's is found at la_preinit. Before that (an
 * exec from a constructor) it is unknown. */
char** mld_program_environ(void) {
  char*** p = __atomic_load_n(&program_environ, __ATOMIC_ACQUIRE);
  return p ? *p : NULL;
}
