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
  if (params.pixels != PixelMode::raw) {
    // JUNGFRAU gain handling and calibration exist on the CPU backends only.
    const std::string what =
        params.pixels == PixelMode::jungfrau_calibrated
            ? "detector.type jungfrau with calibration (calibrated frames)"
            : "detector.type jungfrau (G0-only finding)";
    if (options.backend == Backend::gpu)
      throw std::runtime_error("cluster finder: the GPU backend does not support " + what +
                               "; use backend cpu");
    if (options.backend == Backend::auto_select)
      log::info("cluster finder: {} runs on the CPU backend (the GPU backend does not support it)",
                what);
    return make_cpu(params, options);
  }
  return make_on_backend<ClusterFinder>(
      options.backend, "cluster finder", [] { return gpu::unavailable_reason(); },
      [&] { return make_gpu(params, options); }, [&] { return make_cpu(params, options); });
}

}  // namespace glint::pipeline
