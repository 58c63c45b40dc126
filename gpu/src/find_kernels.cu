// The GPU cluster-finding kernels. Every arithmetic operation comes from cluster_math.hpp, so
// the bits are the CPU reference's (../shared/spec/cluster-finding.md).
//
// Exactness inside a frame (the sequential raster-order dependency): pass 0 decides every pixel
// of a band from the frame-start means. For each window pixel that precedes the centre in raster
// order it knows both possible values of f - mean (frame-start mean, or the mean after this
// frame's update, which depends only on that pixel's own state and value), so it bounds the
// window's total and max from below and above. Rounded addition and max are monotone, so the
// bounds hold for every mix of updated and not-updated predecessors; a pixel whose decision is the
// same at both ends is final. The rest (a few per frame) are re-decided exactly, in raster order,
// by one thread of the band, with the final means of their predecessors. Frames stay sequential.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include <algorithm>

#include "check.cuh"
#include "find_kernels.hpp"

namespace glint::gpu::detail {

namespace cm = cluster_math;

namespace {

constexpr int kFindThreads = 512;
constexpr int kPackThreads = 256;

// Tri-state decisions of pass 0.
constexpr uint8_t kNo = 0, kYes = 1, kUnknown = 2;

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p, bool sys) {
  unsigned long long v;
  if (sys)
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release(unsigned long long* p, unsigned long long v,
                                              bool sys) {
  if (sys)
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  else
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/// All threads of the block wait until *flag >= v (no-op for a missing neighbour).
__device__ void wait_at_least(const unsigned long long* flag, unsigned long long v, bool sys) {
  if (flag != nullptr && threadIdx.x == 0) {
    while (load_acquire(flag, sys) < v) __nanosleep(32);
  }
  __syncthreads();
}

/// Publishes the block's progress after all its threads' writes.
__device__ void publish(unsigned long long* flag, unsigned long long v, bool sys) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (sys)
      __threadfence_system();
    else
      __threadfence();
    store_release(flag, v, sys);
  }
}

// (lo > t) for every value in [lo, hi]? yes / no / unknown. NaN t: every comparison is false.
__device__ __forceinline__ uint8_t greater_tri(double lo, double hi, double t) {
  if (lo > t) return kYes;
  if (!(hi > t)) return kNo;
  return kUnknown;
}

struct Decision {
  uint8_t update;
  uint8_t stored;
};

/// Pass-0 decision from bounds of the window's total and max (steps 2 and 4 of the spec).
__device__ __forceinline__ Decision decide_bounds(double v, double rms, double tlo, double thi,
                                                  double mlo, double mhi,
                                                  const cm::Thresholds& t) {
  const double thr_n = cm::mul(t.n, rms);
  const double thr_c = cm::mul(t.c3_n, rms);
  const uint8_t a = greater_tri(mlo, mhi, thr_n);           // max > n*rms
  const uint8_t c = greater_tri(tlo, thi, thr_c);           // total > c3*n*rms
  // v < max; max >= v always (the centre is in the window), so !(v < max) means v == max.
  const uint8_t b = (v < mlo) ? kYes : (!(v < mhi) ? kNo : kUnknown);
  const uint8_t e = (!(v < mhi)) ? kYes : ((v < mlo) ? kNo : kUnknown);  // v == max
  const auto flip = [](uint8_t x) -> uint8_t { return x == kUnknown ? kUnknown : (x ^ 1); };
  if (a == kYes) return {kNo, flip(b)};
  if (a == kNo) {
    if (c == kYes) return {kNo, e};
    if (c == kNo) return {kYes, kNo};
    return {kUnknown, e == kNo ? kNo : kUnknown};
  }
  // max > n*rms undecided.
  const uint8_t upd = (c == kYes) ? kNo : kUnknown;
  const bool never_stored = (b == kYes) && (c == kNo || e == kNo);
  return {upd, never_stored ? kNo : kUnknown};
}

struct Band {
  int y0, y1;        // rows of this block
  int h;             // half window
  int cols;
};

template <int S>
struct FindSmem {
  // Offsets into dynamic shared memory, in bytes.
  static __host__ __device__ std::size_t bytes(int cols, int rows_per_block) {
    constexpr int h = S / 2;
    const std::size_t c = static_cast<std::size_t>(cols);
    const std::size_t r = static_cast<std::size_t>(rows_per_block);
    return c * 8 * ((r + 2 * h) + (r + h) + 3 * r) + c * r * (1 + 3 * 4) + 16;
  }
};

template <int S>
__global__ void __launch_bounds__(kFindThreads) find_kernel(const __grid_constant__ FindLaunch p) {
  constexpr int h = S / 2;
  constexpr int S2 = S * S;
  const int cols = static_cast<int>(p.cols);
  const int rows = static_cast<int>(p.rows);
  const int b = blockIdx.x;
  const int R = static_cast<int>(p.rows_per_block);
  const int y0 = static_cast<int>(p.band_begin) + b * R;
  const int y1 = min(static_cast<int>(p.band_end), y0 + R);
  const int own_pixels = (y1 - y0) * cols;
  const cm::Thresholds thr = p.thresholds;

  extern __shared__ __align__(16) unsigned char smem[];
  double* sh_d0 = reinterpret_cast<double*>(smem);                       // rows y0-h .. y1+h
  double* sh_d1 = sh_d0 + static_cast<std::size_t>(R + 2 * h) * cols;    // rows y0-h .. y1
  double* sh_s1 = sh_d1 + static_cast<std::size_t>(R + h) * cols;        // own rows
  double* sh_s21 = sh_s1 + static_cast<std::size_t>(R) * cols;
  double* sh_m1 = sh_s21 + static_cast<std::size_t>(R) * cols;
  uint32_t* sh_ulist = reinterpret_cast<uint32_t*>(sh_m1 + static_cast<std::size_t>(R) * cols);
  uint32_t* sh_slist = sh_ulist + static_cast<std::size_t>(R) * cols;
  uint32_t* sh_sorted = sh_slist + static_cast<std::size_t>(R) * cols;
  uint8_t* sh_status = reinterpret_cast<uint8_t*>(sh_sorted + static_cast<std::size_t>(R) * cols);
  __shared__ int sh_nu, sh_ns;

  const unsigned long long* prog_above = b > 0 ? &p.progress[b - 1] : p.progress_above;
  const unsigned long long* prog_below =
      b + 1 < static_cast<int>(p.blocks) ? &p.progress[b + 1] : p.progress_below;
  unsigned long long* prog_self = &p.progress[b];
  const bool sys = p.system_scope;
  const int band_begin = static_cast<int>(p.band_begin);
  const int band_end = static_cast<int>(p.band_end);

  const unsigned long long g0 = __ldcg(p.frames_done);
  const std::size_t frame_elems = static_cast<std::size_t>(p.frame_rows) * cols;

  // Pointer to the arrays that hold row y (this GPU's, or a neighbouring GPU's).
  const auto arrays_for = [&](int y) -> const PedestalArrays& {
    return y < band_begin ? p.above : (y >= band_end ? p.below : p.own);
  };

  for (uint32_t k = 0; k < p.n_frames; ++k) {
    const unsigned long long g = g0 + k;
    const int par = static_cast<int>(g & 1ull);
    const int nxt = par ^ 1;
    const uint16_t* fr = p.frames + k * frame_elems;
    const auto fval = [&](int y, int x) -> double {
      return static_cast<double>(fr[static_cast<std::size_t>(y - static_cast<int>(p.frame_row0)) *
                                        cols + x]);
    };

    // The neighbours must have finished frame g-1: their state is this frame's start.
    wait_at_least(prog_above, 2 * g, sys);
    wait_at_least(prog_below, 2 * g, sys);
    if (threadIdx.x == 0) {
      sh_nu = 0;
      sh_ns = 0;
    }

    // Loop 1: f - mean with the frame-start means (rows y0-h .. y1+h), and with the mean after
    // an update (rows y0-h .. y1: the rows that can precede a pixel of the band).
    const int ya = max(0, y0 - h);
    const int yb = min(rows, y1 + h);
    for (int t = threadIdx.x; t < (yb - ya) * cols; t += blockDim.x) {
      const int y = ya + t / cols;
      const int x = t - (y - ya) * cols;
      const std::size_t j = static_cast<std::size_t>(y) * cols + x;
      const PedestalArrays& a = arrays_for(y);
      const double f = fval(y, x);
      const int r = y - (y0 - h);
      sh_d0[r * cols + x] = cm::sub(f, __ldcg(a.mean[par] + j));
      if (y < y1) {
        double s = __ldcg(a.sum[par] + j);
        double s2 = __ldcg(a.sum2[par] + j);
        const double m1 = cm::fast_push(s, s2, f, p.window);
        sh_d1[r * cols + x] = cm::sub(f, m1);
        if (y >= y0) {
          const int o = (y - y0) * cols + x;
          sh_s1[o] = s;
          sh_s21[o] = s2;
          sh_m1[o] = m1;
        }
      }
    }
    __syncthreads();

    const auto commit = [&](int o, std::size_t j, bool update) {
      if (update) {
        const double m1 = sh_m1[o];
        const double s21 = sh_s21[o];
        __stcg(p.own.sum[nxt] + j, sh_s1[o]);
        __stcg(p.own.sum2[nxt] + j, s21);
        __stcg(p.own.mean[nxt] + j, m1);
        __stcg(p.own.noise + j, cm::noise_of(s21, __ldg(p.own.count + j), m1));
      } else {
        __stcg(p.own.sum[nxt] + j, __ldcg(p.own.sum[par] + j));
        __stcg(p.own.sum2[nxt] + j, __ldcg(p.own.sum2[par] + j));
        __stcg(p.own.mean[nxt] + j, __ldcg(p.own.mean[par] + j));
      }
    };

    // Loop 2 (pass 0): decide every pixel of the band, commit the certain ones.
    for (int o = threadIdx.x; o < own_pixels; o += blockDim.x) {
      const int y = y0 + o / cols;
      const int x = o - (y - y0) * cols;
      const std::size_t j = static_cast<std::size_t>(y) * cols + x;
      const int r = y - (y0 - h);
      const double v = sh_d0[r * cols + x];
      const double rms = __ldcg(p.own.noise + j);
      Decision d;
      if (cm::is_negative_outlier(v, rms, thr)) {
        d = {kNo, kNo};
      } else {
        double tlo = 0.0, thi = 0.0, mlo = 0.0, mhi = 0.0;
#pragma unroll
        for (int dy = -h; dy <= h; ++dy) {
          const int yy = y + dy;
          if (yy < 0 || yy >= rows) continue;
          const int rr = r + dy;
#pragma unroll
          for (int dx = -h; dx <= h; ++dx) {
            const int xx = x + dx;
            if (xx < 0 || xx >= cols) continue;
            const double a0 = sh_d0[rr * cols + xx];
            double lo = a0, hi = a0;
            if (dy < 0 || (dy == 0 && dx < 0)) {
              const double a1 = sh_d1[rr * cols + xx];
              lo = fmin(a0, a1);
              hi = fmax(a0, a1);
            }
            tlo = cm::add(tlo, lo);
            thi = cm::add(thi, hi);
            if (mlo < lo) mlo = lo;
            if (mhi < hi) mhi = hi;
          }
        }
        d = decide_bounds(v, rms, tlo, thi, mlo, mhi, thr);
      }
      if (d.update != kUnknown) commit(o, j, d.update == kYes);
      if (d.update == kUnknown || d.stored == kUnknown)
        sh_ulist[atomicAdd(&sh_nu, 1)] = static_cast<uint32_t>(o);
      else if (d.stored == kYes)
        sh_slist[atomicAdd(&sh_ns, 1)] = static_cast<uint32_t>(o);
      sh_status[o] = static_cast<uint8_t>(d.update | (d.stored << 2));
    }
    __syncthreads();

    // The final value f - mean of window pixel (yy, xx) as pixel (y, x) sees it when visited.
    const auto final_d = [&](int yy, int xx, bool predecessor) -> double {
      if (!predecessor) return sh_d0[(yy - (y0 - h)) * cols + xx];
      if (yy >= y0) {
        const uint8_t st = sh_status[(yy - y0) * cols + xx] & 3;
        return st == kYes ? sh_d1[(yy - (y0 - h)) * cols + xx] : sh_d0[(yy - (y0 - h)) * cols + xx];
      }
      const PedestalArrays& a = arrays_for(yy);
      return cm::sub(fval(yy, xx), __ldcg(a.mean[nxt] + static_cast<std::size_t>(yy) * cols + xx));
    };

    // Resolution of the undecided pixels, in raster order.
    const int nu = sh_nu;
    if (nu > 0) {
      for (int t = threadIdx.x; t < nu; t += blockDim.x) {
        const uint32_t v = sh_ulist[t];
        int rank = 0;
        for (int u = 0; u < nu; ++u) rank += sh_ulist[u] < v;
        sh_sorted[rank] = v;
      }
      __syncthreads();
      // Pixels in the first h rows read the band above's final means.
      if (static_cast<int>(sh_sorted[0]) < h * cols) wait_at_least(prog_above, 2 * g + 1, sys);
      if (threadIdx.x == 0) {
        for (int u = 0; u < nu; ++u) {
          const int o = static_cast<int>(sh_sorted[u]);
          const int y = y0 + o / cols;
          const int x = o - (y - y0) * cols;
          const std::size_t j = static_cast<std::size_t>(y) * cols + x;
          const double v = sh_d0[(y - (y0 - h)) * cols + x];
          const double rms = __ldcg(p.own.noise + j);
          const uint8_t before = sh_status[o];
          bool update = false, stored = false;
          if (!cm::is_negative_outlier(v, rms, thr)) {
            double total = 0.0, mx = 0.0;
            for (int dy = -h; dy <= h; ++dy) {
              const int yy = y + dy;
              if (yy < 0 || yy >= rows) continue;
              for (int dx = -h; dx <= h; ++dx) {
                const int xx = x + dx;
                if (xx < 0 || xx >= cols) continue;
                const double dd = final_d(yy, xx, dy < 0 || (dy == 0 && dx < 0));
                total = cm::add(total, dd);
                if (mx < dd) mx = dd;
              }
            }
            const cm::PixelAction act = cm::classify(v, rms, total, mx, thr);
            update = act == cm::PixelAction::update;
            stored = act == cm::PixelAction::candidate && v == mx;
          }
          if ((before & 3) == kUnknown) commit(o, j, update);
          sh_status[o] = static_cast<uint8_t>((update ? kYes : kNo) | ((stored ? kYes : kNo) << 2));
          if (stored) sh_slist[sh_ns++] = static_cast<uint32_t>(o);
        }
      }
    }
    publish(prog_self, 2 * g + 1, sys);
    __syncthreads();

    // Emission: the band's clusters in raster order into this (frame, band) region.
    const int ns = sh_ns;
    if (ns > 0) {
      for (int t = threadIdx.x; t < ns; t += blockDim.x) {
        const uint32_t v = sh_slist[t];
        int rank = 0;
        for (int u = 0; u < ns; ++u) rank += sh_slist[u] < v;
        sh_sorted[rank] = v;
      }
      __syncthreads();
      if (static_cast<int>(sh_sorted[0]) < h * cols) wait_at_least(prog_above, 2 * g + 1, sys);
      const std::size_t region = static_cast<std::size_t>(k) * p.blocks + b;
      const int cap = static_cast<int>(p.region_capacity);
      const int n_write = min(ns, cap);
      for (int e = threadIdx.x; e < n_write * S2; e += blockDim.x) {
        const int c = e / S2;
        const int w = e - c * S2;
        const int o = static_cast<int>(sh_sorted[c]);
        const int y = y0 + o / cols;
        const int x = o - (y - y0) * cols;
        const int dy = w / S - h;
        const int dx = w - (w / S) * S - h;
        const int yy = y + dy, xx = x + dx;
        int32_t value = 0;
        if (yy >= 0 && yy < rows && xx >= 0 && xx < cols)
          value = cm::cluster_value(final_d(yy, xx, dy < 0 || (dy == 0 && dx < 0)));
        const std::size_t slot = region * p.region_capacity + c;
        p.region_data[slot * S2 + w] = value;
        if (w == 0) p.region_xy[slot] = static_cast<uint32_t>(x) | (static_cast<uint32_t>(y) << 16);
      }
    }
    if (threadIdx.x == 0) {
      p.region_counts[static_cast<std::size_t>(k) * p.blocks + b] = static_cast<uint32_t>(ns);
      if (ns > 0) atomicAdd(&p.frame_totals[k], static_cast<uint32_t>(ns));
    }
    publish(prog_self, 2 * g + 2, sys);
  }

  // The last block to finish advances the frame counter (every block has read it by then).
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned int prev = atomicAdd(p.blocks_done, 1u);
    if (prev + 1 == p.blocks) {
      *p.frames_done = g0 + p.n_frames;
      *p.blocks_done = 0;
      __threadfence();
    }
  }
}

