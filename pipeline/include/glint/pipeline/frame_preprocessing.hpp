#pragma once
// The pre-processing stage between the source and the finder: it sees each complete image's
// pixels once they are in the finder's input slot, before the batch is submitted, and may change
// them in place (calibration). It runs on the copy threads (FrameCopier), one image per
// call, several images at a time: it must not keep state between images other than read-only
// tables built at run start. Today it does nothing: the finder sees the raw pixels.
#include <cstdint>
#include <span>

#include "glint/config/config.hpp"

namespace glint::pipeline {

class FramePreprocessing {
 public:
  /// Built at run start from the run's configuration (tables are loaded here, never per frame).
  explicit FramePreprocessing(const config::Config& cfg);

  /// Whether apply() changes anything (false: the stage is skipped).
  bool active() const { return false; }
  /// Processes one image in place: `pixels` is the image (rows x cols, row-major) in the
  /// finder's input slot.
  void apply(uint64_t frame_number, std::span<uint16_t> pixels) const;
};

}  // namespace glint::pipeline
