// The fast exact CPU backend. Frames are processed one after the other (a frame needs the
// pedestal its predecessor left); inside a frame the rows are split into bands, one per thread.
//
// Why it is exact (docs/cluster-finding.md, the in-frame dependency): when pixel i is
// visited, each window pixel j before it in raster order ("predecessor") holds either its
// frame-start mean (j did not update) or the mean after its own fast push (j updated), and that
// updated mean depends only on j's frame-start state and value. So, per band and frame:
//   pass 0: for every pixel compute d0 = f - mean and d1 = f - mean' (after a fast push), bound the
//     window max and total over every mix of d0/d1 for the predecessors (fl(a + b) is monotone in
//     each argument, so the ordered sum of the lower values bounds every possible ordered sum from
//     below, and likewise above), and decide the pixel when both ends agree (update / no update /
//     stored cluster); otherwise mark it undecided;
//   resolve: re-decide the undecided pixels in raster order with the actual values of their
//     predecessors, whose decisions are final by then (rows above the band: after that band
//     resolved), and extract the stored clusters with the values each window pixel had at its
//     visit;
//   commit: apply the updates and refresh the cached rms of updated pixels.
// Undecided pixels are rare (a window total or max within ~|d|/1000 of a threshold, or a near tie),
// so the result is the sequential one bit for bit, at any thread count, for the price of pass 0.
// Bands synchronise only with the bands their windows reach (see find()), so threads run as a
// wavefront instead of meeting at frame-wide barriers.
#include <algorithm>
#include <atomic>
#include <bit>
#include <limits>
#include <memory>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/cluster_math.hpp"
#include "glint/detail/calibrated_dark.hpp"
#include "glint/detail/worker_pool.hpp"

// Hot loops are compiled twice, for AVX2 and for the x86-64 baseline, and picked at load time.
// Neither enables FMA, and the file compiles with -ffp-contract=off: the bits do not change.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GLINT_VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GLINT_VECTOR_CLONES
#endif

