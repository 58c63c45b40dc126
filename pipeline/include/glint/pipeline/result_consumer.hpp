#pragma once
// What receives a run's results: the last stages of the chain (source -> pre-processing ->
// finder -> consumers). Consumers are registered per run (ConsumerChain) and see every frame of
// the run once, in frame order: data frames as batches of per-frame records and clusters
// (on_batch), every other frame as a row without clusters (on_rows: dark, incomplete, missing,
// dropped). Calls come from the run's thread, one at a time.
//
// A consumer that may fall behind (a live view, a slow stage) must not delay the run: it keeps a
// bounded queue of its own, drops what does not fit and counts it (ConsumerStats::dropped). The
// run file never drops: a failure there fails the run. The products never drop either (sums over
// every frame): their workers keep up, and a full queue makes the run wait.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "glint/cluster_finder.hpp"
#include "glint/cluster_table.hpp"
#include "glint/config/config.hpp"
#include "glint/pedestal.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::pipeline {

/// What a consumer learns at the start of a run.
struct RunContext {
  const config::Config& cfg;
  uint64_t run_index = 0;
  std::filesystem::path file;      ///< the run file
  FinderParams finder;
  std::string backend;             ///< the finder's description
};

/// Data frames searched for clusters, in frame order: one record per frame in `clusters` (its
/// clusters in raster order), `timestamps` per frame. With a pixel mask, `clusters` holds only
/// the clusters whose centre is not masked and `masked` the clusters removed per frame (empty
/// without a mask). Valid during the call only.
struct FoundBatch {
  const ClusterTable& clusters;
  std::span<const uint64_t> timestamps;
  std::span<const uint32_t> masked = {};
};

/// How the run ended, for on_end.
struct RunEnd {
  const PedestalState* end_pedestal = nullptr;  ///< null after an abort's failure or an error
  bool aborted = false;   ///< queued frames were not processed
  bool failed = false;    ///< the run is in the error state: close what is open, nothing more
  std::string end_reason; ///< end of acquisition, stop, frame limit, time limit, abort, disk_low
  uint64_t stream_stride = 1;  ///< frame-number step of the stream (a decimated stream: N)
  uint64_t masked_clusters = 0;  ///< clusters removed by the pixel mask over the run
};

/// Each consumer's own counters (exact; readable from any thread).
struct ConsumerStats {
  std::string name;
  uint64_t frames = 0;   ///< rows handed to it (data frames and rows without clusters)
  uint64_t dropped = 0;  ///< what it dropped for lack of room (its own unit, e.g. volumes)
  uint64_t failed = 0;   ///< what it failed to produce (logged)
};

class ResultConsumer {
 public:
  virtual ~ResultConsumer() = default;
  /// A short name for logs and statistics ("run file", "clust file", "reconstruction").
  virtual std::string_view name() const = 0;

  /// Before the first frame (the finder is built, nothing has been received). Throws to fail
  /// the run.
  virtual void on_start(const RunContext& run) = 0;
  /// The pedestal data taking starts from, once the dark frames are in (or kept from before).
  virtual void on_pedestal(const PedestalState& pedestal) { (void)pedestal; }
  /// The run's pixel mask (NXdetector pixel_mask bits, rows x cols), once it is final: at the
  /// end of the dark frames, before on_pedestal. Only when the run has a mask (mask.*).
  virtual void on_pixel_mask(std::span<const uint32_t> mask) { (void)mask; }
  /// Data frames and their clusters, in frame order.
  virtual void on_batch(const FoundBatch& batch) = 0;
  /// Frames without a cluster search, in frame order with on_batch's frames.
  virtual void on_rows(std::span<const FrameRow> rows) { (void)rows; }
  /// Make what was received so far durable and visible to readers (every output.flush_interval_ms).
  virtual void flush() {}
  /// The run ended (also after an error): finish and close. Consumers end in the reverse order
  /// of registration, so that one handing its results to an earlier one ends before it.
  virtual void on_end(const RunEnd& end) = 0;

  virtual ConsumerStats stats() const = 0;
};

}  // namespace glint::pipeline
