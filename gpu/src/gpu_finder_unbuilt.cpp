// Until the GPU engine is compiled in, asking for it says so.
#include <stdexcept>

#include "glint/gpu/gpu_finder.hpp"

namespace glint::gpu {

std::unique_ptr<ClusterFinder> make_gpu_finder(const FinderParams&, const GpuFinderOptions&) {
  throw std::runtime_error("the GPU cluster finder is not built into this glint");
}

}  // namespace glint::gpu
