#include "glint/recon/fftw.hpp"

#include <fftw3.h>

#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <utility>

namespace glint::recon {

namespace {
std::mutex& planner_mutex() {
  static std::mutex m;
  return m;
}
}  // namespace

AlignedFloats::AlignedFloats(std::size_t n) : n_(n) {
  if (n_ == 0) return;
  p_ = static_cast<float*>(fftwf_malloc(n_ * sizeof(float)));
  if (!p_) throw std::bad_alloc();
  std::memset(p_, 0, n_ * sizeof(float));
}
AlignedFloats::~AlignedFloats() {
  if (p_) fftwf_free(p_);
}
AlignedFloats::AlignedFloats(AlignedFloats&& o) noexcept
    : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
AlignedFloats& AlignedFloats::operator=(AlignedFloats&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(n_, o.n_);
  return *this;
}

struct FftPair::Impl {
  fftwf_plan fwd = nullptr, inv = nullptr;
};

FftPair::FftPair(const tv::Dims& d, float* buffer, int threads) : impl_(std::make_unique<Impl>()) {
  std::lock_guard lock(planner_mutex());
#if defined(GLINT_HAVE_FFTW_THREADS)
  static const bool threads_ok = fftwf_init_threads() != 0;
  if (threads_ok) fftwf_plan_with_nthreads(threads > 0 ? threads : 1);
#else
  (void)threads;
#endif
  auto* c = reinterpret_cast<fftwf_complex*>(buffer);
  impl_->fwd = fftwf_plan_dft_r2c_3d(d.nz, d.ny, d.nx, buffer, c, FFTW_ESTIMATE);
  impl_->inv = fftwf_plan_dft_c2r_3d(d.nz, d.ny, d.nx, c, buffer, FFTW_ESTIMATE);
  if (!impl_->fwd || !impl_->inv) throw std::runtime_error("FFTW could not plan the 3D transform");
}

FftPair::~FftPair() {
  std::lock_guard lock(planner_mutex());
  if (impl_->fwd) fftwf_destroy_plan(impl_->fwd);
  if (impl_->inv) fftwf_destroy_plan(impl_->inv);
}

void FftPair::forward() { fftwf_execute(impl_->fwd); }
void FftPair::inverse() { fftwf_execute(impl_->inv); }

void pad(const tv::Dims& d, const float* in, float* out) {
  const std::size_t px = d.padded_x();
  for (std::size_t row = 0; row < std::size_t(d.ny) * d.nz; ++row) {
    std::memcpy(out + row * px, in + row * d.nx, d.nx * sizeof(float));
    for (std::size_t x = d.nx; x < px; ++x) out[row * px + x] = 0.0f;
  }
}

void unpad(const tv::Dims& d, const float* in, float* out) {
  const std::size_t px = d.padded_x();
  for (std::size_t row = 0; row < std::size_t(d.ny) * d.nz; ++row)
    std::memcpy(out + row * d.nx, in + row * px, d.nx * sizeof(float));
}

}  // namespace glint::recon
