#include "stream_view.hpp"

#include <cuda_runtime_api.h>

#include "check.cuh"

namespace glint::gpu::detail {

void StreamView::synchronize() const { GLINT_CUDA_CHECK(cudaStreamSynchronize(s_)); }

}  // namespace glint::gpu::detail
