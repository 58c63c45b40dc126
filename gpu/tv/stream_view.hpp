#pragma once
// A non-owning view of a CUDA stream for headers that include no CUDA headers. Internal to
// glint::gpu. cudaStream_t is a pointer to the opaque CUstream_st, so a view converts to and from
// it without a cast where the CUDA runtime header is included.

struct CUstream_st;

namespace glint::gpu {

/// A stream owned elsewhere (detail::Stream); copying the view never copies the stream. The
/// default view is the legacy default stream, which glint never launches on: every launcher is
/// given the stream of its owner.
class StreamView {
 public:
  constexpr StreamView() = default;
  constexpr StreamView(CUstream_st* stream) : s_(stream) {}  // NOLINT: implicit from cudaStream_t
  constexpr CUstream_st* get() const { return s_; }
  constexpr operator CUstream_st*() const { return s_; }  // NOLINT: to cudaStream_t

 private:
  CUstream_st* s_ = nullptr;
};

}  // namespace glint::gpu
