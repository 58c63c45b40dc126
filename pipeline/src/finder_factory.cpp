#include "glint/pipeline/finder_factory.hpp"

#include <stdexcept>
#include <string>

#include "glint/gpu/device.hpp"
#include "glint/log.hpp"
#include "glint/gpu/gpu_finder.hpp"

namespace glint::pipeline {

namespace {

std::unique_ptr<ClusterFinder> make_cpu(const FinderParams& params, const FinderOptions& o) {
  return make_cpu_finder(params, o.threads, o.batch_frames);
}

std::unique_ptr<ClusterFinder> make_gpu(const FinderParams& params, const FinderOptions& o) {
  gpu::GpuFinderOptions g;
  g.batch_frames = o.batch_frames;
  g.streams = o.streams;
  g.devices = o.gpu_ids;
  g.tuning = o.tuning;
  return gpu::make_gpu_finder(params, g);
}

}  // namespace

std::unique_ptr<ClusterFinder> make_finder(const FinderParams& params,
                                           const FinderOptions& options) {
  validate(params);
  // Every pixel mode (raw, JUNGFRAU G0 only, JUNGFRAU calibrated) runs on both backends; the GPU
  // engine refuses any other with an error naming it.
  return make_on_backend<ClusterFinder>(
      options.backend, "cluster finder", [] { return gpu::unavailable_reason(); },
      [&] { return make_gpu(params, options); }, [&] { return make_cpu(params, options); });
}

}  // namespace glint::pipeline
