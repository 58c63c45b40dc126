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
#include <cstdlib>

#include "check.cuh"
#include "find_kernels.hpp"

namespace glint::gpu::detail {

namespace cm = cluster_math;

int find_threads();

namespace {

constexpr int kFindThreadsMax = 1024;


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

/// a / b correctly rounded, as cm::div gives it, for a divisor known in advance (inv ~ 1/b):
/// a quotient refined with fused multiply-adds is returned only when its exact residual proves it
/// is the nearest double (strictly within half an ulp, not a power of two, normal range);
/// otherwise cm::div decides. The test stays sound even if the residual was rounded (2^-50 slack).
__device__ __forceinline__ double div_known(double a, double b, double inv) {
  const double q0 = __dmul_rn(a, inv);
  const double r0 = __fma_rn(-q0, b, a);
  const double q1 = __fma_rn(r0, inv, q0);
  const double r1 = __fma_rn(-q1, b, a);
  const long long bits = __double_as_longlong(q1);
  const int e = static_cast<int>((bits >> 52) & 0x7ff);
  const bool power_of_two = (bits & 0xfffffffffffffll) == 0;
  if (e > 60 && e < 2000 && !power_of_two) {
    const double half_ulp = __longlong_as_double(static_cast<long long>(e - 53) << 52);
    const double limit = __dmul_rn(__dmul_rn(half_ulp, b), 1.0 - 0x1p-50);
    if (fabs(r1) < limit) return q1;
  }
  return cm::div(a, b);
}

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
  // For a segment of `seg` pixels and halo H = h*cols + h: d0 of [p0-H, p1+H), lo/hi of
  // [p0-H, p1), three pixel lists and the status bytes of the segment.
  static __host__ __device__ std::size_t bytes(int cols, int seg) {
    constexpr int h = S / 2;
    const std::size_t halo = static_cast<std::size_t>(h) * cols + h;
    const std::size_t n = static_cast<std::size_t>(seg);
    return 8 * ((n + 2 * halo) + 2 * (n + halo)) + n * (1 + 3 * 4) + 16;
  }
};

/// Phases timed per block when FindLaunch::profile is set (cycles, summed over frames).
enum Phase { kWait = 0, kLoop1, kLoop2, kResolve, kEmit, kPhases };

/// Row of pixel j (j < 2^24 rows*cols): float reciprocal, then an exact correction.
__device__ __forceinline__ int row_of(int j, int cols, float inv_cols) {
  int y = __float2int_rz(static_cast<float>(j) * inv_cols);
  if (y * cols > j) --y;
  else if ((y + 1) * cols <= j) ++y;
  return y;
}

template <int S>
__global__ void __launch_bounds__(kFindThreadsMax) find_kernel(const __grid_constant__ FindLaunch p) {
  constexpr int h = S / 2;
  constexpr int S2 = S * S;
  const int cols = static_cast<int>(p.cols);
  const int rows = static_cast<int>(p.rows);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int b = blockIdx.x;
  const int halo = h * cols + h;
  // The block's segment of the band in raster order. Segments hold at least `halo` pixels, so a
  // pixel's window reaches into the neighbouring segments only.
  const long long band0 = static_cast<long long>(p.band_begin) * cols;
  const long long band_px = static_cast<long long>(p.band_end - p.band_begin) * cols;
  const int p0 = static_cast<int>(band0 + band_px * b / p.blocks);
  const int p1 = static_cast<int>(band0 + band_px * (b + 1) / p.blocks);
  const int own_pixels = p1 - p0;
  const int seg_max = static_cast<int>(p.segment_max);
  const int base = p0 - halo;  // shared index = pixel - base
  const int band_first = static_cast<int>(band0);
  const int band_last = static_cast<int>(band0 + band_px);
  const cm::Thresholds thr = p.thresholds;
  const double inv_window = 1.0 / static_cast<double>(p.window);

  extern __shared__ __align__(16) unsigned char smem[];
  double* sh_d0 = reinterpret_cast<double*>(smem);                        // [p0-H, p1+H)
  double* sh_lo = sh_d0 + (seg_max + 2 * halo);                           // [p0-H, p1)
  double* sh_hi = sh_lo + (seg_max + halo);
  uint32_t* sh_ulist = reinterpret_cast<uint32_t*>(sh_hi + (seg_max + halo));
  uint32_t* sh_slist = sh_ulist + seg_max;
  uint32_t* sh_sorted = sh_slist + seg_max;
  uint8_t* sh_status = reinterpret_cast<uint8_t*>(sh_sorted + seg_max);
  __shared__ int sh_nu, sh_ns, sh_umin, sh_left;

  const unsigned long long* prog_above = b > 0 ? &p.progress[b - 1] : p.progress_above;
  const unsigned long long* prog_below =
      b + 1 < static_cast<int>(p.blocks) ? &p.progress[b + 1] : p.progress_below;
  unsigned long long* prog_self = &p.progress[b];
  const bool sys = p.system_scope;

  const unsigned long long g0 = __ldcg(p.frames_done);
  const std::size_t frame_elems = static_cast<std::size_t>(p.frame_rows) * cols;
  const int frame_first = static_cast<int>(p.frame_row0) * cols;
  long long clk[kPhases] = {0, 0, 0, 0, 0};
  long long t_mark = clock64();
  const auto lap = [&](int phase) {
    if (p.profile != nullptr && threadIdx.x == 0) {
      const long long now = clock64();
      clk[phase] += now - t_mark;
      t_mark = now;
    }
  };

  // The arrays that hold pixel j (this GPU's, or a neighbouring GPU's).
  const auto arrays_for = [&](int j) -> const PedestalArrays& {
    return j < band_first ? p.above : (j >= band_last ? p.below : p.own);
  };

  for (uint32_t k = 0; k < p.n_frames; ++k) {
    const unsigned long long g = g0 + k;
    const int par = static_cast<int>(g & 1ull);
    const int nxt = par ^ 1;
    const uint16_t* fr = p.frames + k * frame_elems - frame_first;
    const auto fval = [&](int j) -> double { return static_cast<double>(fr[j]); };

    // Progress counter of a segment: g+1 once frame g's decisions and state are final there.
    // This frame starts when the neighbours' frame g-1 state (our halo) is final; they are then
    // past reading our frame g-1 start state, the buffers this frame writes.
    if (threadIdx.x == 0) {
      if (prog_above) while (load_acquire(prog_above, sys) < g) __nanosleep(20);
      if (prog_below) while (load_acquire(prog_below, sys) < g) __nanosleep(20);
      sh_nu = 0;
      sh_ns = 0;
      sh_umin = own_pixels;
    }
    __syncthreads();
    lap(kWait);

    // Loop 1: d0 = f - frame-start mean over [p0-H, p1+H). For pixels that can precede one of
    // the segment ([p0-H, p1)) also [lo, hi] covering both d0 and d1 = f - (mean after this
    // frame's update). With a full window (count == N) the mean moves by d0/N up to rounding, so
    // an interval with a generous rounding slack needs no division; otherwise d1 is computed.
    const int q0 = max(frame_first, p0 - halo);
    const int q1 = min(frame_first + static_cast<int>(frame_elems), p1 + halo);
    const auto first_pass = [&](int j, uint16_t fv, double m0, uint32_t count) {
      const double f = static_cast<double>(fv);
      const double d0 = cm::sub(f, m0);
      sh_d0[j - base] = d0;
      if (j < p1) {
        double lo, hi;
        if (count == p.window) {
          const double step = d0 * inv_window;  // d1 - d0 is about -step
          const double slack = fabs(step) * 1e-6 + 1e-12 * (fabs(m0) + fabs(f)) + 1e-300;
          lo = fmin(d0, d0 - step) - slack;
          hi = fmax(d0, d0 - step) + slack;
        } else {
          const PedestalArrays& a = arrays_for(j);
          double s = __ldcg(a.sum[par] + j);
          double s2 = __ldcg(a.sum2[par] + j);
          const double d1 = cm::sub(f, cm::fast_push(s, s2, f, p.window));
          lo = fmin(d0, d1);
          hi = fmax(d0, d1);
        }
        sh_lo[j - base] = lo;
        sh_hi[j - base] = hi;
      }
    };
    // Two pixels per thread and iteration, loads first: half the memory round trips.
    for (int j = q0 + static_cast<int>(threadIdx.x); j < q1; j += 2 * blockDim.x) {
      const int j2 = j + blockDim.x;
      const bool two = j2 < q1;
      const uint16_t fa = fr[j];
      const double ma = __ldcg(arrays_for(j).mean[par] + j);
      const uint32_t ca = j < p1 ? __ldg(arrays_for(j).count + j) : 0u;
      uint16_t fb = 0;
      double mb = 0.0;
      uint32_t cb = 0;
      if (two) {
        fb = fr[j2];
        mb = __ldcg(arrays_for(j2).mean[par] + j2);
        cb = j2 < p1 ? __ldg(arrays_for(j2).count + j2) : 0u;
      }
      first_pass(j, fa, ma, ca);
      if (two) first_pass(j2, fb, mb, cb);
    }
    __syncthreads();
    lap(kLoop1);

    // Commit of pixel j of the segment: the fast push (new sum, sum2, mean into the next
    // buffers, noise in place), or a copy of its unchanged state.
    const double window_d = static_cast<double>(p.window);
    const auto commit_loaded = [&](int j, bool update, double s, double s2, uint32_t count) {
      if (update) {
        const double f = fval(j);
        double m1, rms;
        if (count == p.window) {
          // fast_push and noise_of with count == N: sum/N is the cached mean (so f - sum/N is
          // d0), and every division by N is exact (div_known): the same operations, same bits.
          s = cm::add(s, sh_d0[j - base]);
          s2 = cm::add(s2, cm::sub(cm::mul(f, f), div_known(s2, window_d, inv_window)));
          m1 = div_known(s, window_d, inv_window);
          rms = cm::root(cm::sub(div_known(s2, window_d, inv_window), cm::mul(m1, m1)));
        } else {
          m1 = cm::fast_push(s, s2, f, p.window);
          rms = cm::noise_of(s2, count, m1);
        }
        __stcg(p.own.mean[nxt] + j, m1);
        __stcg(p.own.noise + j, rms);
      } else {
        __stcg(p.own.mean[nxt] + j, __ldcg(p.own.mean[par] + j));
      }
      __stcg(p.own.sum[nxt] + j, s);
      __stcg(p.own.sum2[nxt] + j, s2);
    };
    const auto commit = [&](int j, bool update) {
      commit_loaded(j, update, __ldcg(p.own.sum[par] + j), __ldcg(p.own.sum2[par] + j),
                    __ldg(p.own.count + j));
    };

    // Loop 2 (pass 0): decide every pixel of the segment, commit the certain ones.
    for (int o = threadIdx.x; o < own_pixels; o += blockDim.x) {
      const int j = p0 + o;
      const int y = row_of(j, cols, inv_cols);
      const int x = j - y * cols;
      const double v = sh_d0[j - base];
      // Everything the pixel may need from memory, loaded at once (one round trip).
      const double rms = __ldcg(p.own.noise + j);
      const double s_old = __ldcg(p.own.sum[par] + j);
      const double s2_old = __ldcg(p.own.sum2[par] + j);
      const uint32_t count = __ldg(p.own.count + j);
      Decision d;
      if (cm::is_negative_outlier(v, rms, thr)) {
        d = {kNo, kNo};
      } else {
        double tlo = 0.0, thi = 0.0, mlo = 0.0, mhi = 0.0;
#pragma unroll
        for (int dy = -h; dy <= h; ++dy) {
          const int yy = y + dy;
          if (yy < 0 || yy >= rows) continue;
#pragma unroll
          for (int dx = -h; dx <= h; ++dx) {
            const int xx = x + dx;
            if (xx < 0 || xx >= cols) continue;
            const int s = j + dy * cols + dx - base;
            double lo, hi;
            if (dy < 0 || (dy == 0 && dx < 0)) {
              lo = sh_lo[s];
              hi = sh_hi[s];
            } else {
              lo = hi = sh_d0[s];
            }
            tlo = cm::add(tlo, lo);
            thi = cm::add(thi, hi);
            if (mlo < lo) mlo = lo;
            if (mhi < hi) mhi = hi;
          }
        }
        d = decide_bounds(v, rms, tlo, thi, mlo, mhi, thr);
      }
      if (d.update != kUnknown) commit_loaded(j, d.update == kYes, s_old, s2_old, count);
      if (d.update == kUnknown || d.stored == kUnknown) {
        sh_ulist[atomicAdd(&sh_nu, 1)] = static_cast<uint32_t>(o);
        atomicMin(&sh_umin, o);
      } else if (d.stored == kYes) {
        sh_slist[atomicAdd(&sh_ns, 1)] = static_cast<uint32_t>(o);
      }
      sh_status[o] = static_cast<uint8_t>(d.update | (d.stored << 2));
    }
    __syncthreads();
    lap(kLoop2);

    // The value f - mean of window pixel jj as the pixel being visited sees it: this frame's
    // final mean for a predecessor, the frame-start mean otherwise.
    const auto final_d = [&](int jj, bool predecessor) -> double {
      if (!predecessor) return sh_d0[jj - base];
      return cm::sub(fval(jj), __ldcg(arrays_for(jj).mean[nxt] + jj));
    };

    // Resolution of the undecided pixels. A pixel is re-decided exactly once none of its
    // predecessors in the segment is undecided; rounds of such pixels run in parallel, which
    // gives the raster-order result (each depends only on its window's predecessors).
    const int nu = sh_nu;
    if (nu > 0) {
      // Pixels whose window reaches before the segment read the segment above's final means.
      if (sh_umin < halo) {
        if (threadIdx.x == 0 && prog_above)
          while (load_acquire(prog_above, sys) < g + 1) __nanosleep(20);
        __syncthreads();
      }
      for (;;) {
        if (threadIdx.x == 0) sh_left = 0;
        __syncthreads();
        for (int t = threadIdx.x; t < nu; t += blockDim.x) {
          const int o = static_cast<int>(sh_ulist[t]);
          const uint8_t before = sh_status[o];
          if (before & 0x10) continue;  // resolved in an earlier round
          const int j = p0 + o;
          const int y = row_of(j, cols, inv_cols);
          const int x = j - y * cols;
          bool ready = true;
          for (int dy = -h; dy <= 0 && ready; ++dy) {
            for (int dx = -h; dx <= h; ++dx) {
              if (dy == 0 && dx >= 0) break;
              const int xx = x + dx;
              const int jj = j + dy * cols + dx;
              if (xx < 0 || xx >= cols || jj < p0) continue;
              if ((sh_status[jj - p0] & 3) == kUnknown) {
                ready = false;
                break;
              }
            }
          }
          if (!ready) {
            atomicAdd(&sh_left, 1);
            continue;
          }
          __threadfence_block();  // the predecessors' statuses before their committed means
          const double v = sh_d0[j - base];
          const double rms = __ldcg(p.own.noise + j);
          bool update = false, stored = false;
          if (!cm::is_negative_outlier(v, rms, thr)) {
            double total = 0.0, mx = 0.0;
            for (int dy = -h; dy <= h; ++dy) {
              const int yy = y + dy;
              if (yy < 0 || yy >= rows) continue;
              for (int dx = -h; dx <= h; ++dx) {
                const int xx = x + dx;
                if (xx < 0 || xx >= cols) continue;
                const double dd = final_d(j + dy * cols + dx, dy < 0 || (dy == 0 && dx < 0));
                total = cm::add(total, dd);
                if (mx < dd) mx = dd;
              }
            }
            const cm::PixelAction act = cm::classify(v, rms, total, mx, thr);
            update = act == cm::PixelAction::update;
            stored = act == cm::PixelAction::candidate && v == mx;
          }
          if ((before & 3) == kUnknown) commit(j, update);
          __threadfence_block();  // the commit's mean before the status that releases successors
          sh_status[o] = static_cast<uint8_t>(0x10 | (update ? kYes : kNo) |
                                              ((stored ? kYes : kNo) << 2));
          if (stored) sh_slist[atomicAdd(&sh_ns, 1)] = static_cast<uint32_t>(o);
        }
        __syncthreads();
        if (sh_left == 0) break;
        __syncthreads();  // everyone has read sh_left before it is reset
      }
    }
    lap(kResolve);
    // Frame g is final in this segment.
    __syncthreads();
    if (threadIdx.x == 0) store_release(prog_self, g + 1, sys);

    // Emission: the segment's clusters in raster order into this (frame, segment) region.
    const int ns = sh_ns;
    if (ns > 0) {
      for (int t = threadIdx.x; t < ns; t += blockDim.x) {
        const uint32_t v = sh_slist[t];
        int rank = 0;
        for (int u = 0; u < ns; ++u) rank += sh_slist[u] < v;
        sh_sorted[rank] = v;
      }
      __syncthreads();
      if (static_cast<int>(sh_sorted[0]) < halo) {
        if (threadIdx.x == 0 && prog_above)
          while (load_acquire(prog_above, sys) < g + 1) __nanosleep(20);
        __syncthreads();
      }
      const std::size_t region = static_cast<std::size_t>(k) * p.blocks + b;
      const int n_write = min(ns, static_cast<int>(p.region_capacity));
      for (int e = threadIdx.x; e < n_write * S2; e += blockDim.x) {
        const int c = e / S2;
        const int w = e - c * S2;
        const int j = p0 + static_cast<int>(sh_sorted[c]);
        const int y = row_of(j, cols, inv_cols);
        const int x = j - y * cols;
        const int dy = w / S - h;
        const int dx = w - (w / S) * S - h;
        const int yy = y + dy, xx = x + dx;
        int32_t value = 0;
        if (yy >= 0 && yy < rows && xx >= 0 && xx < cols)
          value = cm::cluster_value(final_d(j + dy * cols + dx, dy < 0 || (dy == 0 && dx < 0)));
        const std::size_t slot = region * p.region_capacity + c;
        p.region_data[slot * S2 + w] = value;
        if (w == 0) p.region_xy[slot] = static_cast<uint32_t>(x) | (static_cast<uint32_t>(y) << 16);
      }
    }
    if (threadIdx.x == 0) {
      p.region_counts[static_cast<std::size_t>(k) * p.blocks + b] = static_cast<uint32_t>(ns);
      if (ns > 0) atomicAdd(&p.frame_totals[k], static_cast<uint32_t>(ns));
    }
    // The lists and counters are reset by the next frame only after this barrier.
    __syncthreads();
    lap(kEmit);
  }

  if (p.profile != nullptr && threadIdx.x == 0)
    for (int i = 0; i < kPhases; ++i) atomicAdd(&p.profile[b * kPhases + i],
                                                static_cast<unsigned long long>(clk[i]));

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
                                              static_cast<int>(p.segment_max));
  // The shared-memory limit was raised by find_max_resident_blocks() on this device.
  find_kernel<S><<<p.blocks, find_threads(), smem, stream>>>(p);
  GLINT_CUDA_CHECK_LAUNCH();
}

