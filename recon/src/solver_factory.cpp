#include "glint/recon/solver_factory.hpp"

#include "glint/gpu/device.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "glint/recon/cpu_solver.hpp"

namespace glint::recon {

std::unique_ptr<tv::Reconstructor> make_reconstructor(const tv::Dims& dims,
                                                      const BackendOptions& o) {
  return make_on_backend<tv::Reconstructor>(
      o.backend, "TV solver", [] { return gpu::unavailable_reason(); },
      [&] {
        return std::make_unique<gpu::GpuReconstructor>(dims, o.variant, o.with_fft, o.device,
                                                        o.low_priority, o.tv_tuning);
      },
      [&] { return std::make_unique<CpuReconstructor>(dims, o.threads); });
}

}  // namespace glint::recon
