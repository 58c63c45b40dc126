#pragma once
// The run's pixel mask (docs/cluster-finding.md, "Pixel mask"): NeXus NXdetector/pixel_mask bits,
// uint32 per pixel, rows x cols, 0 = good. It comes from a file (an HDF5 dataset) and from the
// run's dark frames (dead, noisy, and for JUNGFRAU gain switching), OR-ed together. It is a
// product filter, as NeXus masks are applied downstream: the pedestal and the finder never see
// it; clusters whose centre pixel is masked are removed from the results (MaskFilter) and
// counted.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "glint/cluster_table.hpp"
#include "glint/frame.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pedestal.hpp"

namespace glint::pipeline {

/// NXdetector pixel_mask bits (the NeXus definition; bits 5, 7 and 9-30 are undefined there).
enum PixelMaskBit : uint32_t {
  kMaskGap = 1u << 0,              ///< gap (no sensor)
  kMaskDead = 1u << 1,             ///< dead
  kMaskUnderResponding = 1u << 2,  ///< under-responding
  kMaskOverResponding = 1u << 3,   ///< over-responding (glint: JUNGFRAU out of G0 in the dark)
  kMaskNoisy = 1u << 4,            ///< noisy
  kMaskClusterOfBad = 1u << 6,     ///< part of a cluster of problematic pixels
  kMaskUser = 1u << 8,             ///< user-defined (e.g. around the beam stop)
  kMaskVirtual = 1u << 31,         ///< virtual pixel (interpolated)
};

/// The bit meanings as written with the dataset (its "bit_meanings" attribute).
std::string pixel_mask_bit_meanings();

/// Per-pixel counts of dark frames in which a JUNGFRAU pixel was out of G0 (gain bits not 00).
class DarkGainSwitches {
 public:
  explicit DarkGainSwitches(FrameShape shape) : shape_(shape), counts_(shape.pixels(), 0) {}
  /// Adds whole raw frames (a multiple of the frame's pixels).
  void add(std::span<const uint16_t> frames);
  /// Adds whole frames of one module (`region` of the image; the module's native frames, counted
  /// where its orientation shows each pixel); they count as frames when `count_frames` (once per
  /// image: for its first module).
  void add(std::span<const uint16_t> frames, const ModuleRegion& region, bool count_frames);
  FrameShape shape() const { return shape_; }
  uint64_t frames() const { return frames_; }
  std::span<const uint32_t> counts() const { return counts_; }

 private:
  FrameShape shape_;
  uint64_t frames_ = 0;
  std::vector<uint32_t> counts_;
};

/// What the dark frames flagged (pixels of each kind, for the log).
struct DarkMaskCounts {
  uint64_t dead = 0, noisy = 0, gain_switching = 0;
  double median_noise = 0;
};

/// Flags in `mask` (rows x cols, OR-ed in) from the pedestal of the dark frames:
///  - dead (kMaskDead): no sample, or a noise of 0 (a constant value) or NaN (a variance that
///    rounding made negative: a constant value as well);
///  - noisy (kMaskNoisy): noise > noisy_factor x the median noise of the pixels not dead;
///  - gain switching (kMaskOverResponding), when `gains` is given: out of G0 in a dark frame.
/// Throws std::invalid_argument when the shapes differ.
DarkMaskCounts flag_from_dark(std::span<uint32_t> mask, const PedestalState& pedestal,
                              double noisy_factor, const DarkGainSwitches* gains);

/// Reads a mask from `spec` = FILE.h5:/dataset: a 2-D integer dataset (read as uint32; negative
/// values are refused) of exactly `shape`. Throws std::runtime_error with one line naming the
/// file, the dataset and what was expected.
std::vector<uint32_t> read_mask_file(const std::string& spec, FrameShape shape);

/// Writes `mask` as a uint32 rows x cols dataset into a new or existing HDF5 file (tests,
/// tools). Throws std::runtime_error.
void write_mask_file(const std::string& path, const std::string& dataset,
                     std::span<const uint32_t> mask, FrameShape shape);

/// Removes the clusters whose centre pixel is masked from result tables. It sees only the
/// ClusterTable, so it is the same for every backend and CPU and GPU results stay bit-identical.
class MaskFilter {
 public:
  MaskFilter() = default;
  /// `mask`: rows x cols NXdetector bits (any bit set masks the pixel).
  MaskFilter(std::vector<uint32_t> mask, FrameShape shape);

  /// Whether anything can be removed (a mask with a masked pixel).
  bool active() const { return masked_ > 0; }
  uint64_t masked_pixels() const { return masked_; }

  /// `in` without the clusters centred on a masked pixel (the records, gain counts and order of
  /// the rest as they were) into `out`; `removed` gets the clusters removed per frame. Returns
  /// their total.
  uint64_t apply(const ClusterTable& in, ClusterTable& out, std::vector<uint32_t>& removed) const;

 private:
  std::vector<uint32_t> mask_;
  FrameShape shape_{};
  uint64_t masked_ = 0;
};

}  // namespace glint::pipeline
