#pragma once
// The GPU cluster-finding engine behind the ClusterFinder interface. Header free of CUDA.
#include <memory>
#include <vector>

#include "glint/cluster_finder.hpp"

namespace glint::gpu {

struct GpuFinderOptions {
  int batch_frames = 256;     ///< frames per batch (one H2D copy, one graph replay)
  int streams = 2;            ///< stream slots per GPU (batches in flight)
  std::vector<int> devices{0};
};

/// Throws glint::gpu::CudaError (or std::runtime_error where the engine is not built) when the
/// GPU backend cannot run; see unavailable_reason().
std::unique_ptr<ClusterFinder> make_gpu_finder(const FinderParams& params,
                                               const GpuFinderOptions& options);

}  // namespace glint::gpu