namespace glint {
namespace {

namespace cm = cluster_math;

// Per-pixel outcome of a frame: no update and no cluster, update, stored cluster, undecided.
constexpr uint8_t kSkip = 0, kUpdate = 1, kStore = 2, kUncertain = 3;

using Vec4 = double __attribute__((vector_size(32)));
constexpr int kLanes = 4;

inline Vec4 load4(const double* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(double* p, Vec4 v) { std::memcpy(p, &v, sizeof v); }

using Mask4 = long long __attribute__((vector_size(32)));

/// Row flags returned by pass 0.
constexpr unsigned kRowUncertain = 1, kRowStoreOrUncertain = 2;

/// Pass 0 for one row of window centres, four at a time. For each centre it bounds the window
/// max and total over every mix of frame-start (d0) and updated (d1) values of the predecessors
/// (window taps in the reference's row-major order, so each bound is itself an ordered sum) and
/// decides the pixel when both ends give the same decision. rows0[k]/rows1[k] point at column 0 of
/// window row k, zero-padded by h columns on the left and up to a multiple of 4 columns plus h on
/// the right. Thresholds are formed from the cached
/// rms as the reference forms them: (-n)*rms, n*rms, (c3*n)*rms. Returns kRow* flags.
template <int S>
[[gnu::always_inline]] inline unsigned decide_row_t(const double* const* rows0,
                                                    const double* const* rows1, int cols,
                                                    const double* rms, double neg_n,
                                                    double n_sigma, double c3_n, double max0,
                                                    uint8_t* status) {
  constexpr int h = S / 2;
  const Mask4 s0 = {kSkip, kSkip, kSkip, kSkip}, s1 = {kUpdate, kUpdate, kUpdate, kUpdate},
              s2 = {kStore, kStore, kStore, kStore},
              s3 = {kUncertain, kUncertain, kUncertain, kUncertain};
  Mask4 any_uncertain = s0, any_store = s0;
  unsigned tail_flags = 0;
  for (int x = 0; x < cols; x += kLanes) {
    Vec4 tl = {0.0, 0.0, 0.0, 0.0}, th = tl;
    Vec4 ml = {max0, max0, max0, max0}, mh = ml;
#pragma GCC unroll 9
    for (int k = 0; k < S; ++k) {
#pragma GCC unroll 9
      for (int dx = -h; dx <= h; ++dx) {
        const Vec4 u = load4(rows0[k] + x + dx);
        if (k < h || (k == h && dx < 0)) {  // a predecessor: either value is possible
          const Vec4 w = load4(rows1[k] + x + dx);
          const Vec4 lo = w < u ? w : u;
          const Vec4 hi = u < w ? w : u;
          tl = tl + lo;
          th = th + hi;
          ml = ml < lo ? lo : ml;
          mh = mh < hi ? hi : mh;
        } else {
          tl = tl + u;
          th = th + u;
          ml = ml < u ? u : ml;
          mh = mh < u ? u : mh;
        }
      }
    }
    const Vec4 v = load4(rows0[h] + x);
    // The last, partial block must not read the next row's rms (another thread may be writing it).
    double tail[kLanes] = {0.0, 0.0, 0.0, 0.0};
    if (x + kLanes > cols) std::copy(rms + x, rms + cols, tail);
    const Vec4 r = load4(x + kLanes <= cols ? rms + x : tail);
    const Vec4 nn = {neg_n, neg_n, neg_n, neg_n}, ns = {n_sigma, n_sigma, n_sigma, n_sigma},
               nc = {c3_n, c3_n, c3_n, c3_n};
    const Vec4 tneg = nn * r, tn = ns * r, tc = nc * r;
    // Certain outcomes; NaN thresholds make every comparison false, i.e. "update", as in the
    // reference.
    const Mask4 cand = v < ml ? s0 : (v < mh ? s3 : s2);
    const Mask4 small = th > tc ? (tl > tc ? cand : s3) : s1;
    const Mask4 st = v < tneg ? s0 : (ml > tn ? cand : (mh > tn ? s3 : small));
    if (x + kLanes <= cols) {
      const uint32_t packed = static_cast<uint32_t>(st[0]) | static_cast<uint32_t>(st[1]) << 8 |
                              static_cast<uint32_t>(st[2]) << 16 |
                              static_cast<uint32_t>(st[3]) << 24;
      std::memcpy(status + x, &packed, 4);
      any_uncertain |= st == s3;
      any_store |= st >= s2;
    } else {
      for (int j = 0; x + j < cols; ++j) {
        status[x + j] = static_cast<uint8_t>(st[j]);
        if (st[j] == kUncertain) tail_flags |= kRowUncertain;
        if (st[j] >= kStore) tail_flags |= kRowStoreOrUncertain;
      }
    }
  }
  unsigned flags = tail_flags;
  for (int j = 0; j < kLanes; ++j) {
    if (any_uncertain[j]) flags |= kRowUncertain;
    if (any_store[j]) flags |= kRowStoreOrUncertain;
  }
  return flags;
}

#define GLINT_DECIDE_ROW(S)                                                                    \
  GLINT_VECTOR_CLONES unsigned decide_row_##S(const double* const* r0, const double* const* r1, \
                                              int cols, const double* rms, double neg_n,       \
                                              double n_sigma, double c3_n, double max0,        \
                                              uint8_t* status) {                               \
    return decide_row_t<S>(r0, r1, cols, rms, neg_n, n_sigma, c3_n, max0, status);             \
  }
GLINT_DECIDE_ROW(3)
GLINT_DECIDE_ROW(5)
GLINT_DECIDE_ROW(7)
GLINT_DECIDE_ROW(9)
#undef GLINT_DECIDE_ROW

unsigned decide_row(int size, const double* const* r0, const double* const* r1, int cols,
                    const double* rms, double neg_n, double n_sigma, double c3_n, double max0,
                    uint8_t* status) {
  switch (size) {
    case 3: return decide_row_3(r0, r1, cols, rms, neg_n, n_sigma, c3_n, max0, status);
    case 5: return decide_row_5(r0, r1, cols, rms, neg_n, n_sigma, c3_n, max0, status);
    case 7: return decide_row_7(r0, r1, cols, rms, neg_n, n_sigma, c3_n, max0, status);
    default: return decide_row_9(r0, r1, cols, rms, neg_n, n_sigma, c3_n, max0, status);
  }
}

/// Pass 0 inputs for one frame row: d0 = f - mean and d1 = f - mean after a fast push.
template <class T>
[[gnu::always_inline]] inline void prepare_row_t(
    int cols, const T* __restrict f, const double* __restrict mean, const double* __restrict sum,
    double n, double* __restrict d0, double* __restrict d1) {
  for (int x = 0; x < cols; ++x) {
    const double v = static_cast<double>(f[x]);
    d0[x] = v - mean[x];
    const double s = sum[x];
    d1[x] = v - (s + (v - s / n)) / n;
  }
}

/// The same when every pixel holds a full window (count == N): the cached mean is then sum / N,
/// computed here instead of loaded. The fast push's sum and mean are kept for the commit (sum1,
/// mean1), which then needs two divisions per pixel instead of four.
template <class T>
[[gnu::always_inline]] inline void prepare_row_steady_t(
    int cols, const T* __restrict f, const double* __restrict sum, double n, double* __restrict d0,
    double* __restrict d1, double* __restrict sum1, double* __restrict mean1) {
  for (int x = 0; x < cols; ++x) {
    const double v = static_cast<double>(f[x]);
    const double s = sum[x];
    const double m0 = s / n;
    const double s1 = s + (v - m0);
    const double m1 = s1 / n;
    d0[x] = v - m0;
    d1[x] = v - m1;
    sum1[x] = s1;
    mean1[x] = m1;
  }
}

template <class T>
[[gnu::always_inline]] inline void prepare_row_d0_steady_t(
    int cols, const T* __restrict f, const double* __restrict sum, double n,
    double* __restrict d0) {
  for (int x = 0; x < cols; ++x) d0[x] = static_cast<double>(f[x]) - sum[x] / n;
}

template <class T>
[[gnu::always_inline]] inline void prepare_row_d0_t(
    int cols, const T* __restrict f, const double* __restrict mean, double* __restrict d0) {
  for (int x = 0; x < cols; ++x) d0[x] = static_cast<double>(f[x]) - mean[x];
}

/// Commit of one row: updated pixels take their fast-push state and a fresh cached rms.
template <class T>
[[gnu::always_inline]] inline void commit_row_t(
    int cols, const uint8_t* __restrict status, const T* __restrict f, double n,
    double* __restrict sum, double* __restrict sum2, double* __restrict mean,
    const uint32_t* __restrict count, double* __restrict rms) {
  for (int x = 0; x < cols; ++x) {
    const bool upd = status[x] == kUpdate;
    const double v = static_cast<double>(f[x]);
    const double s = sum[x], s2 = sum2[x];
    const double s1 = s + (v - s / n);
    const double s2n = s2 + (v * v - s2 / n);
    const double m1 = s1 / n;
    // Computed for every pixel and selected afterwards, so that the loop vectorises.
    const double var_any = s2n / static_cast<double>(count[x]) - m1 * m1;
    const double var = count[x] == 0 ? 0.0 : var_any;
    const double r = std::sqrt(var);
    sum[x] = upd ? s1 : s;
    sum2[x] = upd ? s2n : s2;
    mean[x] = upd ? m1 : mean[x];
    rms[x] = upd ? r : rms[x];
  }
}

/// The same when every pixel holds a full window: no cached mean and count to maintain.
template <class T>
[[gnu::always_inline]] inline void commit_row_steady_t(
    int cols, const uint8_t* __restrict status, const T* __restrict f, double n,
    const double* __restrict sum1, const double* __restrict mean1, double* __restrict sum,
    double* __restrict sum2, double* __restrict rms) {
  for (int x = 0; x < cols; ++x) {
    const bool upd = status[x] == kUpdate;
    const double v = static_cast<double>(f[x]);
    const double s2 = sum2[x];
    const double s2n = s2 + (v * v - s2 / n);
    const double m1 = mean1[x];
    const double r = std::sqrt(s2n / n - m1 * m1);
    const double s0 = sum[x], s1 = sum1[x];  // both loaded: the select then vectorises
    sum[x] = upd ? s1 : s0;
    const double r0 = rms[x];
    sum2[x] = upd ? s2n : s2;
    rms[x] = upd ? r : r0;
  }
}

/// Dark push of one row (the reference's Pedestal::push), refreshing the cached mean.
template <class T>
[[gnu::always_inline]] inline void dark_row_t(
    int cols, const T* __restrict f, uint32_t window, double* __restrict sum,
    double* __restrict sum2, uint32_t* __restrict count, double* __restrict mean) {
  const double n = static_cast<double>(window);
  for (int x = 0; x < cols; ++x) {
    const double v = static_cast<double>(f[x]);
    const uint32_t c0 = count[x];
    const bool filling = c0 < window;
    const double s = sum[x], s2 = sum2[x];
    const double s_fill = s + v, s2_fill = s2 + v * v;
    const double s_run = s + (v - s / n), s2_run = s2 + (v * v - s2 / n);
    const uint32_t c = c0 + (filling ? 1u : 0u);
    const double s_new = filling ? s_fill : s_run;
    sum[x] = s_new;
    sum2[x] = filling ? s2_fill : s2_run;
    count[x] = c;
    mean[x] = s_new / static_cast<double>(c);
  }
}

// The row functions for both frame types: uint16 pixels, and calibrated (double) values.
#define GLINT_ROW_FUNCTIONS(T, SUFFIX)                                                             \
  GLINT_VECTOR_CLONES void prepare_row##SUFFIX(                                                    \
      int cols, const T* __restrict f, const double* __restrict mean,                              \
      const double* __restrict sum, double n, double* __restrict d0, double* __restrict d1) {      \
    prepare_row_t<T>(cols, f, mean, sum, n, d0, d1);                                               \
  }                                                                                                \
  GLINT_VECTOR_CLONES void prepare_row_steady##SUFFIX(                                             \
      int cols, const T* __restrict f, const double* __restrict sum, double n,                     \
      double* __restrict d0, double* __restrict d1, double* __restrict sum1,                       \
      double* __restrict mean1) {                                                                  \
    prepare_row_steady_t<T>(cols, f, sum, n, d0, d1, sum1, mean1);                                 \
  }                                                                                                \
  GLINT_VECTOR_CLONES void prepare_row_d0_steady##SUFFIX(                                          \
      int cols, const T* __restrict f, const double* __restrict sum, double n,                     \
      double* __restrict d0) {                                                                     \
    prepare_row_d0_steady_t<T>(cols, f, sum, n, d0);                                               \
  }                                                                                                \
  GLINT_VECTOR_CLONES void prepare_row_d0##SUFFIX(                                                 \
      int cols, const T* __restrict f, const double* __restrict mean, double* __restrict d0) {     \
    prepare_row_d0_t<T>(cols, f, mean, d0);                                                        \
  }                                                                                                \
  GLINT_VECTOR_CLONES void commit_row##SUFFIX(                                                     \
      int cols, const uint8_t* __restrict status, const T* __restrict f, double n,                 \
      double* __restrict sum, double* __restrict sum2, double* __restrict mean,                    \
      const uint32_t* __restrict count, double* __restrict rms) {                                  \
    commit_row_t<T>(cols, status, f, n, sum, sum2, mean, count, rms);                              \
  }                                                                                                \
  GLINT_VECTOR_CLONES void commit_row_steady##SUFFIX(                                              \
      int cols, const uint8_t* __restrict status, const T* __restrict f, double n,                 \
      const double* __restrict sum1, const double* __restrict mean1, double* __restrict sum,       \
      double* __restrict sum2, double* __restrict rms) {                                           \
    commit_row_steady_t<T>(cols, status, f, n, sum1, mean1, sum, sum2, rms);                       \
  }                                                                                                \
  GLINT_VECTOR_CLONES void dark_row##SUFFIX(                                                       \
      int cols, const T* __restrict f, uint32_t window, double* __restrict sum,                    \
      double* __restrict sum2, uint32_t* __restrict count, double* __restrict mean) {              \
    dark_row_t<T>(cols, f, window, sum, sum2, count, mean);                                        \
  }
