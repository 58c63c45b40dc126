#pragma once
// Launchers of the cluster-finding kernels (find_kernels.cu). Internal to glint::gpu.
//
// A GPU's band of rows is cut into segments of consecutive pixels in raster order; each block of
// the persistent find kernel owns one segment, or several (segments b, b + blocks, ...: every
// neighbour of a segment belongs to another block, which works on it at about the same time),
// and walks through the batch's frames in order, each frame through its segments.
// Pedestal state per pixel in global memory: sum, sum2 and the cached mean double-buffered by
// frame parity (frame G reads buffer G&1 and writes buffer (G+1)&1), noise cached in place, count
// read-only. With `resident`, a block keeps its own pixels' state in shared memory during the
// launch and writes only the means (and sum, sum2 of pixels whose window is not full) every
// frame, the rest at the end. Blocks synchronise only with the segments before and after through
// monotonic progress counters (G+1 once frame G's decisions and state are final in the segment),
// so frames pipeline through the frame as a wavefront.
#include <cstdint>

#include "glint/cluster_finder.hpp"
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
  uint32_t segment_max = 1;              ///< most pixels a segment holds
  int threads = 0;                       ///< threads per block (the lane plan's)
  uint32_t blocks = 0;                   ///< grid size
  uint32_t chunks = 1;                   ///< segments per block
  uint32_t segments = 0;                 ///< blocks * chunks: segments of this launch
  uint32_t window = 1000;
  bool resident = true;                  ///< own pixels' state in shared memory (chunks == 1)
  int spill = 0;                         ///< FindLayout: which arrays live in `scratch`
  unsigned char* scratch = nullptr;      ///< [blocks * scratch_stride] (spill > 0)
  std::size_t scratch_stride = 0;        ///< bytes per block
  cluster_math::Thresholds thresholds{};
  PedestalArrays own, above, below;      ///< above/below: rows owned by neighbouring GPUs
  unsigned long long* progress = nullptr;              ///< [segments]
  const unsigned long long* progress_above = nullptr;  ///< the band above this launch's first
  const unsigned long long* progress_below = nullptr;  ///< the band below this launch's last
  unsigned long long* frames_done = nullptr;  ///< frames processed so far (parity, progress base)
  unsigned int* blocks_done = nullptr;
  const uint16_t* frames = nullptr;
  uint32_t n_frames = 0;
  /// The batch's output, written in place (no pack): each block takes runs of clusters from
  /// `out_alloc` (a batch-wide count of clusters handed out, zeroed before the launch) at least
  /// `out_chunk` at a time, and puts each (frame k, segment v) piece of clusters, in raster
  /// order, at piece_first[k * segments + v] of out_x, out_y and the values, its true count at
  /// piece_counts[...] (kNoPiece and kOverflow in out_flags where the piece would pass
  /// out_capacity). A block's sizes depend only on its own counts, so a batch's final out_alloc
  /// is the same however the blocks interleave: a re-run of that capacity holds every piece.
  uint32_t* piece_counts = nullptr;      ///< [n_frames * segments]
  uint32_t* piece_first = nullptr;       ///< [n_frames * segments]
  uint16_t* out_x = nullptr;
  uint16_t* out_y = nullptr;
  /// S*S values per cluster: int32 (a float's bits when calibrated), or int16 with `narrow`
  /// (a value beyond int16 raises kTooWide in out_flags).
  void* out_data = nullptr;
  bool narrow = false;
  uint32_t out_capacity = 0;             ///< clusters
  uint32_t out_chunk = 64;
  uint32_t* out_alloc = nullptr;
  uint32_t* out_flags = nullptr;
  uint32_t* frame_totals = nullptr;      ///< [n_frames], zeroed before the launch
  /// Optional [blocks * kFindProfileSlots]: cycles per phase, then the nanoseconds from the
  /// previous segment's release of a frame to this segment seeing it, summed over the frames
  /// this segment had to wait for, and their number.
  unsigned long long* profile = nullptr;
  unsigned long long* release_ns = nullptr;  ///< with profile: [2][segments] release timestamps
  /// With profile: [kLaunchRecords][blocks][4]: each block's globaltimer and clock64 at entry and
  /// at exit, for launch (frames_done at launch / n_frames) % kLaunchRecords.
  unsigned long long* launch_ts = nullptr;
  /// What the pixels are (the kernel instantiation that runs). JUNGFRAU: gain_counts, [n_frames]
  /// x (G1, G2, invalid), zeroed before the launch, gets each frame's pixels out of G0 in the
  /// band (null: not counted); calibrated: cal_pedestal and cal_gain are the stage-major tables
  /// of the whole frame (jungfrau::calibrate), and out_data holds the float entries' bits.
  PixelMode pixels = PixelMode::raw;
  uint32_t* gain_counts = nullptr;
  const double* cal_pedestal = nullptr;
  const double* cal_gain = nullptr;
  /// Optional [blocks][kTraceFrames][kTraceFields]: per frame k < kTraceFrames of a launch
  /// (one segment per block), globaltimer stamps of the frame's steps (FindTrace), overwritten by
  /// every launch.
  unsigned long long* trace = nullptr;
};
inline constexpr int kLaunchRecords = 64;
inline constexpr int kTraceFrames = 256;
/// Fields of a trace record: the frame g; globaltimer ns when the block was ready for it, saw the
/// segment above, saw the segment below (no earlier than ready), started it (all threads past the wait), finished loop 1,
/// loop 2 and the resolution, began the release, issued it (after its fence), finished the
/// emission; the undecided pixels (bits 0-15), the resolution's rounds (16-23), its pixels that
/// waited for the segment above (24-31), the stored pixels (32-63); when the last such wait
/// ended.
enum FindTrace {
  kTraceG = 0, kTraceReady, kTraceAbove, kTraceBelow, kTraceGo, kTraceLoop1, kTraceLoop2,
  kTraceResolve, kTraceRelease0, kTraceRelease1, kTraceEnd, kTraceCounts, kTraceAboveWait,
  kTraceFields
};
/// wait, loop 1 (with the own pixels' d0), loop 2 (pass 0), resolve, release (the releasing
/// thread's fence), emit
inline constexpr int kFindPhases = 6;
inline constexpr int kFindProfileSlots = kFindPhases + 2;

