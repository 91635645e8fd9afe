/* preload.c — the LD_PRELOAD interposer of `mldoctor run`.
 *
 * It sees what the audit module cannot: the text of a failed dlopen (ld.so
 * never hands it to auditors; the program gets it from dlerror, which keeps
 * no caller state, so wrapping it is exact), fork (a fork after an OpenMP
 * runtime has started threads leaves the child with a dead pool) and changes
 * of thread and loader variables through setenv/putenv/unsetenv. The state
 * of the runtimes at exit comes from the audit module, which can register
 * its exit handler after ld.so's own (this library's constructor runs
 * before __libc_start_main registers _dl_fini, so a handler of ours would
 * run after every destructor).
 *
 * dlopen itself is not wrapped: glibc searches DT_RPATH/DT_RUNPATH and
 * expands $ORIGIN of the object that *called* dlopen (its return address),
 * and a wrapper would become that caller. The audit module sees each load
 * with its real requester instead.
 *
 * Every wrapper calls the next definition (RTLD_NEXT) with the same
 * arguments and returns its result untouched; errno is preserved across the
 * recording. No thread-local storage, no malloc (trace-writer.h).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace-writer.h"

#define MLD_EXPORT __attribute__((visibility("default")))

static char* (*real_dlerror)(void);
static pid_t (*real_fork)(void);
static int (*real_setenv)(const char*, const char*, int);
static int (*real_putenv)(char*);
static int (*real_unsetenv)(const char*);

static void* next(const char* name) { return dlsym(RTLD_NEXT, name); }

static const char* caller_object(const void* address) {
  Dl_info info;
  if (address && dladdr(address, &info) && info.dli_fname) return info.dli_fname;
  return NULL;
}

/* ---- dlerror ----------------------------------------------------------- */

MLD_EXPORT char* dlerror(void) {
  if (!real_dlerror) real_dlerror = (char* (*)(void))next("dlerror");
  char* message = real_dlerror ? real_dlerror() : NULL;
  if (message && mld_trace_enabled()) {
    int saved = errno;
    struct mld_event e;
    mld_event_begin(&e, "dlerror");
    mld_event_str(&e, "message", message);
    mld_event_str(&e, "caller", caller_object(__builtin_return_address(0)));
    mld_event_emit(&e);
    errno = saved;
  }
  return message;
}

/* ---- fork ---------------------------------------------------------------- */

static int count_threads(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  struct dirent* ent;
  while ((ent = readdir(d))) n += ent->d_name[0] != '.';
  closedir(d);
  return n;
}

/* An OpenMP runtime by its file name (the audit module knows them by what
 * they define; this is only the fork event's hint). */
static int openmp_name(const char* path) {
  const char* base = mld_basename(path);
  return mld_starts_with(base, "libgomp") || mld_starts_with(base, "libiomp5") || mld_starts_with(base, "libomp.") ||
         mld_starts_with(base, "libomp-");
}

struct openmp_list {
  char json[2048];
  size_t len;
};

static int add_openmp(struct dl_phdr_info* info, size_t size, void* data) {
  struct openmp_list* list = data;
  if (!openmp_name(info->dlpi_name)) return 0;
  struct mld_event one;
  one.len = 0;
  one.truncated = 0;
  mld_event_str(&one, "p", info->dlpi_name);
  size_t n = one.len - 5; /* drop ,"p": */
  if (list->len + n + 3 >= sizeof list->json) return 1;
  if (list->len > 1) list->json[list->len++] = ',';
  memcpy(list->json + list->len, one.text + 5, n);
  list->len += n;
  return 0;
}

MLD_EXPORT pid_t fork(void) {
  if (!real_fork) real_fork = (pid_t(*)(void))next("fork");
  int threads = mld_trace_enabled() ? count_threads() : 0;
  pid_t child = real_fork();
  if (child == 0 || !mld_trace_enabled()) return child;
  int saved = errno;
  struct openmp_list list;
  list.len = 0;
  list.json[list.len++] = '[';
  dl_iterate_phdr(add_openmp, &list);
  list.json[list.len++] = ']';
  list.json[list.len] = 0;
  struct mld_event e;
  mld_event_begin(&e, "fork");
  mld_event_int(&e, "child", child);
  mld_event_int(&e, "threads", threads);
  mld_event_raw(&e, "openmp", list.json);
  mld_event_str(&e, "caller", caller_object(__builtin_return_address(0)));
  mld_event_emit(&e);
  errno = saved;
  return child;
}

/* ---- environment ----------------------------------------------------------- */

static int watched_variable(const char* name) {
  static const char* const prefixes[] = {"OMP_",  "KMP_",    "GOMP_",  "MKL_",  "OPENBLAS_", "GOTO_",
                                         "BLIS_", "VECLIB_", "NUMBA_", "NUMEXPR_", "TBB_",   "LD_",
                                         "GLIBC_TUNABLES", "CUDA_VISIBLE_DEVICES", "NCCL_", "TORCH_"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (mld_starts_with(name, prefixes[i])) return 1;
  return 0;
}

static void emit_env(const char* op, const char* name, size_t name_len, const char* value, int result,
                     const void* caller) {
  struct mld_event e;
  mld_event_begin(&e, "env");
  mld_event_str(&e, "op", op);
  mld_event_strn(&e, "name", name, name_len);
  mld_event_str(&e, "value", value);
  mld_event_int(&e, "result", result);
  mld_event_str(&e, "caller", caller_object(caller));
  mld_event_emit(&e);
}

MLD_EXPORT int setenv(const char* name, const char* value, int overwrite) {
  if (!real_setenv) real_setenv = (int (*)(const char*, const char*, int))next("setenv");
  int result = real_setenv(name, value, overwrite);
  if (watched_variable(name) && mld_trace_enabled()) {
    int saved = errno;
    emit_env(overwrite ? "setenv" : "setenv-if-unset", name, strlen(name), value, result,
             __builtin_return_address(0));
    errno = saved;
  }
  return result;
}

MLD_EXPORT int putenv(char* string) {
  if (!real_putenv) real_putenv = (int (*)(char*))next("putenv");
  int result = real_putenv(string);
  if (watched_variable(string) && mld_trace_enabled()) {
    int saved = errno;
    const char* eq = strchr(string, '=');
    if (eq)
      emit_env("putenv", string, (size_t)(eq - string), eq + 1, result, __builtin_return_address(0));
    else
      emit_env("unsetenv", string, strlen(string), NULL, result, __builtin_return_address(0));
    errno = saved;
  }
  return result;
}

MLD_EXPORT int unsetenv(const char* name) {
  if (!real_unsetenv) real_unsetenv = (int (*)(const char*))next("unsetenv");
  int result = real_unsetenv(name);
  if (watched_variable(name) && mld_trace_enabled()) {
    int saved = errno;
    emit_env("unsetenv", name, strlen(name), NULL, result, __builtin_return_address(0));
    errno = saved;
  }
  return result;
}

/* The next definitions are looked up here, before the program runs: a
 * dlsym between a failed dlopen and the program's dlerror would clear the
 * message the program is about to read. */
__attribute__((constructor)) static void preload_init(void) {
  real_dlerror = (char* (*)(void))next("dlerror");
  real_fork = (pid_t(*)(void))next("fork");
  real_setenv = (int (*)(const char*, const char*, int))next("setenv");
  real_putenv = (int (*)(char*))next("putenv");
  real_unsetenv = (int (*)(const char*))next("unsetenv");
}