GLINT_ROW_FUNCTIONS(uint16_t, )
GLINT_ROW_FUNCTIONS(double, _calibrated)
#undef GLINT_ROW_FUNCTIONS

/// Calibrated values of one row of raw JUNGFRAU pixels (i0: the row's first pixel index).
GLINT_VECTOR_CLONES
void calibrate_row(int cols, const uint16_t* __restrict f, std::size_t i0, std::size_t np,
                   const double* __restrict ped, const double* __restrict gain,
                   double* __restrict out) {
  for (int x = 0; x < cols; ++x) out[x] = jungfrau::calibrate(f[x], i0 + x, np, ped, gain);
}

/// G0-only mode: pixels out of G0 count as pedestal level (d = 0) in their neighbours' windows.
void zero_out_of_g0(int cols, const uint16_t* f, double* d0, double* d1) {
  for (int x = 0; x < cols; ++x)
    if (!jungfrau::in_g0(f[x])) {
      d0[x] = 0.0;
      if (d1) d1[x] = 0.0;
    }
}

/// G0-only dark push: pixels out of G0 are not pushed.
void dark_row_g0(int cols, const uint16_t* f, uint32_t window, double* sum, double* sum2,
                 uint32_t* count, double* mean) {
  for (int x = 0; x < cols; ++x)
    if (jungfrau::in_g0(f[x]))
      mean[x] = cm::dark_push(sum[x], sum2[x], count[x], static_cast<double>(f[x]), window);
}

