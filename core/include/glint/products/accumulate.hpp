#pragma once
// The per-cluster arithmetic of the products' accumulators, written once for host and device
// (ProductSums on CPU workers, the GPU accumulator's kernel), so that both give the same bits:
// the bin of a value in a BinTable, a cluster energy as the energy image sums it, and the
// sub-pixel of a photon position.
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "glint/detail/hd.hpp"
#include "glint/rounded.hpp"

namespace glint::products::detail {

/// BinTable::bin: regular bins over [lo, hi) (hi in the last bin when `closed`), a guess from
/// (v - lo) * scale corrected against the bins + 1 `edges`: -1 below lo (and NaN), `bins` at or
/// above hi (above hi when closed).
GLINT_HD int64_t table_bin(double v, double lo, double hi, double scale, int64_t bins,
                           bool closed, const double* edges) {
  if (!(v >= lo)) return -1;
  if (v > hi || (v == hi && !closed)) return bins;
  if (v == hi) return bins - 1;
  auto i = static_cast<int64_t>(rounded::mul(rounded::sub(v, lo), scale));
  if (i < 0) i = 0;
  if (i >= bins) i = bins - 1;
  while (i > 0 && v < edges[i]) --i;
  while (i + 1 < bins && v >= edges[i + 1]) ++i;
  return i;
}

/// An energy as the energy image accumulates it: ADU exactly, keV as llround(e * 1e6) micro-keV.
GLINT_HD int64_t fixed_energy(int32_t e) { return e; }
GLINT_HD int64_t fixed_energy(float e) {
  const double micro = rounded::mul(static_cast<double>(e), 1e6);
#if defined(__CUDA_ARCH__)
  return ::llround(micro);
#else
  return std::llround(micro);
#endif
}

/// SubpixelImage::add: the sub-pixel (floor(y * factor), floor(x * factor)) of a photon at column
/// x, row y of an image `width` x `height` sub-pixels (width_d, height_d: the same as double), as
/// the flat index row * width + column; false when it falls outside (or NaN).
GLINT_HD bool subpixel_cell(double x, double y, double factor, double width_d, double height_d,
                            std::size_t width, std::size_t& index) {
  const double fx = rounded::mul(x, factor);
  const double fy = rounded::mul(y, factor);
  if (!(fx >= 0.0 && fx < width_d && fy >= 0.0 && fy < height_d)) return false;
  index = static_cast<std::size_t>(fy) * width + static_cast<std::size_t>(fx);
  return true;
}

}  // namespace glint::products::detail
