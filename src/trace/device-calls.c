/* device-calls.c — wrappers of the calls that bind a traced process to a GPU
 * and create its NCCL communicators (device-calls.h says why).
 *
 * The mechanism is audit.c's for the thread-count setters: one table of
 * wrapper slots per function, each slot a separate function with a static
 * record of the caller and of the exact target ld.so resolved, handed out by
 * la_symbind64; nothing is exported into the process and no code is made at
 * run time. Each wrapper calls its target with the same arguments (the
 * 128-byte ncclUniqueId by value, as the caller passed it), returns what it
 * returned, leaves the out-parameters as it wrote them and errno as the call
 * left it, then writes one "device" event.
 *
 * The device an NCCL communicator is created on is the CUDA device current
 * on the calling thread when ncclCommInitRank* starts. The wrapper asks the
 * process's own CUDA runtime (cudaGetDevice of the libcudart the program
 * itself last called) only when that is safe: the program has already used
 * that runtime in this process and its last call there succeeded, so the
 * runtime is initialised (no driver initialisation is started by us) and
 * the query cannot fail and change the thread's cudaGetLastError state.
 * Otherwise the event says why the device is unknown, and the analysis
 * falls back on what the program asked for (its cudaSetDevice calls).
 *
 * NCCL's init calls may block until every rank joins (the hang of a job
 * whose ranks disagree), so they are recorded when they start and again
 * when they return. cudaGetDevice and cudaSetDevice are called very often
 * by frameworks (torch's device guards), so a call that repeats the last
 * one recorded on the same thread (same device, same result) is not
 * recorded again, and at most 256 of each are recorded per process.
 *
 * No malloc, no TLS (trace-writer.h).
 */
#define _GNU_SOURCE
#include "device-calls.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "trace-writer.h"

const char* const mld_device_symbols[DEVICE_FNS] = {
    [DEV_CUDA_SET_DEVICE] = "cudaSetDevice",
    [DEV_CUDA_GET_DEVICE] = "cudaGetDevice",
    [DEV_CU_CTX_SET_CURRENT] = "cuCtxSetCurrent",
    [DEV_CU_PRIMARY_RETAIN] = "cuDevicePrimaryCtxRetain",
    [DEV_NCCL_GET_UNIQUE_ID] = "ncclGetUniqueId",
    [DEV_NCCL_INIT_RANK] = "ncclCommInitRank",
    [DEV_NCCL_INIT_RANK_CONFIG] = "ncclCommInitRankConfig",
    [DEV_NCCL_INIT_ALL] = "ncclCommInitAll",
    [DEV_NCCL_SPLIT] = "ncclCommSplit",
};

int mld_device_fn_of(const char* symbol) {
  if (symbol[0] != 'c' && symbol[0] != 'n') return -1;
  for (int i = 0; i < DEVICE_FNS; i++)
    if (!strcmp(symbol, mld_device_symbols[i])) return i;
  return -1;
}

/* The ABI types, as the headers declare them: enums are ints, handles are
 * pointers, ncclUniqueId is a struct of 128 chars passed by value. */
typedef struct {
  char internal[128];
} nccl_unique_id;
typedef void* handle;

/* ---- the CUDA runtimes the program called ------------------------------ */

#define RUNTIMES 8

struct runtime_state {
  const void* lib;         /* the shim's record of the libcudart */
  void* get_device;        /* its cudaGetDevice, as bound for the program */
  int get_device_resolved; /* looked up in `lib` when the program bound none */
  int pid;                 /* the process that last called it (0: never) */
  int last_ret;            /* the result of that call */
};

static struct runtime_state runtimes[RUNTIMES];
static struct runtime_state* last_runtime; /* the one the program called last */

static struct runtime_state* runtime_for(const void* lib) {
  for (int i = 0; i < RUNTIMES; i++) {
    const void* have = __atomic_load_n(&runtimes[i].lib, __ATOMIC_ACQUIRE);
    if (have == lib) return &runtimes[i];
    if (have) continue;
    const void* expected = NULL;
    if (__atomic_compare_exchange_n(&runtimes[i].lib, &expected, lib, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE) ||
        expected == lib)
      return &runtimes[i];
  }
  return NULL;
}

