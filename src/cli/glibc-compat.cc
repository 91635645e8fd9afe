// glibc-compat.cc — keeps the binary runnable on glibc 2.34 and 2.35 although
// it is built on Debian 12 (glibc 2.36) with libstdc++ linked statically.
//
// GCC 12's libstdc++.a always brings random.o (cow-string-inst.o refers to
// std::random_device), and random.o calls arc4random(), new in glibc 2.36: a
// versioned reference to it would make the dynamic loader refuse the binary
// on Ubuntu 22.04 or RHEL 9 ("version `GLIBC_2.36' not found") for a function
// mldoctor never calls. Defining it here resolves the reference inside the
// executable (hidden: libraries loaded later keep libc's), with the same contract: a uniformly
// random 32-bit value from the kernel's CSPRNG (getrandom(2), glibc 2.25).
//
// The portable build (MLD_PORTABLE: glibc 2.31's libraries, no version above
// 2.28 wanted) also defines __libc_single_threaded (glibc 2.32), which
// libstdc++.a and Vectorscan's archive read before each reference-count
// update: 0 means "maybe several threads", so they always use atomic
// operations, which is correct in every process (only the shortcut of a
// single-threaded one is lost).
#include <errno.h>
#include <sys/random.h>

#include <cstdint>
#include <cstdlib>

extern "C" __attribute__((visibility("hidden"))) uint32_t arc4random() noexcept {
  uint32_t value;
  for (;;) {
    ssize_t n = getrandom(&value, sizeof value, 0);
    if (n == static_cast<ssize_t>(sizeof value)) return value;
    if (n < 0 && errno != EINTR) std::abort();  // no entropy source: as glibc, never return a guess
  }
}

#ifdef MLD_PORTABLE
extern "C" __attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
#endif
