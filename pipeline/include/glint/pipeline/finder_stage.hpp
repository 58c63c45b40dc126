#pragma once
// The finder stage: gathers the run's images into batches in the finder's input slot (dark or
// data, consecutive frames), submits them, and hands every result to the consumers in frame
// order: data batches as they come back from the finder, dark frames and frames without a
// search as rows, each only after everything handed to the finder before it. It works through
// the ClusterFinder interface only: any backend, the same path. With a detector of modules
// (ModularFinder) the copy threads write each module's block where that module's finder reads it.
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pipeline/consumer_chain.hpp"
#include "glint/pipeline/frame_copier.hpp"
#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/run_counters.hpp"

namespace glint::pipeline {

enum class FrameKind { dark, data };

class FinderStage {
 public:
  /// Results go to `consumers`; the stage counts what it hands on in `counters`.
  FinderStage(std::unique_ptr<ClusterFinder> finder, FrameCopier& copier,
              ConsumerChain& consumers, RunCounters& counters);
  ~FinderStage();  ///< detaches the sink (results still in flight are dropped with the run)
  FinderStage(const FinderStage&) = delete;
  FinderStage& operator=(const FinderStage&) = delete;

  ClusterFinder& finder() { return *finder_; }

  /// Adds one complete image to the open batch (copied into the input slot, possibly on another
  /// thread; the image goes back to the pool). A change of kind submits the open batch first;
  /// a full batch is submitted.
  void add(FramePtr f, FrameKind kind);
  /// Hands the open batch to the finder (a dark batch's rows go to the consumers at once).
  void submit();
  /// Everything added so far has reached the consumers.
  void drain();
  /// Rows of frames without a cluster search (incomplete, missing, dropped), after everything
  /// added before them.
  void write_rows(std::span<const FrameRow> rows);
  /// An abort: the open batch is dropped; batches already submitted still reach the consumers.
  void discard();
  /// No more results reach the consumers (after a failure).
  void detach();

  /// From now on, clusters centred on a pixel `mask` masks are removed from each data batch
  /// before the consumers see it, and counted (RunCounters::masked_clusters, FoundBatch::masked).
  /// The filter sees the finder's ClusterTable only: the same for every backend.
  void set_mask(MaskFilter mask) { mask_ = std::move(mask); }
  /// Dark frames' pixels (raw, as submitted) are counted per pixel out of JUNGFRAU's G0 into
  /// `gains` (null: not counted). `gains` outlives the stage's dark frames.
  void count_dark_gains(DarkGainSwitches* gains) { dark_gains_ = gains; }

 private:
  void deliver(const ClusterTable& batch);

  std::unique_ptr<ClusterFinder> finder_;
  ModularFinder* modular_ = nullptr;  ///< finder_ when it is a detector of modules
  std::vector<std::span<uint16_t>> module_slots_;  ///< the open batch's slots, by module
  FrameCopier& copier_;
  ConsumerChain& consumers_;
  RunCounters& counters_;
  const std::size_t pixels_;
  const std::size_t capacity_;  ///< frames per batch: the finder's input slot

  FrameKind kind_ = FrameKind::data;
  std::span<uint16_t> slot_;    ///< the open batch's input slot, taken at its first frame
  std::vector<uint64_t> numbers_, timestamps_;
  std::vector<FrameRow> rows_;
  std::deque<std::vector<uint64_t>> in_flight_;  ///< timestamps of each submitted data batch
  MaskFilter mask_;
  ClusterTable kept_;              ///< a batch without its masked clusters
  std::vector<uint32_t> removed_;  ///< masked clusters per frame of that batch
  std::vector<uint64_t> per_module_;  ///< a batch's clusters per module
  DarkGainSwitches* dark_gains_ = nullptr;
};

}  // namespace glint::pipeline
