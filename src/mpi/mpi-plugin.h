/* mpi-plugin.h — the C interface between `mldoctor fleet` and
 * libmldoctor-mpi.so, the one object that links libmpi.
 *
 * mldoctor itself never links MPI: every other command starts without
 * libmpi and its dozen dependencies, the binary runs where no MPI is
 * installed, and fleet dlopen()s the plugin (RTLD_GLOBAL, as Open MPI's own
 * components need libmpi's symbols in the global scope) only when asked.
 * Plain C types only: the plugin and the binary need not share a C++
 * runtime. Every call returns 0 or an MPI error code (mld_mpi_error_text). */
#ifndef MLD_MPI_PLUGIN_H
#define MLD_MPI_PLUGIN_H

#ifdef __cplusplus
extern "C" {
#endif

#define MLD_MPI_PLUGIN_ABI 2

struct mld_mpi_plugin {
  int abi;                     /* MLD_MPI_PLUGIN_ABI */
  const char* library_version; /* MPI_Get_library_version, first line */
  /* The file the loader mapped MPI_Init from (dladdr), "" when unknown:
   * fleet looks beside it for the launcher interfaces this MPI speaks
   * before it calls init, which aborts the process when none fits. */
  const char* library_path;
  int (*init)(int* argc, char*** argv);
  int (*finalize)(void);
  void (*abort_job)(int code);
  int (*rank)(int* rank);
  int (*size)(int* size);
  /* Variable-size byte strings gathered at rank 0: there `*out` is a
   * malloc()ed concatenation and `*lengths` (malloc()ed, one per rank) their
   * lengths; elsewhere both are set to NULL. */
  int (*gatherv)(const void* data, int length, void** out, int** lengths);
  /* Rank 0's bytes to every rank: `*data`/`*length` in at rank 0, a
   * malloc()ed copy out elsewhere. */
  int (*bcast)(void** data, int* length);
  int (*send_doubles)(const double* values, int count, int peer);
  int (*recv_doubles)(double* values, int count, int peer);
  /* The exit status rank 0 decided, to every rank. */
  int (*bcast_int)(int* value);
  void (*error_text)(int code, char* buf, int size);
};

/* The plugin's only export (the table's abi says which layout it has). */
const struct mld_mpi_plugin* mld_mpi_plugin_v1(void);

#ifdef __cplusplus
}
#endif

#endif
