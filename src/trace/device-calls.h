/* device-calls.h — the calls of a traced process that bind it to a GPU and
 * create its NCCL communicators, observed by the audit module of
 * `mldoctor run`.
 *
 * A process of a distributed job picks its GPU with cudaSetDevice (or the
 * driver's cuCtxSetCurrent) and then creates NCCL communicators on whatever
 * device is current on the calling thread. Which device that was, and which
 * rank asked for it, is what a job that hangs at its first collective
 * ("using GPU N to perform barrier as devices used by this process are
 * currently unknown") or fails with "Duplicate GPU detected" never says. The
 * audit module hands ld.so a wrapper for each binding of these functions
 * into a CUDA runtime, driver or NCCL library, as it does for the
 * thread-count setters: the wrapper calls the exact target ld.so resolved,
 * returns its result and out-parameters untouched (errno too), and records
 * the call as a "device" event with the environment facts of the rank.
 */
#ifndef MLD_DEVICE_CALLS_H
#define MLD_DEVICE_CALLS_H

#include <stdint.h>

enum mld_device_fn {
  DEV_CUDA_SET_DEVICE,       /* cudaError_t cudaSetDevice(int) */
  DEV_CUDA_GET_DEVICE,       /* cudaError_t cudaGetDevice(int*) */
  DEV_CU_CTX_SET_CURRENT,    /* CUresult cuCtxSetCurrent(CUcontext) */
  DEV_CU_PRIMARY_RETAIN,     /* CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice) */
  DEV_NCCL_GET_UNIQUE_ID,    /* ncclResult_t ncclGetUniqueId(ncclUniqueId*) */
  DEV_NCCL_INIT_RANK,        /* ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int) */
  DEV_NCCL_INIT_RANK_CONFIG, /* ncclCommInitRankConfig(..., ncclConfig_t*) */
  DEV_NCCL_INIT_ALL,         /* ncclCommInitAll(ncclComm_t*, int, const int*) */
  DEV_NCCL_SPLIT,            /* ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) */
  DEVICE_FNS
};

/* The functions' names, by mld_device_fn: an object that defines any of
 * them is a device library (libcudart, libcuda, libnccl or a renamed copy),
 * and only bindings into it are wrapped. */
extern const char* const mld_device_symbols[DEVICE_FNS];

/* The mld_device_fn of a symbol name; -1 for every other name. */
int mld_device_fn_of(const char* symbol);

/* What ld.so should bind for a call of `symbol` (function `fn`) made by
 * `caller` into the device library `lib` (the shim's own object record,
 * opaque here), resolved by ld.so to `target`: a wrapper that records the
 * call, or `target` itself when every wrapper slot is taken. */
uintptr_t mld_device_bind(int fn, const char* symbol, const char* caller, const void* lib,
                          const char* lib_name, uintptr_t target);

/* Provided by the shim: a function `symbol` of the loaded object `object`
 * (as passed to mld_device_bind), or NULL. Called outside ld.so's locks. */
void* mld_object_function(const void* object, const char* symbol);

#endif
