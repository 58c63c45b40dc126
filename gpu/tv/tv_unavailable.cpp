// Built when nvcc was not found: the GPU TV solver's API exists and says why it cannot run.
#include <stdexcept>

#include "glint/gpu/tv_solver.hpp"

namespace glint::gpu {

struct GpuReconstructor::Impl {};

GpuReconstructor::GpuReconstructor(const tv::Dims&, tv::Variant, bool, int, bool,
                                   const TvTuning&) {
  throw std::runtime_error("the GPU TV solver is not built into this glint (built without CUDA)");
}
GpuReconstructor::~GpuReconstructor() = default;
std::string GpuReconstructor::name() const { return "gpu (not built)"; }
tv::Dims GpuReconstructor::dims() const { return {}; }
const TvMemoryPlan& GpuReconstructor::memory_plan() const {
  throw std::runtime_error("the GPU TV solver is not built into this glint");
}
tv::SolveReport GpuReconstructor::solve(std::span<const float>, const tv::TransferFunction&,
                                        const tv::SolverOptions&, std::span<float>,
                                        const tv::Progress&) {
  throw std::runtime_error("the GPU TV solver is not built into this glint");
}
void GpuReconstructor::denoise(std::span<const float>, float, int, bool, std::span<float>,
                               std::span<float>) {
  throw std::runtime_error("the GPU TV solver is not built into this glint");
}
double measure_copy_bandwidth(std::size_t, int, int) {
  throw std::runtime_error("the GPU TV solver is not built into this glint");
}
unsigned long long count_recip_sqrt_mismatches(float, float, int) {
  throw std::runtime_error("the GPU TV solver is not built into this glint");
}

}  // namespace glint::gpu
