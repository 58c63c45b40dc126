#include "glint/pipeline/finder_factory.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>
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

int module_device(std::span<const int> gpu_ids, std::size_t k, std::size_t modules) {
  if (gpu_ids.empty() || modules == 0 || k >= modules)
    throw std::invalid_argument("module_device: no GPU ids, or no such module");
  return gpu_ids[k * gpu_ids.size() / modules];
}

std::unique_ptr<ClusterFinder> make_module_finders(const FinderParams& params,
                                                   std::vector<ModuleRegion> regions,
                                                   const FinderOptions& options,
                                                   const FinderFactory& make) {
  const std::size_t m = regions.size();
  if (m <= 1) return make_modular_finder(params, std::move(regions),
                                         [&](const FinderParams& p, std::size_t) {
                                           return make(p, options);
                                         },
                                         false);
  auto build = [&](Backend backend) {
    const bool cpu = backend == Backend::cpu;
    const unsigned total = options.threads ? options.threads
                                           : std::max(1u, std::thread::hardware_concurrency());
    return make_modular_finder(
        params, regions,
        [&](const FinderParams& p, std::size_t k) {
          FinderOptions o = options;
          o.backend = backend;
          if (cpu) o.threads = std::max<unsigned>(1, total / static_cast<unsigned>(m));
          else o.gpu_ids = {module_device(options.gpu_ids, k, m)};
          return make(p, o);
        },
        cpu);
  };
  if (options.backend != Backend::auto_select) return build(options.backend);
  if (gpu::unavailable_reason().empty()) {
    try {
      return build(Backend::gpu);
    } catch (const std::exception& e) {
      log::warn("cluster finder: GPU backend unusable ({}); using the CPU backend", e.what());
    }
  }
  return build(Backend::cpu);
}

}  // namespace glint::pipeline
