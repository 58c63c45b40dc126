#include "glint/gpu/transfer.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "cuda_owners.hpp"
#include "glint/detail/median.hpp"

namespace glint::gpu {

namespace detail {

double median_copy_ms(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                      StreamView s, int repeats, int warmups) {
  Event a(true), b(true);
  std::vector<double> ms;
  for (int r = 0; r < warmups + std::max(1, repeats); ++r) {
    a.record(s);
    GLINT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s.get()));
    b.record(s);
    b.synchronize();
    float t = 0;
    GLINT_CUDA_CHECK(cudaEventElapsedTime(&t, a.get(), b.get()));
    if (r >= warmups) ms.push_back(t);
  }
  return glint::detail::median(std::move(ms));
}

}  // namespace detail

double measure_h2d_bytes_per_second(std::size_t bytes, int repeats, int device) {
  using namespace detail;
  DeviceGuard guard(device);
  PinnedBuffer<unsigned char> host(bytes);
  DeviceBuffer<unsigned char> dev(bytes);
  for (std::size_t i = 0; i < bytes; i += 4096) host.get()[i] = static_cast<unsigned char>(i);
  Stream s;
  const double ms = median_copy_ms(dev.get(), host.get(), bytes, cudaMemcpyHostToDevice, s,
                                   repeats, /*warmups=*/1);
  return static_cast<double>(bytes) / (ms * 1e-3);
}

}  // namespace glint::gpu
