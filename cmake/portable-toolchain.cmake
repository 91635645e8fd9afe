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

# MLD_TARGET_ARCH=arm64: a cross build for aarch64 with Debian's cross
# compiler (g++-aarch64-linux-gnu) against the arm64 sysroot; the build's own
# tools (the rules compiler, the man page generator) run under qemu-user
# (qemu-aarch64-static -L the sysroot: no binfmt registration needed).
if(NOT MLD_TARGET_ARCH)
  set(MLD_TARGET_ARCH "$ENV{MLD_TARGET_ARCH}")
endif()
set(ENV{MLD_TARGET_ARCH} "${MLD_TARGET_ARCH}")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MLD_TARGET_ARCH)
if(MLD_TARGET_ARCH STREQUAL "arm64")
  set(CMAKE_SYSTEM_NAME Linux)
  set(CMAKE_SYSTEM_PROCESSOR aarch64)
  set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
  set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L "${MLD_SYSROOT}")
  set(mld_multiarch "aarch64-linux-gnu")
  # Debian's cross compiler searches its own glibc headers
  # (/usr/aarch64-linux-gnu/include, this machine's release) before the
  # sysroot's: the search list is rebuilt without them, in gcc's order.
  execute_process(COMMAND aarch64-linux-gnu-g++ -print-file-name=include
                  OUTPUT_VARIABLE mld_gcc_include OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND aarch64-linux-gnu-g++ -dumpversion
                  OUTPUT_VARIABLE mld_gcc_version OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(mld_cxx_include "/usr/aarch64-linux-gnu/include/c++/${mld_gcc_version}")
  set(mld_libc_include "-isystem ${MLD_SYSROOT}/usr/include/aarch64-linux-gnu -isystem ${MLD_SYSROOT}/usr/include")
  set(CMAKE_C_FLAGS_INIT "-nostdinc -isystem ${mld_gcc_include} ${mld_libc_include}")
  set(CMAKE_CXX_FLAGS_INIT "-nostdinc -isystem ${mld_cxx_include} -isystem ${mld_cxx_include}/aarch64-linux-gnu -isystem ${mld_cxx_include}/backward -isystem ${mld_gcc_include} ${mld_libc_include}")
elseif(NOT MLD_TARGET_ARCH OR MLD_TARGET_ARCH STREQUAL "amd64")
  set(mld_multiarch "${CMAKE_HOST_SYSTEM_PROCESSOR}-linux-gnu")
else()
  message(FATAL_ERROR "MLD_TARGET_ARCH must be amd64 or arm64 (got '${MLD_TARGET_ARCH}')")
endif()

set(CMAKE_SYSROOT "${MLD_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${MLD_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
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