template <int S>
void launch_find_s(const FindLaunch& p, cudaStream_t stream) {
  const std::size_t smem = FindSmem<S>::bytes(static_cast<int>(p.cols),
                                              static_cast<int>(p.rows_per_block));
  // The shared-memory limit was raised by find_max_resident_blocks() on this device.
  find_kernel<S><<<p.blocks, kFindThreads, smem, stream>>>(p);
  GLINT_CUDA_CHECK_LAUNCH();
}

template <int S>
int max_resident_s(uint32_t cols, uint32_t rows_per_block) {
  const std::size_t smem = FindSmem<S>::bytes(static_cast<int>(cols),
                                              static_cast<int>(rows_per_block));
  if (smem > 200 * 1024) return 0;
  GLINT_CUDA_CHECK(cudaFuncSetAttribute(find_kernel<S>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  int per_sm = 0;
  GLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, find_kernel<S>, kFindThreads, smem));
  int dev = 0, sms = 0;
  GLINT_CUDA_CHECK(cudaGetDevice(&dev));
  GLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return per_sm * sms;
}

__global__ void pack_kernel(const PackLaunch p) {
  const uint32_t f = blockIdx.x;
  using Reduce = cub::BlockReduce<unsigned long long, kPackThreads>;
  using Scan = cub::BlockScan<uint32_t, kPackThreads>;
  __shared__ typename Reduce::TempStorage reduce_tmp;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ unsigned long long base;
  extern __shared__ uint32_t prefix[];  // [blocks]

  unsigned long long part = 0;
  for (uint32_t i = threadIdx.x; i < f; i += kPackThreads) part += p.frame_totals[i];
  const unsigned long long before = Reduce(reduce_tmp).Sum(part);
  if (threadIdx.x == 0) base = before;
  uint32_t carry = 0;
  for (uint32_t c0 = 0; c0 < p.blocks; c0 += kPackThreads) {
    const uint32_t bb = c0 + threadIdx.x;
    const uint32_t n = bb < p.blocks ? p.region_counts[static_cast<std::size_t>(f) * p.blocks + bb]
                                     : 0u;
    uint32_t excl = 0, agg = 0;
    Scan(scan_tmp).ExclusiveSum(n, excl, agg);
    if (bb < p.blocks) prefix[bb] = carry + excl;
    carry += agg;
    __syncthreads();
  }
  __syncthreads();
  const unsigned long long frame_base = base;
  const uint32_t total = p.frame_totals[f];
  if (threadIdx.x == 0) {
    p.out_counts[f] = total;
    if (frame_base + total > p.out_capacity) *reinterpret_cast<volatile uint32_t*>(p.out_overflow) = 1;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int S2 = p.values;
  for (uint32_t bb = warp; bb < p.blocks; bb += kPackThreads / 32) {
    const std::size_t region = static_cast<std::size_t>(f) * p.blocks + bb;
    const uint32_t cnt = p.region_counts[region];
    if (cnt == 0) continue;
    if (cnt > p.region_capacity && lane == 0)
      *reinterpret_cast<volatile uint32_t*>(p.out_overflow) = 1;
    const uint32_t n = min(cnt, p.region_capacity);
    const unsigned long long o = frame_base + prefix[bb];
    for (uint32_t r = lane; r < n; r += 32) {
      if (o + r >= p.out_capacity) break;
      const uint32_t xy = p.region_xy[region * p.region_capacity + r];
      p.out_x[o + r] = static_cast<uint16_t>(xy & 0xffffu);
      p.out_y[o + r] = static_cast<uint16_t>(xy >> 16);
    }
    const int32_t* src = p.region_data + region * p.region_capacity * S2;
    for (uint32_t e = lane; e < n * S2; e += 32) {
      if (o + e / S2 >= p.out_capacity) break;
      p.out_data[o * S2 + e] = src[e];
    }
  }
}

__global__ void snapshot_kernel(const PedestalArrays live, const unsigned long long* frames_done,
                                const PedestalArrays snap, std::size_t begin, std::size_t end) {
  const int par = static_cast<int>(*frames_done & 1ull);
  for (std::size_t j = begin + blockIdx.x * blockDim.x + threadIdx.x; j < end;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    snap.sum[0][j] = live.sum[par][j];
    snap.sum2[0][j] = live.sum2[par][j];
    snap.mean[0][j] = live.mean[par][j];
    snap.noise[j] = live.noise[j];
  }
}

__global__ void dark_kernel(const PedestalArrays a, int par, const uint16_t* frames,
                            uint32_t n_frames, uint32_t cols, std::size_t begin, std::size_t end,
                            std::size_t frame_offset, std::size_t frame_elems, uint32_t window) {
  for (std::size_t j = begin + blockIdx.x * blockDim.x + threadIdx.x; j < end;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    double s = a.sum[par][j], s2 = a.sum2[par][j];
    uint32_t c = a.count[j];
    double m = a.mean[par][j];
    for (uint32_t k = 0; k < n_frames; ++k) {
      const double v = static_cast<double>(frames[k * frame_elems + (j - frame_offset)]);
      m = cm::dark_push(s, s2, c, v, window);
    }
    a.sum[par][j] = s;
    a.sum2[par][j] = s2;
    a.count[j] = c;
    a.mean[par][j] = m;
    a.noise[j] = cm::noise_of(s2, c, m);
  }
  (void)cols;
}

__global__ void derive_kernel(const PedestalArrays a, int par, std::size_t begin, std::size_t end) {
  for (std::size_t j = begin + blockIdx.x * blockDim.x + threadIdx.x; j < end;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const double m = cm::mean_of(a.sum[par][j], a.count[j]);
    a.mean[par][j] = m;
    a.noise[j] = cm::noise_of(a.sum2[par][j], a.count[j], m);
  }
}

int grid_for(std::size_t n) {
  return static_cast<int>(std::min<std::size_t>((n + 255) / 256, 4096));
}

}  // namespace

