#pragma once
// A non-owning view of a CUDA stream, passed wherever work is enqueued. Internal to glint::gpu.
// It includes no CUDA header, so launcher headers that host code includes stay CUDA-free:
// cudaStream_t is a pointer to the opaque CUstream_st, so a view converts to and from it without
// a cast where the CUDA runtime header is included.
struct CUstream_st;

namespace glint::gpu::detail {

/// A non-owning handle of a CUDA stream owned elsewhere (detail::Stream): what functions that
/// enqueue work take, so that they never own or destroy the stream they are given. The default
/// view is the legacy default stream, which glint never launches on.
class StreamView {
 public:
  constexpr StreamView() = default;
  constexpr StreamView(CUstream_st* s) : s_(s) {}  // NOLINT: implicit, like a raw handle
  constexpr CUstream_st* get() const { return s_; }
  constexpr operator CUstream_st*() const { return s_; }  // NOLINT: for the runtime's calls
  /// Waits for the work enqueued so far; throws CudaError on failure.
  void synchronize() const;

 private:
  CUstream_st* s_ = nullptr;
};

}  // namespace glint::gpu::detail
