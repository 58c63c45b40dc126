#pragma once
// The reconstruction stage beside cluster finding: hit images of every `frames_per_slice` frames
// (counts of cluster centres, or summed cluster signal) are stacked into a volume of `slices`
// slices; a full volume is reconstructed on a worker thread (on the GPU: a stream of the lowest
// priority), so that the caller -- the cluster-finding pipeline -- is never delayed: add() only
// accumulates, and a volume that finds the worker busy with two others is dropped and counted.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "glint/recon/forward_model.hpp"
#include "glint/cluster_table.hpp"
#include "glint/recon/solver_factory.hpp"
#include "glint/recon/volume_io.hpp"
#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

enum class HitWeight { centres, signal };

/// "centres" | "signal"; throws std::invalid_argument otherwise.
HitWeight parse_hit_weight(const std::string& s);

struct StageOptions {
  int width = 0, height = 0;        ///< detector image (cluster centres outside are ignored)
  std::uint32_t frames_per_slice = 100;
  std::uint32_t slices = 16;        ///< volume depth, >= 2
  HitWeight weight = HitWeight::centres;
  std::string forward = "identity";
  tv::SolverOptions solver;
  BackendOptions backend;           ///< low_priority is set by the stage
};

struct StageResult {
  std::uint64_t first_frame = 0, last_frame = 0;  ///< frame numbers the volume covers
  Volume input, output;
  tv::SolveReport report;
  std::string backend;
};

struct StageStats {
  std::uint64_t frames = 0;            ///< frames accumulated
  std::uint64_t volumes_done = 0;      ///< reconstructed and delivered
  std::uint64_t volumes_dropped = 0;   ///< dropped because the worker was busy
  std::uint64_t volumes_failed = 0;    ///< the solver threw (the message is logged)
};

class ReconstructionStage {
 public:
  /// sink is called on the worker thread with each reconstructed volume.
  ReconstructionStage(const StageOptions& options, std::function<void(StageResult&&)> sink);
  /// Reconstructs what is queued (not a partial volume), then stops the worker.
  ~ReconstructionStage();
  ReconstructionStage(const ReconstructionStage&) = delete;
  ReconstructionStage& operator=(const ReconstructionStage&) = delete;

  /// Accumulates a batch of found clusters (frames in order). Never waits for a reconstruction.
  void add(const ClusterTable& clusters);
  /// Queues the partial volume (at least two slices; a partial slice counts) for reconstruction,
  /// e.g. at the end of a run.
  void flush();
  /// Blocks until the queue is empty and the worker idle (tests, end of run).
  void wait_idle();
  StageStats stats() const;
  /// A sticky device error the worker met (the GPU context is lost: nothing on it can run any
  /// more, in this stage or elsewhere in the process), or null. The volume is counted as failed
  /// like any other; the caller rethrows the error to end the process (CudaError::sticky).
  std::exception_ptr fatal_error() const;

 private:
  void close_slice();
  void enqueue(StageResult&& r);
  void run(std::stop_token st);

  StageOptions o_;
  std::function<void(StageResult&&)> sink_;
  tv::Dims full_dims_{};     ///< a full volume: width x height x slices
  ForwardModel full_model_;  ///< H of a full volume, built (and checked) once
  // Producer side (the caller's thread).
  Volume current_;
  std::uint32_t slice_ = 0, frames_in_slice_ = 0;
  std::uint64_t first_frame_ = 0, last_frame_ = 0;
  bool have_first_ = false;
  // Shared with the worker.
  mutable std::mutex m_;
  std::condition_variable_any cv_;
  std::deque<StageResult> queue_;
  bool busy_ = false;
  StageStats stats_;
  std::exception_ptr fatal_;
  std::jthread worker_;
};

}  // namespace glint::recon
