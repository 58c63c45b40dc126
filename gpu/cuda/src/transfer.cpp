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

double measure_duplex_seconds(std::size_t h2d_bytes, std::size_t d2h_bytes, int repeats,
                              int device) {
  using namespace detail;
  DeviceGuard guard(device);
  PinnedBuffer<unsigned char> up(std::max<std::size_t>(h2d_bytes, 1));
  PinnedBuffer<unsigned char> down(std::max<std::size_t>(d2h_bytes, 1));
  DeviceBuffer<unsigned char> dup(std::max<std::size_t>(h2d_bytes, 1));
  DeviceBuffer<unsigned char> ddown(std::max<std::size_t>(d2h_bytes, 1));
  for (std::size_t i = 0; i < h2d_bytes; i += 4096) up.get()[i] = static_cast<unsigned char>(i);
  GLINT_CUDA_CHECK(cudaMemset(ddown.get(), 1, std::max<std::size_t>(d2h_bytes, 1)));
  Stream s_up, s_down;
  Event start(true), end(true), down_done;
  std::vector<double> ms;
  for (int r = 0; r < 1 + std::max(1, repeats); ++r) {
    // Both copies start together; the time runs until the later one ends.
    start.record(s_up);
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(s_down.get(), start.get(), 0));
    if (h2d_bytes)
      GLINT_CUDA_CHECK(cudaMemcpyAsync(dup.get(), up.get(), h2d_bytes, cudaMemcpyHostToDevice,
                                       s_up.get()));
    if (d2h_bytes)
      GLINT_CUDA_CHECK(cudaMemcpyAsync(down.get(), ddown.get(), d2h_bytes,
                                       cudaMemcpyDeviceToHost, s_down.get()));
    down_done.record(s_down);
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(s_up.get(), down_done.get(), 0));
    end.record(s_up);
    end.synchronize();
    float t = 0;
    GLINT_CUDA_CHECK(cudaEventElapsedTime(&t, start.get(), end.get()));
    if (r >= 1) ms.push_back(t);
  }
  return glint::detail::median(std::move(ms)) * 1e-3;
}

}  // namespace glint::gpu
