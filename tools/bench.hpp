#pragma once
// `glint bench find`: options shared by the CPU side (bench_find.cpp) and the GPU side
// (bench_find_gpu.cpp).
#include <cstdint>
#include <string>
#include <vector>

namespace glint::tools {

struct BenchFindOptions {
  uint32_t size = 400;          ///< frames are size x size pixels
  uint64_t frames = 1000;       ///< data frames, generated in memory before timing
  unsigned threads = 0;         ///< CPU threads, 0 = all cores
  double photons = 500.0;       ///< mean photons per data frame
  int batch = 256;              ///< GPU frames per batch
  int streams = 2;              ///< GPU streams per device
  std::vector<int> gpus{0};     ///< GPUs to use
  int cluster_size = 3;
  double n_sigma = 5.0;
  uint64_t seed = 1;
};

/// The GPU benchmark; prints its figures and returns the exit status.
int run_bench_find_gpu(const BenchFindOptions& options);

}  // namespace glint::tools