static void note_runtime_call(struct runtime_state* r, int ret) {
  if (!r) return;
  __atomic_store_n(&r->last_ret, ret, __ATOMIC_RELAXED);
  __atomic_store_n(&r->pid, (int)getpid(), __ATOMIC_RELEASE);
  __atomic_store_n(&last_runtime, r, __ATOMIC_RELEASE);
}

/* The CUDA device current on this thread, from the runtime the program
 * itself uses, when asking is safe (see the top of this file); else -1
 * with *why saying why it is unknown. */
static int current_device(const char** why) {
  struct runtime_state* r = __atomic_load_n(&last_runtime, __ATOMIC_ACQUIRE);
  if (!r) {
    *why = "the program made no CUDA runtime call before";
    return -1;
  }
  if (__atomic_load_n(&r->pid, __ATOMIC_ACQUIRE) != (int)getpid()) {
    *why = "the CUDA runtime was last used by the parent before fork";
    return -1;
  }
  if (__atomic_load_n(&r->last_ret, __ATOMIC_RELAXED) != 0) {
    *why = "the program's last CUDA runtime call failed";
    return -1;
  }
  int (*get)(int*) = (int (*)(int*))__atomic_load_n(&r->get_device, __ATOMIC_ACQUIRE);
  if (!get && !__atomic_load_n(&r->get_device_resolved, __ATOMIC_ACQUIRE)) {
    get = (int (*)(int*))mld_object_function(r->lib, "cudaGetDevice");
    void* expected = NULL;
    __atomic_compare_exchange_n(&r->get_device, &expected, (void*)get, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    __atomic_store_n(&r->get_device_resolved, 1, __ATOMIC_RELEASE);
  }
  if (!get) {
    *why = "the CUDA runtime has no cudaGetDevice";
    return -1;
  }
  int device = -1;
  if (get(&device) != 0 || device < 0) {
    *why = "cudaGetDevice failed";
    return -1;
  }
  return device;
}

/* ---- slots --------------------------------------------------------------- */

#define DSLOTS 32

struct dslot {
  int state; /* 0 free, 1 being filled, 2 ready */
  const char* symbol;
  const char* caller;
  const void* lib;
  const char* lib_name;
  void* target;
  struct runtime_state* runtime; /* cudaSetDevice, cudaGetDevice: the libcudart */
};

static struct dslot dslots[DEVICE_FNS][DSLOTS];

/* The last recorded call of each CUDA runtime function, to leave out exact
 * repeats on the same thread, and how many were recorded in this process. */
struct repeat {
  int pid;
  long tid;
  int device, ret;
  unsigned recorded;
};
static struct repeat repeats[2];
#define MAX_REPEATED_EVENTS 256

static int worth_recording(int fn, long tid, int device, int ret) {
  struct repeat* r = &repeats[fn == DEV_CUDA_GET_DEVICE];
  const int pid = (int)getpid();
  if (__atomic_load_n(&r->pid, __ATOMIC_ACQUIRE) != pid) {
    __atomic_store_n(&r->recorded, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->tid, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&r->pid, pid, __ATOMIC_RELEASE);
  } else if (__atomic_load_n(&r->tid, __ATOMIC_RELAXED) == tid &&
             __atomic_load_n(&r->device, __ATOMIC_RELAXED) == device &&
             __atomic_load_n(&r->ret, __ATOMIC_RELAXED) == ret) {
    return 0;
  }
  if (__atomic_fetch_add(&r->recorded, 1, __ATOMIC_RELAXED) >= MAX_REPEATED_EVENTS) return 0;
  __atomic_store_n(&r->device, device, __ATOMIC_RELAXED);
  __atomic_store_n(&r->ret, ret, __ATOMIC_RELAXED);
  __atomic_store_n(&r->tid, tid, __ATOMIC_RELAXED);
  return 1;
}

/* ---- events -------------------------------------------------------------- */

static void begin(struct mld_event* e, const struct dslot* s, const char* state) {
  mld_event_begin(e, "device");
  mld_event_str(e, "fn", s->symbol);
  if (state) mld_event_str(e, "state", state);
  mld_event_str(e, "caller", s->caller);
  mld_event_str(e, "lib", s->lib_name);
}

/* The rank's environment as the process sees it now (getenv: no copy). */
static void add_env(struct mld_event* e) {
  static const char* const names[] = {"CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "RANK", "WORLD_SIZE"};
  for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
    mld_event_str(e, names[i], getenv(names[i]));
}

static void add_ptr(struct mld_event* e, const char* key, const void* p) {
  mld_event_int(e, key, (long long)(uintptr_t)p);
}

/* A 64-bit FNV-1a digest of a unique id, in hex: ranks whose init calls
 * carry the same digest join the same communicator. */
static void add_id(struct mld_event* e, const char* key, const nccl_unique_id* id) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned i = 0; i < sizeof id->internal; i++) {
    h ^= (unsigned char)id->internal[i];
    h *= 1099511628211ull;
  }
  static const char hex[] = "0123456789abcdef";
  char text[17];
  for (int i = 15; i >= 0; i--, h >>= 4) text[i] = hex[h & 15];
  text[16] = 0;
  mld_event_str(e, key, text);
}