/// A progress counter on its own cache line.
struct alignas(64) Progress {
  std::atomic<uint32_t> value{0};
};

/// The rows a thread owns, the bands it must wait for, its rolling pass-0 rows and the clusters
/// it found (raster order, with the first cluster of every frame of the current call).
struct Band {
  int y0 = 0, y1 = 0;          // owned rows [y0, y1)
  unsigned near_lo = 0, near_hi = 0;  // bands holding rows [y0 - h, y1 + h)
  unsigned up_lo = 0;          // bands [up_lo, self) hold rows [y0 - h, y0)
  int padded_cols = 0;
  std::vector<double> ring0, ring1;   // S rows of d0 / d1, zero-padded by h columns
  std::vector<double> sum1, mean1;    // steady: the fast push of the owned pixels (pass 0)
  std::vector<double> halo_sum1, halo_mean1;  // sinks for the rows above the band
  std::vector<uint8_t> row_flags;     // kRow* flags of the owned rows, this frame
  std::vector<uint32_t> uncertain;    // pixel indices, raster order
  bool boundary_work = false;         // uncertain or stored pixels in the first h rows
  std::vector<uint16_t> cx, cy;
  std::vector<int32_t> cdata;
  std::vector<std::size_t> frame_first;
  std::vector<std::size_t> out_first;  // where frame k's clusters go in the output table
  // JUNGFRAU: gain counts of the owned rows per frame; calibrated values of the owned rows
  // (pass 0 to commit) and of one other row (scratch).
  std::vector<jungfrau::GainCounts> gains;
  std::vector<double> values, scratch;
};

class CpuFinder final : public SynchronousFinder {
 public:
  CpuFinder(const FinderParams& params, unsigned threads, int batch_frames)
      : SynchronousFinder(batch_frames), params_(params),
        thresholds_(cm::make_thresholds(params.n_sigma, params.cluster_size)),
        pool_(effective_threads(params, threads)), calibrated_(params) {
    validate(params_);
    // aare starts the window max at numeric_limits<frame type>::min(): 0 for uint16 frames, the
    // smallest normal double for calibrated (double) frames.
    if (calibrated_.active()) max0_ = std::numeric_limits<double>::min();
    const std::size_t np = params_.shape.pixels();
    sum_.assign(np, 0.0);
    sum2_.assign(np, 0.0);
    mean_.assign(np, 0.0);
    count_.assign(np, 0u);
    rms_.assign(np, 0.0);
    status_.assign(np, kSkip);

    const int rows = static_cast<int>(params_.shape.rows);
    const int cols = static_cast<int>(params_.shape.cols);
    const int S = params_.cluster_size;
    const int h = S / 2;
    const unsigned nb = pool_.size();
    bands_.resize(nb);
    progress_ = std::make_unique<Progress[]>(nb);
    for (unsigned b = 0; b < nb; ++b) {
      Band& band = bands_[b];
      band.y0 = static_cast<int>(static_cast<uint64_t>(rows) * b / nb);
      band.y1 = static_cast<int>(static_cast<uint64_t>(rows) * (b + 1) / nb);
      // Rows are read four columns at a time: pad the width up to a multiple of four.
      const int cols4 = (cols + kLanes - 1) / kLanes * kLanes;
      band.padded_cols = cols4 + 2 * h;
      band.ring0.assign(static_cast<std::size_t>(S) * band.padded_cols, 0.0);
      band.ring1.assign(static_cast<std::size_t>(S) * band.padded_cols, 0.0);
      band.sum1.assign(static_cast<std::size_t>(band.y1 - band.y0) * cols, 0.0);
      band.mean1.assign(band.sum1.size(), 0.0);
      band.halo_sum1.assign(cols, 0.0);
      band.halo_mean1.assign(cols, 0.0);
      band.row_flags.assign(static_cast<std::size_t>(band.y1 - band.y0), 0);
      if (calibrated_.active()) {
        band.values.assign(band.sum1.size(), 0.0);
        band.scratch.assign(cols, 0.0);
      }
    }
    for (unsigned b = 0; b < nb; ++b) {
      Band& band = bands_[b];
      band.near_lo = band.near_hi = band.up_lo = b;
      for (unsigned o = 0; o < nb; ++o) {
        const Band& other = bands_[o];
        const bool near = other.y0 < band.y1 + h && other.y1 > band.y0 - h;
        if (near) {
          band.near_lo = std::min(band.near_lo, o);
          band.near_hi = std::max(band.near_hi, o);
        }
        if (o < b && other.y1 > band.y0 - h) band.up_lo = std::min(band.up_lo, o);
      }
    }
  }

