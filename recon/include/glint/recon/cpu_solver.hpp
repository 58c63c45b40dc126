#pragma once
// The CPU reference TV solver: FFTW single precision (threaded) and the same per-voxel FGP
// arithmetic as the GPU kernels (glint/tv/fgp_math.hpp), in the separate variant's order.
#include <memory>

#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

class CpuReconstructor final : public tv::Reconstructor {
 public:
  /// threads <= 0: all hardware threads.
  CpuReconstructor(const tv::Dims& dims, int threads = 0);
  ~CpuReconstructor() override;
  CpuReconstructor(const CpuReconstructor&) = delete;
  CpuReconstructor& operator=(const CpuReconstructor&) = delete;

  std::string name() const override;
  tv::Dims dims() const override;
  tv::SolveReport solve(std::span<const float> y, const tv::TransferFunction& H,
                        const tv::SolverOptions& options, std::span<float> x,
                        const tv::Progress& progress = {}) override;
  void denoise(std::span<const float> b, float w, int steps, bool nonneg, std::span<float> p,
               std::span<float> x) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace glint::recon
