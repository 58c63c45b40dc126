#pragma once
// The products' accumulation kernel behind a host-callable launcher (no CUDA header here).
#include <cstddef>
#include <cstdint>

#include "glint/products/eta_calibration.hpp"
#include "stream_view.hpp"

namespace glint::gpu::detail {

/// A BinTable on the device: its edges (bins + 1) and the first guess's scale.
struct DeviceBins {
  const double* edges = nullptr;
  double lo = 0.0, hi = 1.0, scale = 1.0;
  int64_t bins = 1;
  bool closed = false;
};

/// The scalar counts of the products, one device counter each.
enum ProductCounter : int {
  kClusters = 0,
  kUnderflow,
  kOverflow,
  kEta2Outside,
  kEta3Outside,
  kSubpixelOutside,  ///< eta outside the calibration
  kSubpixelOff,      ///< position off the detector (SubpixelImage::outside)
  kCounters
};

/// What the kernel reads and the device tables it adds into (null: that product is off).
struct ProductsKernelParams {
  uint32_t rows = 0, cols = 0;
  int cluster_size = 3;
  bool calibrated = false;  ///< float values (else int32)
  bool quadrant = false;    ///< energy: the largest 2 x 2 sum (else the S x S sum)
  double emin = 0.0, emax = 0.0;
  DeviceBins spectrum, eta2, eta3;
  int64_t eta_bins = 0;
  bool eta = false;
  // Sub-pixel image (with subpixel): the calibration's axes and tables, the image's geometry.
  bool subpixel = false;
  products::detail::AxisView cal_x, cal_y, cal_e;
  const double* ietax = nullptr;
  const double* ietay = nullptr;
  double factor = 1.0, width_d = 0.0, height_d = 0.0;
  std::size_t width = 0;

  uint64_t* hitmap = nullptr;         ///< rows * cols
  int64_t* energy = nullptr;          ///< rows * cols
  uint64_t* spectrum_counts = nullptr;
  uint32_t* pixel_spectra = nullptr;  ///< rows * cols * bins
  uint64_t* eta2_counts = nullptr;
  uint64_t* eta3_counts = nullptr;
  uint64_t* subpixel_counts = nullptr;
  uint64_t* counters = nullptr;       ///< kCounters
};

/// Accumulates `n` clusters (`values`: n * S * S int32 or float bits; centres x, y) into the
/// tables of `p` on stream `s`. `flags` (n bytes, or null): 1 for each cluster counted (on the
/// detector and in the window), else 0. `sm_count` sizes the grid.
void launch_products(const ProductsKernelParams& p, const int32_t* values, const uint16_t* x,
                     const uint16_t* y, uint32_t n, uint8_t* flags, int sm_count, StreamView s);

}  // namespace glint::gpu::detail
