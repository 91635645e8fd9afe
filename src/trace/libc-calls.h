/* libc-calls.h — the wrapped libc calls of `mldoctor run`: dlerror, fork,
 * setenv, putenv, unsetenv, execve, execv, execvp, execvpe and chroot.
 *
 * One implementation serves both shims. The audit module (glibc 2.35+,
 * where la_symbind64 also sees BIND_NOW bindings) hands ld.so these
 * wrappers for the bindings into the program's libc, under hidden names,
 * so nothing is added to the process's global scope. The LD_PRELOAD
 * interposer (older glibc) is built with MLD_LIBC_CALLS_EXPORTED and
 * exports them under libc's own names. Either way each wrapper calls the
 * real function with the same arguments, returns its result untouched and
 * records the call with the object it came from.
 */
#ifndef MLD_LIBC_CALLS_H
#define MLD_LIBC_CALLS_H

#include <stddef.h>
#include <sys/types.h>

struct mld_libc_calls {
  char* (*dlerror)(void);
  pid_t (*fork)(void);
  int (*setenv)(const char*, const char*, int);
  int (*putenv)(char*);
  int (*unsetenv)(const char*);
  int (*execve)(const char*, char* const[], char* const[]);
  int (*execv)(const char*, char* const[]);
  int (*execvp)(const char*, char* const[]);
  int (*execvpe)(const char*, char* const[], char* const[]);
  int (*chroot)(const char*);
};

/* Where each wrapper finds the real function; filled by the shim. */
extern struct mld_libc_calls mld_real;

/* Provided by each shim: the OpenMP runtimes loaded in this process as a
 * JSON array of paths, for the fork event. */
void mld_openmp_json(char* buf, size_t size);

/* Provided by each shim: the program's environment (the one execv and
 * execvp pass on), or NULL while unknown. */
char** mld_program_environ(void);

/* Threads of this process (/proc/self/task, read without malloc). */
int mld_count_threads(void);

#ifdef MLD_LIBC_CALLS_EXPORTED
#define MLD_LIBC_CALL(name) name
#define MLD_LIBC_VISIBLE __attribute__((visibility("default")))
#else
#define MLD_LIBC_CALL(name) mld_wrap_##name
#define MLD_LIBC_VISIBLE
#endif

MLD_LIBC_VISIBLE char* MLD_LIBC_CALL(dlerror)(void);
MLD_LIBC_VISIBLE pid_t MLD_LIBC_CALL(fork)(void);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(setenv)(const char* name, const char* value, int overwrite);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(putenv)(char* string);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(unsetenv)(const char* name);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execve)(const char* path, char* const argv[],
                                           char* const envp[]);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execv)(const char* path, char* const argv[]);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execvp)(const char* file, char* const argv[]);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(execvpe)(const char* file, char* const argv[],
                                            char* const envp[]);
MLD_LIBC_VISIBLE int MLD_LIBC_CALL(chroot)(const char* path);

#endif