/* ---- the wrapped calls ------------------------------------------------- */

static int cuda_set_device(struct dslot* s, int device) {
  int ret = ((int (*)(int))s->target)(device);
  const int saved = errno;
  note_runtime_call(s->runtime, ret);
  if (worth_recording(DEV_CUDA_SET_DEVICE, syscall(SYS_gettid), device, ret)) {
    struct mld_event e;
    begin(&e, s, NULL);
    mld_event_int(&e, "device", device);
    mld_event_int(&e, "ret", ret);
    add_env(&e);
    mld_event_emit(&e);
  }
  errno = saved;
  return ret;
}

static int cuda_get_device(struct dslot* s, int* device) {
  int ret = ((int (*)(int*))s->target)(device);
  const int saved = errno;
  note_runtime_call(s->runtime, ret);
  const int value = ret == 0 && device ? *device : -1;
  if (worth_recording(DEV_CUDA_GET_DEVICE, syscall(SYS_gettid), value, ret)) {
    struct mld_event e;
    begin(&e, s, NULL);
    if (value >= 0) mld_event_int(&e, "device", value);
    mld_event_int(&e, "ret", ret);
    add_env(&e);
    mld_event_emit(&e);
  }
  errno = saved;
  return ret;
}

static int cu_ctx_set_current(struct dslot* s, handle ctx) {
  int ret = ((int (*)(handle))s->target)(ctx);
  const int saved = errno;
  struct mld_event e;
  begin(&e, s, NULL);
  add_ptr(&e, "ctx", ctx);
  mld_event_int(&e, "ret", ret);
  add_env(&e);
  mld_event_emit(&e);
  errno = saved;
  return ret;
}

static int cu_primary_retain(struct dslot* s, handle* pctx, int device) {
  int ret = ((int (*)(handle*, int))s->target)(pctx, device);
  const int saved = errno;
  struct mld_event e;
  begin(&e, s, NULL);
  mld_event_int(&e, "device", device);
  if (ret == 0 && pctx) add_ptr(&e, "ctx", *pctx);
  mld_event_int(&e, "ret", ret);
  add_env(&e);
  mld_event_emit(&e);
  errno = saved;
  return ret;
}

static int nccl_get_unique_id(struct dslot* s, nccl_unique_id* id) {
  int ret = ((int (*)(nccl_unique_id*))s->target)(id);
  const int saved = errno;
  struct mld_event e;
  begin(&e, s, NULL);
  if (ret == 0 && id) add_id(&e, "id", id);
  mld_event_int(&e, "ret", ret);
  add_env(&e);
  mld_event_emit(&e);
  errno = saved;
  return ret;
}

/* The start of an NCCL init: the device it will use, the rank and the
 * communicator it joins. Called with errno as the caller left it, which it
 * gives back. */
static void init_started(const struct dslot* s, int nranks, int rank, const nccl_unique_id* id) {
  const int saved = errno;
  const char* why = NULL;
  const int device = current_device(&why);
  struct mld_event e;
  begin(&e, s, "called");
  if (nranks >= 0) mld_event_int(&e, "nranks", nranks);
  if (rank >= 0) mld_event_int(&e, "nccl_rank", rank);
  if (id) add_id(&e, "id", id);
  if (device >= 0)
    mld_event_int(&e, "cuda_device", device);
  else
    mld_event_str(&e, "cuda_device_unknown", why);
  add_env(&e);
  mld_event_emit(&e);
  errno = saved;
}

static void init_returned(const struct dslot* s, int ret, const handle* comm) {
  struct mld_event e;
  begin(&e, s, "returned");
  mld_event_int(&e, "ret", ret);
  if (ret == 0 && comm) add_ptr(&e, "comm", *comm);
  mld_event_emit(&e);
}

