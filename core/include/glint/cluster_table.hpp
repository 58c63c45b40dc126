#pragma once
// Found clusters of a sequence of frames, packed: one record per data frame (also for frames
// without clusters) and one flat table of clusters in frame order, raster order within a frame.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "glint/jungfrau.hpp"

namespace glint {

struct FrameRecord {
  uint64_t frame_number = 0;
  uint64_t first_cluster = 0;  ///< row of the frame's first cluster in the table
  uint32_t n_clusters = 0;
  friend bool operator==(const FrameRecord&, const FrameRecord&) = default;
};

/// What a cluster's S*S values are: int32 (raw frames, aare's Cluster<int32_t, S, S>) or float
/// (calibrated frames in keV, aare's Cluster<float, S, S>). Either way each value takes 4 bytes;
/// float values are kept as their bit patterns in the int32 array.
enum class ClusterValues : uint8_t { int32, float32 };

/// Consecutive frame ranges [first, last) of `frames` that hold about equal numbers of clusters,
/// for work shared among threads: as many as the clusters give at `min_clusters` a part, at most
/// `max_parts` and at most one a frame, at least one (none for no frames). Every frame is in
/// exactly one range, in order.
std::vector<std::pair<std::size_t, std::size_t>> split_by_clusters(
    std::span<const FrameRecord> frames, std::size_t max_parts, std::size_t min_clusters);

class ClusterTable {
 public:
  /// `gain_counts`: the table keeps, per frame, the pixels out of G0 (JUNGFRAU frames).
  explicit ClusterTable(int cluster_size = 3, ClusterValues values = ClusterValues::int32,
                        bool gain_counts = false)
      : cluster_size_(cluster_size), values_(values), gain_counts_(gain_counts) {}

  int cluster_size() const { return cluster_size_; }
  ClusterValues value_type() const { return values_; }
  bool has_gain_counts() const { return gain_counts_; }
  std::size_t values_per_cluster() const {
    return static_cast<std::size_t>(cluster_size_) * cluster_size_;
  }
  std::size_t n_frames() const { return frames_.size(); }
  std::size_t n_clusters() const { return x_.size(); }

  /// Starts the record of the next frame; clusters added afterwards belong to it.
  void begin_frame(uint64_t frame_number);
  /// Appends a cluster to the current frame; `values` holds S*S entries, row-major.
  void add_cluster(uint16_t x, uint16_t y, std::span<const int32_t> values);
  /// The same for a float table (value_type() == float32): the values' bits are stored.
  void add_cluster(uint16_t x, uint16_t y, std::span<const float> values);
  /// Sets the current frame's gain counts (a table with gain counts only).
  void set_gain_counts(const jungfrau::GainCounts& counts);
  /// Appends another table's frames and clusters (same cluster size) after this one's.
  void append(const ClusterTable& other);
  void clear();
  /// Reserves room for about `clusters` more clusters and `frames` more frames.
  void reserve(std::size_t frames, std::size_t clusters);

  std::span<const FrameRecord> frames() const { return frames_; }
  std::span<const uint16_t> x() const { return x_; }
  std::span<const uint16_t> y() const { return y_; }
  /// Per frame, the pixels out of G0 (empty unless has_gain_counts()).
  std::span<const jungfrau::GainCounts> gain_counts() const { return gains_; }
  /// S*S int32 values per cluster, cluster-major (for a float table: the floats' bit patterns).
  std::span<const int32_t> data() const { return data_; }
  /// Value k of cluster i of a float table.
  float float_value(std::size_t i, std::size_t k) const {
    return std::bit_cast<float>(data_[i * values_per_cluster() + k]);
  }
  std::span<const int32_t> cluster_data(std::size_t i) const {
    return std::span<const int32_t>(data_).subspan(i * values_per_cluster(), values_per_cluster());
  }

  /// Direct access for backends that fill whole batches at once (the GPU's compacted output).
  std::vector<FrameRecord>& frames_mut() { return frames_; }
  std::vector<uint16_t>& x_mut() { return x_; }
  std::vector<uint16_t>& y_mut() { return y_; }
  std::vector<int32_t>& data_mut() { return data_; }
  std::vector<jungfrau::GainCounts>& gain_counts_mut() { return gains_; }

  friend bool operator==(const ClusterTable&, const ClusterTable&) = default;

 private:
  int cluster_size_;
  ClusterValues values_ = ClusterValues::int32;
  bool gain_counts_ = false;
  std::vector<FrameRecord> frames_;
  std::vector<jungfrau::GainCounts> gains_;
  std::vector<uint16_t> x_;
  std::vector<uint16_t> y_;
  std::vector<int32_t> data_;
};

}  // namespace glint
