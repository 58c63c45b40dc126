#include "glint/products/subpixel_image.hpp"

#include <limits>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

namespace glint::products {

SubpixelImage::SubpixelImage(std::size_t rows, std::size_t cols, uint32_t factor)
    : rows_(rows), cols_(cols), factor_(factor), width_(cols * factor), height_(rows * factor) {
  if (rows == 0 || cols == 0 || factor == 0)
    throw std::invalid_argument(fmt::format(
        "sub-pixel image: rows ({}), cols ({}) and factor ({}) must be >= 1", rows, cols, factor));
  // At most 2^20 sub-pixels a side and 2^33 in all (64 GiB of counts): no index overflows.
  constexpr std::size_t kSide = std::size_t{1} << 20;
  if (rows > kSide / factor || cols > kSide / factor ||
      height_ > (std::size_t{1} << 33) / width_)
    throw std::invalid_argument(fmt::format(
        "sub-pixel image: {} x {} pixels with factor {} is too large", rows, cols, factor));
  factor_d_ = static_cast<double>(factor);
  width_d_ = static_cast<double>(width_);
  height_d_ = static_cast<double>(height_);
  counts_.assign(width_ * height_, 0);
}

void SubpixelImage::merge(const SubpixelImage& other) {
  if (other.rows_ != rows_ || other.cols_ != cols_ || other.factor_ != factor_)
    throw std::invalid_argument(fmt::format(
        "sub-pixel image: cannot merge {} x {} (factor {}) into {} x {} (factor {})",
        other.rows_, other.cols_, other.factor_, rows_, cols_, factor_));
  for (std::size_t i = 0; i < counts_.size(); ++i) counts_[i] += other.counts_[i];
  outside_ += other.outside_;
}

void SubpixelImage::assign(std::span<const uint64_t> counts, uint64_t outside) {
  if (counts.size() != counts_.size())
    throw std::invalid_argument(fmt::format("sub-pixel image: {} counts given, {} x {} expected",
                                            counts.size(), height_, width_));
  counts_.assign(counts.begin(), counts.end());
  outside_ = outside;
}

uint64_t SubpixelImage::total() const {
  return std::accumulate(counts_.begin(), counts_.end(), uint64_t{0});
}

}  // namespace glint::products
