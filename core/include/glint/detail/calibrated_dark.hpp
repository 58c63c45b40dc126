#pragma once
// The dark frames of a calibrated JUNGFRAU finder. They serve twice, as with aare: first every
// dark frame goes into the per-stage ADC pedestal (aare's calculate_pedestal), then, once that
// pedestal is fixed, the same frames are calibrated with it and pushed into the finder's
// (keV) pedestal. The raw dark frames are therefore kept until the pedestal is fixed: at the
// first data frame or the first pedestal read-out. Dark frames after that are calibrated with
// the fixed pedestal and pushed at once.
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/jungfrau.hpp"

namespace glint::detail {

class CalibratedDark {
 public:
  explicit CalibratedDark(const FinderParams& p)
      : np_(p.shape.pixels()) {
    if (p.pixels != PixelMode::jungfrau_calibrated) return;
    active_ = true;
    stage_pedestal_ = jungfrau::StagePedestal(p.shape);
    pedestal_ = p.calibration->pedestal;
    gain_ = p.calibration->gain;
    for (int s = 0; s < jungfrau::kStages; ++s)
      from_dark_[s] = p.calibration->pedestal_from_dark[s];
    open_ = from_dark_[0] || from_dark_[1] || from_dark_[2];
  }

  bool active() const { return active_; }
  /// The ADC pedestal is still being accumulated: dark frames must be kept, not pushed.
  bool open() const { return open_; }

  /// Accumulates dark frames (whole frames) into the ADC pedestal and keeps them.
  void keep(std::span<const uint16_t> frames) {
    for (std::size_t off = 0; off < frames.size(); off += np_)
      stage_pedestal_.add(frames.subspan(off, np_));
    kept_.insert(kept_.end(), frames.begin(), frames.end());
  }

  /// Fixes the ADC pedestal and returns the kept dark frames, to be calibrated and pushed.
  /// Throws std::runtime_error when no dark frame was seen.
  std::vector<uint16_t> close() {
    if (stage_pedestal_.frames() == 0)
      throw std::runtime_error("calibrated JUNGFRAU finding needs dark frames before the first "
                               "data frame (the G0 pedestal is taken from them)");
    const std::vector<double> m = stage_pedestal_.means();
    for (int s = 0; s < jungfrau::kStages; ++s)
      if (from_dark_[s])
        std::copy(m.begin() + s * np_, m.begin() + (s + 1) * np_, pedestal_.begin() + s * np_);
    open_ = false;
    return std::move(kept_);
  }

  /// The stage-major ADC pedestal and gain tables (the pedestal is final once !open()).
  const double* pedestal() const { return pedestal_.data(); }
  const double* gain() const { return gain_.data(); }
  std::span<const double> pedestal_table() const { return pedestal_; }

  double calibrate(uint16_t raw, std::size_t i) const {
    return jungfrau::calibrate(raw, i, np_, pedestal_.data(), gain_.data());
  }

 private:
  std::size_t np_;
  bool active_ = false;
  bool open_ = false;
  bool from_dark_[jungfrau::kStages] = {false, false, false};
  jungfrau::StagePedestal stage_pedestal_{FrameShape{}};
  std::vector<double> pedestal_, gain_;
  std::vector<uint16_t> kept_;
};

}  // namespace glint::detail
