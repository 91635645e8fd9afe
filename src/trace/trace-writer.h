/* trace-writer.h — the event writer shared by the two in-process shims of
 * `mldoctor run` (the rtld-audit module and the LD_PRELOAD interposer).
 *
 * Each traced process appends JSON lines to <MLDOCTOR_TRACE_DIR>/<pid>.jsonl,
 * whole lines per write(2) on an O_APPEND descriptor, so lines from the two
 * shims and from several threads never interleave and every line written
 * before a crash survives it. The shims are C without the C++ runtime, use no
 * thread-local storage (it would take static TLS surplus from the traced
 * process: research/glibc-tls-audit.md §2) and no malloc: events are built in
 * a caller-owned stack buffer and truncated, never grown.
 */
#ifndef MLD_TRACE_WRITER_H
#define MLD_TRACE_WRITER_H

#include <stddef.h>
#include <stdint.h>

#define MLD_EVENT_MAX 8192

struct mld_event {
  char text[MLD_EVENT_MAX];
  size_t len;
  int truncated;
};

/* Reads MLDOCTOR_TRACE_DIR once; 0 when tracing is off (no directory). */
int mld_trace_init(void);
int mld_trace_enabled(void);
/* 1 when the process's root directory is no longer the one it had when
 * tracing started (a chroot or pivot_root since), 0 when it is, -1 unknown. */
int mld_root_changed(void);

/* Starts an event: {"ev":"<kind>","pid":..,"tid":..,"t":<monotonic ns> */
void mld_event_begin(struct mld_event* e, const char* kind);
void mld_event_str(struct mld_event* e, const char* key, const char* value); /* null: JSON null */
void mld_event_strn(struct mld_event* e, const char* key, const char* value, size_t n);
void mld_event_int(struct mld_event* e, const char* key, long long value);
/* NUL-separated strings (as in /proc/self/cmdline) as a JSON array. */
void mld_event_strings(struct mld_event* e, const char* key, const char* nul_separated, size_t n);
void mld_event_raw(struct mld_event* e, const char* key, const char* json); /* trusted JSON */
/* Closes the object and appends it to this process's file. */
void mld_event_emit(struct mld_event* e);
/* Closes the object without writing it: e->text[0..e->len) is one line. */
void mld_event_finish(struct mld_event* e);
/* Appends complete lines to this process's file in one write. */
void mld_write_lines(const char* text, size_t len);

/* Helpers without libc locale or allocation. */
size_t mld_strlen(const char* s);
int mld_starts_with(const char* s, const char* prefix);
const char* mld_basename(const char* path);

#endif
