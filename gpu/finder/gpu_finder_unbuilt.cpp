// Built without CUDA: asking for the GPU engine says so.
#include <stdexcept>

#include "glint/gpu/gpu_finder.hpp"

namespace glint::gpu {

std::unique_ptr<GpuClusterFinder> make_gpu_finder(const FinderParams&, const GpuFinderOptions&) {
  throw std::runtime_error("the GPU cluster finder is not built into this glint (built without "
                           "CUDA)");
}

}  // namespace glint::gpu
