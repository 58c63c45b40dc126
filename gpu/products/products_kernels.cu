// The products' accumulation kernel: one thread per cluster running products::add_cluster (the
// per-cluster code ProductSums runs on the CPU, correctly rounded one operation at a time) into
// a sink of integer atomics on the device tables. The scalar counts and a small spectrum are
// first summed per block in shared memory.
#include "products_kernels.hpp"

#include <algorithm>

#include "check.cuh"
#include "glint/products/accumulate.hpp"
#include "glint/products/cluster_products.hpp"

namespace glint::gpu::detail {

namespace {

static_assert(sizeof(unsigned long long) == sizeof(uint64_t));

constexpr int kThreads = 256;
/// Spectra of at most this many bins are counted per block in shared memory first.
constexpr int64_t kSharedSpectrumBins = 4096;

// add_cluster is a host-and-device template, so its sink's calls exist for the host too; only
// the device ever runs them.
GLINT_HD void add_u64(uint64_t* p, unsigned long long v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(reinterpret_cast<unsigned long long*>(p), v);
#else
  (void)p;
  (void)v;
#endif
}
GLINT_HD void add_u32(unsigned int* p, unsigned int v) {
#if defined(__CUDA_ARCH__)
  atomicAdd(p, v);
#else
  (void)p;
  (void)v;
#endif
}

/// Where a cluster's counts go on the device: the tables (atomics), the block's counters and, for
/// a small spectrum, the block's spectrum (shared memory, added to the table at the block's end).
struct DeviceSink {
  const ProductsKernelParams& p;
  unsigned int* counts;    ///< kCounters, shared
  unsigned int* spectrum;  ///< shared, or null: straight into the table

  GLINT_HD void counted(std::size_t pixel, int64_t e) {
    add_u32(counts + kClusters, 1u);
    if (p.hitmap) {
      add_u64(p.hitmap + pixel, 1ull);
      // Two's complement: the unsigned sum has the bits of the int64 sum.
      add_u64(reinterpret_cast<uint64_t*>(p.energy) + pixel, static_cast<unsigned long long>(e));
    }
  }
  GLINT_HD void underflow() { add_u32(counts + kUnderflow, 1u); }
  GLINT_HD void overflow() { add_u32(counts + kOverflow, 1u); }
  GLINT_HD void spectrum_bin(std::size_t b, std::size_t pixel) {
    if (spectrum) add_u32(spectrum + b, 1u);
    else add_u64(p.spectrum + b, 1ull);
    if (p.pixel_spectra)
      add_u32(p.pixel_spectra + pixel * static_cast<std::size_t>(p.view.spectrum.bins) + b, 1u);
  }
  GLINT_HD void eta2_bin(std::size_t i) { add_u64(p.eta2 + i, 1ull); }
  GLINT_HD void eta2_outside() { add_u32(counts + kEta2Outside, 1u); }
  GLINT_HD void eta3_bin(std::size_t i) { add_u64(p.eta3 + i, 1ull); }
  GLINT_HD void eta3_outside() { add_u32(counts + kEta3Outside, 1u); }
  /// SubpixelImage::add.
  GLINT_HD void photon(double x, double y) {
    std::size_t cell = 0;
    if (products::detail::subpixel_cell(x, y, p.factor, p.width_d, p.height_d, p.width, cell))
      add_u64(p.subpixel + cell, 1ull);
    else
      add_u32(counts + kSubpixelOff, 1u);
  }
  GLINT_HD void subpixel_outside() { add_u32(counts + kSubpixelOutside, 1u); }
};

template <typename T, int S>
__global__ void __launch_bounds__(kThreads)
    accumulate_products(ProductsKernelParams p, const T* __restrict__ values,
                        const uint16_t* __restrict__ xs, const uint16_t* __restrict__ ys,
                        uint32_t n, uint8_t* __restrict__ flags, bool shared_spectrum) {
  extern __shared__ unsigned int spectrum_block[];
  __shared__ unsigned int counts_block[kCounters];
  const int size = S != 0 ? S : p.cluster_size;
  const int nv = size * size;
  const int64_t bins = p.view.spectrum.bins;
  if (threadIdx.x < kCounters) counts_block[threadIdx.x] = 0;
  if (shared_spectrum)
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x) spectrum_block[b] = 0;
  __syncthreads();
  DeviceSink sink{p, counts_block, shared_spectrum ? spectrum_block : nullptr};
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const bool counted = products::add_cluster(p.view, values + static_cast<std::size_t>(i) * nv,
                                               size, xs[i], ys[i], sink);
    if (flags) flags[i] = counted ? 1 : 0;
  }
  __syncthreads();
  if (threadIdx.x < kCounters && counts_block[threadIdx.x] != 0)
    add_u64(p.counters + threadIdx.x, counts_block[threadIdx.x]);
  if (shared_spectrum)
    for (int64_t b = threadIdx.x; b < bins; b += blockDim.x)
      if (spectrum_block[b] != 0) add_u64(p.spectrum + b, spectrum_block[b]);
}

template <typename T, int S>
void launch(const ProductsKernelParams& p, const int32_t* values, const uint16_t* x,
            const uint16_t* y, uint32_t n, uint8_t* flags, int sm_count, StreamView s) {
  const bool shared_spectrum = p.view.spectrum.bins <= kSharedSpectrumBins;
  const std::size_t shared =
      shared_spectrum ? sizeof(unsigned int) * static_cast<std::size_t>(p.view.spectrum.bins) : 0;
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