static int nccl_init_rank(struct dslot* s, handle* comm, int nranks, nccl_unique_id id, int rank) {
  init_started(s, nranks, rank, &id);
  int ret = ((int (*)(handle*, int, nccl_unique_id, int))s->target)(comm, nranks, id, rank);
  const int saved = errno;
  init_returned(s, ret, comm);
  errno = saved;
  return ret;
}

static int nccl_init_rank_config(struct dslot* s, handle* comm, int nranks, nccl_unique_id id,
                                 int rank, void* config) {
  init_started(s, nranks, rank, &id);
  int ret = ((int (*)(handle*, int, nccl_unique_id, int, void*))s->target)(comm, nranks, id, rank,
                                                                           config);
  const int saved = errno;
  init_returned(s, ret, comm);
  errno = saved;
  return ret;
}

/* One process, several devices: the devices are the list it gives (0..n-1
 * when none), so no current device is involved. */
static int nccl_init_all(struct dslot* s, handle* comms, int ndev, const int* devlist) {
  const int saved_in = errno;
  char list[64 * 12 + 1]; /* 64 entries of up to 11 characters and a comma */
  size_t len = 0;
  for (int i = 0; devlist && i < ndev && i < 64; i++) {
    char digits[12];
    int n = 0;
    unsigned v = devlist[i] < 0 ? 0u - (unsigned)devlist[i] : (unsigned)devlist[i];
    do digits[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < 11);
    if (devlist[i] < 0) digits[n++] = '-';
    if (len) list[len++] = ',';
    while (n) list[len++] = digits[--n];
  }
  list[len] = 0;
  struct mld_event e;
  begin(&e, s, "called");
  mld_event_int(&e, "nranks", ndev);
  if (devlist) mld_event_str(&e, "devices", list);
  add_env(&e);
  mld_event_emit(&e);
  errno = saved_in;
  int ret = ((int (*)(handle*, int, const int*))s->target)(comms, ndev, devlist);
  const int saved = errno;
  init_returned(s, ret, NULL);
  errno = saved;
  return ret;
}

/* The new communicator lives on its parent's device. */
static int nccl_split(struct dslot* s, handle comm, int color, int key, handle* newcomm,
                      void* config) {
  const int saved_in = errno;
  struct mld_event e;
  begin(&e, s, "called");
  add_ptr(&e, "parent", comm);
  mld_event_int(&e, "color", color);
  mld_event_int(&e, "key", key);
  add_env(&e);
  mld_event_emit(&e);
  errno = saved_in;
  int ret =
      ((int (*)(handle, int, int, handle*, void*))s->target)(comm, color, key, newcomm, config);
  const int saved = errno;
  init_returned(s, ret, newcomm);
  errno = saved;
  return ret;
}

/* ---- one function per slot ----------------------------------------------- */

#define REPEAT8(M, b) M(b##0) M(b##1) M(b##2) M(b##3) M(b##4) M(b##5) M(b##6) M(b##7)
#define REPEAT32(M) REPEAT8(M, ) REPEAT8(M, 1) REPEAT8(M, 2) REPEAT8(M, 3)
#define LIST8(M, b) M(b##0), M(b##1), M(b##2), M(b##3), M(b##4), M(b##5), M(b##6), M(b##7)
#define LIST32(M) LIST8(M, ), LIST8(M, 1), LIST8(M, 2), LIST8(M, 3)
/* Slot numbers 0..7 are written "0".."7" and 10..37 as "10".."37". */
#define SLOT_INDEX(i) ((i) / 10 * 8 + (i) % 10)
#define SLOT(fn, i) (&dslots[fn][SLOT_INDEX(i)])

#define W_SET(i) \
  static int set_w##i(int d) { return cuda_set_device(SLOT(DEV_CUDA_SET_DEVICE, i), d); }
#define W_GET(i) \
  static int get_w##i(int* d) { return cuda_get_device(SLOT(DEV_CUDA_GET_DEVICE, i), d); }
#define W_CTX(i) \
  static int ctx_w##i(handle c) { return cu_ctx_set_current(SLOT(DEV_CU_CTX_SET_CURRENT, i), c); }
#define W_RETAIN(i)                                                 \
  static int retain_w##i(handle* c, int d) {                        \
    return cu_primary_retain(SLOT(DEV_CU_PRIMARY_RETAIN, i), c, d); \
  }
