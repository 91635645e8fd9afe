// glibc-compat-libm.c — the portable build only (MLD_PORTABLE, see
// CMakeLists.txt): keeps the binary free of GLIBC_2.29 although Vectorscan's
// archive (compiled against this machine's glibc) calls pow().
//
// glibc 2.29 gave pow, exp, exp2, log and log2 new symbol versions (entry
// points without the old SVID error handling, matherr); a program linked
// against 2.29 or later binds the new ones and then needs GLIBC_2.29. The old
// versions remain in every later libm and return the same values. Each
// function here is defined hidden in the executable, so calls from our code
// and from the static archives resolve to it, and it calls libm's old version
// through a .symver alias; libraries loaded later keep libm's own.
#include <math.h>

#if defined(__x86_64__)
#define MLD_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define MLD_GLIBC_BASE "GLIBC_2.17"
#else
#error "glibc-compat-libm.c: unknown base glibc version for this architecture"
#endif

#define MLD_OLD_LIBM_1(name)                                      \
  double mld_old_##name(double);                                  \
  __asm__(".symver mld_old_" #name "," #name "@" MLD_GLIBC_BASE); \
  __attribute__((visibility("hidden"))) double name(double x) { return mld_old_##name(x); }
#define MLD_OLD_LIBM_2(name)                                              \
  double mld_old_##name(double, double);                                  \
  __asm__(".symver mld_old_" #name "," #name "@" MLD_GLIBC_BASE);         \
  __attribute__((visibility("hidden"))) double name(double x, double y) { \
    return mld_old_##name(x, y);                                          \
  }

MLD_OLD_LIBM_2(pow)
MLD_OLD_LIBM_1(exp)
MLD_OLD_LIBM_1(exp2)
MLD_OLD_LIBM_1(log)
MLD_OLD_LIBM_1(log2)
