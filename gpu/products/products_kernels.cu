// The products' accumulation kernel: one thread per cluster, the arithmetic of ProductSums::add
// (the shared host-and-device functions, correctly rounded one operation at a time), integer
// atomics into the device tables. The scalar counts and a small spectrum are first summed per
// block in shared memory.
#include "products_kernels.hpp"

#include <algorithm>

#include "check.cuh"
#include "glint/products/accumulate.hpp"
#include "glint/products/cluster_quantities.hpp"
#include "glint/products/eta_calibration.hpp"

namespace glint::gpu::detail {

namespace {

static_assert(sizeof(unsigned long long) == sizeof(uint64_t));

constexpr int kThreads = 256;
/// Spectra of at most this many bins are counted per block in shared memory first.
constexpr int64_t kSharedSpectrumBins = 4096;

__device__ __forceinline__ void add_u64(uint64_t* p, unsigned long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(p), v);
}

__device__ __forceinline__ int64_t bin_of(const DeviceBins& b, double v) {
  return products::detail::table_bin(v, b.lo, b.hi, b.scale, b.bins, b.closed, b.edges);
}

template <typename T, int S>
__global__ void __launch_bounds__(kThreads)
    accumulate_products(ProductsKernelParams p, const T* __restrict__ values,
                        const uint16_t* __restrict__ xs, const uint16_t* __restrict__ ys,
                        uint32_t n, uint8_t* __restrict__ flags, bool shared_spectrum) {
  extern __shared__ unsigned int spectrum_block[];
  __shared__ unsigned int counts_block[kCounters];
  const int size = S != 0 ? S : p.cluster_size;
  const int nv = size * size;
  const int64_t bins = p.spectrum.bins;
  if (threadIdx.x < kCounters) counts_block[threadIdx.x] = 0;
  if (shared_spectrum)
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x) spectrum_block[b] = 0;
  __syncthreads();
  const bool need_eta2 = p.eta || p.subpixel;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint32_t x = xs[i], y = ys[i];
    uint8_t counted = 0;
    if (x < p.cols && y < p.rows) {  // else: not a pixel of these frames, never counted
      const T* v = values + static_cast<std::size_t>(i) * nv;
      products::Eta<T> eta2v{};
      if (need_eta2) eta2v = products::eta2(v, size);
      T e;
      if (p.quadrant) e = need_eta2 ? eta2v.sum : products::max_quadrant(v, size).sum;
      else e = products::cluster_sum(v, size);
      const double ed = static_cast<double>(e);
      if (ed >= p.emin && ed <= p.emax) {
        counted = 1;
        atomicAdd(&counts_block[kClusters], 1u);
        const std::size_t pixel = static_cast<std::size_t>(y) * p.cols + x;
        if (p.hitmap) {
          add_u64(p.hitmap + pixel, 1ull);
          // Two's complement: the unsigned sum has the bits of the int64 sum.
          add_u64(reinterpret_cast<uint64_t*>(p.energy) + pixel,
                  static_cast<unsigned long long>(products::detail::fixed_energy(e)));
        }
        const int64_t b = bin_of(p.spectrum, ed);
        if (b < 0) {
          atomicAdd(&counts_block[kUnderflow], 1u);
        } else if (b >= bins) {
          atomicAdd(&counts_block[kOverflow], 1u);
        } else {
          if (shared_spectrum) atomicAdd(&spectrum_block[b], 1u);
          else add_u64(p.spectrum_counts + b, 1ull);
          if (p.pixel_spectra)
            atomicAdd(p.pixel_spectra + pixel * static_cast<std::size_t>(bins) + b, 1u);
        }
        if (p.eta) {
          const int64_t eb = p.eta_bins;
          const int64_t bx = bin_of(p.eta2, eta2v.x), by = bin_of(p.eta2, eta2v.y);
          if (bx < 0 || by < 0 || bx >= eb || by >= eb) atomicAdd(&counts_block[kEta2Outside], 1u);
          else add_u64(p.eta2_counts + by * eb + bx, 1ull);
          const products::Eta<T> eta3v = products::eta3(v, size);
          const int64_t cx = bin_of(p.eta3, eta3v.x), cy = bin_of(p.eta3, eta3v.y);
          if (cx < 0 || cy < 0 || cx >= eb || cy >= eb) atomicAdd(&counts_block[kEta3Outside], 1u);
          else add_u64(p.eta3_counts + cy * eb + cx, 1ull);
        }
        if (p.subpixel) {
          std::size_t t = 0;
          if (products::detail::calibration_index(p.cal_x, p.cal_y, p.cal_e, eta2v.x, eta2v.y,
                                                  static_cast<double>(eta2v.sum), t)) {
            double dx = 0.0, dy = 0.0;
            products::detail::corner_offset(eta2v.corner, dx, dy);
            const double px = products::detail::eta2_coordinate(static_cast<uint16_t>(x),
                                                                 p.ietax[t], dx);
            const double py = products::detail::eta2_coordinate(static_cast<uint16_t>(y),
                                                                 p.ietay[t], dy);
            std::size_t cell = 0;
            if (products::detail::subpixel_cell(px, py, p.factor, p.width_d, p.height_d, p.width,
                                                cell))
              add_u64(p.subpixel_counts + cell, 1ull);
            else
              atomicAdd(&counts_block[kSubpixelOff], 1u);
          } else {
            atomicAdd(&counts_block[kSubpixelOutside], 1u);
          }
        }
      }
    }
    if (flags) flags[i] = counted;
  }
  __syncthreads();
  if (threadIdx.x < kCounters && counts_block[threadIdx.x] != 0)
    add_u64(p.counters + threadIdx.x, counts_block[threadIdx.x]);
  if (shared_spectrum)
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x)
      if (spectrum_block[b] != 0) add_u64(p.spectrum_counts + b, spectrum_block[b]);
}

template <typename T, int S>
void launch(const ProductsKernelParams& p, const int32_t* values, const uint16_t* x,
            const uint16_t* y, uint32_t n, uint8_t* flags, int sm_count, StreamView s) {
  const bool shared_spectrum = p.spectrum.bins <= kSharedSpectrumBins;
  const std::size_t shared = shared_spectrum ? sizeof(unsigned int) * p.spectrum.bins : 0;
  const uint32_t needed = (n + kThreads - 1) / kThreads;
  const uint32_t blocks = std::max(1u, std::min(needed, static_cast<uint32_t>(sm_count) * 8u));
  // The values are 32-bit words: int32, or the bits of floats (read as floats on the device).
  accumulate_products<T, S><<<blocks, kThreads, shared, s.get()>>>(
      p, reinterpret_cast<const T*>(values), x, y, n, flags, shared_spectrum);
  GLINT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_products(const ProductsKernelParams& p, const int32_t* values, const uint16_t* x,
                     const uint16_t* y, uint32_t n, uint8_t* flags, int sm_count, StreamView s) {
  if (n == 0) return;
  const bool three = p.cluster_size == 3;
  if (p.calibrated && three) launch<float, 3>(p, values, x, y, n, flags, sm_count, s);
  else if (p.calibrated) launch<float, 0>(p, values, x, y, n, flags, sm_count, s);
  else if (three) launch<int32_t, 3>(p, values, x, y, n, flags, sm_count, s);
  else launch<int32_t, 0>(p, values, x, y, n, flags, sm_count, s);
}

}  // namespace glint::gpu::detail
