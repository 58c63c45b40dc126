#pragma once
// Chooses the reconstruction backend once: cpu, gpu, or auto (the GPU where there is one and the
// volume fits, else the CPU).
#include <memory>

#include "glint/backend.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

using glint::Backend;
using glint::parse_backend;

struct BackendOptions {
  Backend backend = Backend::auto_select;
  tv::Variant variant = tv::Variant::two_state;
  bool with_fft = true;  ///< false: the identity forward model only (no FFT buffers)
  int threads = 0;       ///< CPU threads (0: all)
  int device = 0;
  bool low_priority = false;  ///< GPU: the lowest stream priority (beside cluster finding)
  gpu::TvTuning tv_tuning;    ///< GPU: kernel choices and launch shapes (tuned defaults)
};

/// auto: the GPU solver where a GPU is usable and the volume fits on it, else the CPU solver
/// (logged). gpu: throws std::runtime_error with the reason when the GPU solver cannot run.
std::unique_ptr<tv::Reconstructor> make_reconstructor(const tv::Dims& dims,
                                                      const BackendOptions& options);

}  // namespace glint::recon
