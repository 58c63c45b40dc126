#include "glint/pipeline/finder_factory.hpp"

#include <stdexcept>
#include <string>

#include "glint/gpu/device.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/log.hpp"

namespace glint::pipeline {

Backend parse_backend(std::string_view name) {
  if (name == "cpu") return Backend::cpu;
  if (name == "gpu") return Backend::gpu;
  if (name == "auto") return Backend::auto_select;
  throw std::invalid_argument("unknown backend '" + std::string(name) +
                              "' (allowed: cpu, gpu, auto)");
}

std::string_view to_string(Backend backend) {
  switch (backend) {
    case Backend::cpu: return "cpu";
    case Backend::gpu: return "gpu";
    case Backend::auto_select: return "auto";
  }
  return "auto";
}

namespace {

std::unique_ptr<ClusterFinder> make_cpu(const FinderParams& params, const FinderOptions& o) {
  return make_cpu_finder(params, o.threads, o.batch_frames);
}

std::unique_ptr<ClusterFinder> make_gpu(const FinderParams& params, const FinderOptions& o) {
  const std::string reason = gpu::unavailable_reason();
  if (!reason.empty()) throw std::runtime_error("GPU backend not available: " + reason);
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
  switch (options.backend) {
    case Backend::cpu: return make_cpu(params, options);
    case Backend::gpu: return make_gpu(params, options);
    case Backend::auto_select:
      if (gpu::device_count() > 0) {
        try {
          return make_gpu(params, options);
        } catch (const std::exception& e) {
          log::warn("GPU backend unusable ({}); using the CPU backend", e.what());
        }
      }
      return make_cpu(params, options);
  }
  throw std::logic_error("make_finder: unhandled backend");
}

}  // namespace glint::pipeline
