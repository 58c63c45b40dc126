#pragma once
// `glint bench find`: options shared by the CPU side (bench_find.cpp) and the GPU side
// (bench_find_gpu.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/config/config.hpp"
#include "glint/synthetic.hpp"

namespace glint::pipeline {
class ProductsConsumer;
}

namespace glint::tools {

struct BenchFindOptions {
  uint32_t size = 400;          ///< frames are size x size pixels
  uint32_t rows = 0, cols = 0;  ///< frames are rows x cols pixels instead (0: size)
  uint64_t frames = 1000;       ///< data frames, generated in memory before timing
  unsigned threads = 0;         ///< CPU threads, 0 = all cores
  double photons = 500.0;       ///< mean photons per data frame
  int batch = 256;              ///< GPU frames per batch
  int streams = 2;              ///< GPU streams per device
  std::vector<int> gpus{0};     ///< GPUs to use
  int cluster_size = 3;
  double n_sigma = 5.0;
  uint64_t seed = 1;
  /// generic, or jungfrau: gain bits over a 14-bit ADC (glint::synth's gain switching); clusters
  /// on G0 pixels only, or on calibrated frames with `gain_file` or `calibrated`.
  std::string detector = "generic";
  std::string gain_file;      ///< JUNGFRAU gain maps (PSI module file)
  std::string pedestal_file;  ///< with gain_file: G1/G2 pedestals (else from the dark frames)
  bool calibrated = false;    ///< calibrated with glint::synth's gain maps and G1/G2 pedestals
  std::string products;       ///< --products LIST: also time the run with these products on
  unsigned products_threads = 0;  ///< their worker threads, 0: as glintd (min(4, cores / 4))
  std::string products_device = "auto";  ///< --products-device: auto | cpu | gpu (products.device)
  std::string eta_calibration;    ///< --eta-calibration FILE: the sub-pixel image too
  uint32_t subpixel = 5;          ///< --subpixel F: its sub-pixels per pixel and axis
  std::vector<uint32_t> modules{1, 1};  ///< --modules X,Y: a detector of X x Y modules
};

/// `--products`: the products' configuration and a consumer for the timed run with them on.
config::ProductsConfig bench_products_config(const BenchFindOptions& options);

/// What one products worker costs: ProductSums::add over `batches` on this thread, in ns per
/// cluster (at least ~0.2 s of work, repeated over the batches as needed).
double products_ns_per_cluster(const config::ProductsConfig& products, const FinderParams& params,
                               const std::vector<ClusterTable>& batches);

/// The frame shape of a run: rows x cols, SIZE where either is 0.
FrameShape bench_shape(const BenchFindOptions& options);

/// The finder parameters of a run: its frame shape, the cluster size, n_sigma and the pixel
/// mode (with its calibration tables). Throws std::runtime_error naming a file that does not fit.
FinderParams bench_finder_params(const BenchFindOptions& options);

/// The frames of a run (glint::synth from `seed`) under a steady load: every data frame carries
/// about `photons` photons (no crowded frames). Frames [0, dark_frames) are dark.
synth::Config bench_frames_config(const BenchFindOptions& options);

/// Frames [first, first + count) of `gen`, back to back.
std::vector<uint16_t> synthesize(const synth::Generator& gen, uint64_t first, uint64_t count);

/// Prints the run with the products against the run without them (frames/s each, the run
/// thread's waits and copies), the end of the run apart (`end_seconds`: merging or downloading
/// the tables, once per run) and one worker's cost per cluster.
void print_products_timing(const BenchFindOptions& o, double fps_off, double fps_on,
                           const pipeline::ProductsConsumer& products, uint64_t clusters,
                           double ns_per_cluster, double end_seconds);

/// The GPU benchmark; prints its figures and returns the exit status.
int run_bench_find_gpu(const BenchFindOptions& options);
/// The GPU benches' checks of the options and of the GPUs asked for: 0, or kExitUsage after
/// printing what is wrong.
int gpu_bench_usage_problem(const BenchFindOptions& options);

/// The frames a GPU bench submits: its dark frames, and a pool of data frames (one batch per
/// stream slot, at most 1024 frames) that fills every slot once and is then resubmitted.
struct GpuBenchFrames {
  synth::Config config;
  std::vector<uint16_t> dark, pool;
  std::size_t pool_frames = 0;
};
GpuBenchFrames gpu_bench_frames(const BenchFindOptions& options);
/// The same for a detector of modules (--modules): one GPU finder per module, spread over --gpus.
int run_bench_find_gpu_modules(const BenchFindOptions& options);

}  // namespace glint::tools
