#pragma once
// Between the source and the finder stage: turns the source's images into the run's rows, one
// per frame number, in order. A jump in frame numbers becomes rows for the missing frames (or
// the dropped ones, flagged as such); an incomplete image becomes a row without a search; a
// complete image goes to the finder stage as a dark frame while the pedestal is being taken and
// as a data frame after.
//
// A decimated stream (slsReceiver's rx_zmqfreq N: every N-th frame) is recognised by its first
// step: a run whose first two images are N > 1 apart (none dropped between them, N at most
// kMaxStreamStride) has stride N, and rows are written for the frame numbers on that stride
// only. A later step that is not a multiple of N ends the stride (logged; stride 1 from there).
// Rows for missing and dropped frames are bounded per run (run.max_missing_rows): the one that
// reaches the bound calls `missing_limit` (the run ends), and further ones are only counted.
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "glint/pipeline/finder_stage.hpp"
#include "glint/pipeline/frame_source.hpp"
#include "glint/pipeline/run_counters.hpp"

namespace glint::pipeline {

/// The largest step taken as a decimated stream's stride.
inline constexpr uint64_t kMaxStreamStride = 10000;

class FrameSequencer {
 public:
  /// `pedestal_ready` is called once the last of `dark_frames` dark frames has been submitted
  /// (at once from start_data() when there are none to take).
  FrameSequencer(uint64_t run_index, uint64_t dark_frames, FrameSource& source,
                 FinderStage& finder, RunCounters& counters,
                 std::function<void()> pedestal_ready,
                 uint64_t max_missing_rows = UINT64_MAX, std::function<void()> missing_limit = {});

  /// pedestal.dark_marker frame_mode: a frame is dark when its sender marked it so
  /// (AssembledFrame::dark_marked), data otherwise; the first unmarked frame after marked ones
  /// makes the pedestal ready even before dark_frames of them.
  void take_dark_by_marker(bool on) { dark_by_marker_ = on; }
  /// No dark frames to take (the previous run's pedestal is kept, or none are configured):
  /// data taking starts now.
  void start_data();
  /// Routes one image from the source (its buffer goes back to the pool).
  void route(FramePtr f);
  /// At a graceful end: rows for the frames dropped after the last one received.
  void finish();

 private:
  /// Rows for the frame numbers from, from + stride, ... below `to` that never reached the
  /// finder (`dropped`: those dropped at the assembler, ascending).
  void write_gap(uint64_t from, uint64_t to, uint64_t stride, const std::vector<uint64_t>& dropped);

  const uint64_t run_index_;
  uint64_t dark_remaining_;
  FrameSource& source_;
  FinderStage& finder_;
  RunCounters& counters_;
  std::function<void()> pedestal_ready_;
  std::optional<uint64_t> next_expected_;
  bool dark_by_marker_ = false;
  bool marked_seen_ = false;
  const uint64_t max_missing_rows_;
  std::function<void()> missing_limit_;
  uint64_t gap_rows_ = 0;  ///< missing and dropped rows written
  std::optional<uint64_t> last_;  ///< the last frame number routed
  bool first_step_ = true;
  uint64_t stride_ = 1;
};

}  // namespace glint::pipeline
