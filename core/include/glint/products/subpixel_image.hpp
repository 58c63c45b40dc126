#pragma once
// The sub-pixel image: photon positions (glint::products::Photon, pixel units) counted on a grid
// `factor` times finer than the detector's pixels.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "glint/products/accumulate.hpp"

namespace glint::products {

class SubpixelImage {
 public:
  /// A detector of rows x cols pixels, each split into factor x factor sub-pixels. Throws
  /// std::invalid_argument when a size is 0 or the image would not fit in memory's indices.
  SubpixelImage(std::size_t rows, std::size_t cols, uint32_t factor);

  /// Counts a photon at column x, row y (pixel units: pixel (r, c) spans [c, c + 1) x
  /// [r, r + 1)) in sub-pixel (floor(y * f), floor(x * f)), products rounded in double. A
  /// position whose sub-pixel falls outside the image (or NaN) is counted in outside() only.
  void add(double x, double y) {
    std::size_t i = 0;
    if (detail::subpixel_cell(x, y, factor_d_, width_d_, height_d_, width_, i)) ++counts_[i];
    else ++outside_;
  }
  /// Replaces the counts (rows * factor x cols * factor, else std::invalid_argument) and the
  /// photons outside: the image as another accumulator (the GPU's) counted it.
  void assign(std::span<const uint64_t> counts, uint64_t outside);
  /// Adds another image's counts (same rows, cols and factor; else std::invalid_argument).
  void merge(const SubpixelImage& other);

  std::size_t rows() const { return rows_; }
  std::size_t cols() const { return cols_; }
  uint32_t factor() const { return factor_; }
  /// (rows * factor, cols * factor) counts, row-major.
  std::span<const uint64_t> counts() const { return counts_; }
  uint64_t outside() const { return outside_; }
  /// Photons counted inside.
  uint64_t total() const;

 private:
  std::size_t rows_, cols_;
  uint32_t factor_;
  std::size_t width_, height_;
  double factor_d_, width_d_, height_d_;
  std::vector<uint64_t> counts_;
  uint64_t outside_ = 0;
};

}  // namespace glint::products
