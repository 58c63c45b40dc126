#pragma once
// FFTW single-precision helpers shared by the CPU solver and the forward models: aligned buffers
// in the padded layout and in-place 3D real transforms (planning serialised: FFTW's planner is not
// thread-safe).
#include <cstddef>
#include <memory>

#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

/// fftwf_malloc'ed floats, zero-initialised, move-only.
class AlignedFloats {
 public:
  AlignedFloats() = default;
  explicit AlignedFloats(std::size_t n);
  ~AlignedFloats();
  AlignedFloats(AlignedFloats&& o) noexcept;
  AlignedFloats& operator=(AlignedFloats&& o) noexcept;
  float* data() const { return p_; }
  std::size_t size() const { return n_; }
  float& operator[](std::size_t i) const { return p_[i]; }

 private:
  float* p_ = nullptr;
  std::size_t n_ = 0;
};

/// An in-place forward (R2C) and inverse (C2R) 3D transform pair on one padded buffer.
class FftPair {
 public:
  FftPair(const tv::Dims& d, float* buffer, int threads);
  ~FftPair();
  FftPair(const FftPair&) = delete;
  FftPair& operator=(const FftPair&) = delete;
  void forward();  ///< real (padded rows) -> half spectrum, unnormalised
  void inverse();  ///< half spectrum -> real, unnormalised (scales by N)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Copies an unpadded volume (nz*ny*nx) into the padded layout and back.
void pad(const tv::Dims& d, const float* in, float* out);
void unpad(const tv::Dims& d, const float* in, float* out);

}  // namespace glint::recon