template <int S>
int max_resident_s(uint32_t cols, uint32_t segment) {
  const std::size_t smem = FindSmem<S>::bytes(static_cast<int>(cols), static_cast<int>(segment));
  if (smem > 200 * 1024) return 0;
  GLINT_CUDA_CHECK(cudaFuncSetAttribute(find_kernel<S>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  int per_sm = 0;
  GLINT_CUDA_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, find_kernel<S>, find_threads(), smem));
  return per_sm;
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

FindShape find_shape(uint32_t cols, uint32_t segment, int cluster_size) {
  FindShape s;
  s.threads = find_threads();
  switch (cluster_size) {
    case 3: s.shared_bytes = FindSmem<3>::bytes(cols, segment); break;
    case 5: s.shared_bytes = FindSmem<5>::bytes(cols, segment); break;
    case 7: s.shared_bytes = FindSmem<7>::bytes(cols, segment); break;
    default: s.shared_bytes = FindSmem<9>::bytes(cols, segment); break;
  }
  return s;
}

/// Threads per find block: 512 (two blocks per SM), or GLINT_FIND_THREADS (256, 768, 1024; a
/// tuning knob).
int find_threads() {
  static const int t = [] {
    const char* e = std::getenv("GLINT_FIND_THREADS");
    const int v = e ? std::atoi(e) : 512;
    return (v == 256 || v == 512 || v == 768 || v == 1024) ? v : 512;
  }();
  return t;
}

int find_blocks_per_sm(uint32_t cols, uint32_t segment, int cluster_size) {
  switch (cluster_size) {
    case 3: return max_resident_s<3>(cols, segment);
    case 5: return max_resident_s<5>(cols, segment);
    case 7: return max_resident_s<7>(cols, segment);
    default: return max_resident_s<9>(cols, segment);
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
