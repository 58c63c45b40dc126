#pragma once
// Copies assembled images into the finder's input slot on a few threads, so that the run's
// thread only orders frames and hands batches on; each copied image is pre-processed in place
// (FramePreprocessing) and goes back to the assembler's pool at once. With no threads the copies
// happen on the caller's thread.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "glint/config/config.hpp"
#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/frame_preprocessing.hpp"

namespace glint::pipeline {

/// Copy threads: as configured (ingest.copy_threads); "auto" (negative): none on small machines
/// (the copy stays on the run's thread), up to 4.
unsigned copy_threads(int configured);

class FrameCopier {
 public:
  FrameCopier(unsigned threads, const config::DetectorConfig& det, FrameAssembler& assembler,
              const FramePreprocessing& preprocessing);
  ~FrameCopier();
  FrameCopier(const FrameCopier&) = delete;
  FrameCopier& operator=(const FrameCopier&) = delete;

  /// Writes `f`'s image into `dst` (one image), pre-processes it and releases `f`. (Only for a
  /// finder that is not a ModularFinder: one module mounted normal, whose raw frame is the
  /// image.)
  void copy(FramePtr f, std::span<uint16_t> dst);
  /// Writes each module's block of `f`'s image (regions[k]) where module k's finder reads it,
  /// as image `index` of its input slot slots[k], and releases `f`. The block is written as the
  /// ports deliver it, the module's native order, whatever regions[k].orientation: the finder
  /// reads native frames, ModularFinder turns its results into the image. `regions` and `slots`
  /// outlive the copy (until wait()). (The pre-processing stage sees whole images only; it is
  /// inactive on a detector of modules.)
  void copy_modules(FramePtr f, std::span<const ModuleRegion> regions,
                    std::span<const std::span<uint16_t>> slots, std::size_t index);
  /// Returns once every copy handed in so far is done.
  void wait();
  /// The destinations are read next by a device, not by this CPU (ClusterFinder::
  /// staging_read_by_device): images are written with non-temporal stores, unless pre-processed.
  void set_streaming(bool streaming) { streaming_ = streaming; }

 private:
  struct Task {
    FramePtr frame;
    std::span<uint16_t> dst;                     ///< the image (no regions)
    std::span<const ModuleRegion> regions;        ///< or each module's block ...
    std::span<const std::span<uint16_t>> slots;   ///< ... into its finder's slot ...
    std::size_t index = 0;                        ///< ... as this image of the batch
  };
  void loop(std::stop_token st);
  void write(Task t);
  void enqueue(Task t);

  const config::DetectorConfig det_;
  FrameAssembler& assembler_;
  const FramePreprocessing& preprocessing_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Task> tasks_;
  std::size_t outstanding_ = 0;
  std::atomic<bool> streaming_{false};
  std::vector<std::jthread> threads_;  // last: stopped and joined first
};

}  // namespace glint::pipeline
