#pragma once
// Between the source and the finder stage: turns the source's images into the run's rows, one
// per frame number, in order. A jump in frame numbers becomes rows for the missing frames (or
// the dropped ones, flagged as such); an incomplete image becomes a row without a search; a
// complete image goes to the finder stage as a dark frame while the pedestal is being taken and
// as a data frame after.
#include <cstdint>
#include <functional>
#include <optional>

#include "glint/pipeline/finder_stage.hpp"
#include "glint/pipeline/frame_source.hpp"
#include "glint/pipeline/run_counters.hpp"

namespace glint::pipeline {

class FrameSequencer {
 public:
  /// `pedestal_ready` is called once the last of `dark_frames` dark frames has been submitted
  /// (at once from start_data() when there are none to take).
  FrameSequencer(uint64_t run_index, uint64_t dark_frames, FrameSource& source,
                 FinderStage& finder, RunCounters& counters,
                 std::function<void()> pedestal_ready);

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
  /// Rows for the frame numbers in [from, to) that never reached the finder.
  void write_gap(uint64_t from, uint64_t to);

  const uint64_t run_index_;
  uint64_t dark_remaining_;
  FrameSource& source_;
  FinderStage& finder_;
  RunCounters& counters_;
  std::function<void()> pedestal_ready_;
  std::optional<uint64_t> next_expected_;
  bool dark_by_marker_ = false;
  bool marked_seen_ = false;
};

}  // namespace glint::pipeline