FindShape find_shape(uint32_t cols, uint32_t rows_per_block, int cluster_size) {
  FindShape s;
  s.threads = kFindThreads;
  switch (cluster_size) {
    case 3: s.shared_bytes = FindSmem<3>::bytes(cols, rows_per_block); break;
    case 5: s.shared_bytes = FindSmem<5>::bytes(cols, rows_per_block); break;
    case 7: s.shared_bytes = FindSmem<7>::bytes(cols, rows_per_block); break;
    default: s.shared_bytes = FindSmem<9>::bytes(cols, rows_per_block); break;
  }
  return s;
}

int find_max_resident_blocks(uint32_t cols, uint32_t rows_per_block, int cluster_size) {
  switch (cluster_size) {
    case 3: return max_resident_s<3>(cols, rows_per_block);
    case 5: return max_resident_s<5>(cols, rows_per_block);
    case 7: return max_resident_s<7>(cols, rows_per_block);
    default: return max_resident_s<9>(cols, rows_per_block);
  }
}

void launch_find(const FindLaunch& p, cudaStream_t stream) {
  if (p.n_frames == 0) return;
  switch (p.cluster_size) {
    case 3: launch_find_s<3>(p, stream); break;
    case 5: launch_find_s<5>(p, stream); break;
    case 7: launch_find_s<7>(p, stream); break;
    default: launch_find_s<9>(p, stream); break;
  }
}

