// The GPU cluster-finding kernels. Every arithmetic operation comes from cluster_math.hpp, so
// the bits are the CPU reference's (docs/cluster-finding.md).
//
// Exactness inside a frame (the sequential raster-order dependency): pass 0 decides every pixel
// of a band from the frame-start means. For each window pixel that precedes the centre in raster
// order it knows both possible values of f - mean (frame-start mean, or the mean after this
// frame's update, which depends only on that pixel's own state and value), so it bounds the
// window's total and max from below and above. Rounded addition and max are monotone, so the
// bounds hold for every mix of updated and not-updated predecessors; a pixel whose decision is the
// same at both ends is final. The rest (a few per frame) are re-decided exactly, each once its
// undecided predecessors are final, with their final means: the raster-order result. Frames stay
// sequential; the segments of a frame hand frames on to each other as a wavefront.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "glint/cluster_window.hpp"
#include "glint/jungfrau.hpp"
#include "check.cuh"
#include "find_kernels.hpp"

namespace glint::gpu::detail {

namespace cm = cluster_math;

namespace {

constexpr int kFindThreadsMax = 1024;
/// Dynamic shared memory per find block, at most (the device's opt-in limit may be lower).
constexpr std::size_t kFindSharedMax = 227 * 1024;


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

/// Pass-0 decision from bounds of the window's total and max (steps 2 and 4 of
/// docs/cluster-finding.md).
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

/// Memory of one find block, for segments of `seg` pixels and the window halo H = h*cols + h
/// (how far a window reaches before or after its centre in raster order). Pixel j of
/// [p0-H, p1+H) sits at j - (p0-H); own pixel o = j - p0 at o. Each array lives in shared memory,
/// or, from a spill level on (kMaxSpill), in the block's global scratch area.
struct FindLayout {
  struct Place {
    std::size_t off = 0;
    bool global = false;
  };
  Place d0;      ///< double [seg + 2H]: f - frame-start mean
  Place dprev;   ///< double [H]: previous frame's f - final mean, of [p0-H, p0)
  Place state;   ///< double [5][seg]: own sum, sum2, mean, noise, sum2/N (resident)
  Place lohi;    ///< bounds of the final f - mean, of [p0-H, p1): double lo[seg + H] and
                 ///< hi[seg + H] (resident), else float2 [seg + H]
  Place lists;   ///< uint32 [4][seg]: undecided, stored, sorted (two frames)
  Place f;       ///< uint16 [2][f_stride]: frame values of [p0-H, p1+H), two work items
  Place full;    ///< uint8 [seg + H]: count == window, of [p0-H, p1)
  Place status;  ///< uint8 [seg]
  std::size_t bytes = 0;    ///< shared memory
  std::size_t scratch = 0;  ///< global scratch
  uint32_t f_stride = 0;    ///< uint16 per frame buffer (even: 4-byte copies)
  bool f_direct = false;    ///< frame values read from the frame buffer, not copied

