#pragma once
// JUNGFRAU pixels and their calibration (docs/cluster-finding.md, "JUNGFRAU").
//
// A JUNGFRAU pixel is 16 bits: the gain stage in bits 15:14 (00 = G0, 01 = G1, 11 = G2; 10 is not
// a stage the detector produces) over a 14-bit ADC value. A calibrated pixel is
// (adc - pedestal[g]) / gain[g] in keV, with the pedestal in ADU and the gain in ADU/keV of the
// pixel's stage g, evaluated as aare's apply_calibration does (one double subtraction, one
// double division; the invalid code 10 reads as G0 there, and here).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "glint/frame.hpp"
#include "glint/rounded.hpp"

namespace glint::jungfrau {

inline constexpr uint16_t kAdcMask = 0x3FFF;
inline constexpr int kStages = 3;
/// A JUNGFRAU module: 512 rows of 1024 columns, the shape of PSI's calibration files.
inline constexpr FrameShape kModuleShape{512, 1024};

/// The gain bits (15:14) of a raw pixel: 0 = G0, 1 = G1, 3 = G2, 2 = invalid.
GLINT_HD constexpr unsigned gain_bits(uint16_t raw) { return static_cast<unsigned>(raw) >> 14; }
/// The 14-bit ADC value.
GLINT_HD constexpr uint16_t adc(uint16_t raw) { return static_cast<uint16_t>(raw & kAdcMask); }
/// True when the pixel is in G0 (gain bits 00).
GLINT_HD constexpr bool in_g0(uint16_t raw) { return raw < 0x4000; }
/// The calibration stage index (0, 1, 2) as aare's get_gain reads it: the invalid code reads as 0.
GLINT_HD constexpr int stage(uint16_t raw) {
  const unsigned b = gain_bits(raw);
  return b == 3 ? 2 : (b == 1 ? 1 : 0);
}

/// Pixels of one frame by gain bits.
struct GainCounts {
  uint32_t g1 = 0;
  uint32_t g2 = 0;
  uint32_t invalid = 0;  ///< gain bits 10
  uint32_t switched() const { return g1 + g2 + invalid; }  ///< pixels not in G0
  friend bool operator==(const GainCounts&, const GainCounts&) = default;
};
GainCounts count_gains(std::span<const uint16_t> frame);

/// Per-pixel, per-stage tables: pedestal (ADU) and gain (ADU/keV), each kStages * pixels values,
/// stage-major (all G0 pixels, then G1, then G2), pixels row-major.
struct Calibration {
  FrameShape shape{};
  std::vector<double> gain;      ///< ADU/keV
  std::vector<double> pedestal;  ///< ADU; filled at run time where pedestal_from_dark says so
  /// Stages whose pedestal comes from the run's dark frames (aare's calculate_pedestal over them);
  /// the others come from `pedestal` as loaded (a pedestal file taken with the gain forced).
  bool pedestal_from_dark[kStages] = {true, true, true};

  /// Throws std::invalid_argument when a table does not hold kStages * shape.pixels() values or
  /// a gain is zero or not finite.
  void validate() const;
};

/// Calibrated value of pixel i: (double(adc) - pedestal[s][i]) / gain[s][i], s = stage(raw).
/// `ped` and `gain` are stage-major tables of kStages * np values.
GLINT_HD double calibrate(uint16_t raw, std::size_t i, std::size_t np, const double* ped,
                          const double* gain) {
  const std::size_t k = static_cast<std::size_t>(stage(raw)) * np + i;
  return rounded::div(rounded::sub(static_cast<double>(adc(raw)), ped[k]), gain[k]);
}

/// aare's calculate_pedestal: per pixel and stage, the sum (integer) and count of the ADC values
/// of the frames where the pixel was in that stage; the pedestal is sum / count (0 where no frame
/// had the pixel in that stage).
class StagePedestal {
 public:
  explicit StagePedestal(FrameShape shape);
  void add(std::span<const uint16_t> frame);
  uint64_t frames() const { return frames_; }
  /// kStages * pixels values, stage-major.
  std::vector<double> means() const;

 private:
  FrameShape shape_;
  uint64_t frames_ = 0;
  std::vector<uint64_t> sum_;
  std::vector<uint64_t> count_;
};

/// Reads PSI's module gain file: little-endian float64 arrays of `shape` pixels, G0, G1, G2 and
/// optionally HG0, HG1, HG2 (3 or 6 arrays; the file must hold exactly that). With `hg0` the HG0
/// array replaces G0 (a module run in high-gain G0), as aare's load_calibration(hg0=True) does.
/// Returns kStages * pixels values. Throws std::runtime_error naming the file and what it holds.
std::vector<double> read_gain_file(const std::filesystem::path& path, FrameShape shape, bool hg0);

/// A pedestal file: little-endian float64, G0, G1, G2 arrays of `shape` pixels (ADU), as written
/// by write_pedestal_file. Throws std::runtime_error naming the file when it does not fit.
std::vector<double> read_pedestal_file(const std::filesystem::path& path, FrameShape shape);
void write_pedestal_file(const std::filesystem::path& path, std::span<const double> pedestal);

/// The tables of a calibrated finder for frames of `shape`: gains from `gain_file` (see
/// read_gain_file); the G0 pedestal from the run's dark frames; G1 and G2 from `pedestal_file`
/// when given, else from the dark frames as well. Throws std::runtime_error naming the file.
std::shared_ptr<Calibration> load_calibration(FrameShape shape,
                                              const std::filesystem::path& gain_file,
                                              const std::filesystem::path& pedestal_file,
                                              bool hg0);

}  // namespace glint::jungfrau