void launch_pack(const PackLaunch& p, cudaStream_t stream) {
  if (p.n_frames == 0) return;
  pack_kernel<<<p.n_frames, kPackThreads, p.blocks * sizeof(uint32_t), stream>>>(p);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_snapshot(const PedestalArrays& live, const unsigned long long* frames_done,
                     const PedestalArrays& snap, uint32_t cols, uint32_t row0, uint32_t row1,
                     cudaStream_t stream) {
  const std::size_t begin = static_cast<std::size_t>(row0) * cols;
  const std::size_t end = static_cast<std::size_t>(row1) * cols;
  snapshot_kernel<<<grid_for(end - begin), 256, 0, stream>>>(live, frames_done, snap, begin, end);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_dark(const PedestalArrays& a, int parity, const uint16_t* frames, uint32_t n_frames,
                 uint32_t cols, uint32_t row0, uint32_t row1, uint32_t frame_row0,
                 uint32_t frame_rows, uint32_t window, cudaStream_t stream) {
  const std::size_t begin = static_cast<std::size_t>(row0) * cols;
  const std::size_t end = static_cast<std::size_t>(row1) * cols;
  dark_kernel<<<grid_for(end - begin), 256, 0, stream>>>(
      a, parity, frames, n_frames, cols, begin, end, static_cast<std::size_t>(frame_row0) * cols,
      static_cast<std::size_t>(frame_rows) * cols, window);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_derive(const PedestalArrays& a, int parity, uint32_t cols, uint32_t row0,
                   uint32_t row1, cudaStream_t stream) {
  const std::size_t begin = static_cast<std::size_t>(row0) * cols;
  const std::size_t end = static_cast<std::size_t>(row1) * cols;
  derive_kernel<<<grid_for(end - begin), 256, 0, stream>>>(a, parity, begin, end);
  GLINT_CUDA_CHECK_LAUNCH();
}

}  // namespace glint::gpu::detail
