#pragma once
// Launchers of the cluster-finding kernels (find_kernels.cu). Internal to glint::gpu.
//
// A GPU's band of rows is cut into segments of consecutive pixels in raster order; one block of
// the persistent find kernel owns one segment and walks through the batch's frames in order.
// Pedestal state per pixel in global memory: sum, sum2 and the cached mean double-buffered by
// frame parity (frame G reads buffer G&1 and writes buffer (G+1)&1), noise cached in place, count
// read-only. With `resident`, a block keeps its own pixels' state in shared memory during the
// launch and writes only the means (and sum, sum2 of pixels whose window is not full) every
// frame, the rest at the end. Blocks synchronise only with the segments before and after through
// monotonic progress counters (G+1 once frame G's decisions and state are final in the segment),
// so frames pipeline through the frame as a wavefront.
#include <cstdint>

#include "glint/cluster_math.hpp"
#include "stream_view.hpp"

namespace glint::gpu::detail {

struct PedestalArrays {
  double* sum[2] = {nullptr, nullptr};
  double* sum2[2] = {nullptr, nullptr};
  double* mean[2] = {nullptr, nullptr};
  double* noise = nullptr;
  uint32_t* count = nullptr;
};

struct FindLaunch {
  uint32_t rows = 0, cols = 0;           ///< the whole frame
  uint32_t band_begin = 0, band_end = 0; ///< rows computed by this launch (this GPU)
  uint32_t frame_row0 = 0;               ///< first frame row held in `frames`
  uint32_t frame_rows = 0;               ///< rows per frame held in `frames`
  int cluster_size = 3;
  uint32_t segment_max = 1;              ///< most pixels a block owns
  int threads = 512;                     ///< threads per block (FindTuning::find_threads)
  uint32_t blocks = 0;                   ///< grid size (segments of this launch)
  uint32_t window = 1000;
  bool resident = true;                  ///< own pixels' state in shared memory
  cluster_math::Thresholds thresholds{};
  PedestalArrays own, above, below;      ///< above/below: rows owned by neighbouring GPUs
  unsigned long long* progress = nullptr;              ///< [blocks]
  const unsigned long long* progress_above = nullptr;  ///< the band above this launch's first
  const unsigned long long* progress_below = nullptr;  ///< the band below this launch's last
  unsigned long long* frames_done = nullptr;  ///< frames processed so far (parity, progress base)
  unsigned int* blocks_done = nullptr;
  const uint16_t* frames = nullptr;
  uint32_t n_frames = 0;
  uint32_t* region_counts = nullptr;     ///< [n_frames * blocks], true counts (may exceed capacity)
  uint32_t* region_xy = nullptr;         ///< [n_frames * blocks * capacity]
  int32_t* region_data = nullptr;        ///< [n_frames * blocks * capacity * S*S]
  uint32_t region_capacity = 0;
  uint32_t* frame_totals = nullptr;      ///< [n_frames], zeroed before the launch
  /// Optional [blocks * kFindProfileSlots]: cycles per phase, then the nanoseconds from the
  /// previous segment's release of a frame to this segment seeing it, summed over the frames
  /// this segment had to wait for, and their number.
  unsigned long long* profile = nullptr;
  unsigned long long* release_ns = nullptr;  ///< with profile: [2][blocks] release timestamps
  /// With profile: [kLaunchRecords][blocks][4]: each block's globaltimer and clock64 at entry and
  /// at exit, for launch (frames_done at launch / n_frames) % kLaunchRecords.
  unsigned long long* launch_ts = nullptr;
};
inline constexpr int kLaunchRecords = 64;
/// wait, loop 1 (with the own pixels' d0), loop 2 (pass 0), resolve, release (the releasing
/// thread's fence), emit
inline constexpr int kFindPhases = 6;
inline constexpr int kFindProfileSlots = kFindPhases + 2;

/// Find blocks of `threads` threads resident at once per multiprocessor of the current device
/// for segments of `segment` pixels (they wait for each other, so every block must be resident);
/// 0 when the shared memory does not fit. Also raises the kernel's shared-memory limit on this
/// device.
int find_blocks_per_sm(uint32_t cols, uint32_t segment, int cluster_size, bool resident,
                       int threads);
void launch_find(const FindLaunch& p, StreamView stream);

struct PackLaunch {
  uint32_t n_frames = 0, blocks = 0, region_capacity = 0;
  uint32_t chunks = 1;                   ///< pack blocks per frame (each packs a run of regions)
  int values = 9;                        ///< S*S
  const uint32_t* region_counts = nullptr;
  const uint32_t* region_xy = nullptr;
  const int32_t* region_data = nullptr;
  const uint32_t* frame_totals = nullptr;
  // Output (device memory, or mapped host memory for an overflow re-run).
  uint32_t* out_counts = nullptr;        ///< [n_frames]
  uint16_t* out_x = nullptr;
  uint16_t* out_y = nullptr;
  int32_t* out_data = nullptr;
  uint64_t out_capacity = 0;             ///< clusters
  uint32_t* out_overflow = nullptr;      ///< set to 1 when anything did not fit
};
/// One block of `threads` (64 or 256) per frame and chunk of regions.
void launch_pack(const PackLaunch& p, int threads, StreamView stream);

/// Copies the current-parity state (sum, sum2, mean, noise) of rows [row0, row1) into `snap`
/// buffer 0 (and noise).
void launch_snapshot(const PedestalArrays& live, const unsigned long long* frames_done,
                     const PedestalArrays& snap, uint32_t cols, uint32_t row0, uint32_t row1,
                     StreamView stream);

/// Dark frames: pushes n_frames frames (rows [row0,row1) of each, `frame_rows` rows per frame
/// starting at frame_row0) into the parity-`parity` state; mean and noise recomputed.
void launch_dark(const PedestalArrays& a, int parity, const uint16_t* frames, uint32_t n_frames,
                 uint32_t cols, uint32_t row0, uint32_t row1, uint32_t frame_row0,
                 uint32_t frame_rows, uint32_t window, StreamView stream);

/// Recomputes mean and noise of parity `parity` from sum, sum2 and count (after a load).
void launch_derive(const PedestalArrays& a, int parity, uint32_t cols, uint32_t row0,
                   uint32_t row1, StreamView stream);

}  // namespace glint::gpu::detail
