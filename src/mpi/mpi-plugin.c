/* mpi-plugin.c — libmldoctor-mpi.so: the MPI calls `mldoctor fleet` makes,
 * behind the plain C table of mpi-plugin.h. Built only where MPI's headers
 * are (Debian: libopenmpi-dev); everything it does is a collective on
 * MPI_COMM_WORLD or a point-to-point exchange with rank 0. */
#define _GNU_SOURCE
#include "mpi/mpi-plugin.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

static char version[MPI_MAX_LIBRARY_VERSION_STRING];
static char library_path[4096];

static int init(int* argc, char*** argv) {
  int ready = 0;
  MPI_Initialized(&ready);
  if (ready) return 0;
  int rc = MPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return rc;
}

static int finalize(void) { return MPI_Finalize(); }
static void abort_job(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
static int rank(int* r) { return MPI_Comm_rank(MPI_COMM_WORLD, r); }
static int size(int* s) { return MPI_Comm_size(MPI_COMM_WORLD, s); }

static int gatherv(const void* data, int length, void** out, int** lengths) {
  int me = 0, n = 0, rc;
  *out = NULL;
  *lengths = NULL;
  if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &me)) || (rc = MPI_Comm_size(MPI_COMM_WORLD, &n)))
    return rc;
  int* lens = NULL;
  int* displs = NULL;
  char* buf = NULL;
  if (me == 0) {
    lens = calloc((size_t)n, sizeof *lens);
    displs = calloc((size_t)n, sizeof *displs);
    if (!lens || !displs) {
      free(lens);
      free(displs);
      return MPI_ERR_NO_MEM;
    }
  }
  rc = MPI_Gather(&length, 1, MPI_INT, lens, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS && me == 0) {
    long total = 0;
    for (int i = 0; i < n; i++) {
      displs[i] = (int)total;
      total += lens[i];
    }
    if (total > 0x7fffffffL)
      rc = MPI_ERR_COUNT;
    else if (!(buf = malloc(total ? (size_t)total : 1)))
      rc = MPI_ERR_NO_MEM;
  }
  /* Every rank enters the second collective even when the root failed. */
  int rc2 = MPI_Gatherv(data, length, MPI_BYTE, buf, lens, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (rc == MPI_SUCCESS) rc = rc2;
  free(displs);
  if (rc != MPI_SUCCESS || me != 0) {
    free(buf);
    free(lens);
    return rc;
  }
  *out = buf;
  *lengths = lens;
  return MPI_SUCCESS;
}

static int bcast(void** data, int* length) {
  int me = 0, rc;
  if ((rc = MPI_Comm_rank(MPI_COMM_WORLD, &me))) return rc;
  if ((rc = MPI_Bcast(length, 1, MPI_INT, 0, MPI_COMM_WORLD))) return rc;
  if (me != 0) {
    *data = malloc(*length ? (size_t)*length : 1);
    if (!*data) return MPI_ERR_NO_MEM;
  }
  return MPI_Bcast(*data, *length, MPI_BYTE, 0, MPI_COMM_WORLD);
}

static int send_doubles(const double* values, int count, int peer) {
  return MPI_Send(values, count, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD);
}

static int recv_doubles(double* values, int count, int peer) {
  return MPI_Recv(values, count, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static int bcast_int(int* value) { return MPI_Bcast(value, 1, MPI_INT, 0, MPI_COMM_WORLD); }

static void error_text(int code, char* buf, int n) {
  char s[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, s, &len) != MPI_SUCCESS) len = 0;
  s[len < MPI_MAX_ERROR_STRING ? len : MPI_MAX_ERROR_STRING - 1] = 0;
  if (n > 0) {
    strncpy(buf, len ? s : "unknown MPI error", (size_t)n - 1);
    buf[n - 1] = 0;
  }
}

__attribute__((visibility("default"))) const struct mld_mpi_plugin* mld_mpi_plugin_v1(void) {
  static struct mld_mpi_plugin table;
  if (!table.abi) {
    int len = 0;
    MPI_Get_library_version(version, &len);
    char* nl = strchr(version, '\n');
    if (nl) *nl = 0;
    Dl_info info;
    if (dladdr((void*)MPI_Init, &info) && info.dli_fname) {
      strncpy(library_path, info.dli_fname, sizeof library_path - 1);
      library_path[sizeof library_path - 1] = 0;
    }
    table =
        (struct mld_mpi_plugin){MLD_MPI_PLUGIN_ABI, version,      library_path, init,      finalize,
                                abort_job,          rank,         size,         gatherv,   bcast,
                                send_doubles,       recv_doubles, bcast_int,    error_text};
  }
  return &table;
}
