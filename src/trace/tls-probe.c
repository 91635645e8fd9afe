/* tls-probe.c — how much static TLS room a process of this system starts
 * with, as its own ld.so laid it out (`mldoctor run`, before the job).
 *
 * An LD_AUDIT module changes the static TLS a process can still give to
 * dlopen()ed initial-exec modules: ld.so sizes the area before the program's
 * libraries are mapped, glibc 2.32+ (and backports, Debian 11's 2.31) add
 * surplus for each audit namespace, and the module's own libc takes some back
 * (docs/design.md, "Static TLS under LD_AUDIT"). How much is left differs per
 * release and per distribution patch, so `run` does not compute it: it starts
 * this probe twice, in the job's environment with and without its shims, and
 * takes the difference. The probe links libc alone, the least any program
 * starts with; see launch.cc for why that bounds every process of the job.
 *
 * Output, one line: "<static size> <used>" in bytes — GLRO(dl_tls_static_size)
 * from ld.so's own _dl_get_tls_static_info (GLIBC_PRIVATE, exported by every
 * ld.so since 2.3) and the end of the last block placed in the area
 * (GL(dl_tls_static_used)), from each module's block address in this thread
 * (dl_iterate_phdr's dlpi_tls_data) and, from 2.41, the rseq area's. The TCB is inside the
 * size on every ABI and the same in both runs, so the two runs' room differs
 * by exactly (size - used) - (size' - used'). Nothing on stdout and status 1
 * on an architecture it does not know.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

static uintptr_t thread_pointer(void) {
  uintptr_t tp = 0;
#if defined(__x86_64__)
  __asm__("mov %%fs:0, %0" : "=r"(tp));
#elif defined(__aarch64__)
  __asm__("mrs %0, tpidr_el0" : "=r"(tp));
#endif
  return tp;
}

struct area {
  uintptr_t tp;
  size_t size, used;
};

static int add_module(struct dl_phdr_info* info, size_t n, void* data) {
  struct area* a = data;
  (void)n;
  if (!info->dlpi_tls_data) return 0;
  uintptr_t block = (uintptr_t)info->dlpi_tls_data;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type != PT_TLS) continue;
#if defined(__x86_64__)
    /* TLS_TCB_AT_TP: blocks below the thread pointer, l_tls_offset = tp - block. */
    if (block < a->tp && a->tp - block <= a->size && a->tp - block > a->used)
      a->used = a->tp - block;
#elif defined(__aarch64__)
    /* TLS_DTV_AT_TP: blocks above it, after the TCB; used ends at the block's end. */
    size_t end = block - a->tp + info->dlpi_phdr[i].p_memsz;
    if (block > a->tp && end <= a->size && end > a->used) a->used = end;
#endif
  }
  return 0;
}

int main(void) {
#if !defined(__x86_64__) && !defined(__aarch64__)
  return 1;
#else
  void (*info)(size_t*, size_t*) =
      (void (*)(size_t*, size_t*))dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info");
  if (!info) return 1;
  struct area a = {thread_pointer(), 0, 0};
  size_t align = 0;
  info(&a.size, &align);
  if (!a.tp || !a.size) return 1;
  dl_iterate_phdr(add_module, &a);
#if defined(__x86_64__)
  /* glibc 2.41+ places the rseq area in the static block as an "extra TLS"
   * block after the startup modules (elf/dl-tls.c _dl_determine_tlsoffset);
   * __rseq_offset (libc, 2.35+) says where. Before 2.41 it lies in the TCB
   * (a positive offset) and takes nothing from the block. */
  const ptrdiff_t* rseq = (const ptrdiff_t*)dlsym(RTLD_DEFAULT, "__rseq_offset");
  if (rseq && *rseq < 0 && (size_t) - *rseq <= a.size && (size_t) - *rseq > a.used)
    a.used = (size_t) - *rseq;
#endif
  printf("%zu %zu\n", a.size, a.used);
  return 0;
#endif
}
