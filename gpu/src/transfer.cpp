#include "glint/gpu/transfer.hpp"

#include <algorithm>
#include <vector>

#include "cuda_owners.hpp"

namespace glint::gpu {

double measure_h2d_bytes_per_second(std::size_t bytes, int repeats, int device) {
  using namespace detail;
  DeviceGuard guard(device);
  PinnedBuffer<unsigned char> host(bytes);
  DeviceBuffer<unsigned char> dev(bytes);
  for (std::size_t i = 0; i < bytes; i += 4096) host.get()[i] = static_cast<unsigned char>(i);
  Stream s;
  Event a(true), b(true);
  std::vector<float> ms;
  for (int r = 0; r < std::max(1, repeats) + 1; ++r) {
    a.record(s.get());
    GLINT_CUDA_CHECK(cudaMemcpyAsync(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice,
                                     s.get()));
    b.record(s.get());
    b.synchronize();
    float t = 0;
    GLINT_CUDA_CHECK(cudaEventElapsedTime(&t, a.get(), b.get()));
    if (r > 0) ms.push_back(t);  // the first copy warms up
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  return static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
}

}  // namespace glint::gpu
