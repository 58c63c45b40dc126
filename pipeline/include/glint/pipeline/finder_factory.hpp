#pragma once
// Chooses the cluster-finder backend once, at start-up. Every backend gives the same bits.
#include <functional>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glint/backend.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/modular_finder.hpp"
#include "glint/gpu/find_tuning.hpp"

namespace glint::pipeline {

using glint::Backend;
using glint::parse_backend;

struct FinderOptions {
  Backend backend = Backend::auto_select;
  unsigned threads = 0;            ///< CPU threads; 0 = all hardware threads
  int batch_frames = 256;          ///< frames per batch (the finder's input slot)
  int streams = 2;                 ///< GPU stream slots per device
  std::vector<int> gpu_ids{0};     ///< GPUs to use
  gpu::FindTuning tuning;          ///< GPU finder tuning (the run's RunTuning::find)
};

/// auto: the GPU engine when a GPU is usable, the exact CPU backend otherwise (logged).
/// gpu: throws std::runtime_error with the reason when no GPU backend can run.
std::unique_ptr<ClusterFinder> make_finder(const FinderParams& params,
                                           const FinderOptions& options);

/// How a run builds its finder: make_finder, or (tests) a wrapper around it.
using FinderFactory =
    std::function<std::unique_ptr<ClusterFinder>(const FinderParams&, const FinderOptions&)>;

/// The GPU of `gpu_ids` that module k of `modules` runs on: the modules in contiguous groups,
/// one group per entry (gpu_ids [0, 1] and 8 modules: 0-3 on GPU 0, 4-7 on GPU 1; an id given
/// twice holds two groups).
int module_device(std::span<const int> gpu_ids, std::size_t k, std::size_t modules);

/// The finder of a detector of `regions` (module_grid): one finder per module made by `make`,
/// all on one backend (auto resolved once: the GPU when usable, else the CPU). GPU: each module
/// on module_device's GPU with options.streams streams of its own. CPU: the modules run at once,
/// options.threads (0: all hardware threads) shared among them. One region: make(params,
/// options) itself.
std::unique_ptr<ClusterFinder> make_module_finders(const FinderParams& params,
                                                   std::vector<ModuleRegion> regions,
                                                   const FinderOptions& options,
                                                   const FinderFactory& make);

}  // namespace glint::pipeline
