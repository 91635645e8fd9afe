/* trace-writer.c — appends the shims' events to <dir>/<pid>.jsonl.
 *
 * Every write opens the file, appends complete lines and closes it again:
 * the traced program never holds a descriptor of ours, so a program that
 * dup2()s onto low descriptors, closes every descriptor in a child or counts
 * its open files sees exactly what it would see without `mldoctor run`, and
 * a forked or vforked child needs no fix-up of shared state. A write is one
 * event, or the held events of one load bracket (audit.c); its cost is
 * measured by bench/run-overhead.py.
 */
#define _GNU_SOURCE
#include "trace-writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char trace_dir[1024];
static int trace_state; /* 0 unknown, 1 on, -1 off */
static struct stat start_root;
static int start_root_known;

size_t mld_strlen(const char* s) { return s ? strlen(s) : 0; }

int mld_starts_with(const char* s, const char* prefix) {
  return s && strncmp(s, prefix, strlen(prefix)) == 0;
}

const char* mld_basename(const char* path) {
  const char* slash = path ? strrchr(path, '/') : NULL;
  return slash ? slash + 1 : path;
}

int mld_trace_init(void) {
  if (trace_state != 0) return trace_state > 0;
  const char* dir = getenv("MLDOCTOR_TRACE_DIR");
  if (!dir || dir[0] != '/' || strlen(dir) >= sizeof trace_dir - 32) {
    trace_state = -1;
    return 0;
  }
  memcpy(trace_dir, dir, strlen(dir) + 1);
  const int saved = errno;
  start_root_known = stat("/", &start_root) == 0;
  errno = saved;
  trace_state = 1;
  return 1;
}

int mld_root_changed(void) {
  struct stat now;
  if (!start_root_known || stat("/", &now) != 0) return -1;
  return now.st_dev != start_root.st_dev || now.st_ino != start_root.st_ino;
}

int mld_trace_enabled(void) { return trace_state > 0 || mld_trace_init(); }

static void append(struct mld_event* e, const char* s, size_t n) {
  /* Keep room for the closing "}\n". */
  if (e->len + n + 2 > sizeof e->text) {
    n = sizeof e->text - 2 - e->len;
    e->truncated = 1;
  }
  memcpy(e->text + e->len, s, n);
  e->len += n;
}

static void append_c(struct mld_event* e, const char* s) { append(e, s, strlen(s)); }

static void append_ll(struct mld_event* e, long long v) {
  char buf[24];
  int i = sizeof buf;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  do {
    buf[--i] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) buf[--i] = '-';
  append(e, buf + i, sizeof buf - i);
}

/* JSON string escaping; bytes >= 0x80 pass through and the reader repairs
 * invalid UTF-8 (paths are bytes, not text). */
static void append_escaped(struct mld_event* e, const char* s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  append_c(e, "\"");
  for (size_t i = 0; i < n; i++) {
    /* Stop early enough that the closing quote and the event's end fit:
     * a cut value stays a well-formed string and the event says so. */
    if (e->len + 6 + 48 > sizeof e->text) {
      e->truncated = 1;
      break;
    }
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      append(e, esc, 2);
    } else if (c < 0x20) {
      char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      append(e, esc, 6);
    } else {
      append(e, (const char*)&s[i], 1);
    }
  }
  append_c(e, "\"");
}

static void append_key(struct mld_event* e, const char* key) {
  append_c(e, ",\"");
  append_c(e, key);
  append_c(e, "\":");
}

void mld_event_begin(struct mld_event* e, const char* kind) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  e->len = 0;
  e->truncated = 0;
  append_c(e, "{\"ev\":\"");
  append_c(e, kind);
  append_c(e, "\",\"pid\":");
  append_ll(e, getpid());
  append_c(e, ",\"tid\":");
  append_ll(e, syscall(SYS_gettid));
  append_c(e, ",\"t\":");
  append_ll(e, (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec);
}

void mld_event_strn(struct mld_event* e, const char* key, const char* value, size_t n) {
  append_key(e, key);
  if (!value)
    append_c(e, "null");
  else
    append_escaped(e, value, n);
}

void mld_event_str(struct mld_event* e, const char* key, const char* value) {
  mld_event_strn(e, key, value, mld_strlen(value));
}

void mld_event_int(struct mld_event* e, const char* key, long long value) {
  append_key(e, key);
  append_ll(e, value);
}

void mld_event_strings(struct mld_event* e, const char* key, const char* list, size_t n) {
  append_key(e, key);
  append_c(e, "[");
  size_t start = 0;
  int first = 1;
  for (size_t i = 0; i < n && !e->truncated; i++) {
    if (list[i] != 0) continue;
    if (!first) append_c(e, ",");
    append_escaped(e, list + start, i - start);
    first = 0;
    start = i + 1;
  }
  append_c(e, "]");
}

void mld_event_raw(struct mld_event* e, const char* key, const char* json) {
  append_key(e, key);
  append_c(e, json);
}

void mld_event_finish(struct mld_event* e) {
  if (e->truncated && e->len + 16 + 2 <= sizeof e->text) append_c(e, ",\"truncated\":1");
  e->text[e->len++] = '}';
  e->text[e->len++] = '\n';
}

void mld_write_lines(const char* text, size_t len) {
  if (!mld_trace_enabled() || len == 0) return;
  char path[sizeof trace_dir + 32];
  struct mld_event name;
  name.len = 0;
  name.truncated = 0;
  append_c(&name, trace_dir);
  append_c(&name, "/");
  append_ll(&name, getpid());
  append_c(&name, ".jsonl");
  memcpy(path, name.text, name.len);
  path[name.len] = 0;

  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  size_t off = 0;
  while (off < len) {
    ssize_t w = write(fd, text + off, len - off);
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(fd);
}

void mld_event_emit(struct mld_event* e) {
  if (!mld_trace_enabled()) return;
  mld_event_finish(e);
  mld_write_lines(e->text, e->len);
}
