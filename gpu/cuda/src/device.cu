#include "check.cuh"
#include "glint/gpu/device.hpp"

#include <string>

namespace glint::gpu {

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the non-sticky "no device" error
    return 0;
  }
  return n;
}

DeviceInfo device_info(int id) {
  cudaDeviceProp p{};
  GLINT_CUDA_CHECK(cudaGetDeviceProperties(&p, id));
  DeviceInfo info;
  info.id = id;
  info.name = p.name;
  info.sm_count = p.multiProcessorCount;
  info.major = p.major;
  info.minor = p.minor;
  info.total_memory = p.totalGlobalMem;
  info.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  return info;
}

std::string unavailable_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    // CUDA's own words for these two ("CUDA driver version is insufficient for CUDA runtime
    // version") read as a version mismatch on a machine that simply has no GPU driver.
    if (e == cudaErrorInsufficientDriver)
      return "no NVIDIA GPU driver is loaded, or it is older than this build's CUDA " +
             std::to_string(CUDART_VERSION / 1000) + "." +
             std::to_string(CUDART_VERSION % 1000 / 10) +
             " needs (cudaErrorInsufficientDriver): install or update the NVIDIA driver";
    if (e == cudaErrorNoDevice) return "no CUDA device found (cudaErrorNoDevice)";
    return std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" +
           cudaGetErrorString(e) + ")";
  }
  if (n == 0) return "no CUDA device found";
  return {};
}

}  // namespace glint::gpu