  const FinderParams& params() const override { return params_; }

  void push_dark(std::span<const uint16_t> frames) override {
    check_dark_frames(params_, frames);
    if (calibrated_.open()) {
      calibrated_.keep(frames);
      return;
    }
    push_dark_values(frames);
  }

  void push_dark_values(std::span<const uint16_t> frames) {
    const std::size_t np = params_.shape.pixels();
    const std::size_t n_frames = frames.size() / np;
    const int cols = static_cast<int>(params_.shape.cols);
    const uint32_t w = params_.pedestal_window;
    pool_.run([&](unsigned t) {
      Band& band = bands_[t];
      for (std::size_t k = 0; k < n_frames; ++k)
        for (int y = band.y0; y < band.y1; ++y) {
          const std::size_t i = static_cast<std::size_t>(y) * cols;
          const uint16_t* f = frames.data() + k * np + i;
          switch (params_.pixels) {
            case PixelMode::raw:
              dark_row(cols, f, w, &sum_[i], &sum2_[i], &count_[i], &mean_[i]);
              break;
            case PixelMode::jungfrau_g0:
              dark_row_g0(cols, f, w, &sum_[i], &sum2_[i], &count_[i], &mean_[i]);
              break;
            case PixelMode::jungfrau_calibrated:
              calibrate_row(cols, f, i, np, calibrated_.pedestal(), calibrated_.gain(),
                            band.scratch.data());
              dark_row_calibrated(cols, band.scratch.data(), w, &sum_[i], &sum2_[i], &count_[i],
                                  &mean_[i]);
              break;
          }
        }
      refresh_rms(static_cast<std::size_t>(band.y0) * cols, static_cast<std::size_t>(band.y1) * cols);
    });
    update_steady();
  }

