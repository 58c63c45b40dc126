#include "lane_plan.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "cuda_owners.hpp"
#include "find_kernels.hpp"
#include "glint/log.hpp"

namespace glint::gpu::detail {
namespace {

/// Cuts the lane's band into segments (on the lane's device, current).
void choose_segments(const FinderParams& params, const FindTuning& tuning, LanePlan& lane) {
  const uint32_t cols = params.shape.cols;
  const int size = params.cluster_size;
  // Threads per block where two blocks share a multiprocessor; a block alone on one gets twice
  // as many, by default 1024 (measured: a 1024 x 1024 frame in 132 segments, 35.7 us per frame
  // with 1024 threads, 47.7 with 512). By default a segment whose whole state is in shared
  // memory takes kFindThreadsResident (its frame is bound by the block's barriers), other
  // segments kFindThreadsShared (they wait for global memory, which more warps hide).
  const bool automatic = tuning.find_threads == 0;
  const int threads = automatic ? kFindThreadsShared : tuning.find_threads;
  const int threads_alone = automatic ? kFindThreadsAlone : std::min(1024, 2 * threads);
  const int threads_resident = automatic ? kFindThreadsResident : threads;
  const uint64_t band_px = static_cast<uint64_t>(lane.r1 - lane.r0) * cols;
  const uint64_t h = static_cast<uint64_t>(size / 2);
  const uint64_t halo = std::max<uint64_t>(1, h * cols + h);
  const long long cap = tuning.max_segments;
  int sms = 0;
  GLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, lane.device));
  // A band shorter than a window's reach is one segment.
  const uint64_t by_halo = std::max<uint64_t>(1, band_px / halo);
  const auto threads_for = [&](int per_sm, bool resident, int spill) {
    if (per_sm == 1) return threads_alone;
    return resident && spill == 0 ? threads_resident : threads;
  };
  int plan_threads = threads;  // of the search step being tried
  const auto fit = [&](uint64_t seg, bool resident, int spill, bool chunked = false) {
    return find_blocks_per_sm(cols, static_cast<uint32_t>(seg), size, resident, spill, chunked,
                              plan_threads, params.pixels);
  };
  const auto take = [&](uint64_t blocks, uint64_t chunks, uint64_t seg, bool resident,
                        int spill) {
    lane.threads = plan_threads;
    lane.blocks = static_cast<uint32_t>(blocks);
    lane.chunks = static_cast<uint32_t>(chunks);
    lane.segment_max = static_cast<uint32_t>(seg);
    lane.resident = resident;
    lane.spill = spill;
    lane.scratch_stride =
        find_scratch_bytes(cols, static_cast<uint32_t>(seg), size, resident, spill);
  };

  // One segment per block, `per_sm` blocks per multiprocessor (at most `limit` segments): the
  // state in shared memory, else in global memory, else with the rarely used lists in global
  // memory too.
  struct Option {
    bool resident;
    int spill;
  };
  static constexpr Option kOneSegment[] = {{true, 0}, {false, 0}, {true, 1}, {false, 1}};
  const auto one_segment = [&](int per_sm, uint64_t limit) {
    const uint64_t blocks = std::min({static_cast<uint64_t>(per_sm) * sms, by_halo, limit});
    if (blocks == 0) return;
    const uint64_t seg = (band_px + blocks - 1) / blocks;
    for (const Option o : kOneSegment) {
      if (o.resident && !tuning.resident) continue;
      plan_threads = threads_for(per_sm, o.resident, o.spill);
      const int n = fit(seg, o.resident, o.spill);
      if (n >= per_sm || (n >= 1 && blocks <= static_cast<uint64_t>(n) * sms)) {
        take(blocks, 1, seg, o.resident, o.spill);
        return;
      }
    }
  };
  // A frame too large for that: each block takes several segments in turn, as long as fit in
  // its shared memory at `per_sm` blocks per multiprocessor; the plan with the fewest segments
  // per block is kept.
  const auto several = [&](int per_sm, int spill, uint64_t limit) {
    plan_threads = threads_for(per_sm, false, spill);
    uint64_t blocks = std::min(static_cast<uint64_t>(per_sm) * sms, by_halo);
    const uint64_t seg_min = std::min(halo, band_px);
    if (fit(seg_min, false, spill, true) < per_sm) return;
    uint64_t lo = seg_min, hi = (band_px + blocks - 1) / blocks;
    while (lo < hi) {  // the longest segment that fits
      const uint64_t mid = lo + (hi - lo + 1) / 2;
      if (fit(mid, false, spill, true) >= per_sm) lo = mid;
      else hi = mid - 1;
    }
    uint64_t chunks = (band_px + blocks * lo - 1) / (blocks * lo);
    if (blocks * chunks > by_halo) {
      chunks = std::min(chunks, by_halo);
      blocks = std::max<uint64_t>(1, by_halo / chunks);
    }
    if (blocks * chunks > limit) return;
    const uint64_t seg = (band_px + blocks * chunks - 1) / (blocks * chunks);
    // Every block resident at once.
    const uint64_t need = (blocks + static_cast<uint64_t>(sms) - 1) / static_cast<uint64_t>(sms);
    if (static_cast<uint64_t>(std::max(0, fit(seg, false, spill, chunks > 1))) < need) return;
    if (lane.blocks == 0 || chunks < lane.chunks) take(blocks, chunks, seg, false, spill);
  };

