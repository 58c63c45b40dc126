// Device-memory planning of the GPU TV solver: host arithmetic only, built with or without CUDA.
#include <algorithm>
#include <functional>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "glint/detail/ceil_div.hpp"
#include "glint/gpu/tv_solver.hpp"

namespace glint::gpu {

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

int tv_march_chunk(int nz, long long tiles, int per_sm, int sms, int halo, int min_chunk,
                   int max_chunk, long long group) {
  const int hi = std::max(1, std::min(max_chunk, nz)), lo = std::min(std::max(1, min_chunk), hi);
  tiles = std::max(1LL, tiles);
  const long long resident = static_cast<long long>(std::max(1, per_sm)) * std::max(1, sms);
  if (per_sm > 1) {
    const long long four_waves = detail::ceil_div(nz * tiles, 4 * resident);
    return static_cast<int>(std::clamp<long long>(four_waves, lo, hi));
  }
  if (group <= 0 || group > tiles) group = tiles;
  int best = hi;
  long long best_end = -1;
  std::vector<long long> free_at;  // min-heap of the slots' finishing times
  for (int c = lo; c <= hi; ++c) {
    free_at.assign(static_cast<std::size_t>(resident), 0);
    long long end = 0;
    // (A candidate stops once it can no longer finish first.)
    for (long long g0 = 0; g0 < tiles; g0 += group) {
      const long long in_group = std::min(group, tiles - g0);
      for (int z0 = 0; z0 < nz && (best_end < 0 || end < best_end); z0 += c) {
        const long long took = std::min(c, nz - z0) + 2LL * halo;
        for (long long t = 0; t < in_group; ++t) {
          std::pop_heap(free_at.begin(), free_at.end(), std::greater<>());
          free_at.back() += took;
          end = std::max(end, free_at.back());
          std::push_heap(free_at.begin(), free_at.end(), std::greater<>());
        }
      }
    }
    if (best_end < 0 || end < best_end) {
      best = c;
      best_end = end;
    }
  }
  // One wave: where n >= 1 chunks of every region fit the resident blocks at once, the chunk of
  // nz / n planes (rounded up) even beyond max_chunk, if that finishes first: all blocks then
  // march side by side from start to end, so none falls behind its neighbours.
  if (const long long n = resident / tiles; n >= 1) {
    const int c = static_cast<int>(detail::ceil_div(nz, n));
    if (c > hi && c + 2LL * halo < best_end) best = c;
  }
  return best;
}

long long tv_launch_group(long long tiles, long long resident) {
  resident = std::max(1LL, resident);
  if (tiles <= resident) return 0;
  const long long groups = detail::ceil_div(tiles, resident);
  const long long group = detail::ceil_div(tiles, groups);
  return 4 * group >= 3 * resident ? group : 0;
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