  void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
            ClusterTable& out) override {
    const std::size_t np = params_.shape.pixels();
    check_find_arguments(params_, frames, frame_numbers, out);
    const std::size_t nf = frame_numbers.size();
    if (nf == 0) return;
    settle();
    for (unsigned b = 0; b < pool_.size(); ++b) {
      progress_[b].value.store(0, std::memory_order_relaxed);
      Band& band = bands_[b];
      band.cx.clear();
      band.cy.clear();
      band.cdata.clear();
      band.frame_first.clear();
      band.gains.clear();
    }
    // Each band moves through three phases per frame and waits only for the bands whose rows its
    // own windows reach (a wavefront; no frame-wide barrier):
    //   pass 0 (reads the frame-start state of the band and its halo) needs the neighbours'
    //     commit of the previous frame;
    //   resolve + extract (reads final decisions of the rows above, only when the band has
    //     undecided or stored pixels next to its top edge) needs those bands resolved;
    //   commit (writes the band's state) needs the neighbours to have finished reading it.
    pool_.run([&](unsigned t) {
      Band& band = bands_[t];
      for (std::size_t k = 0; k < nf; ++k) {
        const uint32_t base = static_cast<uint32_t>(3 * k);
        const uint16_t* f = frames.data() + k * np;
        wait_near(t, base);
        if (params_.pixels != PixelMode::raw) band.gains.push_back(band_gains(band, f));
        pass0(band, f);
        publish(t, base + 1);
        if (band.boundary_work)
          for (unsigned o = band.up_lo; o < t; ++o) wait_for(o, base + 2);
        switch (params_.pixels) {  // the mode is a template argument of the per-pixel code
          case PixelMode::raw:
            resolve<PixelMode::raw>(band, f);
            extract<PixelMode::raw>(band, f);
            break;
          case PixelMode::jungfrau_g0:
            resolve<PixelMode::jungfrau_g0>(band, f);
            extract<PixelMode::jungfrau_g0>(band, f);
            break;
          case PixelMode::jungfrau_calibrated:
            resolve<PixelMode::jungfrau_calibrated>(band, f);
            extract<PixelMode::jungfrau_calibrated>(band, f);
            break;
        }
        publish(t, base + 2);
        wait_near(t, base + 2);
        commit(band, f);
        publish(t, base + 3);
      }
      // Output: frame by frame, bands in row order; each band copies its own clusters.
      pool_.barrier();
      if (t == 0) layout_output(frame_numbers, out);
      pool_.barrier();
      copy_clusters(band, out);
    });
  }

  /// Appends the frame records of this call to `out`, sizes its cluster arrays and tells every
  /// band where its clusters of each frame go.
  void layout_output(std::span<const uint64_t> frame_numbers, ClusterTable& out) {
    const std::size_t nf = frame_numbers.size();
    std::size_t next = out.n_clusters();
    auto& records = out.frames_mut();
    records.reserve(records.size() + nf);
    for (Band& band : bands_) band.out_first.resize(nf);
    for (std::size_t k = 0; k < nf; ++k) {
      const std::size_t first = next;
      for (Band& band : bands_) {
        band.out_first[k] = next;
        const std::size_t last = k + 1 < nf ? band.frame_first[k + 1] : band.cx.size();
        next += last - band.frame_first[k];
      }
      records.push_back(FrameRecord{frame_numbers[k], first, static_cast<uint32_t>(next - first)});
      if (out.has_gain_counts()) {
        jungfrau::GainCounts g;
        for (const Band& band : bands_) {
          g.g1 += band.gains[k].g1;
          g.g2 += band.gains[k].g2;
          g.invalid += band.gains[k].invalid;
        }
        out.gain_counts_mut().push_back(g);
      }
    }
    out.x_mut().resize(next);
    out.y_mut().resize(next);
    out.data_mut().resize(next * out.values_per_cluster());
  }

  void copy_clusters(const Band& band, ClusterTable& out) const {
    const std::size_t nv = out.values_per_cluster();
    const std::size_t nf = band.frame_first.size();
    for (std::size_t k = 0; k < nf; ++k) {
      const std::size_t first = band.frame_first[k];
      const std::size_t last = k + 1 < nf ? band.frame_first[k + 1] : band.cx.size();
      const std::size_t to = band.out_first[k];
      std::copy(band.cx.begin() + first, band.cx.begin() + last, out.x_mut().begin() + to);
      std::copy(band.cy.begin() + first, band.cy.begin() + last, out.y_mut().begin() + to);
      std::copy(band.cdata.begin() + first * nv, band.cdata.begin() + last * nv,
                out.data_mut().begin() + to * nv);
    }
  }

  PedestalState pedestal() const override {
    const_cast<CpuFinder*>(this)->settle();  // fixes the calibration's pedestal (once)
    PedestalState s(params_.shape, params_.pedestal_window);
    s.sum = sum_;
    s.sum2 = sum2_;
    s.count = count_;
    return s;
  }

  std::vector<double> calibration_pedestal() const override {
    if (!calibrated_.active()) return {};
    const_cast<CpuFinder*>(this)->settle();
    const auto t = calibrated_.pedestal_table();
    return {t.begin(), t.end()};
  }

  void load_pedestal(const PedestalState& s) override {
    if (s.shape != params_.shape || s.window != params_.pedestal_window)
      throw std::invalid_argument("load_pedestal: shape or window differs from the finder's");
    const std::size_t np = params_.shape.pixels();
    if (s.sum.size() != np || s.sum2.size() != np || s.count.size() != np)
      throw std::invalid_argument("load_pedestal: state arrays do not match the shape");
    settle();
    sum_ = s.sum;
    sum2_ = s.sum2;
    count_ = s.count;
    for (std::size_t i = 0; i < np; ++i) mean_[i] = s.mean(i);
    refresh_rms(0, np);
    update_steady();
  }

  std::string description() const override {
    return "cpu (" + std::to_string(pool_.size()) + (pool_.size() == 1 ? " thread)" : " threads)");
  }

 private:
  /// Calibrated mode: fixes the ADC pedestal and pushes the kept dark frames (calibrated).
  void settle() {
    if (calibrated_.open()) {
      push_dark_values(calibrated_.close());
    }
  }

  jungfrau::GainCounts band_gains(const Band& band, const uint16_t* f) const {
    const std::size_t cols = params_.shape.cols;
    return jungfrau::count_gains(std::span<const uint16_t>(
        f + static_cast<std::size_t>(band.y0) * cols,
        static_cast<std::size_t>(band.y1 - band.y0) * cols));
  }

  template <PixelMode M>
  static bool excluded(const uint16_t* f, std::size_t j) {
    return M == PixelMode::jungfrau_g0 && !jungfrau::in_g0(f[j]);
  }
  template <PixelMode M>
  double value(const uint16_t* f, std::size_t j) const {
    if constexpr (M == PixelMode::jungfrau_calibrated) return calibrated_.calibrate(f[j], j);
    else return static_cast<double>(f[j]);
  }

  static unsigned effective_threads(const FinderParams& p, unsigned threads) {
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    return std::max(1u, std::min<unsigned>(threads, std::max<uint32_t>(p.shape.rows, 1)));
  }

  void publish(unsigned t, uint32_t value) {
    progress_[t].value.store(value, std::memory_order_release);
    progress_[t].value.notify_all();
  }
  void wait_for(unsigned o, uint32_t target) {
    const std::atomic<uint32_t>& p = progress_[o].value;
    for (;;) {
      const uint32_t now = p.load(std::memory_order_acquire);
      if (now >= target) return;
      detail::wait_for_change(p, now);
    }
  }
  void wait_near(unsigned t, uint32_t target) {
    const Band& band = bands_[t];
    for (unsigned o = band.near_lo; o <= band.near_hi; ++o)
      if (o != t) wait_for(o, target);
  }

  /// Steady: every pixel holds a full window, so its cached mean is sum / N (the hot loops then
  /// compute it instead of keeping mean_ current; mean_ is refreshed whenever it can change back).
  void update_steady() {
    const uint32_t w = params_.pedestal_window;
    steady_ = std::all_of(count_.begin(), count_.end(), [w](uint32_t c) { return c == w; });
  }

  double mean_at(std::size_t j) const {
    return steady_ ? cm::div(sum_[j], static_cast<double>(params_.pedestal_window)) : mean_[j];
  }

  void refresh_rms(std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i) rms_[i] = cm::noise_of(sum2_[i], count_[i], mean_[i]);
  }

  void pass0(Band& band, const uint16_t* f) {
    band.uncertain.clear();
    band.boundary_work = false;
    const int rows = static_cast<int>(params_.shape.rows);
    const int cols = static_cast<int>(params_.shape.cols);
    const int S = params_.cluster_size;
    const int h = S / 2;
    const double n = static_cast<double>(params_.pedestal_window);
    auto slot = [&](int r) { return static_cast<std::size_t>(((r % S) + S) % S) * band.padded_cols + h; };
    int next = band.y0 - h;  // next frame row to bring into the ring
    const double* r0[9];
    const double* r1[9];
    for (int y = band.y0; y < band.y1; ++y) {
      for (; next <= y + h; ++next) {
        double* d0 = band.ring0.data() + slot(next);
        double* d1 = band.ring1.data() + slot(next);
        if (next < 0 || next >= rows) {
          std::fill(d0, d0 + cols, 0.0);
          std::fill(d1, d1 + cols, 0.0);
          continue;
        }
        const std::size_t i = static_cast<std::size_t>(next) * cols;
        const bool below = next >= band.y1;  // successors of every owned pixel: d0 only
        if (calibrated_.active()) {
          prepare_calibrated(band, f, next, d0, d1);
          continue;
        }
        if (steady_) {
          if (below) prepare_row_d0_steady(cols, f + i, &sum_[i], n, d0);
          else if (next < band.y0)
            prepare_row_steady(cols, f + i, &sum_[i], n, d0, d1, band.halo_sum1.data(),
                               band.halo_mean1.data());
          else {
            const std::size_t o = static_cast<std::size_t>(next - band.y0) * cols;
            prepare_row_steady(cols, f + i, &sum_[i], n, d0, d1, &band.sum1[o], &band.mean1[o]);
          }
        } else {
          if (below) prepare_row_d0(cols, f + i, &mean_[i], d0);
          else prepare_row(cols, f + i, &mean_[i], &sum_[i], n, d0, d1);
        }
        if (params_.pixels == PixelMode::jungfrau_g0)
          zero_out_of_g0(cols, f + i, d0, below ? nullptr : d1);
      }
      for (int k = 0; k < S; ++k) {
        r0[k] = band.ring0.data() + slot(y - h + k);
        r1[k] = band.ring1.data() + slot(y - h + k);
      }
      const std::size_t i = static_cast<std::size_t>(y) * cols;
      const unsigned flags = decide_row(S, r0, r1, cols, &rms_[i], thresholds_.neg_n,
                                        thresholds_.n, thresholds_.c3_n, max0_, &status_[i]);
      if (params_.pixels == PixelMode::jungfrau_g0)  // out of G0: neither centre nor update
        for (int x = 0; x < cols; ++x)
          if (!jungfrau::in_g0(f[i + x])) status_[i + x] = kSkip;
      band.row_flags[y - band.y0] = static_cast<uint8_t>(flags);
      if (flags & kRowUncertain)
        for (int x = 0; x < cols; ++x)
          if (status_[i + x] == kUncertain) band.uncertain.push_back(static_cast<uint32_t>(i + x));
      if (y < band.y0 + h && (flags & kRowStoreOrUncertain)) band.boundary_work = true;
    }
  }

  /// Pass 0 inputs of frame row `r` in calibrated mode: the row is calibrated first (into the
  /// band's values for its own rows, kept for the commit; into scratch otherwise).
  void prepare_calibrated(Band& band, const uint16_t* f, int r, double* d0, double* d1) {
    const int cols = static_cast<int>(params_.shape.cols);
    const std::size_t np = params_.shape.pixels();
    const double n = static_cast<double>(params_.pedestal_window);
    const std::size_t i = static_cast<std::size_t>(r) * cols;
    const bool own = r >= band.y0 && r < band.y1;
    const std::size_t o = own ? static_cast<std::size_t>(r - band.y0) * cols : 0;
    double* v = own ? &band.values[o] : band.scratch.data();
    calibrate_row(cols, f + i, i, np, calibrated_.pedestal(), calibrated_.gain(), v);
    if (r >= band.y1) {
      if (steady_) prepare_row_d0_steady_calibrated(cols, v, &sum_[i], n, d0);
      else prepare_row_d0_calibrated(cols, v, &mean_[i], d0);
    } else if (steady_) {
      double* s1 = own ? &band.sum1[o] : band.halo_sum1.data();
      double* m1 = own ? &band.mean1[o] : band.halo_mean1.data();
      prepare_row_steady_calibrated(cols, v, &sum_[i], n, d0, d1, s1, m1);
    } else {
      prepare_row_calibrated(cols, v, &mean_[i], &sum_[i], n, d0, d1);
    }
  }

  /// The value window pixel j had when pixel i (raster index) was visited: f - mean, the mean
  /// updated by this frame's fast push when j precedes i and updated.
  template <PixelMode M>
  double visit_value(const uint16_t* f, std::size_t i, int yy, int xx) const {
    const int rows = static_cast<int>(params_.shape.rows);
    const int cols = static_cast<int>(params_.shape.cols);
    if (yy < 0 || yy >= rows || xx < 0 || xx >= cols) return 0.0;
    const std::size_t j = static_cast<std::size_t>(yy) * cols + xx;
    if (excluded<M>(f, j)) return 0.0;
    const double v = value<M>(f, j);
    if (j < i && status_[j] == kUpdate) {
      const double n = static_cast<double>(params_.pedestal_window);
      const double s = sum_[j];
      return cm::sub(v, cm::div(cm::add(s, cm::sub(v, cm::div(s, n))), n));
    }
    return cm::sub(v, mean_at(j));
  }

  /// Exact sequential decision of the band's uncertain pixels, in raster order.
  template <PixelMode M>
  void resolve(Band& band, const uint16_t* f) {
    const int cols = static_cast<int>(params_.shape.cols);
    const int h = params_.cluster_size / 2;
    for (const uint32_t i : band.uncertain) {
      const int y = static_cast<int>(i / cols), x = static_cast<int>(i % cols);
      const double v = cm::sub(value<M>(f, i), mean_at(i));
      double total = 0.0, max = max0_;
      for (int yy = y - h; yy <= y + h; ++yy)
        for (int xx = x - h; xx <= x + h; ++xx) {
          const double d = visit_value<M>(f, i, yy, xx);
          total = cm::add(total, d);
          if (max < d) max = d;
        }
      uint8_t s = kSkip;
      if (cm::is_negative_outlier(v, rms_[i], thresholds_)) {
        s = kSkip;
      } else {
        switch (cm::classify(v, rms_[i], total, max, thresholds_)) {
          case cm::PixelAction::update: s = kUpdate; break;
          case cm::PixelAction::candidate: s = v == max ? kStore : kSkip; break;
          default: s = kSkip; break;
        }
      }
      status_[i] = s;
      if (s == kStore) band.row_flags[y - band.y0] |= kRowStoreOrUncertain;
    }
  }

  template <PixelMode M>
  void extract(Band& band, const uint16_t* f) {
    band.frame_first.push_back(band.cx.size());
    const int cols = static_cast<int>(params_.shape.cols);
    const int h = params_.cluster_size / 2;
    for (int y = band.y0; y < band.y1; ++y) {
      if (!(band.row_flags[y - band.y0] & kRowStoreOrUncertain)) continue;
      const std::size_t row = static_cast<std::size_t>(y) * cols;
      const uint8_t* s = &status_[row];
      for (int x = 0; x < cols; ++x) {
        if (s[x] != kStore) continue;
        band.cx.push_back(static_cast<uint16_t>(x));
        band.cy.push_back(static_cast<uint16_t>(y));
        for (int yy = y - h; yy <= y + h; ++yy)
          for (int xx = x - h; xx <= x + h; ++xx) {
            const double d = visit_value<M>(f, row + x, yy, xx);
            if constexpr (M == PixelMode::jungfrau_calibrated)
              band.cdata.push_back(std::bit_cast<int32_t>(static_cast<float>(d)));
            else
              band.cdata.push_back(cm::cluster_value(d));
          }
      }
    }
  }

  void commit(Band& band, const uint16_t* f) {
    const int cols = static_cast<int>(params_.shape.cols);
    const double n = static_cast<double>(params_.pedestal_window);
    const std::size_t first = static_cast<std::size_t>(band.y0) * cols;
    const std::size_t count = static_cast<std::size_t>(band.y1 - band.y0) * cols;
    // One call over the band's contiguous rows; the loop does not care about row boundaries.
    for (std::size_t off = 0; off < count; off += 1u << 16) {
      const int len = static_cast<int>(std::min<std::size_t>(count - off, 1u << 16));
      const std::size_t i = first + off;
      if (calibrated_.active()) {
        const double* v = &band.values[off];
        if (steady_)
          commit_row_steady_calibrated(len, &status_[i], v, n, &band.sum1[off], &band.mean1[off],
                                       &sum_[i], &sum2_[i], &rms_[i]);
        else
          commit_row_calibrated(len, &status_[i], v, n, &sum_[i], &sum2_[i], &mean_[i],
                                &count_[i], &rms_[i]);
      } else if (steady_) {
        commit_row_steady(len, &status_[i], f + i, n, &band.sum1[off], &band.mean1[off],
                          &sum_[i], &sum2_[i], &rms_[i]);
      } else {
        commit_row(len, &status_[i], f + i, n, &sum_[i], &sum2_[i], &mean_[i], &count_[i],
                   &rms_[i]);
      }
    }
  }

  FinderParams params_;
  cm::Thresholds thresholds_;
  detail::WorkerPool pool_;
  std::vector<double> sum_, sum2_, mean_, rms_;
  std::vector<uint32_t> count_;
  std::vector<uint8_t> status_;
  bool steady_ = false;
  detail::CalibratedDark calibrated_;
  double max0_ = 0.0;
  std::vector<Band> bands_;
  std::unique_ptr<Progress[]> progress_;
};

}  // namespace

std::unique_ptr<ClusterFinder> make_cpu_finder(const FinderParams& params, unsigned threads,
                                               int batch_frames) {
  validate(params);
  return std::make_unique<CpuFinder>(params, threads, batch_frames);
}

}  // namespace glint
