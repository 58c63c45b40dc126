#pragma once
// One image a run offers to its live view (a hit map, an energy image, a sub-pixel image, a
// spectrum, the pedestal or noise map): what it is, its units and its values, row-major. The
// products of a run make them (products_consumer.*); the preview publisher sends them
// (preview_publisher.*) at its own rate.
#include <cstdint>
#include <string>
#include <vector>

namespace glint::pipeline {

struct PreviewImage {
  std::string what;    ///< "hitmap", "energy", "subpixel", "spectrum", "pedestal", "noise", ...
  std::string units;   ///< of the values: "counts", "ADU", "keV"
  uint32_t rows = 0;   ///< a spectrum: 1 row of `cols` bins
  uint32_t cols = 0;
  std::vector<double> values;  ///< rows * cols, row-major
  /// What the axes are, when not pixels: e.g. a spectrum's first and last bin edge and unit.
  double x_min = 0.0, x_max = 0.0;
  std::string x_label;         ///< empty: pixel columns
  uint64_t frames = 0;         ///< data frames the image was made from
};

}  // namespace glint::pipeline
