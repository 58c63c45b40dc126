#include "glint/recon/solver_factory.hpp"

#include <stdexcept>
#include <string>

#include "glint/gpu/device.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "glint/log.hpp"
#include "glint/recon/cpu_solver.hpp"

namespace glint::recon {

Backend parse_backend(std::string_view s) {
  if (s == "cpu") return Backend::cpu;
  if (s == "gpu") return Backend::gpu;
  if (s == "auto") return Backend::automatic;
  throw std::invalid_argument("unknown backend '" + std::string(s) + "' (cpu, gpu, auto)");
}

std::unique_ptr<tv::Reconstructor> make_reconstructor(const tv::Dims& dims,
                                                      const BackendOptions& o) {
  if (o.backend == Backend::cpu) return std::make_unique<CpuReconstructor>(dims, o.threads);
  if (o.backend == Backend::gpu) {
    const std::string why = gpu::unavailable_reason();
    if (!why.empty()) throw std::runtime_error("--backend gpu: " + why);
    return std::make_unique<gpu::GpuReconstructor>(dims, o.variant, o.with_fft, o.device,
                                                    o.low_priority);
  }
  if (gpu::device_count() > 0) {
    try {
      return std::make_unique<gpu::GpuReconstructor>(dims, o.variant, o.with_fft, o.device,
                                                    o.low_priority);
    } catch (const std::exception& e) {
      log::warn("TV solver: GPU not usable ({}); using the CPU", e.what());
    }
  }
  return std::make_unique<CpuReconstructor>(dims, o.threads);
}

}  // namespace glint::recon