  __host__ __device__ FindLayout(uint32_t cols, uint32_t seg, int cluster_size, bool resident,
                                 int spill) {
    const std::size_t h = static_cast<std::size_t>(cluster_size / 2);
    const std::size_t halo = h * cols + h;
    const std::size_t n = seg;
    std::size_t sh = 0, gl = 0;
    const auto put = [&](Place& pl, std::size_t size, bool global, std::size_t align) {
      std::size_t& o = global ? gl : sh;
      o = (o + align - 1) / align * align;
      pl.off = o;
      pl.global = global;
      o += size;
    };
    put(d0, 8 * (n + 2 * halo), spill >= 3, 8);
    put(dprev, 8 * halo, spill >= 1, 8);
    if (resident) put(state, 40 * n, false, 8);
    put(lohi, (resident ? 16 : 8) * (n + halo), spill >= 3, 8);
    put(lists, 16 * n, spill >= 1, 8);
    f_stride = static_cast<uint32_t>((n + 2 * halo + 5) & ~std::size_t{1});
    f_direct = spill >= 2;
    if (!f_direct) put(f, 4 * static_cast<std::size_t>(f_stride), false, 8);
    put(full, n + halo, spill >= 4, 1);
    put(status, n, spill >= 4, 1);
    bytes = (sh + 15) / 16 * 16;
    scratch = (gl + 255) / 256 * 256;
  }
};

/// Phases timed per block when FindLaunch::profile is set (cycles, summed over frames).
enum Phase { kWait = 0, kLoop1, kLoop2, kResolve, kRelease, kEmit, kPhases };
static_assert(kPhases == kFindPhases);

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Row of pixel j (j < 2^24 rows*cols): float reciprocal, then an exact correction.
__device__ __forceinline__ int row_of(int j, int cols, float inv_cols) {
  int y = __float2int_rz(static_cast<float>(j) * inv_cols);
  if (y * cols > j) --y;
  else if ((y + 1) * cols <= j) ++y;
  return y;
}

__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gmem_src) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(s), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/// Named block barrier `id` over n threads: wait for all, or only count this warp in.
__device__ __forceinline__ void named_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
/// A find block's output cursor (shared memory, used by its releasing thread only): the run of
/// clusters [pos, end) it is filling, and the next run [next, next + next_size), asked for ahead
/// (after a release, off the frame's path), while next_size > 0.
struct OutCursor {
  uint32_t pos, end, next, next_size;
};

/// The first of n clusters in the block's output (kNoPiece where they would pass the capacity;
/// the count of clusters handed out keeps growing, so that the host learns what the batch needs).
__device__ __forceinline__ uint32_t take_piece(OutCursor& c, uint32_t n, const FindLaunch& p) {
  uint32_t pos = c.pos, end = c.end;
  if (end - pos < n) {
    if (c.next_size > 0) {
      pos = c.next;
      end = c.next + c.next_size;
      c.next_size = 0;
    }
    if (end - pos < n) {
      const uint32_t size = max(n, p.out_chunk);
      pos = atomicAdd(p.out_alloc, size);
      end = pos + size;
    }
  }
  c.pos = pos + n;
  c.end = end;
  if (n > 0 && (pos + n > p.out_capacity || pos + n < pos)) {
    atomicOr(p.out_flags, kOverflow);
    return kNoPiece;
  }
  return pos;
}

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/// How the find kernel reads a pixel, by pixel mode (docs/cluster-finding.md, "JUNGFRAU"),
/// so that the raw (uint16) instantiation keeps its code: the value the pedestal works on, and
/// whether the pixel takes part at all (G0 only: a pixel out of G0 is never a centre, is d = 0.0
/// in a window and 0 in a stored cluster). Calibrated: the window max starts at the smallest
/// normal double (aare's numeric_limits<double>::min()), entries are floats (their bits stored).
template <PixelMode kMode>
struct Pixels {
  static constexpr bool kJungfrau = kMode != PixelMode::raw;
  static constexpr double kMax0 =
      kMode == PixelMode::jungfrau_calibrated ? 2.2250738585072014e-308 : 0.0;
  __device__ __forceinline__ static bool excluded(uint16_t raw) {
    if constexpr (kMode == PixelMode::jungfrau_g0) return !jungfrau::in_g0(raw);
    else return false;
  }
  __device__ __forceinline__ static double value(uint16_t raw, int j, const FindLaunch& p) {
    if constexpr (kMode == PixelMode::jungfrau_calibrated)
      return jungfrau::calibrate(raw, static_cast<std::size_t>(j),
                                 static_cast<std::size_t>(p.rows) * p.cols, p.cal_pedestal,
                                 p.cal_gain);
    else return static_cast<double>(raw);
  }
  /// f - m as a window sees pixel j (0.0 for an excluded pixel).
  __device__ __forceinline__ static double dev(uint16_t raw, int j, double m,
                                               const FindLaunch& p) {
    if (excluded(raw)) return 0.0;
    return cm::sub(value(raw, j, p), m);
  }
  __device__ __forceinline__ static int32_t entry(double d) {
    if constexpr (kMode == PixelMode::jungfrau_calibrated)
      return __float_as_int(__double2float_rn(d));
    else return cm::cluster_value(d);
  }
};
static_assert(Pixels<PixelMode::jungfrau_calibrated>::kMax0 == 0x1p-1022);

/// The persistent find kernel. One block owns the segment [p0, p1) of the band (with kChunked
/// several, b, b + blocks, ..., each frame through all of them in turn) and walks through the
/// batch's frames. kSpill: which arrays live in the block's global scratch (FindLayout). With
/// kResident (one segment per block), the pedestal state of its own pixels stays in shared memory
/// for the whole launch: only the means (which the neighbouring segments read, double-buffered by
/// frame parity) go to global memory every frame, sum and sum2 only for pixels whose window is
/// not full, everything else once at the end. Per frame, on the path that the neighbours wait
/// for: the halo's frame-start means (loop 1, with the own pixels' f - mean prepared while those
/// loads are in flight), pass-0 decisions and commits of the segment (loop 2), resolution of the
/// undecided pixels, then the progress counter. After it: cluster emission, which never waits
/// for the segment above: window entries that lie there are written one frame later, from the
/// means that loop 1 of the next frame reads anyway (or at the end of the launch).
template <int S, bool kResident, int kSpill, bool kChunked, PixelMode kMode>
__global__ void __launch_bounds__(kFindThreadsMax) find_kernel(const __grid_constant__ FindLaunch p) {
  using Px = Pixels<kMode>;
  // Where each array lives is known at compile time, so that shared-memory arrays are addressed
  // as such (generic addressing costs about a third of the kernel's time).
  constexpr bool kListsGlobal = kSpill >= 1;   // also dprev
  constexpr bool kFDirect = kSpill >= 2;
  constexpr bool kDGlobal = kSpill >= 3;       // d0 and the bounds
  constexpr bool kFlagsGlobal = kSpill >= 4;   // full and status
  constexpr int h = S / 2;
  constexpr int S2 = S * S;
  const int cols = static_cast<int>(p.cols);
  const int rows = static_cast<int>(p.rows);
  const float inv_cols = 1.0f / static_cast<float>(cols);
  const int b = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  const int nt = static_cast<int>(blockDim.x);
  const int halo = h * cols + h;
  const int segs = static_cast<int>(p.segments);
  // One segment per block: its bounds stay constant (no registers held for them).
  const int chunks = kChunked ? static_cast<int>(p.chunks) : 1;
  // The segments of the band in raster order. Segments hold at least `halo` pixels (or the
  // whole band), so a pixel's window reaches into the neighbouring segments only.
  const long long band0 = static_cast<long long>(p.band_begin) * cols;
  const long long band_px = static_cast<long long>(p.band_end - p.band_begin) * cols;
  const int seg_max = static_cast<int>(p.segment_max);
  const int band_first = static_cast<int>(band0);
  const int band_last = static_cast<int>(band0 + band_px);
  const cm::Thresholds thr = p.thresholds;
  const double inv_window = 1.0 / static_cast<double>(p.window);
  const double window_d = static_cast<double>(p.window);
  const std::size_t frame_elems = static_cast<std::size_t>(p.frame_rows) * cols;
  const int frame_first = static_cast<int>(p.frame_row0) * cols;
  const int frame_end = frame_first + static_cast<int>(frame_elems);
  // The segment being worked on (set_segment): own pixels [p0, p1), frame pixels read [q0, q1)
  // (the segment and the halo on both sides, within the rows held).
  int v = 0, p0 = 0, p1 = 0, own_pixels = 0, base = 0, q0 = 0, q1 = 0;
  const auto seg_begin = [&](int u) { return static_cast<int>(band0 + band_px * u / segs); };

  const FindLayout lay(p.cols, p.segment_max, S, kResident, kSpill);
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* const scratch = p.scratch + static_cast<std::size_t>(b) * p.scratch_stride;
  const auto shared_or_scratch = [&](const FindLayout::Place& pl, auto in_scratch) {
    if constexpr (decltype(in_scratch)::value) return scratch + pl.off;
    else return smem + pl.off;
  };
  using InScratchD = std::integral_constant<bool, kDGlobal>;
  using InScratchL = std::integral_constant<bool, kListsGlobal>;
  using InScratchF = std::integral_constant<bool, kFlagsGlobal>;
  double* sh_d0 = reinterpret_cast<double*>(shared_or_scratch(lay.d0, InScratchD{}));
  double* sh_dprev = reinterpret_cast<double*>(shared_or_scratch(lay.dprev, InScratchL{}));
  double* sh_sum = reinterpret_cast<double*>(smem + lay.state.off);
  double* sh_sum2 = sh_sum + seg_max;
  double* sh_mean = sh_sum2 + seg_max;
  double* sh_noise = sh_mean + seg_max;
  double* sh_s2n = sh_noise + seg_max;  // sum2 / N, as cm::div gives it
  // Bounds of f - mean: two double arrays when the state is resident (no conversions), else one
  // float2 array rounded outwards (less shared memory).
  double* sh_lo = reinterpret_cast<double*>(shared_or_scratch(lay.lohi, InScratchD{}));
  double* sh_hi = sh_lo + (seg_max + halo);
  float2* sh_lohi = reinterpret_cast<float2*>(shared_or_scratch(lay.lohi, InScratchD{}));
  const auto put_bounds = [&](int s, double lo, double hi) {
    if constexpr (kResident) {
      sh_lo[s] = lo;
      sh_hi[s] = hi;
    } else {
      sh_lohi[s] = make_float2(__double2float_rd(lo), __double2float_ru(hi));
    }
  };
  const auto get_bounds = [&](int s, double& lo, double& hi) {
    if constexpr (kResident) {
      lo = sh_lo[s];
      hi = sh_hi[s];
    } else {
      const float2 q = sh_lohi[s];
      lo = q.x;
      hi = q.y;
    }
  };
  uint32_t* sh_ulist = reinterpret_cast<uint32_t*>(shared_or_scratch(lay.lists, InScratchL{}));
  uint32_t* sh_slist = sh_ulist + seg_max;
  uint32_t* sh_sorted = sh_slist + seg_max;  // [2][seg_max], by frame parity within the launch
  uint16_t* sh_f = reinterpret_cast<uint16_t*>(smem + lay.f.off);
  uint8_t* sh_full = shared_or_scratch(lay.full, InScratchF{});
  uint8_t* sh_status = shared_or_scratch(lay.status, InScratchF{});
  __shared__ int sh_nu, sh_ns, sh_left, sh_waits;
  // The output (OutCursor, kept by the releasing thread), and each work item's first cluster
  // there by the parity of the item.
  __shared__ OutCursor sh_out;
  __shared__ uint32_t sh_first[2];
  const auto put_value = [&](std::size_t i, int32_t value) {
    if (p.narrow) {
      if (value != static_cast<int32_t>(static_cast<int16_t>(value))) atomicOr(p.out_flags, kTooWide);
      static_cast<int16_t*>(p.out_data)[i] = static_cast<int16_t>(value);
    } else {
      static_cast<int32_t*>(p.out_data)[i] = value;
    }
  };

  // Progress counters of the segment and its neighbours. System scope only where a flag crosses
  // to another GPU: the band's first segment reads the GPU above and is read by it, the last
  // segment likewise below. Every other hand-off stays on this GPU at GPU scope (a system-scope
  // release or acquire costs far more). Derived from v where used (fewer registers held).
  const auto prog_above = [&]() -> const unsigned long long* {
    return v > 0 ? &p.progress[v - 1] : p.progress_above;
  };
  const auto prog_below = [&]() -> const unsigned long long* {
    return v + 1 < segs ? &p.progress[v + 1] : p.progress_below;
  };
  const auto sys_above = [&]() { return v == 0 && p.progress_above != nullptr; };
  const auto sys_below = [&]() { return v + 1 == segs && p.progress_below != nullptr; };
  const auto set_segment = [&](int u) {
    v = u;
    p0 = seg_begin(u);
    p1 = seg_begin(u + 1);
    own_pixels = p1 - p0;
    base = p0 - halo;  // index in the segment's arrays = pixel - base
    q0 = max(frame_first, base);
    q1 = min(frame_end, p1 + halo);
  };
  set_segment(b);
  const PedestalArrays& own = p.own;

  const unsigned long long g0 = __ldcg(p.frames_done);
  unsigned long long entry_ns = 0, entry_clk = 0;
  if (p.launch_ts != nullptr && tid == 0) {
    entry_ns = global_ns();
    entry_clk = clock64();
  }
  // Profile counters (thread 0 only; in shared memory to spare registers).
  __shared__ unsigned long long sh_prof[kFindProfileSlots + 1];  // + the last time stamp
  if (tid <= kFindProfileSlots) sh_prof[tid] = tid == kFindProfileSlots ? clock64() : 0;
  const auto lap = [&](int phase) {
    if (p.profile != nullptr && tid == 0) {
      const unsigned long long now = clock64();
      sh_prof[phase] += now - sh_prof[kFindProfileSlots];
      sh_prof[kFindProfileSlots] = now;
    }
  };

  // The arrays that hold pixel j (this GPU's, or a neighbouring GPU's).
  const auto arrays_for = [&](int j) -> const PedestalArrays& {
    return j < band_first ? p.above : (j >= band_last ? p.below : p.own);
  };

  // Work item w (frame k, the block's segment w % chunks) has its frame values of [q0, q1) in
  // sh_f buffer w & 1, copied by 4-byte asynchronous copies from an aligned start a0 (q0 or
  // q0 - 1); pixel j sits at j - a0. With lay.f_direct they are read from the frame buffer.
  const auto frame_src = [&](uint32_t k) { return p.frames + k * frame_elems - frame_first; };
  const auto a0_of = [&](uint32_t k, int qq0) {
    return qq0 - static_cast<int>((reinterpret_cast<uintptr_t>(frame_src(k) + qq0) >> 1) & 1u);
  };
  const auto frame_a0 = [&](uint32_t k) { return a0_of(k, q0); };
  const auto fetch_item = [&](uint32_t k, int u, uint32_t buf) {
    if constexpr (kFDirect) return;
    // (With one segment per block it is this one: no divisions.)
    const int uq0 = kChunked ? max(frame_first, seg_begin(u) - halo) : q0;
    const int uq1 = kChunked ? min(frame_end, seg_begin(u + 1) + halo) : q1;
    const uint16_t* src = frame_src(k);
    const int a0 = a0_of(k, uq0);
    uint16_t* dst = sh_f + buf * lay.f_stride;
    const int words = (uq1 - a0 + 1) / 2;
    for (int i = tid; i < words; i += nt) {
      const int j = a0 + 2 * i;
      if (j >= uq0 && j + 1 < uq1) {
        cp_async4(dst + 2 * i, src + j);
      } else {
        if (j >= uq0 && j < uq1) dst[2 * i] = src[j];
        if (j + 1 >= uq0 && j + 1 < uq1) dst[2 * i + 1] = src[j + 1];
      }
    }
    cp_async_commit();
  };
  // The frame being decided (set_frame): parity, its values.
  int par = 0, nxt = 1, acur = 0;
  [[maybe_unused]] uint32_t kcur = 0;  // the frame (JUNGFRAU: its gain counts)
  const uint16_t* fcur = sh_f;
  const auto set_frame = [&](uint32_t k, uint32_t w) {
    kcur = k;
    par = static_cast<int>((g0 + k) & 1ull);
    nxt = par ^ 1;
    if constexpr (kFDirect) {
      fcur = frame_src(k);
      acur = 0;
    } else {
      fcur = sh_f + (w & 1u) * lay.f_stride;
      acur = frame_a0(k);
    }
  };
  const auto fraw = [&](int j) -> uint16_t { return fcur[j - acur]; };
  const auto fval = [&](int j) -> double { return Px::value(fraw(j), j, p); };
  // count == window flags of [q0, p1).
  const auto load_full = [&]() {
    for (int j = q0 + tid; j < p1; j += nt)
      sh_full[j - base] = __ldg(arrays_for(j).count + j) == p.window ? 1 : 0;
  };

  // Bounds [lo, hi] of pixel j's f - mean as a successor in raster order sees it: both the
  // frame-start value d0 and d1 = f - (mean after this frame's update). With a full window
  // (count == N) the mean moves by d0/N up to rounding, so an interval with a generous rounding
  // slack needs no division; otherwise d1 is computed.
  const auto store_bounds = [&](int j, double f, double d0, double m0, bool full, double s,
                                double s2) {
    double lo, hi;
    if (full) {
      const double step = d0 * inv_window;  // d1 - d0 is about -step
      const double slack = fabs(step) * 1e-6 + 1e-12 * (fabs(m0) + fabs(f)) + 1e-300;
      const double d1 = d0 - step;
      lo = (d1 < d0 ? d1 : d0) - slack;
      hi = (d1 < d0 ? d0 : d1) + slack;
    } else {
      const double d1 = cm::sub(f, cm::fast_push(s, s2, f, p.window));
      lo = d1 < d0 ? d1 : d0;
      hi = d1 < d0 ? d0 : d1;
    }
    put_bounds(j - base, lo, hi);
  };

  // d0 and bounds of the own pixels for frame k, from their state at the start of frame k.
  const auto prepare_own = [&]() {
    const int park = par;
    [[maybe_unused]] uint32_t by_bits[4] = {0, 0, 0, 0};  // JUNGFRAU: own pixels by gain bits
    for (int o = tid; o < own_pixels; o += nt) {
      const int j = p0 + o;
      if constexpr (Px::kJungfrau) {
        const uint16_t raw = fraw(j);
        ++by_bits[jungfrau::gain_bits(raw)];
        if (Px::excluded(raw)) {
          sh_d0[j - base] = 0.0;
          put_bounds(j - base, 0.0, 0.0);
          continue;
        }
      }
      const double f = fval(j);
      const bool full = sh_full[j - base] != 0;
      double m0, s = 0.0, s2 = 0.0;
      if constexpr (kResident) {
        m0 = sh_mean[o];
        if (!full) {
          s = sh_sum[o];
          s2 = sh_sum2[o];
        }
      } else {
        m0 = __ldcg(own.mean[park] + j);
        if (!full) {
          s = __ldcg(own.sum[park] + j);
          s2 = __ldcg(own.sum2[park] + j);
        }
      }
      const double d0 = cm::sub(f, m0);
      sh_d0[j - base] = d0;
      store_bounds(j, f, d0, m0, full, s, s2);
    }
    if constexpr (Px::kJungfrau) {
      if (p.gain_counts != nullptr) {
        uint32_t* gc = p.gain_counts + static_cast<std::size_t>(kcur) * 3;
        if (by_bits[1] != 0) atomicAdd(gc + 0, by_bits[1]);
        if (by_bits[3] != 0) atomicAdd(gc + 1, by_bits[3]);
        if (by_bits[2] != 0) atomicAdd(gc + 2, by_bits[2]);
      }
    }
  };

  // The centre of the output's cluster i, as an own-pixel index of the segment worked on.
  const auto center_at = [&](uint32_t i) -> int {
    const uint32_t y = __ldcg(p.out_y + i), x = __ldcg(p.out_x + i);
    return static_cast<int>(y * static_cast<uint32_t>(cols) + x) - p0;
  };
  // The entries before a cluster's centre in raster order (dy < 0, or dy == 0 and dx < 0) are
  // its first PA window entries: only those can lie in the segment above.
  constexpr int PA = h * S + h;
  // Writes window entry w < PA of cluster c (centre center(c)) of a piece of an earlier frame
  // placed at `first` if it lies in the segment above (left out when the frame was emitted), with
  // final_d(jj) = f - that segment's final mean of that frame.
  const auto patch_one = [&](uint32_t first, int c, int w, auto&& center, auto&& final_d) {
    const int dy = w / S - h;
    const int dx = w - (w / S) * S - h;
    const int j = p0 + center(c);
    const int jj = j + dy * cols + dx;
    if (jj >= p0) return;
    const int y = row_of(j, cols, inv_cols);
    const int x = j - y * cols;
    if (y + dy < 0 || x + dx < 0 || x + dx >= cols) return;
    put_value((static_cast<std::size_t>(first) + c) * S2 + w, Px::entry(final_d(jj)));
  };
  // The same for every cluster of that piece (nsp of them), threads t0, t0 + stride, ...
  const auto patch_above = [&](uint32_t first, int nsp, auto&& center, int t0, int stride,
                               auto&& final_d) {
    for (int e = t0; e < nsp * S2; e += stride) {
      const int c = e / S2;
      const int w = e - c * S2;
      if (w < PA) patch_one(first, c, w, center, final_d);
    }
  };


  // Commit of own pixel o from its frame-start sum and sum2: the fast push (new state; the mean
  // into the next buffer), or the unchanged mean into the next buffer.
  const auto commit = [&](int o, bool update, double s, double s2) {
    const int j = p0 + o;
    const bool full = sh_full[j - base] != 0;
    double m1;
    if (update) {
      const double f = fval(j);
      double rms;
      if (full) {
        // fast_push and noise_of with count == N: sum/N is the cached mean (so f - sum/N is
        // d0), and every division by N is correctly rounded: the same operations, same bits.
        // With the state resident, sum2/N is kept from the last update (same bits). The new
        // sum/N and sum2/N by the plain division: fewer instructions than div_known's verified
        // refinement, 0.1 us/frame faster at 400x400 (H100, docs/performance.md).
        s = cm::add(s, sh_d0[j - base]);
        const double s2n_old = kResident ? sh_s2n[o] : div_known(s2, window_d, inv_window);
        s2 = cm::add(s2, cm::sub(cm::mul(f, f), s2n_old));
        m1 = cm::div(s, window_d);
        const double s2n = cm::div(s2, window_d);
        rms = cm::root(cm::sub(s2n, cm::mul(m1, m1)));
        if constexpr (kResident) sh_s2n[o] = s2n;
      } else {
        m1 = cm::fast_push(s, s2, f, p.window);
        rms = cm::noise_of(s2, __ldg(own.count + j), m1);
      }
      if constexpr (kResident) {
        sh_sum[o] = s;
        sh_sum2[o] = s2;
        sh_mean[o] = m1;
        sh_noise[o] = rms;
      } else {
        __stcg(own.noise + j, rms);
      }
    } else {
      m1 = kResident ? sh_mean[o] : __ldcg(own.mean[par] + j);
    }
    // Published for the neighbours (edge pixels; with the state resident, nothing else).
    // (The interior [i0, i1) of the segment holds the pixels that no neighbour reads; none when
    // the segment is shorter than two halos.)
    const int i0 = min(halo, own_pixels);
    const int i1 = max(i0, own_pixels - halo);
    const bool edge = o < i0 || o >= i1;
    if (!kResident || edge) __stcg(own.mean[nxt] + j, m1);
    if (!kResident || (edge && !full)) {
      __stcg(own.sum[nxt] + j, s);
      __stcg(own.sum2[nxt] + j, s2);
    }
  };
  // An own pixel's frame-start noise, sum and sum2.
  const auto start_state = [&](int o, double& rms, double& s, double& s2) {
    if constexpr (kResident) {
      rms = sh_noise[o];
      s = sh_sum[o];
      s2 = sh_sum2[o];
    } else {
      const int j = p0 + o;
      rms = __ldcg(own.noise + j);
      s = __ldcg(own.sum[par] + j);
      s2 = __ldcg(own.sum2[par] + j);
    }
  };
  // This frame's final f - mean of an own pixel whose decision is final.
  const auto final_own = [&](int jj) -> double {
    const double m = kResident ? sh_mean[jj - p0] : __ldcg(own.mean[nxt] + jj);
    return Px::dev(fraw(jj), jj, m, p);
  };

  // Whether the whole window of own pixel o lies inside the frame.
  const auto window_inside = [&](int o) {
    const int j = p0 + o;
    const int y = row_of(j, cols, inv_cols);
    const int x = j - y * cols;
    return y >= h && y < rows - h && x >= h && x < cols - h;
  };
  // With one segment per block that is fixed for the launch: bit i for the thread's i-th own
  // pixel, tid + i * nt (its 33rd and later take the predicated window, exact for every pixel).
  uint32_t inside_bits = 0;
  if constexpr (!kChunked) {
    for (int o = tid, i = 0; o < own_pixels && i < 32; o += nt, ++i)
      if (window_inside(o)) inside_bits |= 1u << i;
  }

  // Pass 0: decide the own pixels, commit the certain ones.
  const auto pass0 = [&]() {
    int it = 0;
    for (int o = tid; o < own_pixels; o += nt, ++it) {
      const int j = p0 + o;
      const double v = sh_d0[j - base];
      double rms, s_old, s2_old;
      start_state(o, rms, s_old, s2_old);
      Decision d;
      if (Px::excluded(fraw(j)) || cm::is_negative_outlier(v, rms, thr)) {
        d = {kNo, kNo};
      } else {
        // Totals summed in row-major order from 0.0 (so the bounds are those of the exact sum),
        // maxima from 0.0 (kMax0; the successors' part once for both).
        double tlo = 0.0, thi = 0.0, plo = Px::kMax0, phi = Px::kMax0, msucc = Px::kMax0;
        const auto add_pixel = [&](int s, bool predecessor) {
          if (predecessor) {
            double lo, hi;
            get_bounds(s, lo, hi);
            tlo = cm::add(tlo, lo);
            thi = cm::add(thi, hi);
            if (plo < lo) plo = lo;
            if (phi < hi) phi = hi;
          } else {
            const double d = sh_d0[s];
            tlo = cm::add(tlo, d);
            thi = cm::add(thi, d);
            if (msucc < d) msucc = d;
          }
        };
        const bool inside =
            kChunked ? window_inside(o) : it < 32 && ((inside_bits >> it) & 1u) != 0;
        if (__all_sync(__activemask(), inside)) {
          // The whole window lies inside the frame, for every pixel of the warp.
#pragma unroll
          for (int dy = -h; dy <= h; ++dy)
#pragma unroll
            for (int dx = -h; dx <= h; ++dx)
              add_pixel(j + dy * cols + dx - base, dy < 0 || (dy == 0 && dx < 0));
        } else {
          // A warp with a window at the frame's edge: the taps outside the frame are left out
          // (predicated, so that the warp runs one path; every segment has such a warp).
          const int y = row_of(j, cols, inv_cols);
          const int x = j - y * cols;
#pragma unroll
          for (int dy = -h; dy <= h; ++dy) {
            const bool row_in = static_cast<unsigned>(y + dy) < static_cast<unsigned>(rows);
#pragma unroll
            for (int dx = -h; dx <= h; ++dx)
              if (row_in && static_cast<unsigned>(x + dx) < static_cast<unsigned>(cols))
                add_pixel(j + dy * cols + dx - base, dy < 0 || (dy == 0 && dx < 0));
          }
        }
        const double mlo = plo < msucc ? msucc : plo, mhi = phi < msucc ? msucc : phi;
        d = decide_bounds(v, rms, tlo, thi, mlo, mhi, thr);
      }
      if (d.update != kUnknown) commit(o, d.update == kYes, s_old, s2_old);
      if (d.update == kUnknown || d.stored == kUnknown) {
        sh_ulist[atomicAdd(&sh_nu, 1)] = static_cast<uint32_t>(o);
      } else if (d.stored == kYes) {
        sh_slist[atomicAdd(&sh_ns, 1)] = static_cast<uint32_t>(o);
      }
      sh_status[o] = static_cast<uint8_t>(d.update | (d.stored << 2));
    }
  };

  // Launch start: count flags of [q0, p1), the resident state, frame 0's values.
  {
    const int par0 = static_cast<int>(g0 & 1ull);
    fetch_item(0, b, 0);
    if (chunks == 1) load_full();
    if constexpr (kResident) {
      for (int o = tid; o < own_pixels; o += nt) {
        const int j = p0 + o;
        sh_sum[o] = __ldcg(own.sum[par0] + j);
        sh_sum2[o] = __ldcg(own.sum2[par0] + j);
        sh_mean[o] = __ldcg(own.mean[par0] + j);
        sh_noise[o] = __ldcg(own.noise + j);
        sh_s2n[o] = div_known(sh_sum2[o], window_d, inv_window);
      }
    }
    if (tid == 0) sh_out = OutCursor{0, 0, 0, 0};
    cp_async_wait_all();
    __syncthreads();
  }

  int prev_ns = 0;  // clusters of the previous frame (uniform; one segment per block)
  for (uint32_t k = 0; k < p.n_frames; ++k) {
   const unsigned long long g = g0 + k;
   for (int ci = 0; ci < chunks; ++ci) {
    const uint32_t w = k * static_cast<uint32_t>(chunks) + static_cast<uint32_t>(ci);
    if (chunks > 1) {
      set_segment(b + ci * static_cast<int>(p.blocks));
      load_full();
    }
    set_frame(k, w);
    // The previous frame's values of this segment: still in the other buffer with one segment per
    // block, else in the frame buffer.
    const bool prev_local = chunks == 1 && !kFDirect;
    const uint16_t* fprev = prev_local ? sh_f + ((w & 1u) ^ 1u) * lay.f_stride
                                       : (k > 0 ? frame_src(k - 1) : fcur);
    const int aprev = prev_local && k > 0 ? frame_a0(k - 1) : 0;
    uint32_t* sorted_cur = sh_sorted + (k & 1u) * seg_max;
    const uint32_t* sorted_prev = sh_sorted + ((k & 1u) ^ 1u) * seg_max;
    // Trace record of this frame (FindTrace), or none.
    unsigned long long* const tr =
        p.trace != nullptr && chunks == 1 && k < static_cast<uint32_t>(kTraceFrames)
            ? p.trace + (static_cast<std::size_t>(b) * kTraceFrames + k) * kTraceFields
            : nullptr;
    const auto stamp = [&](int field) {
      if (tr != nullptr && tid == 0) tr[field] = global_ns();
    };
    if (tr != nullptr && tid == 0) {
      tr[kTraceG] = g;
      tr[kTraceAboveWait] = 0;
    }
    stamp(kTraceReady);

    // Progress counter of a segment: g+1 once frame g's decisions and state are final there.
    // This frame starts when the neighbours' frame g-1 state (our halo) is final; they are then
    // past reading our frame g-1 start means, the buffers this frame writes.
    if (tid == 0) {
      if (prog_above() && load_acquire(prog_above(), sys_above()) < g) {
        while (load_acquire(prog_above(), sys_above()) < g) __nanosleep(20);
        if (p.profile != nullptr && v > 0 && k > 0) {
          sh_prof[kPhases] +=
              global_ns() - __ldcg(p.release_ns + ((g - 1) & 1ull) * segs + (v - 1));
          ++sh_prof[kPhases + 1];
        }
      }
      stamp(kTraceAbove);
      sh_nu = 0;
      sh_ns = 0;
      sh_waits = 0;
    } else if (tid == 32) {
      if (prog_below()) while (load_acquire(prog_below(), sys_below()) < g) __nanosleep(20);
      if (tr != nullptr) tr[kTraceBelow] = global_ns();
    }
    __syncthreads();
    lap(kWait);
    // The segment below's hand-off, seen by another warp, may have been stamped before this
    // warp's "ready": it was there when the segment looked, at "ready".
    if (tr != nullptr && tid == 0 && tr[kTraceBelow] < tr[kTraceReady])
      tr[kTraceBelow] = tr[kTraceReady];
    stamp(kTraceGo);

    // Loop 1: d0 of the halo pixels with the neighbours' frame-start means, bounds for the halo
    // above, and its previous frame's final f - mean for the deferred cluster entries; d0 and
    // bounds of the own pixels from the resident state.
    const int n_above = p0 - q0;
    const int n_halo = n_above + (q1 - p1);
    const auto halo_pixel = [&](int i) { return i < n_above ? q0 + i : p1 + (i - n_above); };
    const auto halo_pass = [&](int j, double m, double s, double s2) {
      if constexpr (Px::kJungfrau) {
        if (Px::excluded(fraw(j))) {
          sh_d0[j - base] = 0.0;
          if (j < p0) {
            put_bounds(j - base, 0.0, 0.0);
            if (k > 0) sh_dprev[j - base] = Px::dev(fprev[j - aprev], j, m, p);
          }
          return;
        }
      }
      const double f = fval(j);
      const double d0 = cm::sub(f, m);
      sh_d0[j - base] = d0;
      if (j < p0) {
        store_bounds(j, f, d0, m, sh_full[j - base] != 0, s, s2);
        if (k > 0) sh_dprev[j - base] = Px::dev(fprev[j - aprev], j, m, p);
      }
    };
    const auto halo_load = [&](int j, double& m, double& s, double& s2) {
      const PedestalArrays& a = arrays_for(j);
      m = __ldcg(a.mean[par] + j);
      if (j < p0 && !sh_full[j - base]) {
        s = __ldcg(a.sum[par] + j);
        s2 = __ldcg(a.sum2[par] + j);
      }
    };
    // Up to two halo pixels per thread: loads first, the own pixels' d0 and bounds (shared
    // memory) while they are in flight.
    {
      const int ja = halo_pixel(min(tid, n_halo - 1)), jb = halo_pixel(min(tid + nt, n_halo - 1));
      double ma = 0.0, sa = 0.0, s2a = 0.0, mb = 0.0, sb = 0.0, s2b = 0.0;
      if (tid < n_halo) halo_load(ja, ma, sa, s2a);
      if (tid + nt < n_halo) halo_load(jb, mb, sb, s2b);
      prepare_own();
      if (tid < n_halo) halo_pass(ja, ma, sa, s2a);
      if (tid + nt < n_halo) halo_pass(jb, mb, sb, s2b);
    }
    for (int i = tid + 2 * nt; i < n_halo; i += nt) {
      const int j = halo_pixel(i);
      double m = 0.0, s = 0.0, s2 = 0.0;
      halo_load(j, m, s, s2);
      halo_pass(j, m, s, s2);
    }
    __syncthreads();
    lap(kLoop1);
    stamp(kTraceLoop1);
    // The previous work item's buffer is free: the next item's values are copied meanwhile.
    if (ci + 1 < chunks)
      fetch_item(k, b + (ci + 1) * static_cast<int>(p.blocks), (w + 1) & 1u);
    else if (k + 1 < p.n_frames)
      fetch_item(k + 1, b, (w + 1) & 1u);

    // Loop 2 (pass 0): decide every pixel of the segment, commit the certain ones.
    pass0();
    __syncthreads();
    lap(kLoop2);
    stamp(kTraceLoop2);

    // Resolution of the undecided pixels. A pixel is re-decided once none of its predecessors in
    // the segment is undecided; rounds of such pixels run in parallel, which gives the
    // raster-order result (each depends only on its window's predecessors). Predecessors in the
    // segment above enter first by their bounds; only a pixel that these leave undecided waits
    // for that segment's final means.
    const int nu = sh_nu;
    int rounds = 0;
    if (nu > 0) {
      for (;;) {
        ++rounds;
        if (tid == 0) sh_left = 0;
        __syncthreads();
        for (int t = tid; t < nu; t += nt) {
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
          double rms, s_old, s2_old;
          start_state(o, rms, s_old, s2_old);
          bool update = false, stored = false;
          if (!cm::is_negative_outlier(v, rms, thr)) {
            double tlo = 0.0, thi = 0.0, mlo = Px::kMax0, mhi = Px::kMax0;
            bool above = false;
            cm::for_each_in_window(x, y, h, rows, cols, [&](int dy, int dx) {
              const int jj = j + dy * cols + dx;
              double lo, hi;
              if (dy < 0 || (dy == 0 && dx < 0)) {
                if (jj < p0) {
                  get_bounds(jj - base, lo, hi);
                  above = true;
                } else {
                  lo = hi = final_own(jj);
                }
              } else {
                lo = hi = sh_d0[jj - base];
              }
              tlo = cm::add(tlo, lo);
              thi = cm::add(thi, hi);
              if (mlo < lo) mlo = lo;
              if (mhi < hi) mhi = hi;
            });
            const Decision db = above ? decide_bounds(v, rms, tlo, thi, mlo, mhi, thr)
                                      : Decision{kUnknown, kUnknown};
            if (!above) {
              // Every value exact: tlo is the total, mlo the max.
              const cm::PixelAction act = cm::classify(v, rms, tlo, mlo, thr);
              update = act == cm::PixelAction::update;
              stored = act == cm::PixelAction::candidate && v == mlo;
            } else if (db.update != kUnknown && db.stored != kUnknown) {
              update = db.update == kYes;
              stored = db.stored == kYes;
            } else {
              while (load_acquire(prog_above(), sys_above()) < g + 1) __nanosleep(20);
              if (tr != nullptr) {
                tr[kTraceAboveWait] = global_ns();
                atomicAdd(&sh_waits, 1);
              }
              double total = 0.0, mx = Px::kMax0;
              cm::for_each_in_window(x, y, h, rows, cols, [&](int dy, int dx) {
                const int jj = j + dy * cols + dx;
                double d;
                if (dy < 0 || (dy == 0 && dx < 0))
                  d = jj < p0 ? Px::dev(fraw(jj), jj, __ldcg(arrays_for(jj).mean[nxt] + jj), p)
                              : final_own(jj);
                else
                  d = sh_d0[jj - base];
                total = cm::add(total, d);
                if (mx < d) mx = d;
              });
              const cm::PixelAction act = cm::classify(v, rms, total, mx, thr);
              update = act == cm::PixelAction::update;
              stored = act == cm::PixelAction::candidate && v == mx;
            }
          }
          if ((before & 3) == kUnknown) commit(o, update, s_old, s2_old);
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
    stamp(kTraceResolve);
    // Frame g is final in this segment (every commit precedes the last barrier). The last warp
    // publishes it; with one segment per block it arrives at the emission barrier first, so the
    // other warps need not wait for the release's memory fence. Off the neighbours' path from
    // here on.
    const int ns = sh_ns;
    const int workers = nt - 32;
    const std::size_t region = static_cast<std::size_t>(k) * segs + v;
    if (tid >= workers) {
      // The releasing thread places the piece first (shared memory only, unless its run is used
      // up and the run asked for ahead does not hold it either), before the workers' barrier.
      if (tid == workers) {
        sh_first[w & 1u] = take_piece(sh_out, static_cast<uint32_t>(ns), p);
        __threadfence_block();  // the place before the arrival that the workers wait for
      }
      named_arrive(1, nt);
      if (tid == workers) {
        const long long t0 = clock64();
        if (p.profile != nullptr) __stcg(p.release_ns + (g & 1ull) * segs + v, global_ns());
        if (tr != nullptr) tr[kTraceRelease0] = global_ns();
        store_release(&p.progress[v], g + 1, sys_above() || sys_below());
        if (tr != nullptr) tr[kTraceRelease1] = global_ns();
        if (p.profile != nullptr) sh_prof[kRelease] += static_cast<unsigned long long>(clock64() - t0);
        p.piece_counts[region] = static_cast<uint32_t>(ns);
        p.piece_first[region] = sh_first[w & 1u];
        if (ns > 0) atomicAdd(&p.frame_totals[k], static_cast<uint32_t>(ns));
        // The next run, asked for while this one still holds about half of what the items to
        // come need (up to 16 frames at this item's rate, at least out_chunk), while the
        // workers write this frame's entries.
        const uint32_t left = (p.n_frames - 1 - k) * static_cast<uint32_t>(chunks) +
                              static_cast<uint32_t>(chunks - 1 - ci);
        if (sh_out.next_size == 0 && left > 0) {
          const uint32_t want =
              max(p.out_chunk, min(16u * static_cast<uint32_t>(chunks), left) *
                                   static_cast<uint32_t>(ns + 1));
          if (sh_out.end - sh_out.pos < want / 2) {
            sh_out.next = atomicAdd(p.out_alloc, want);
            sh_out.next_size = want;
          }
        }
      }
    } else {
      uint32_t first = kNoPiece;  // this piece's place, read after the releasing warp's arrival
      // The previous frame's piece of this segment (its clusters, in raster order: kept here
      // with one segment per block, else read back from the output), and where it was placed.
      const std::size_t prev_region = static_cast<std::size_t>(k - 1) * segs + v;
      const uint32_t prev_first =
          k == 0 ? kNoPiece
                 : (chunks == 1 ? sh_first[(w & 1u) ^ 1u] : __ldcg(p.piece_first + prev_region));
      const int pns =
          prev_first == kNoPiece
              ? 0
              : (chunks == 1 ? prev_ns : static_cast<int>(__ldcg(p.piece_counts + prev_region)));
      const auto prev_center = [&](int c) -> int {
        if (chunks == 1) return static_cast<int>(sorted_prev[c]);
        return center_at(prev_first + static_cast<uint32_t>(c));
      };
      // Window entry w of this frame's cluster at own pixel o, rank c in raster order, into
      // this (frame, segment) piece.
      const auto emit = [&](int c, uint32_t o, int w) {
        const int j = p0 + static_cast<int>(o);
        const int y = row_of(j, cols, inv_cols);
        const int x = j - y * cols;
        const int dy = w / S - h;
        const int dx = w - (w / S) * S - h;
        const int yy = y + dy, xx = x + dx;
        const std::size_t slot = static_cast<std::size_t>(first) + c;
        if (w == 0) {
          p.out_x[slot] = static_cast<uint16_t>(x);
          p.out_y[slot] = static_cast<uint16_t>(y);
        }
        int32_t value = 0;
        if (yy >= 0 && yy < rows && xx >= 0 && xx < cols) {
          const int jj = j + dy * cols + dx;
          if (w >= PA) {
            value = Px::entry(sh_d0[jj - base]);
          } else if (jj >= p0) {
            value = Px::entry(final_own(jj));
          } else {
            return;  // in the segment above: written with the next frame (patch_one)
          }
        }
        put_value(slot * S2 + w, value);
      };
      if constexpr (!kChunked) {
        // Written by the workers after the warps that rank this frame's clusters (a lane per
        // cluster; at least one warp is left for these writes), while those rank: no rank
        // waits behind these writes. Then (a barrier, which also brings the piece's place)
        // every worker writes this frame's entries.
        const int pfirst = min((ns + 31) & ~31, workers - 32);
        if (pns > 0 && tid >= pfirst && prev_center(0) < halo)
          patch_above(prev_first, pns, prev_center, tid - pfirst, workers - pfirst,
                      [&](int jj) { return sh_dprev[jj - base]; });
        for (int t = tid; t < ns; t += workers) {
          const uint32_t o = sh_slist[t];
          int rank = 0;
          for (int u = 0; u < ns; ++u) rank += sh_slist[u] < o;
          sorted_cur[rank] = o;
        }
        named_sync(1, nt);
        first = sh_first[w & 1u];
        if (first != kNoPiece) {
          for (int e = tid; e < ns * S2; e += workers) {
            const int c = e / S2;
            emit(c, sorted_cur[c], e - c * S2);
          }
        }
      } else {
        // Several segments per block (measured: 2048x2048 1.1 % faster; at 400x400, one
        // segment per block, 1.4-3 % slower): one pass, each entry's thread ranking its own
        // cluster, beside the previous frame's entries in the segment above (read back from the
        // output: the entries before the centre of every cluster, if the first one's centre is
        // in the segment's first halo pixels). The next frame reads its centres from the output,
        // not from sorted_cur. The piece's place comes with the releasing warp's arrival.
        const int n_prev = pns > 0 && prev_center(0) < halo ? pns : 0;
        const int n_patch = n_prev * PA;
        named_sync(1, nt);
        first = sh_first[w & 1u];
        const int n_own = first != kNoPiece ? ns * S2 : 0;
        for (int e = tid; e < n_patch + n_own; e += workers) {
          if (e < n_patch) {
            const int c = e / PA;
            patch_one(prev_first, c, e - c * PA, prev_center,
                      [&](int jj) { return sh_dprev[jj - base]; });
            continue;
          }
          const int t = (e - n_patch) / S2;
          const int wi = (e - n_patch) - t * S2;
          const uint32_t o = sh_slist[t];
          int c = 0;
          for (int u = 0; u < ns; ++u) c += sh_slist[u] < o;
          emit(c, o, wi);
        }
      }
    }
    prev_ns = ns;
    // The next item's values have arrived (its own d0 is prepared in its loop 1).
    cp_async_wait_all();
    __syncthreads();
    lap(kEmit);
    stamp(kTraceEnd);
    if (tr != nullptr && tid == 0)
      tr[kTraceCounts] = static_cast<unsigned long long>(min(nu, 0xffff)) |
                         (static_cast<unsigned long long>(min(rounds, 0xff)) << 16) |
                         (static_cast<unsigned long long>(min(sh_waits, 0xff)) << 24) |
                         (static_cast<unsigned long long>(ns) << 32);
   }
  }

  // The last frame's cluster entries in the segment above, once that segment has finished it.
  const int fin = static_cast<int>((g0 + p.n_frames) & 1ull);
  if (p.n_frames > 0) {
    const uint32_t kl = p.n_frames - 1;
    const uint16_t* fl = frame_src(kl);
    for (int ci = 0; ci < chunks; ++ci) {
      if (chunks > 1) set_segment(b + ci * static_cast<int>(p.blocks));
      const std::size_t region = static_cast<std::size_t>(kl) * segs + v;
      const uint32_t fl_first = __ldcg(p.piece_first + region);
      const int nsl =
          fl_first == kNoPiece ? 0 : static_cast<int>(__ldcg(p.piece_counts + region));
      const auto center = [&](int c) { return center_at(fl_first + static_cast<uint32_t>(c)); };
      if (nsl == 0 || center(0) >= halo) continue;
      if (tid == 0 && prog_above())
        while (load_acquire(prog_above(), sys_above()) < g0 + p.n_frames) __nanosleep(20);
      __syncthreads();
      patch_above(fl_first, nsl, center, tid, nt, [&](int jj) {
        return Px::dev(fl[jj], jj, __ldcg(arrays_for(jj).mean[fin] + jj), p);
      });
    }
  }
  // The resident state back to global memory.
  if constexpr (kResident) {
    for (int o = tid; o < own_pixels; o += nt) {
      const int j = p0 + o;
      __stcg(own.mean[fin] + j, sh_mean[o]);
      __stcg(own.sum[fin] + j, sh_sum[o]);
      __stcg(own.sum2[fin] + j, sh_sum2[o]);
      __stcg(own.noise + j, sh_noise[o]);
    }
  }

  if (p.launch_ts != nullptr && tid == 0 && p.n_frames > 0) {
    const std::size_t rec = static_cast<std::size_t>((g0 / p.n_frames) % kLaunchRecords);
    unsigned long long* ts = p.launch_ts + (rec * p.blocks + b) * 4;
    ts[0] = entry_ns;
    ts[1] = entry_clk;
    ts[2] = global_ns();
    ts[3] = clock64();
  }
  if (p.profile != nullptr && tid == 0) {
    unsigned long long* slot = p.profile + static_cast<std::size_t>(b) * kFindProfileSlots;
    for (int i = 0; i < kFindProfileSlots; ++i) atomicAdd(slot + i, sh_prof[i]);
  }

  // The last block to finish advances the frame counter (every block has read it by then).
  if (tid == 0) {
    __threadfence();
    const unsigned int prev = atomicAdd(p.blocks_done, 1u);
    if (prev + 1 == p.blocks) {
      *p.frames_done = g0 + p.n_frames;
      *p.blocks_done = 0;
      __threadfence();
    }
  }
}

/// Calls f(kernel) with the find kernel of size S and pixel mode M for `resident`, `spill` and
/// several segments per block or one (the resident state only with one segment and spill levels
/// 0 and 1).
template <int S, PixelMode M, bool kChunked, typename F>
decltype(auto) with_find_kernel_c(bool resident, int spill, F&& f) {
  if (resident && !kChunked) {
    if (spill == 0) return f(find_kernel<S, true, 0, false, M>);
    return f(find_kernel<S, true, 1, false, M>);
  }
  switch (spill) {
    case 0: return f(find_kernel<S, false, 0, kChunked, M>);
    case 1: return f(find_kernel<S, false, 1, kChunked, M>);
    case 2: return f(find_kernel<S, false, 2, kChunked, M>);
    case 3: return f(find_kernel<S, false, 3, kChunked, M>);
    default: return f(find_kernel<S, false, 4, kChunked, M>);
  }
}
template <int S, PixelMode M, typename F>
decltype(auto) with_find_kernel_m(bool resident, int spill, bool chunked, F&& f) {
  if (chunked) return with_find_kernel_c<S, M, true>(resident, spill, std::forward<F>(f));
  return with_find_kernel_c<S, M, false>(resident, spill, std::forward<F>(f));
}
template <int S, typename F>
decltype(auto) with_find_kernel(PixelMode pixels, bool resident, int spill, bool chunked,
                                F&& f) {
  switch (pixels) {
    case PixelMode::jungfrau_g0:
      return with_find_kernel_m<S, PixelMode::jungfrau_g0>(resident, spill, chunked,
                                                            std::forward<F>(f));
    case PixelMode::jungfrau_calibrated:
      return with_find_kernel_m<S, PixelMode::jungfrau_calibrated>(resident, spill, chunked,
                                                                    std::forward<F>(f));
    default:
      return with_find_kernel_m<S, PixelMode::raw>(resident, spill, chunked, std::forward<F>(f));
  }
}

template <int S>
void launch_find_s(const FindLaunch& p, StreamView stream) {
  const std::size_t smem = FindLayout(p.cols, p.segment_max, S, p.resident, p.spill).bytes;
  // The shared-memory limit was raised by find_blocks_per_sm() on this device.
  with_find_kernel<S>(p.pixels, p.resident, p.spill, p.chunks > 1, [&](auto kernel) {
    kernel<<<p.blocks, p.threads, smem, stream.get()>>>(p);
  });
  GLINT_CUDA_CHECK_LAUNCH();
}

template <int S>
int max_resident_s(uint32_t cols, uint32_t segment, bool resident, int spill, bool chunked,
                   int threads, PixelMode pixels) {
  if (resident && (spill > 1 || chunked)) return 0;
  const std::size_t smem = FindLayout(cols, segment, S, resident, spill).bytes;
  // Everything the device lets one block opt in to, less the kernel's static shared memory.
  int device = 0, optin = 0;
  GLINT_CUDA_CHECK(cudaGetDevice(&device));
  GLINT_CUDA_CHECK(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attr{};
  with_find_kernel<S>(pixels, resident, spill, chunked, [&](auto kernel) {
    GLINT_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  });
  const std::size_t limit =
      std::min<std::size_t>(kFindSharedMax, static_cast<std::size_t>(optin) - attr.sharedSizeBytes);
  if (smem > limit) return 0;
  int per_sm = 0;
  with_find_kernel<S>(pixels, resident, spill, chunked, [&](auto kernel) {
    GLINT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(limit)));
    GLINT_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  });
  return per_sm;
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

template <PixelMode kMode>
__global__ void dark_kernel(const PedestalArrays a, int par, const uint16_t* frames,
                            uint32_t n_frames, uint32_t cols, std::size_t begin, std::size_t end,
                            std::size_t frame_offset, std::size_t frame_elems, uint32_t window,
                            const DarkPixels px) {
  for (std::size_t j = begin + blockIdx.x * blockDim.x + threadIdx.x; j < end;
       j += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    double s = a.sum[par][j], s2 = a.sum2[par][j];
    uint32_t c = a.count[j];
    double m = a.mean[par][j];
    for (uint32_t k = 0; k < n_frames; ++k) {
      const uint16_t raw = frames[k * frame_elems + (j - frame_offset)];
      double v;
      if constexpr (kMode == PixelMode::jungfrau_calibrated) {
        v = jungfrau::calibrate(raw, j, px.pixels, px.pedestal, px.gain);
      } else {
        if constexpr (kMode == PixelMode::jungfrau_g0)
          if (!jungfrau::in_g0(raw)) continue;  // a pixel out of G0 is not pushed
        v = static_cast<double>(raw);
      }
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

std::size_t find_scratch_bytes(uint32_t cols, uint32_t segment, int cluster_size, bool resident,
                               int spill) {
  return FindLayout(cols, segment, cluster_size, resident, spill).scratch;
}

int find_blocks_per_sm(uint32_t cols, uint32_t segment, int cluster_size, bool resident,
                       int spill, bool chunked, int threads, PixelMode pixels) {
  switch (cluster_size) {
    case 3: return max_resident_s<3>(cols, segment, resident, spill, chunked, threads, pixels);
    case 5: return max_resident_s<5>(cols, segment, resident, spill, chunked, threads, pixels);
    case 7: return max_resident_s<7>(cols, segment, resident, spill, chunked, threads, pixels);
    default: return max_resident_s<9>(cols, segment, resident, spill, chunked, threads, pixels);
  }
}

void launch_find(const FindLaunch& p, StreamView stream) {
  if (p.n_frames == 0) return;
  switch (p.cluster_size) {
    case 3: launch_find_s<3>(p, stream); break;
    case 5: launch_find_s<5>(p, stream); break;
    case 7: launch_find_s<7>(p, stream); break;
    default: launch_find_s<9>(p, stream); break;
  }
}

void launch_snapshot(const PedestalArrays& live, const unsigned long long* frames_done,
                     const PedestalArrays& snap, uint32_t cols, uint32_t row0, uint32_t row1,
                     StreamView stream) {
  const std::size_t begin = static_cast<std::size_t>(row0) * cols;
  const std::size_t end = static_cast<std::size_t>(row1) * cols;
  snapshot_kernel<<<grid_for(end - begin), 256, 0, stream.get()>>>(live, frames_done, snap, begin,
                                                                    end);
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_dark(const PedestalArrays& a, int parity, const uint16_t* frames, uint32_t n_frames,
                 uint32_t cols, uint32_t row0, uint32_t row1, uint32_t frame_row0,
                 uint32_t frame_rows, uint32_t window, const DarkPixels& pixels,
                 StreamView stream) {
  const std::size_t begin = static_cast<std::size_t>(row0) * cols;
  const std::size_t end = static_cast<std::size_t>(row1) * cols;
  const auto launch = [&](auto kernel) {
    kernel<<<grid_for(end - begin), 256, 0, stream.get()>>>(
        a, parity, frames, n_frames, cols, begin, end,
        static_cast<std::size_t>(frame_row0) * cols, static_cast<std::size_t>(frame_rows) * cols,
        window, pixels);
  };
  switch (pixels.mode) {
    case PixelMode::jungfrau_g0: launch(dark_kernel<PixelMode::jungfrau_g0>); break;
    case PixelMode::jungfrau_calibrated: launch(dark_kernel<PixelMode::jungfrau_calibrated>); break;
    default: launch(dark_kernel<PixelMode::raw>); break;
  }
  GLINT_CUDA_CHECK_LAUNCH();
}

void launch_derive(const PedestalArrays& a, int parity, uint32_t cols, uint32_t row0,
                   uint32_t row1, StreamView stream) {
  const std::size_t begin = static_cast<std::size_t>(row0) * cols;
  const std::size_t end = static_cast<std::size_t>(row1) * cols;
  derive_kernel<<<grid_for(end - begin), 256, 0, stream.get()>>>(a, parity, begin, end);
  GLINT_CUDA_CHECK_LAUNCH();
}

}  // namespace glint::gpu::detail
