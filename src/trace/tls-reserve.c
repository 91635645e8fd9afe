/* tls-reserve.c — MLD_RESERVE_BYTES of static TLS, taken at start-up.
 *
 * Where an LD_AUDIT module leaves a process more static TLS room than it has
 * without one (glibc 2.31 with Debian's surplus backport: 48 bytes more for
 * a program with only libc's TLS; tls-probe.c measures it), `mldoctor run`
 * preloads these objects, one per set bit of the excess rounded up to 16, so
 * that a dlopen() that fails without run still fails under it (seed 001).
 * Under LD_AUDIT ld.so lays out static TLS before the preloads are mapped,
 * so each one's block comes out of the surplus, exactly as a dlopen()ed
 * module's would; the initial-exec access below is the relocation that makes
 * ld.so place it. The object defines nothing a program could bind to.
 */
static __thread char reserve[MLD_RESERVE_BYTES]
    __attribute__((tls_model("initial-exec"), aligned(16)));

__attribute__((visibility("hidden"))) char* mld_tls_reserve(void) { return reserve; }