#define W_UID(i)                                                   \
  static int uid_w##i(nccl_unique_id* u) {                         \
    return nccl_get_unique_id(SLOT(DEV_NCCL_GET_UNIQUE_ID, i), u); \
  }
#define W_INIT(i)                                                    \
  static int init_w##i(handle* c, int n, nccl_unique_id id, int r) { \
    return nccl_init_rank(SLOT(DEV_NCCL_INIT_RANK, i), c, n, id, r); \
  }
#define W_INITCFG(i)                                                                    \
  static int initcfg_w##i(handle* c, int n, nccl_unique_id id, int r, void* cfg) {      \
    return nccl_init_rank_config(SLOT(DEV_NCCL_INIT_RANK_CONFIG, i), c, n, id, r, cfg); \
  }
#define W_INITALL(i)                                           \
  static int initall_w##i(handle* c, int n, const int* l) {    \
    return nccl_init_all(SLOT(DEV_NCCL_INIT_ALL, i), c, n, l); \
  }
#define W_SPLIT(i)                                                             \
  static int split_w##i(handle c, int color, int key, handle* nc, void* cfg) { \
    return nccl_split(SLOT(DEV_NCCL_SPLIT, i), c, color, key, nc, cfg);        \
  }
REPEAT32(W_SET)
REPEAT32(W_GET)
REPEAT32(W_CTX)
REPEAT32(W_RETAIN)
REPEAT32(W_UID)
REPEAT32(W_INIT)
REPEAT32(W_INITCFG)
REPEAT32(W_INITALL)
REPEAT32(W_SPLIT)

#define N_SET(i) (void*)set_w##i
#define N_GET(i) (void*)get_w##i
#define N_CTX(i) (void*)ctx_w##i
#define N_RETAIN(i) (void*)retain_w##i
#define N_UID(i) (void*)uid_w##i
#define N_INIT(i) (void*)init_w##i
#define N_INITCFG(i) (void*)initcfg_w##i
#define N_INITALL(i) (void*)initall_w##i
#define N_SPLIT(i) (void*)split_w##i
static void* const dwrappers[DEVICE_FNS][DSLOTS] = {
    [DEV_CUDA_SET_DEVICE] = {LIST32(N_SET)},
    [DEV_CUDA_GET_DEVICE] = {LIST32(N_GET)},
    [DEV_CU_CTX_SET_CURRENT] = {LIST32(N_CTX)},
    [DEV_CU_PRIMARY_RETAIN] = {LIST32(N_RETAIN)},
    [DEV_NCCL_GET_UNIQUE_ID] = {LIST32(N_UID)},
    [DEV_NCCL_INIT_RANK] = {LIST32(N_INIT)},
    [DEV_NCCL_INIT_RANK_CONFIG] = {LIST32(N_INITCFG)},
    [DEV_NCCL_INIT_ALL] = {LIST32(N_INITALL)},
    [DEV_NCCL_SPLIT] = {LIST32(N_SPLIT)},
};

uintptr_t mld_device_bind(int fn, const char* symbol, const char* caller, const void* lib,
                          const char* lib_name, uintptr_t target) {
  if (fn < 0 || fn >= DEVICE_FNS) return target;
  const int cuda_runtime = fn == DEV_CUDA_SET_DEVICE || fn == DEV_CUDA_GET_DEVICE;
  for (int i = 0; i < DSLOTS; i++) {
    struct dslot* s = &dslots[fn][i];
    int state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    if (state == 2 && s->caller == caller && s->target == (void*)target)
      return (uintptr_t)dwrappers[fn][i];
    if (state != 0) continue;
    int expected = 0;
    if (!__atomic_compare_exchange_n(&s->state, &expected, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      continue;
    s->symbol = symbol;
    s->caller = caller;
    s->lib = lib;
    s->lib_name = lib_name;
    s->target = (void*)target;
    s->runtime = cuda_runtime ? runtime_for(lib) : NULL;
    if (fn == DEV_CUDA_GET_DEVICE && s->runtime) {
      void* none = NULL;
      __atomic_compare_exchange_n(&s->runtime->get_device, &none, (void*)target, 0,
                                  __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    __atomic_store_n(&s->state, 2, __ATOMIC_RELEASE);
    return (uintptr_t)dwrappers[fn][i];
  }
  return target; /* all slots taken: the call goes unwrapped, straight to its target */
}
