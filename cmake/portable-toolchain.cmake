# The portable build (issue 34): compile and link against the sysroot that
# scripts/make-sysroot.sh makes (Debian 11's glibc 2.31 headers, start files
# and libraries; the static libraries from this machine's release), so that
# the objects need no glibc symbol version above 2.28. See docs/design.md
# ("One binary for glibc 2.28 and newer").
#   cmake -S . -B build-portable -DCMAKE_TOOLCHAIN_FILE=cmake/portable-toolchain.cmake \
#         -DMLD_SYSROOT=/path/to/sysroot/root
# (make portable does both steps.)
if(NOT MLD_SYSROOT)
  set(MLD_SYSROOT "$ENV{MLD_SYSROOT}")
endif()
if(NOT MLD_SYSROOT OR NOT EXISTS "${MLD_SYSROOT}/.mld-sysroot")
  message(FATAL_ERROR "MLD_SYSROOT must name a root made by scripts/make-sysroot.sh (got '${MLD_SYSROOT}')")
endif()
# try_compile projects see the toolchain file again, without the cache.
set(ENV{MLD_SYSROOT} "${MLD_SYSROOT}")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MLD_SYSROOT)

set(CMAKE_SYSROOT "${MLD_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${MLD_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(mld_multiarch "${CMAKE_HOST_SYSTEM_PROCESSOR}-linux-gnu")
# pkg-config reads the sysroot's .pc files and prefixes their paths.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${MLD_SYSROOT}")
set(ENV{PKG_CONFIG_LIBDIR} "${MLD_SYSROOT}/usr/lib/${mld_multiarch}/pkgconfig:${MLD_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
# Debian's gcc is not configured with a sysroot: --sysroot moves the header
# and library search, but its start files (crt1.o, crti.o) and the libraries
# beside them are still looked up under its own prefix, i.e. this machine's
# glibc. -B and -L put the sysroot's first.
set(mld_sysroot_link "-B${MLD_SYSROOT}/usr/lib/${mld_multiarch} -L${MLD_SYSROOT}/usr/lib/${mld_multiarch} -L${MLD_SYSROOT}/lib/${mld_multiarch}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "${mld_sysroot_link}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${mld_sysroot_link}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${mld_sysroot_link}")
set(MLD_PORTABLE ON)
