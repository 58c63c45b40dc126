#pragma once
// GPU discovery, callable from host code that never sees a CUDA header.
#include <string>
#include <vector>

namespace glint::gpu {

/// True when this build contains the CUDA backends.
bool built_with_cuda();

/// Number of usable CUDA devices; 0 without a GPU, a driver or a CUDA build (never throws).
int device_count();

struct DeviceInfo {
  int id = 0;
  std::string name;
  int sm_count = 0;
  int major = 0;
  int minor = 0;
  std::size_t total_memory = 0;
  std::size_t l2_bytes = 0;
};

/// Properties of device `id`; throws glint::gpu::CudaError when it does not exist.
DeviceInfo device_info(int id);

/// Why the GPU backend cannot run here ("built without CUDA", "no CUDA device: ..."), or an empty
/// string when it can.
std::string unavailable_reason();

}  // namespace glint::gpu
