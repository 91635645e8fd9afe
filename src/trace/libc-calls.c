/* libc-calls.c — the wrappers of dlerror, fork, setenv, putenv, unsetenv,
 * the exec calls and chroot (see libc-calls.h for who installs them, and
 * how).
 *
 * dlerror keeps no caller state, so wrapping it is exact, and it is how the
 * text of a failed dlopen reaches us (ld.so never gives it to auditors).
 * fork is recorded with the parent's threads and OpenMP runtimes (a fork
 * after a runtime started its pool leaves the child with a dead one).
 * setenv/putenv/unsetenv are recorded for the variables that steer thread
 * pools and the loader. An exec is recorded before the call (a good one
 * never returns) with what decides whether the new program is traced: does
 * the environment it passes on still name the shims and the trace
 * directory, can they be reached from the process's root now, and is that
 * root still the one the shim started in (a chroot since). A failed exec is
 * recorded too. chroot is recorded before the call, with the directory it
 * was called in: where the new root lacks the trace directory nothing after
 * it can be written, and that event is the last the process leaves. errno
 * is kept across the recording.
 */
#define _GNU_SOURCE
#include "libc-calls.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "trace-writer.h"

struct mld_libc_calls mld_real;

int mld_count_threads(void) {
  int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  int n = 0;
  for (;;) {
    long got = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (got <= 0) break;
    for (long off = 0; off < got;) {
      /* struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
      unsigned short reclen;
      memcpy(&reclen, buf + off + 16, sizeof reclen);
      if (reclen == 0) break;
      n += buf[off + 19] != '.';
      off += reclen;
    }
  }
  close(fd);
  return n;
}

static const char* caller_object(const void* address) {
  Dl_info info;
  if (address && dladdr(address, &info) && info.dli_fname) return info.dli_fname;
  return NULL;
}

MLD_LIBC_VISIBLE char* MLD_LIBC_CALL(dlerror)(void) {
  char* message = mld_real.dlerror ? mld_real.dlerror() : NULL;
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

MLD_LIBC_VISIBLE pid_t MLD_LIBC_CALL(fork)(void) {
  int threads = mld_trace_enabled() ? mld_count_threads() : 0;
  pid_t child = mld_real.fork();
  if (child <= 0 || !mld_trace_enabled()) return child;
  int saved = errno;
  char openmp[2048];
  mld_openmp_json(openmp, sizeof openmp);
  struct mld_event e;
  mld_event_begin(&e, "fork");
  mld_event_int(&e, "child", child);
  mld_event_int(&e, "threads", threads);
  mld_event_raw(&e, "openmp", openmp);
  mld_event_str(&e, "caller", caller_object(__builtin_return_address(0)));
  mld_event_emit(&e);
  errno = saved;
  return child;
}

static int watched_variable(const char* name) {
  static const char* const prefixes[] = {"OMP_",           "KMP_",
                                         "GOMP_",          "MKL_",
                                         "OPENBLAS_",      "GOTO_",
                                         "BLIS_",          "VECLIB_",
                                         "NUMBA_",         "NUMEXPR_",
                                         "TBB_",           "LD_",
                                         "GLIBC_TUNABLES", "CUDA_VISIBLE_DEVICES",
                                         "NCCL_",          "TORCH_"};
  for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
    if (mld_starts_with(name, prefixes[i])) return 1;
  return 0;
}

static void emit_env(const char* op, const char* name, size_t name_len, const char* value,
                     int result, const void* caller) {
  int saved = errno;
  struct mld_event e;
  mld_event_begin(&e, "env");
  mld_event_str(&e, "op", op);
  mld_event_strn(&e, "name", name, name_len);
  mld_event_str(&e, "value", value);
  mld_event_int(&e, "result", result);
  mld_event_str(&e, "caller", caller_object(caller));
  mld_event_emit(&e);
  errno = saved;
}

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(setenv)(const char* name, const char* value, int overwrite) {
  int result = mld_real.setenv(name, value, overwrite);
  if (watched_variable(name) && mld_trace_enabled())
    emit_env(overwrite ? "setenv" : "setenv-if-unset", name, strlen(name), value, result,
             __builtin_return_address(0));
  return result;
}

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(putenv)(char* string) {
  int result = mld_real.putenv(string);
  if (watched_variable(string) && mld_trace_enabled()) {
    const char* eq = strchr(string, '=');
    if (eq)
      emit_env("putenv", string, (size_t)(eq - string), eq + 1, result,
               __builtin_return_address(0));
    else
      emit_env("unsetenv", string, strlen(string), NULL, result, __builtin_return_address(0));
  }
  return result;
}

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(unsetenv)(const char* name) {
  int result = mld_real.unsetenv(name);
  if (watched_variable(name) && mld_trace_enabled())
    emit_env("unsetenv", name, strlen(name), NULL, result, __builtin_return_address(0));
  return result;
}

/* ---- exec ------------------------------------------------------------- */

/* The value of `name` in an environment list, or NULL. */
static const char* env_value(char* const envp[], const char* name) {
  size_t n = strlen(name);
  for (size_t i = 0; envp && envp[i]; i++)
    if (!strncmp(envp[i], name, n) && envp[i][n] == '=') return envp[i] + n + 1;
  return NULL;
}

/* Every entry of an LD_AUDIT/LD_PRELOAD list (':' or ' ' separated) whose
 * file name starts with `shim`: 1 if one is named and all such can be read
 * from this process's root, 0 if one is named that cannot, -1 if none. */
static int shim_named(const char* list, const char* shim) {
  int named = -1;
  char path[4096];
  while (list && *list) {
    size_t n = strcspn(list, ": ");
    if (n > 0 && n < sizeof path) {
      memcpy(path, list, n);
      path[n] = 0;
      if (mld_starts_with(mld_basename(path), shim)) named = named != 0 && !access(path, R_OK);
    }
    list += n;
    while (*list == ':' || *list == ' ') list++;
  }
  return named;
}

/* May run in a vfork() child (CPython's subprocess), which shares the
 * parent's memory while the other threads run on: system calls only, no
 * lock (dladdr would take ld.so's load lock, which another thread may hold
 * while it waits for the thread that vforked), so no caller is named. */
static void emit_exec(const char* call, const char* path, char* const envp[]) {
  int saved = errno;
  struct mld_event e;
  mld_event_begin(&e, "exec");
  mld_event_str(&e, "call", call);
  mld_event_str(&e, "path", path);
  if (envp) {
    const char* dir = env_value(envp, "MLDOCTOR_TRACE_DIR");
    mld_event_int(&e, "audit", shim_named(env_value(envp, "LD_AUDIT"), "libmldoctor-audit"));
    mld_event_int(&e, "preload", shim_named(env_value(envp, "LD_PRELOAD"), "libmldoctor-preload"));
    mld_event_int(&e, "trace_dir", !dir ? -1 : !access(dir, W_OK | X_OK));
  }
  mld_event_int(&e, "root_changed", mld_root_changed());
  mld_event_emit(&e);
  errno = saved;
}

/* No errno in the event: in the audit module `errno` is this module's
 * libc's, not the program's. */
static void emit_exec_failed(void) {
  int saved = errno;
  struct mld_event e;
  mld_event_begin(&e, "exec_failed");
  mld_event_emit(&e);
  errno = saved;
}

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execve)(const char* path, char* const argv[],
                                           char* const envp[]) {
  if (!mld_real.execve) {
    errno = ENOSYS;
    return -1;
  }
  const int traced = mld_trace_enabled();
  if (traced) emit_exec("execve", path, envp);
  int result = mld_real.execve(path, argv, envp);
  if (traced) emit_exec_failed();
  return result;
}

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execv)(const char* path, char* const argv[]) {
  if (!mld_real.execv) {
    errno = ENOSYS;
    return -1;
  }
  const int traced = mld_trace_enabled();
  if (traced) emit_exec("execv", path, mld_program_environ());
  int result = mld_real.execv(path, argv);
  if (traced) emit_exec_failed();
  return result;
}

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execvp)(const char* file, char* const argv[]) {
  if (!mld_real.execvp) {
    errno = ENOSYS;
    return -1;
  }
  const int traced = mld_trace_enabled();
  if (traced) emit_exec("execvp", file, mld_program_environ());
  int result = mld_real.execvp(file, argv);
  if (traced) emit_exec_failed();
  return result;
}

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execvpe)(const char* file, char* const argv[],
                                            char* const envp[]) {
  if (!mld_real.execvpe) {
    errno = ENOSYS;
    return -1;
  }
  const int traced = mld_trace_enabled();
  if (traced) emit_exec("execvpe", file, envp);
  int result = mld_real.execvpe(file, argv, envp);
  if (traced) emit_exec_failed();
  return result;
}

/* ---- chroot ----------------------------------------------------------- */

MLD_LIBC_VISIBLE int MLD_LIBC_CALL(chroot)(const char* path) {
  if (!mld_real.chroot) {
    errno = ENOSYS;
    return -1;
  }
  const int traced = mld_trace_enabled();
  if (traced) {
    int saved = errno;
    char cwd[4096];
    struct mld_event e;
    mld_event_begin(&e, "chroot");
    mld_event_str(&e, "path", path);
    mld_event_str(&e, "cwd", getcwd(cwd, sizeof cwd));
    mld_event_str(&e, "caller", caller_object(__builtin_return_address(0)));
    mld_event_emit(&e);
    errno = saved;
  }
  int result = mld_real.chroot(path);
  if (traced && result != 0) {
    int saved = errno;
    struct mld_event e;
    mld_event_begin(&e, "chroot_failed");
    mld_event_emit(&e);
    errno = saved;
  }
  return result;
}
