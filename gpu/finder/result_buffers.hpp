#pragma once
// Where one batch's clusters go on one GPU: the find kernel writes them in place into one output
// block (OutLayout) in device memory, each (frame, segment) piece at the place its block took for
// it, with a directory of the pieces; the block is copied to pinned host memory, and the host
// reads the pieces in frame and raster order (append_clusters). Internal to the GPU finder.
#include <cstddef>
#include <cstdint>
#include <span>

#include "cuda_owners.hpp"
#include "find_kernels.hpp"
#include "glint/gpu/gpu_finder.hpp"

namespace glint::gpu::detail {

/// Byte offsets of one output block: the flags (word 0: kOverflow, kTooWide; word 1: the clusters
/// handed out to the find blocks, the block's true need), the per-frame counts of `batch` frames,
/// with `gains` (JUNGFRAU) their gain counts (3 per frame), the pieces' counts and first clusters
/// ([batch][segments] each), then x, y and the S*S values of `capacity` clusters (each 256-byte
/// aligned; room for int32 values, of which a narrow batch uses the first half as int16).
struct OutLayout {
  std::size_t counts, gains, piece_counts, piece_first, x, y, data, bytes;
  uint64_t capacity;
  uint32_t segments;
  bool has_gains;
};
OutLayout out_layout(int batch, uint32_t segments, uint64_t capacity, int values, bool gains);

/// The words of an output block's header.
inline constexpr std::size_t kFlagsWord = 0, kAllocWord = 1;

/// On `s`: zeroes what a find launch into the block at `out` (device memory) adds to: the
/// header, the counts and the gain counts ([0, l.piece_counts)).
void zero_output(unsigned char* out, const OutLayout& l, StreamView s);

/// The clusters the find blocks took in the block at `out` (host memory, once copied): what the
/// batch needs.
inline uint64_t handed_out(const unsigned char* out) {
  return reinterpret_cast<const uint32_t*>(out)[kAllocWord];
}

/// The fields of a find launch that write its output into the block at `out` (device-addressable:
/// device memory, or mapped host memory for a re-run), values as int16 when `narrow`, runs taken
/// at least `chunk` clusters at a time. The header, counts and gain counts must be zero when it
/// runs.
void bind_output(FindLaunch& p, unsigned char* out, const OutLayout& l, bool narrow,
                 uint32_t chunk);

/// A view of n frames' results in an output block on the host: `clusters` clusters handed out
/// (int16 values when `narrow`).
GpuBandView band_view(const unsigned char* out, const OutLayout& l, int n, uint64_t clusters,
                      int values, bool narrow);

/// One batch slot's output block on one GPU, on the device and its copy in pinned host memory.
/// The device-to-host copy brings back as many clusters as the previous batches suggest.
class ResultBuffers {
 public:
  /// Grows to at least `capacity` clusters per batch (never shrinks). Returns true when anything
  /// was reallocated: work captured with the old buffers is stale.
  bool reserve(int batch, uint32_t segments, int values, bool gains, uint64_t capacity);
  uint64_t capacity() const { return capacity_; }
  /// On `s`: zeroes the device block's header, counts and gain counts (before the find).
  void zero(StreamView s) const { zero_output(dout_.get(), layout(), s); }
  /// The output fields of a find launch into the device block.
  void bind(FindLaunch& p, bool narrow, uint32_t chunk) const;
  /// On `s`: copies the header, counts and directory, and the first `clusters` clusters handed
  /// out, to the host, values narrow or not (sets copied and copied_narrow).
  void enqueue_copy(uint64_t clusters, bool narrow, StreamView s);
  /// Once the copy is done: whether a piece did not fit, whether a narrow batch met a value
  /// beyond int16, the clusters handed out (what the batch needs), the clusters of n frames.
  bool overflowed() const { return (header()[kFlagsWord] & kOverflow) != 0; }
  bool too_wide() const { return (header()[kFlagsWord] & kTooWide) != 0; }
  uint64_t handed_out() const { return detail::handed_out(out_.get()); }
  uint64_t total(int n) const;
  /// Once the copy is done: the clusters of each of n frames, found in full even when they did
  /// not fit.
  std::span<const uint32_t> frame_counts(int n) const;
  GpuBandView view(int n) const {
    return band_view(out_.get(), layout(), n, handed_out(), values_, copied_narrow);
  }

  uint64_t copied = 0;         ///< clusters the enqueued copy brings back
  bool copied_narrow = false;  ///< whether their values are int16

 private:
  const uint32_t* header() const { return reinterpret_cast<const uint32_t*>(out_.get()); }
  OutLayout layout() const { return out_layout(batch_, segments_, capacity_, values_, gains_); }

  PinnedBuffer<unsigned char> out_;   // the results on the host
  DeviceBuffer<unsigned char> dout_;  // the results on the device (copied into out_)
  uint64_t capacity_ = 0;
  uint32_t segments_ = 0;
  int batch_ = 0, values_ = 9;
  bool gains_ = false;
};

}  // namespace glint::gpu::detail
