// device-binding.h — what the detectors of a job's GPU binding (DIST001–
// DIST003) share: on which device an NCCL communicator was created, how
// that is known, which GPU an ordinal is under CUDA_VISIBLE_DEVICES, and how
// a rank and its calls are named.
//
// CUDA's current device belongs to a thread: cudaSetDevice(n) binds the
// calling thread, and a thread that never bound one runs on device 0.
// ncclCommInitRank creates its communicator on the device current on the
// calling thread. So the device of an init is, in order of certainty: the
// one the process's CUDA runtime reported when the init started; else the
// last device that thread asked for before (the request counts even when it
// failed: it is what the program meant); else device 0, CUDA's default.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "detect/detect.h"

namespace mld::detect {

struct InitDevice {
  long long ordinal = 0;
  enum class How { Queried, Requested, Default } how = How::Default;
  const DeviceRequest* request = nullptr;  // the last binding of that thread before the init
};

inline const DeviceRequest* binding_before(const DeviceProcess& p, const NcclInit& init) {
  const DeviceRequest* last = nullptr;
  for (const DeviceRequest& r : p.requests)
    if (r.tid == init.tid && r.t <= init.t) last = &r;
  return last;
}

inline InitDevice init_device(const DeviceProcess& p, const NcclInit& init) {
  InitDevice d;
  d.request = binding_before(p, init);
  if (init.current_device) {
    d.ordinal = *init.current_device;
    d.how = InitDevice::How::Queried;
  } else if (d.request) {
    d.ordinal = d.request->device;
    d.how = InitDevice::How::Requested;
  }
  return d;
}

// The devices CUDA_VISIBLE_DEVICES makes visible, in order, as CUDA reads
// it: comma-separated indices or GPU-/MIG- UUIDs, up to the first entry
// that is neither (it and everything after it hide). nullopt: unset.
inline std::optional<std::vector<std::string>> visible_devices(const DeviceProcess& p) {
  if (!p.cuda_visible_devices) return std::nullopt;
  std::vector<std::string> out;
  const std::string& v = *p.cuda_visible_devices;
  for (size_t i = 0; i <= v.size();) {
    size_t j = v.find(',', i);
    if (j == std::string::npos) j = v.size();
    std::string item = v.substr(i, j - i);
    const size_t a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    item = a == std::string::npos ? "" : item.substr(a, b - a + 1);
    const bool index = !item.empty() && item.find_first_not_of("0123456789") == std::string::npos;
    if (!index && !item.starts_with("GPU-") && !item.starts_with("MIG-")) break;
    out.push_back(item);
    i = j + 1;
  }
  return out;
}

// The GPU an ordinal of this process is: its CUDA_VISIBLE_DEVICES entry, or
// the ordinal itself when the variable is unset; "" when it is not visible.
inline std::string physical_gpu(const DeviceProcess& p, long long ordinal) {
  if (ordinal < 0) return "";  // a context of a device not known
  const std::optional<std::vector<std::string>> visible = visible_devices(p);
  if (!visible) return std::to_string(ordinal);
  if (static_cast<size_t>(ordinal) >= visible->size()) return "";
  return (*visible)[static_cast<size_t>(ordinal)];
}

inline std::optional<long long> env_number(const std::optional<std::string>& v) {
  if (!v || v->empty() || v->size() > 9 || v->find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoll(*v);
}

// "rank 1 (pid 4242)": the job's RANK, else the rank in the communicator.
inline std::string rank_name(const DeviceProcess& p, const NcclInit* init = nullptr) {
  std::string r = p.rank                    ? *p.rank
                  : init && init->nccl_rank ? std::to_string(*init->nccl_rank)
                                            : std::string("?");
  return "rank " + r + " (pid " + std::to_string(p.pid) + ")";
}

// The name of a CUDA runtime, driver or NCCL result code.
inline std::string result_name(const std::string& fn, long long ret) {
  if (fn.starts_with("nccl")) {
    static const char* const names[] = {
        "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
        "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};
    return ret >= 0 && ret < 8 ? names[ret] : "ncclResult " + std::to_string(ret);
  }
  const bool driver = fn.starts_with("cu") && !fn.starts_with("cuda");
  switch (ret) {
    case 0: return driver ? "CUDA_SUCCESS" : "cudaSuccess";
    case 1: return driver ? "CUDA_ERROR_INVALID_VALUE" : "cudaErrorInvalidValue";
    case 3: return driver ? "CUDA_ERROR_NOT_INITIALIZED" : "cudaErrorInitializationError";
    case 34: return driver ? "CUDA_ERROR_STUB_LIBRARY" : "cudaErrorStubLibrary";
    case 35: return driver ? "error 35" : "cudaErrorInsufficientDriver";
    case 46: return driver ? "CUDA_ERROR_DEVICE_UNAVAILABLE" : "cudaErrorDevicesUnavailable";
    case 100: return driver ? "CUDA_ERROR_NO_DEVICE" : "cudaErrorNoDevice";
    case 101: return driver ? "CUDA_ERROR_INVALID_DEVICE" : "cudaErrorInvalidDevice";
    case 201: return driver ? "CUDA_ERROR_INVALID_CONTEXT" : "error 201";
  }
  return "error " + std::to_string(ret);
}

// "= 0" or "= 35 (cudaErrorInsufficientDriver, failed)" or "did not return".
inline std::string outcome(const std::string& fn, const std::optional<long long>& ret) {
  if (!ret) return "did not return";
  if (*ret == 0) return "= 0";
  return "= " + std::to_string(*ret) + " (" + result_name(fn, *ret) + ", failed)";
}

inline std::string request_text(const DeviceRequest& r) {
  const std::string arg = r.device < 0 ? std::string("a context of an unknown device")
                          : r.fn == "cuCtxSetCurrent"
                              ? "the primary context of device " + std::to_string(r.device)
                              : std::to_string(r.device);
  return r.fn + "(" + arg + ") " + outcome(r.fn, r.ret) + " from " + r.caller + ", thread " +
         std::to_string(r.tid);
}

// "ncclCommInitRank(nranks 2, rank 1) = 1 (ncclUnhandledCudaError, failed) on device 0
// (asked with cudaSetDevice(0), which failed)".
inline std::string init_text(const DeviceProcess& p, const NcclInit& init) {
  const InitDevice d = init_device(p, init);
  std::string s = init.fn + "(nranks " + (init.nranks ? std::to_string(*init.nranks) : "?") +
                  ", rank " + (init.nccl_rank ? std::to_string(*init.nccl_rank) : "?") + ") " +
                  outcome(init.fn, init.ret) + " on thread " + std::to_string(init.tid) +
                  ", device " +
                  (d.ordinal < 0 ? std::string("unknown") : std::to_string(d.ordinal));
  switch (d.how) {
    case InitDevice::How::Queried: s += " (cudaGetDevice at its start)"; break;
    case InitDevice::How::Requested:
      s += " (asked with " + d.request->fn + "(" +
           (d.request->device < 0 ? std::string("another context")
                                  : std::to_string(d.request->device)) +
           ")" + (d.request->ret && *d.request->ret != 0 ? ", which failed" : "") + ")";
      break;
    case InitDevice::How::Default:
      s += " (CUDA's default: no device was bound on that thread before)";
      break;
  }
  return s;
}

}  // namespace mld::detect
