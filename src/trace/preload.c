/* preload.c — the LD_PRELOAD interposer of `mldoctor run`, for glibc
 * before 2.35.
 *
 * From 2.35 ld.so calls la_symbind64 for BIND_NOW bindings too, and the
 * audit module wraps dlerror, fork, setenv, putenv, unsetenv, the exec calls and chroot where
 * objects bind them into libc, without adding an object to the process's
 * global scope. Before 2.35 a BIND_NOW object's bindings never reach the
 * audit module, so these calls are interposed the classic way: this library
 * exports them under libc's names (libc-calls.c, built with
 * MLD_LIBC_CALLS_EXPORTED) and calls the next definition.
 *
 * dlopen itself is never wrapped: glibc searches DT_RPATH/DT_RUNPATH and
 * expands $ORIGIN of the object that *called* dlopen (its return address),
 * and a wrapper would become that caller. The audit module sees each load
 * with its real requester instead.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include "libc-calls.h"
#include "trace-writer.h"

/* An OpenMP runtime by its file name (the audit module knows them by what
 * they define; this is only the fork event's hint). */
static int openmp_name(const char* path) {
  const char* base = mld_basename(path);
  return mld_starts_with(base, "libgomp") || mld_starts_with(base, "libiomp5") ||
         mld_starts_with(base, "libomp.") || mld_starts_with(base, "libomp-");
}

struct json_list {
  char* buf;
  size_t size, len;
};

static int add_openmp(struct dl_phdr_info* info, size_t size, void* data) {
  struct json_list* list = data;
  if (!openmp_name(info->dlpi_name)) return 0;
  struct mld_event one;
  one.len = 0;
  one.truncated = 0;
  mld_event_str(&one, "p", info->dlpi_name);
  size_t n = one.len - 5; /* drop ,"p": */
  if (list->len + n + 3 >= list->size) return 1;
  if (list->len > 1) list->buf[list->len++] = ',';
  memcpy(list->buf + list->len, one.text + 5, n);
  list->len += n;
  return 0;
}

void mld_openmp_json(char* buf, size_t size) {
  struct json_list list = {buf, size, 0};
  list.buf[list.len++] = '[';
  dl_iterate_phdr(add_openmp, &list);
  list.buf[list.len++] = ']';
  list.buf[list.len] = 0;
}

/* The next definitions are looked up here, before the program runs: a
 * dlsym between a failed dlopen and the program's dlerror would clear the
 * message the program is about to read. */
__attribute__((constructor)) static void preload_init(void) {
  mld_real.dlerror = (char* (*)(void))dlsym(RTLD_NEXT, "dlerror");
  mld_real.fork = (pid_t(*)(void))dlsym(RTLD_NEXT, "fork");
  mld_real.setenv = (int (*)(const char*, const char*, int))dlsym(RTLD_NEXT, "setenv");
  mld_real.putenv = (int (*)(char*))dlsym(RTLD_NEXT, "putenv");
  mld_real.unsetenv = (int (*)(const char*))dlsym(RTLD_NEXT, "unsetenv");
  mld_real.execve = (int (*)(const char*, char* const[], char* const[]))dlsym(RTLD_NEXT, "execve");
  mld_real.execv = (int (*)(const char*, char* const[]))dlsym(RTLD_NEXT, "execv");
  mld_real.execvp = (int (*)(const char*, char* const[]))dlsym(RTLD_NEXT, "execvp");
  mld_real.execvpe =
      (int (*)(const char*, char* const[], char* const[]))dlsym(RTLD_NEXT, "execvpe");
  mld_real.chroot = (int (*)(const char*))dlsym(RTLD_NEXT, "chroot");
}

/* The interposer shares the program's namespace and libc. */
char** mld_program_environ(void) { return environ; }
