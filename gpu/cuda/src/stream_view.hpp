#pragma once
// A non-owning view of a CUDA stream, passed wherever work is enqueued. Internal to glint::gpu
// (includes the CUDA runtime header).
#include <cuda_runtime_api.h>

#include "check.cuh"

namespace glint::gpu::detail {

/// A non-owning handle of a CUDA stream (the default stream when built from nothing): what
/// functions that enqueue work take, so that they never own or destroy the stream they are given.
class StreamView {
 public:
  constexpr StreamView() = default;
  constexpr StreamView(cudaStream_t s) : s_(s) {}  // NOLINT: implicit, like a raw handle
  constexpr cudaStream_t get() const { return s_; }
  constexpr operator cudaStream_t() const { return s_; }  // NOLINT: for the runtime's calls
  void synchronize() const { GLINT_CUDA_CHECK(cudaStreamSynchronize(s_)); }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace glint::gpu::detail
