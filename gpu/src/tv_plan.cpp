// Device-memory planning of the GPU TV solver: host arithmetic only, built with or without CUDA.
#include <sstream>

#include <fmt/format.h>

#include "glint/gpu/tv_solver.hpp"

namespace glint::gpu {

int tv_dual_sets(tv::Variant v) {
  switch (v) {
    case tv::Variant::separate: return 2;
    case tv::Variant::fused:
    case tv::Variant::fused_cube:
    case tv::Variant::fused_march: return 3;
    case tv::Variant::two_state: return 3;
    case tv::Variant::temporal: return 4;
  }
  return 4;
}

double tv_volumes_needed(tv::Variant variant, bool fft) {
  // x, x_prev, the gradient-step buffer; y (identity only); the dual sets; the separate
  // variant's z.
  double v = 3 + (fft ? 0.0 : 1.0) + 3.0 * tv_dual_sets(variant);
  if (variant == tv::Variant::separate) v += 1;
  return v;
}

std::size_t tv_spectra_bytes(const tv::Dims& dims, bool fft) {
  return fft ? TvSpectra::kFloats * dims.spectrum_size() * sizeof(float) : 0;
}

std::string TvMemoryPlan::describe() const {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("{}x{}x{} ({}, {}): {} padded volumes of {:.3f} GiB + spectra {:.3f} GiB + "
                     "cuFFT work {:.3f} GiB = {:.3f} GiB of GPU memory ({:.3f} GiB free)",
                     dims.nx, dims.ny, dims.nz, tv::variant_name(variant),
                     fft ? "FFT" : "identity", volumes, volume_bytes / GiB, spectra_bytes / GiB,
                     fft_work_bytes / GiB, total_bytes / GiB, free_bytes / GiB);
}

}  // namespace glint::gpu
