#pragma once
// The GPU cluster-finding engine behind the ClusterFinder interface. Header free of CUDA.
//
// Exact: clusters, pedestal sums and counts are byte-identical to the CPU reference for every
// batch size, stream count and GPU count (docs/performance.md, GPU section, describes how).
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/gpu/find_tuning.hpp"

namespace glint::gpu {

struct GpuFinderOptions {
  int batch_frames = 256;     ///< frames per batch (one H2D copy, one graph replay)
  int streams = 2;            ///< stream slots per GPU (batches in flight)
  std::vector<int> devices{0};
  /// Clusters per frame the output buffers hold on average; 0 = pixels/16. A batch that finds
  /// more is never truncated: it is re-run exactly from its start-of-batch pedestal snapshot into
  /// exactly sized buffers (counted in GpuFinderStats::overflow_reruns) and the capacity grows.
  int cluster_capacity = 0;
  FindTuning tuning;          ///< kernel shapes and diagnosis aids (tuned defaults)
};

/// One GPU's band of a batch's results: counts[i] clusters of frame i lie in this band. With
/// pieces_per_frame == 0 they follow each other in frame order, raster order within a frame. As
/// the GPU finder writes them (in place, each segment of the band where its block had room), frame
/// i's clusters are its pieces_per_frame pieces in raster order, piece q holding
/// piece_counts[i * pieces_per_frame + q] clusters from cluster piece_first[...] of x, y and the
/// values; x, y and the values then span every cluster handed out, some of them unused.
struct GpuBandView {
  std::span<const uint32_t> counts;
  std::span<const uint16_t> x;
  std::span<const uint16_t> y;
  /// S*S values per cluster (a float's bits when calibrated); empty when they came back as int16.
  std::span<const int32_t> data;
  /// JUNGFRAU pixels: per frame, this band's pixels in G1, in G2 and with the invalid gain code
  /// (3 values per frame); empty otherwise.
  std::span<const uint32_t> gain_counts = {};
  /// S*S values per cluster as int16 (FindTuning::narrow, while every value fits); empty
  /// otherwise. Exactly one of data and data16 holds the values of a band with clusters.
  std::span<const int16_t> data16 = {};
  std::span<const uint32_t> piece_counts = {};
  std::span<const uint32_t> piece_first = {};
  uint32_t pieces_per_frame = 0;

  /// The clusters of the band (the sum of counts).
  uint64_t n_clusters() const;
};

/// One batch's results, valid during the sink call, straight from the engine's result buffers
/// (no merge copy). The bands are the GPUs' row bands in row order, so frame i's clusters in
/// raster order are band 0's clusters of frame i, then band 1's, and so on.
struct GpuBatchView {
  std::span<const uint64_t> frame_numbers;
  std::span<const GpuBandView> bands;

  /// Clusters of the whole batch.
  uint64_t n_clusters() const;
};

/// Appends a batch's clusters to `out` in frame order (out's cluster size must be the finder's;
/// int16 values are widened), and with a table that keeps gain counts, each frame's gain counts
/// summed over the bands.
void append_clusters(ClusterTable& out, const GpuBatchView& v);

struct GpuFinderStats {
  uint64_t batches = 0;
  uint64_t frames = 0;
  uint64_t clusters = 0;
  uint64_t graph_launches = 0;   ///< captured-graph replays (one per full batch and GPU)
  uint64_t direct_launches = 0;  ///< kernels launched outside a graph (partial batches, dark)
  /// Host waits on a batch's completion event (one per batch and GPU; a re-run's wait for its
  /// own work is counted with the re-runs).
  uint64_t host_syncs = 0;
  uint64_t overflow_reruns = 0;  ///< batches re-run because their clusters did not fit
  /// Batches whose results outgrew the device-to-host copy sized from the batches before (the load
  /// rose): found again exactly from their start-of-batch snapshot once they had finished (the
  /// next batch's find may already be writing the device output), as an overflow is.
  uint64_t outgrown_reruns = 0;
  /// Batches found with int16 values (FindTuning::narrow) that held a value beyond them: found
  /// again exactly with int32 values, as every batch after them is.
  uint64_t wide_reruns = 0;
  double kernel_ms = 0.0;        ///< device time of the find work (events), summed over batches
};

/// The GPU engine behind the streaming ClusterFinder interface (staging() is the engine's pinned
/// staging of the next slot; batches complete asynchronously and reach the sink in submission
/// order when their slot is reused or at flush()). Beyond the interface: the results as views of
/// the engine's own buffers (no copy) and the engine's statistics, for benchmarks and tests.
class GpuClusterFinder : public ClusterFinder {
 public:
  /// Receives a batch's results as views of the engine's result buffers, valid during the call.
  using Sink = std::function<void(const GpuBatchView&)>;

  /// The interface's sink: each batch's views are appended to a table the finder keeps (one copy,
  /// as append_clusters does) and handed on. Replaces a view sink.
  void set_sink(ResultSink sink) final;
  /// The input slots are pinned staging, read by the GPU's copy engine.
  bool staging_read_by_device() const final { return true; }
  /// Where streamed batches' results go as views (find() uses its own table meanwhile). Replaces
  /// the interface's sink.
  virtual void set_view_sink(Sink sink) = 0;
  virtual GpuFinderStats stats() const = 0;

 private:
  ClusterTable results_;  ///< set_sink's table, reused batch after batch
};

/// Throws glint::gpu::CudaError (or std::runtime_error where the engine is not built) when the
/// GPU backend cannot run, std::invalid_argument for unusable options.
std::unique_ptr<GpuClusterFinder> make_gpu_finder(const FinderParams& params,
                                                  const GpuFinderOptions& options);

}  // namespace glint::gpu
