// gpu-internal.h — what the gpu sources share beyond the public API.
#pragma once

#include "gpu/gpu.h"

namespace mld::gpu {

// environment.cc: the variables the GPU and NCCL rules read, from `host`.
GpuEnv read_gpu_env(const host::Host& host);

}  // namespace mld::gpu
