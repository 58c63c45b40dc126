// Built when nvcc was not found: the GPU API exists and says why it cannot run.
#include "glint/gpu/device.hpp"
#include "glint/gpu/error.hpp"
#include "glint/gpu/transfer.hpp"

namespace glint::gpu {

bool built_with_cuda() { return false; }
int device_count() { return 0; }
DeviceInfo device_info(int id) {
  throw CudaError("device " + std::to_string(id) + ": glint was built without CUDA", 0, false);
}
std::string unavailable_reason() { return "glint was built without CUDA (nvcc not found)"; }
double measure_h2d_bytes_per_second(std::size_t, int, int device) {
  throw CudaError("device " + std::to_string(device) + ": glint was built without CUDA", 0, false);
}
double measure_duplex_seconds(std::size_t, std::size_t, int, int device) {
  throw CudaError("device " + std::to_string(device) + ": glint was built without CUDA", 0, false);
}

}  // namespace glint::gpu
