#pragma once
// The reconstruction stage as a consumer of the run's clusters (config reconstruction.enabled):
// hit images of the data frames are stacked into volumes and reconstructed on the stage's own
// worker, which appends each volume to the run file as it is solved. It never delays the run:
// a volume that finds the worker busy is dropped and counted (its bounded queue).
#include <atomic>
#include <memory>

#include "glint/pipeline/result_consumer.hpp"
#include "glint/pipeline/run_file_consumer.hpp"
#include "glint/recon/reconstruction_stage.hpp"

namespace glint::pipeline {

class ReconstructionConsumer final : public ResultConsumer {
 public:
  /// Volumes go into `run_file`'s file, which must be registered (and so started) before this
  /// consumer and ended after it. A GPU solver takes `tv_tuning`.
  ReconstructionConsumer(RunFileConsumer& run_file, gpu::TvTuning tv_tuning)
      : run_file_(run_file), tv_tuning_(std::move(tv_tuning)) {}

  std::string_view name() const override { return "reconstruction"; }
  /// Sets up the stage. A stage that cannot be set up (e.g. a missing mask file) is logged and
  /// counted as one failed volume; cluster finding goes on without it.
  void on_start(const RunContext& run) override;
  /// Accumulates the batch (never waits for a reconstruction). Rethrows a fatal device error
  /// the worker met (RunStats::fatal).
  void on_batch(const FoundBatch& batch) override;
  /// Queues the partial volume when configured (not after an abort or an error), waits for the
  /// worker and records the totals in the run file.
  void on_end(const RunEnd& end) override;
  ConsumerStats stats() const override;
  /// The stage's counters, including a failure to set it up.
  recon::StageStats stage_stats() const;

 private:
  RunFileConsumer& run_file_;
  const gpu::TvTuning tv_tuning_;
  uint64_t run_index_ = 0;
  bool solve_partial_ = false;
  std::unique_ptr<recon::ReconstructionStage> owner_;
  std::atomic<recon::ReconstructionStage*> stage_{nullptr};  ///< for stats on other threads
  std::atomic<uint64_t> failed_at_start_{0};
};

}  // namespace glint::pipeline
