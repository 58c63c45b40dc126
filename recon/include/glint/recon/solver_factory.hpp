#pragma once
// Chooses the reconstruction backend once: cpu, gpu, or auto (the GPU where there is one and the
// volume fits, else the CPU).
#include <memory>
#include <string>
#include <string_view>

#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

enum class Backend { cpu, gpu, automatic };

/// "cpu" | "gpu" | "auto"; throws std::invalid_argument otherwise.
Backend parse_backend(std::string_view s);

struct BackendOptions {
  Backend backend = Backend::automatic;
  tv::Variant variant = tv::Variant::two_state;
  bool with_fft = true;  ///< false: the identity forward model only (no FFT buffers)
  int threads = 0;       ///< CPU threads (0: all)
  int device = 0;
  bool low_priority = false;  ///< GPU: the lowest stream priority (beside cluster finding)
};

std::unique_ptr<tv::Reconstructor> make_reconstructor(const tv::Dims& dims,
                                                      const BackendOptions& options);

}  // namespace glint::recon
