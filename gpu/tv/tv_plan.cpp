// Device-memory planning of the GPU TV solver: host arithmetic only, built with or without CUDA.
#include <algorithm>
#include <functional>
#include <sstream>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "glint/detail/ceil_div.hpp"
#include "glint/gpu/tv_solver.hpp"

namespace glint::gpu {

long long tv_row_pitch(int nx, tv::Variant variant) {
  const long long pitch = detail::ceil_div(std::max(1, nx), 32) * 32LL;
  if (pitch % 512 == 0) return pitch + 64;
  return variant == tv::Variant::temporal && pitch % 256 == 0 ? pitch + 32 : pitch;
}

int tv_dual_sets(tv::Variant v) {
  switch (v) {
    case tv::Variant::separate: return 2;
    case tv::Variant::fused:
    case tv::Variant::fused_cube:
    case tv::Variant::fused_march: return 3;
    case tv::Variant::two_state: return 3;
    case tv::Variant::temporal: return 4;
  }
  return 4;
}

double tv_volumes_needed(tv::Variant variant, bool fft) {
  // x, x_prev, the gradient-step buffer; y (identity only); the dual sets; the separate
  // variant's z.
  double v = 3 + (fft ? 0.0 : 1.0) + 3.0 * tv_dual_sets(variant);
  if (variant == tv::Variant::separate) v += 1;
  return v;
}

std::size_t tv_spectra_bytes(const tv::Dims& dims, bool fft) {
  return fft ? TvSpectra::kFloats * dims.spectrum_size() * sizeof(float) : 0;
}

long long tv_march_end(const TvPairOrder& order, long long resident, int halo, long long stop) {
  // A min-heap of the slots' finishing times.
  std::vector<long long> free_at(static_cast<std::size_t>(std::max(1LL, resident)), 0);
  long long end = 0;
  for (int id = 0, n = order.blocks(); id < n && (stop < 0 || end < stop); ++id) {
    const TvPairBlock blk = tv_pair_block(order, id);
    std::pop_heap(free_at.begin(), free_at.end(), std::greater<>());
    free_at.back() += blk.zend - blk.z0 + 2LL * halo;
    end = std::max(end, free_at.back());
    std::push_heap(free_at.begin(), free_at.end(), std::greater<>());
  }
  return end;
}

namespace {

/// tv_march_chunk's chunk and, with one block per SM, when its launch order ends (tv_march_end;
/// -1 with several blocks per SM, whose chunk is not simulated).
struct ChunkPick {
  int chunk;
  long long end;
};

/// `order` with the chunk of its regions (order.chunk is ignored); its nz, tiles, group and first
/// as tv_march_chunk clamps them.
ChunkPick pick_march_chunk(TvPairOrder order, int per_sm, int sms, int halo, int min_chunk,
                           int max_chunk) {
  const int nz = order.nz;
  const int hi = std::max(1, std::min(max_chunk, nz)), lo = std::min(std::max(1, min_chunk), hi);
  const long long resident = static_cast<long long>(std::max(1, per_sm)) * std::max(1, sms);
  if (per_sm > 1) {
    const long long four_waves = detail::ceil_div(static_cast<long long>(nz) * order.tiles,
                                                  4 * resident);
    return {static_cast<int>(std::clamp<long long>(four_waves, lo, hi)), -1};
  }
  ChunkPick best{hi, -1};
  auto consider = [&](int c) {
    order.chunk = c;
    // (A candidate's simulation stops once it can no longer end first; the best one's is whole.)
    if (const long long end = tv_march_end(order, resident, halo, best.end);
        best.end < 0 || end < best.end)
      best = {c, end};
  };
  for (int c = lo; c <= hi; ++c) consider(c);
  // One wave: where n >= 1 chunks of every region fit the resident blocks at once, the chunk of
  // nz / n planes (rounded up) even beyond max_chunk, if that finishes first: all blocks then
  // march side by side from start to end, so none falls behind its neighbours.
  if (const long long n = resident / order.tiles; n >= 1) {
    if (const int c = static_cast<int>(detail::ceil_div(nz, n)); c > hi) consider(c);
  }
  return best;
}

}  // namespace

int tv_march_chunk(int nz, long long tiles, int per_sm, int sms, int halo, int min_chunk,
                   int max_chunk, long long group, int first) {
  const int t = static_cast<int>(std::max(1LL, tiles));
  const TvPairOrder order{1, t, nz, 1, static_cast<int>(std::max(0LL, group)),
                          std::clamp(first, 0, t)};
  return pick_march_chunk(order, per_sm, sms, halo, min_chunk, max_chunk).chunk;
}

long long tv_launch_group(long long tiles, long long resident) {
  resident = std::max(1LL, resident);
  if (tiles <= resident) return 0;
  const long long groups = detail::ceil_div(tiles, resident);
  const long long group = detail::ceil_div(tiles, groups);
  return 4 * group >= 3 * resident ? group : 0;
}

TvPairOrder tv_pair_order(int nz, int nreg, int tiles, int per_sm, int sms, int halo,
                          int max_chunk, long long group, int first) {
  nreg = std::max(1, nreg);
  tiles = std::max(1, tiles);
  const long long resident = static_cast<long long>(std::max(1, per_sm)) * std::max(1, sms);
  // The order with f regions first, and when it ends (pick_march_chunk).
  auto with_first = [&](int f) {
    TvPairOrder o{nreg, tiles, std::max(1, nz), 1, 0, std::clamp(f, 0, tiles)};
    const int rest = tiles - o.first;
    const long long g = group >= 0 ? group : tv_launch_group(rest, resident);
    o.group = g < rest ? static_cast<int>(g) : 0;
    const ChunkPick pick = pick_march_chunk(o, per_sm, sms, halo, 16, max_chunk);
    o.chunk = pick.chunk;
    return std::pair{o, pick.end};
  };
  if (first >= 0) return with_first(first).first;
  auto best = with_first(0);
  if (per_sm == 1 && tiles > resident && nz <= kTvLongestFirstMarch) {
    const auto regions_first = with_first(static_cast<int>(resident));
    if (regions_first.second < best.second) best = regions_first;
  }
  return best.first;
}

TvPairRegions tv_pair_regions(int nx) {
  const int n = detail::ceil_div(std::max(1, nx), 60);
  // 56 n + 4 wide >= nx (wide <= n, since 60 n >= nx).
  const int wide = std::clamp(detail::ceil_div(nx - 56 * n, 4), 0, n);
  return TvPairRegions{n - wide, wide};
}

TvPairRegions tv_pair_regions_uniform(int nx, int ox) {
  const int n = detail::ceil_div(std::max(1, nx), ox);
  return ox == 60 ? TvPairRegions{0, n} : TvPairRegions{n, 0};
}

std::string TvMemoryPlan::describe() const {
  constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format("{}x{}x{} ({}, {}): {} padded volumes of {:.3f} GiB + spectra {:.3f} GiB + "
                     "cuFFT work {:.3f} GiB = {:.3f} GiB of GPU memory ({:.3f} GiB free)",
                     dims.nx, dims.ny, dims.nz, tv::variant_name(variant),
                     fft ? "FFT" : "identity", volumes, volume_bytes / GiB, spectra_bytes / GiB,
                     fft_work_bytes / GiB, total_bytes / GiB, free_bytes / GiB);
}

}  // namespace glint::gpu
