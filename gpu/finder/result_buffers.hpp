#pragma once
// Where one batch's clusters go on one GPU: the find kernel writes each (frame, segment) region's
// clusters into RegionBuffers; the pack kernel packs them in frame and raster order into one
// output block (OutLayout) in device memory, which is copied to pinned host memory. Internal to
// the GPU finder.
#include <cstddef>
#include <cstdint>
#include <span>

#include "cuda_owners.hpp"
#include "find_kernels.hpp"
#include "glint/gpu/gpu_finder.hpp"

namespace glint::gpu::detail {

/// Byte offsets of one output block: the flags (first word: kOverflow, kTooWide; the second is
/// the largest count of a region that did not fit, 0 when every region fit), the per-frame counts
/// of `batch` frames, with `gains` (JUNGFRAU) their gain counts (3 per frame), then x, y and the
/// S*S values of `capacity` clusters (each 256-byte aligned; room for int32 values, of which a
/// narrow pack uses the first half as int16).
struct OutLayout {
  std::size_t counts, gains, x, y, data, bytes;
  bool has_gains;
};
OutLayout out_layout(int batch, uint64_t capacity, int values, bool gains);

/// A view of n frames' results in an output block on the host (int16 values when `narrow`).
GpuBandView band_view(const unsigned char* out, const OutLayout& l, int n, int values,
                      bool narrow = false);

/// The find kernel's per-region output of up to `batch` frames and `blocks` segments.
class RegionBuffers {
 public:
  RegionBuffers() = default;
  /// `gains`: per-frame gain counts as well (JUNGFRAU).
  RegionBuffers(std::size_t batch, uint32_t blocks, uint32_t capacity, int values, bool gains);
  uint32_t capacity() const { return capacity_; }
  /// The region fields of a find launch (the totals and gain counts must be zeroed before it
  /// runs: zero()).
  void bind(FindLaunch& p) const;
  /// On `s`: zeroes the totals and gain counts of n frames.
  void zero(int n, StreamView s) const;
  /// The pack of n frames into the output block `out` of `out_capacity` clusters.
  PackLaunch pack(int n, uint32_t blocks, int values, const OutLayout& l, unsigned char* out,
                  uint64_t out_capacity) const;
  uint32_t* totals() const { return totals_.get(); }
  const DeviceBuffer<uint32_t>& counts() const { return counts_; }

 private:
  DeviceBuffer<uint32_t> counts_, xy_, totals_, gains_;
  DeviceBuffer<int32_t> data_;
  uint32_t capacity_ = 0;
};

/// One batch slot's results on one GPU: its regions, the packed block on the device and its copy
/// in pinned host memory. The device-to-host copy brings back as many clusters as the previous
/// batches suggest; the rest follows once the true count is known.
class ResultBuffers {
 public:
  /// Grows to at least `region_capacity` clusters per region and `out_capacity` per batch (never
  /// shrinks). Returns true when anything was reallocated: work captured with the old buffers is
  /// stale.
  bool reserve(int batch, uint32_t blocks, int values, bool gains, uint32_t region_capacity,
               uint64_t out_capacity);
  const RegionBuffers& regions() const { return regions_; }
  uint64_t out_capacity() const { return out_capacity_; }
  /// On `s`, after the find: clears the flags, packs n frames (values as int16 when `narrow`,
  /// raising kTooWide where one does not fit), records nothing.
  void enqueue_pack(int n, uint32_t blocks, uint32_t pack_regions, bool narrow,
                    StreamView s) const;
  /// On `s`: copies the flags, the counts and the first `clusters` clusters to the host, packed
  /// narrow or not (sets copied and copied_narrow).
  void enqueue_copy(uint64_t clusters, bool narrow, StreamView s);
  /// Once the copy is done: whether a region or the output did not hold its clusters, whether a
  /// narrow pack met a value beyond int16, and the clusters of n frames.
  bool overflowed() const { return (flags() & kOverflow) != 0; }
  bool too_wide() const { return (flags() & kTooWide) != 0; }
  uint64_t total(int n) const;
  /// Once the copy is done: the clusters of each of n frames, found in full even when they did
  /// not fit, and the largest count of a region that did not fit (0 when every region fit).
  std::span<const uint32_t> frame_counts(int n) const;
  uint32_t max_region_over() const { return reinterpret_cast<const uint32_t*>(out_.get())[1]; }
  /// Whether the buffers hold `region_capacity` clusters per region and `out_capacity` per batch.
  bool fits(uint32_t region_capacity, uint64_t out_capacity) const {
    return regions_.capacity() >= region_capacity && out_capacity_ >= out_capacity;
  }
  GpuBandView view(int n) const {
    return band_view(out_.get(), layout(), n, values_, copied_narrow);
  }

  uint64_t copied = 0;         ///< clusters the enqueued copy brings back
  bool copied_narrow = false;  ///< whether their values are int16

 private:
  uint32_t flags() const { return *reinterpret_cast<const uint32_t*>(out_.get()); }
  OutLayout layout() const { return out_layout(batch_, out_capacity_, values_, gains_); }

  RegionBuffers regions_;
  PinnedBuffer<unsigned char> out_;   // the results on the host
  DeviceBuffer<unsigned char> dout_;  // the results on the device (copied into out_)
  uint64_t out_capacity_ = 0;
  int batch_ = 0, values_ = 9;
  bool gains_ = false;
};

}  // namespace glint::gpu::detail
