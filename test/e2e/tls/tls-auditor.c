/* A minimal rtld-audit module for test/e2e/tls-differential.py. With
   LD_AUDIT, glibc sizes the static TLS block before libc.so.6 is mapped
   (elf/rtld.c calls init_tls before loading the auditors), so the base libc
   and the auditor's own copy of libc (loaded in the auditor's namespace)
   both take their initial-exec TLS from the surplus. The puts() call keeps
   the DT_NEEDED on libc.so.6 that real auditors have; an auditor without it
   brings no second libc. */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>

unsigned int la_version(unsigned int version) {
  if (version == 0) puts("tls-auditor: LAV_CURRENT is 0?");
  return LAV_CURRENT;
}
