// The device memory of the products' tables (built with and without CUDA).
#include "glint/gpu/products_accumulator.hpp"

namespace glint::gpu {

std::size_t products_table_bytes(const products::ProductSettings& s) {
  const std::size_t pixels = s.pixels();
  const std::size_t bins = s.spectrum.bins;
  std::size_t bytes = 8 * 8;                     // counters
  bytes += (2 * bins + 1) * sizeof(double);      // spectrum counts and edges
  if (s.hitmap) bytes += pixels * 2 * sizeof(uint64_t);
  if (s.pixel_spectra) bytes += pixels * bins * sizeof(uint32_t);
  if (s.eta) {
    const std::size_t e = s.eta_bins;
    bytes += 2 * (e * e * sizeof(uint64_t) + (e + 1) * sizeof(double));
  }
  if (s.subpixel) {
    const std::size_t f = s.subpixel_factor;
    bytes += pixels * f * f * sizeof(uint64_t);
    const auto& c = *s.subpixel;
    bytes += 2 * c.ietax().size() * sizeof(double);
    bytes += (c.nx() + c.ny() + c.ne() + 3) * sizeof(double);
  }
  return bytes;
}

}  // namespace glint::gpu