/// Spill levels of the find kernel's per-segment arrays (shared memory where they fit, else a
/// per-block scratch area in global memory): 0 none; 1 the cluster and undecided lists and the
/// previous frame's halo values (rarely touched); 2 also the frame values (read straight from
/// the frame buffer); 3 also f - mean and its bounds; 4 everything.
inline constexpr int kMaxSpill = 4;

/// Global scratch bytes per find block for segments of `segment` pixels at `spill`.
std::size_t find_scratch_bytes(uint32_t cols, uint32_t segment, int cluster_size, bool resident,
                               int spill);

/// Find blocks of `threads` threads resident at once per multiprocessor of the current device
/// for segments of `segment` pixels, one per block or several (`chunked`), (they wait for each
/// other, so every block must be resident); 0 when the shared memory does not fit. Also raises
/// the kernel's shared-memory limit on this device to what the device allows.
int find_blocks_per_sm(uint32_t cols, uint32_t segment, int cluster_size, bool resident,
                       int spill, bool chunked, int threads, PixelMode pixels);
void launch_find(const FindLaunch& p, StreamView stream);

/// The flags word of a find launch's output (FindLaunch::out_flags).
inline constexpr uint32_t kOverflow = 1;  ///< a piece of clusters did not fit the output
inline constexpr uint32_t kTooWide = 2;   ///< a narrow launch met a value beyond int16
/// piece_first of a piece that did not fit.
inline constexpr uint32_t kNoPiece = 0xffffffffu;

/// Copies the current-parity state (sum, sum2, mean, noise) of rows [row0, row1) into `snap`
/// buffer 0 (and noise).
void launch_snapshot(const PedestalArrays& live, const unsigned long long* frames_done,
                     const PedestalArrays& snap, uint32_t cols, uint32_t row0, uint32_t row1,
                     StreamView stream);

/// How dark frames' pixels are read: their mode, and for jungfrau_calibrated the stage-major
/// tables (jungfrau::calibrate) of frames of `pixels` pixels.
struct DarkPixels {
  PixelMode mode = PixelMode::raw;
  const double* pedestal = nullptr;
  const double* gain = nullptr;
  std::size_t pixels = 0;
};

/// Dark frames: pushes n_frames frames (rows [row0,row1) of each, `frame_rows` rows per frame
/// starting at frame_row0) into the parity-`parity` state; mean and noise recomputed. JUNGFRAU
/// G0 only: pixels out of G0 are not pushed; calibrated: the calibrated values are pushed.
void launch_dark(const PedestalArrays& a, int parity, const uint16_t* frames, uint32_t n_frames,
                 uint32_t cols, uint32_t row0, uint32_t row1, uint32_t frame_row0,
                 uint32_t frame_rows, uint32_t window, const DarkPixels& pixels,
                 StreamView stream);

/// Recomputes mean and noise of parity `parity` from sum, sum2 and count (after a load).
void launch_derive(const PedestalArrays& a, int parity, uint32_t cols, uint32_t row0,
                   uint32_t row1, StreamView stream);

}  // namespace glint::gpu::detail
