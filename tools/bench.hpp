#pragma once
// Options of `glint bench find`, shared by the CPU and GPU benchmark back ends.
#include <cstddef>
#include <cstdint>

namespace glint::tools {

struct BenchFindOptions {
  uint32_t size = 400;          ///< square frames of size x size pixels
  std::size_t frames = 50000;   ///< data frames to time
  unsigned threads = 0;         ///< CPU threads (0 = all)
  std::size_t photons = 500;    ///< photons per frame
  int batch = 256;              ///< GPU frames per batch
  int streams = 2;              ///< GPU stream slots
  int gpus = 1;                 ///< GPUs
  int cluster_size = 3;
  double n_sigma = 5.0;
  uint64_t seed = 1;
};

/// The GPU engine's benchmark: prints frames/s, us/frame, GB/s, kernel time per frame, launches
/// and host synchronisations per batch, and the host-to-device floor measured in the same run.
int run_bench_find_gpu(const BenchFindOptions& options);

}  // namespace glint::tools
