#pragma once
// Chooses the cluster-finder backend once, at start-up. Every backend gives the same bits.
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "glint/backend.hpp"
#include "glint/cluster_finder.hpp"
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

}  // namespace glint::pipeline