  // Two blocks per multiprocessor before one, one segment per block before several, the frame
  // values and f - mean in shared memory before global memory; within `limit` segments.
  // (Measured on the H200: one block per multiprocessor with twice the threads beats two blocks
  // that take two segments each: 1024 x 1024, 35.7 against 48.5 us per frame; 2048 x 2048, 186
  // against 252.)
  const auto search = [&](uint64_t limit) {
    for (int per_sm = 4; per_sm >= 1 && lane.blocks == 0; --per_sm) one_segment(per_sm, limit);
    for (const int per_sm : {1, 2})
      if (lane.blocks == 0)
        for (int spill = 0; spill <= 1; ++spill) several(per_sm, spill, limit);
    for (int spill = 2; spill <= kMaxSpill && lane.blocks == 0; ++spill)
      for (const int per_sm : {1, 2})
        if (lane.blocks == 0) several(per_sm, spill, limit);
  };
  if (cap > 0) search(static_cast<uint64_t>(cap));
  if (lane.blocks == 0) search(by_halo);
  if (lane.blocks == 0)
    throw std::invalid_argument(
        "GPU finder: no find block of " + std::to_string(threads) + " threads fits on GPU " +
        std::to_string(lane.device) + " (GLINT_FIND_THREADS too large for this GPU?)");
  log::write(log::Level::debug,
             "GPU finder: GPU " + std::to_string(lane.device) + " rows " +
                 std::to_string(lane.r0) + ".." + std::to_string(lane.r1) + " in " +
                 std::to_string(lane.segments()) + " segments of <= " +
                 std::to_string(lane.segment_max) + " pixels, " + std::to_string(lane.blocks) +
                 " blocks of " + std::to_string(lane.threads) + " threads, state " +
                 (lane.resident ? "in shared memory" : "in global memory") + ", spill level " +
                 std::to_string(lane.spill));
}

}  // namespace

std::vector<LanePlan> plan_lanes(const FinderParams& params, std::span<const int> devices,
                                 const FindTuning& tuning) {
  const uint32_t rows = params.shape.rows;
  const uint32_t h = static_cast<uint32_t>(params.cluster_size / 2);
  // Every band at least a window's reach long, so that a window reaches the neighbouring bands
  // only.
  const uint64_t halo = static_cast<uint64_t>(h) * params.shape.cols + h;
  std::size_t n_lanes = std::max<std::size_t>(1, devices.size());
  while (n_lanes > 1 && static_cast<uint64_t>(rows / n_lanes) * params.shape.cols < halo)
    --n_lanes;
  if (n_lanes < devices.size())
    log::write(log::Level::warn, "GPU finder: frames of " + std::to_string(rows) +
                                     " rows are searched on " + std::to_string(n_lanes) +
                                     " of the " + std::to_string(devices.size()) + " GPUs");
  std::vector<LanePlan> lanes(n_lanes);
  for (std::size_t li = 0; li < n_lanes; ++li) {
    LanePlan& lane = lanes[li];
    lane.device = devices[li];
    lane.r0 = static_cast<uint32_t>(rows * li / n_lanes);
    lane.r1 = static_cast<uint32_t>(rows * (li + 1) / n_lanes);
    lane.fr0 = lane.r0 >= h ? lane.r0 - h : 0;
    lane.fr1 = std::min(rows, lane.r1 + h);
    DeviceGuard g(lane.device);
    choose_segments(params, tuning, lane);
  }
  return lanes;
}

void enable_peer_access(std::span<const LanePlan> lanes) {
  const std::size_t n_lanes = lanes.size();
  if (n_lanes < 2) return;
  for (std::size_t li = 0; li < n_lanes; ++li) {
    DeviceGuard g(lanes[li].device);
    for (std::size_t lj : {li - 1, li + 1}) {
      if (lj >= n_lanes || lanes[lj].device == lanes[li].device) continue;
      int ok = 0;
      GLINT_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, lanes[li].device, lanes[lj].device));
      if (!ok)
        throw std::invalid_argument("GPU finder: GPU " + std::to_string(lanes[li].device) +
                                    " cannot access GPU " + std::to_string(lanes[lj].device) +
                                    "'s memory (peer access is needed across GPUs)");
      const cudaError_t e = cudaDeviceEnablePeerAccess(lanes[lj].device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        GLINT_CUDA_CHECK(e);
    }
  }
}

}  // namespace glint::gpu::detail
