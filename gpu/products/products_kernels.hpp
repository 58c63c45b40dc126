#pragma once
// The products' accumulation kernel behind a host-callable launcher (no CUDA header here).
#include <cstddef>
#include <cstdint>

#include "glint/products/cluster_products.hpp"
#include "stream_view.hpp"

namespace glint::gpu::detail {

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

/// What the kernel reads (the per-cluster view, its pointers into device memory) and the device
/// tables it adds into (null: that product is off).
struct ProductsKernelParams {
  products::ClusterProductsView view;
  int cluster_size = 3;
  bool calibrated = false;  ///< float values (else int32)
  // The sub-pixel image's geometry (SubpixelImage's).
  double factor = 1.0, width_d = 0.0, height_d = 0.0;
  std::size_t width = 0;

  uint64_t* hitmap = nullptr;         ///< rows * cols
  int64_t* energy = nullptr;          ///< rows * cols
  uint64_t* spectrum = nullptr;       ///< view.spectrum.bins
  uint32_t* pixel_spectra = nullptr;  ///< rows * cols * bins
  uint64_t* eta2 = nullptr;
  uint64_t* eta3 = nullptr;
  uint64_t* subpixel = nullptr;
  uint64_t* counters = nullptr;       ///< kCounters
};

/// Accumulates `n` clusters (`values`: n * S * S int32 or float bits; centres x, y) into the
/// tables of `p` on stream `s`. `flags` (n bytes, or null): 1 for each cluster counted (on the
/// detector and in the window), else 0. `sm_count` sizes the grid.
void launch_products(const ProductsKernelParams& p, const int32_t* values, const uint16_t* x,
                     const uint16_t* y, uint32_t n, uint8_t* flags, int sm_count, StreamView s);

}  // namespace glint::gpu::detail
