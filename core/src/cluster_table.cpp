#include "glint/cluster_table.hpp"

#include <algorithm>
#include <stdexcept>

namespace glint {

void ClusterTable::begin_frame(uint64_t frame_number) {
  frames_.push_back(FrameRecord{frame_number, x_.size(), 0});
  if (gain_counts_) gains_.emplace_back();
}

void ClusterTable::set_gain_counts(const jungfrau::GainCounts& counts) {
  if (!gain_counts_ || gains_.empty())
    throw std::logic_error("ClusterTable::set_gain_counts: no gain counts or no frame");
  gains_.back() = counts;
}

void ClusterTable::add_cluster(uint16_t x, uint16_t y, std::span<const float> values) {
  if (values_ != ClusterValues::float32)
    throw std::logic_error("ClusterTable::add_cluster: float values for an int32 table");
  if (frames_.empty()) throw std::logic_error("ClusterTable::add_cluster before begin_frame");
  if (values.size() != values_per_cluster())
    throw std::invalid_argument("ClusterTable::add_cluster: wrong number of values");
  x_.push_back(x);
  y_.push_back(y);
  for (const float v : values) data_.push_back(std::bit_cast<int32_t>(v));
  ++frames_.back().n_clusters;
}

void ClusterTable::add_cluster(uint16_t x, uint16_t y, std::span<const int32_t> values) {
  if (values_ != ClusterValues::int32)
    throw std::logic_error("ClusterTable::add_cluster: int32 values for a float table");
  if (frames_.empty()) throw std::logic_error("ClusterTable::add_cluster before begin_frame");
  if (values.size() != values_per_cluster())
    throw std::invalid_argument("ClusterTable::add_cluster: wrong number of values");
  x_.push_back(x);
  y_.push_back(y);
  data_.insert(data_.end(), values.begin(), values.end());
  ++frames_.back().n_clusters;
}

void ClusterTable::append(const ClusterTable& other) {
  if (other.cluster_size_ != cluster_size_ || other.values_ != values_ ||
      other.gain_counts_ != gain_counts_)
    throw std::invalid_argument("ClusterTable::append: cluster sizes or value types differ");
  const uint64_t base = x_.size();
  for (FrameRecord r : other.frames_) {
    r.first_cluster += base;
    frames_.push_back(r);
  }
  x_.insert(x_.end(), other.x_.begin(), other.x_.end());
  y_.insert(y_.end(), other.y_.begin(), other.y_.end());
  data_.insert(data_.end(), other.data_.begin(), other.data_.end());
  gains_.insert(gains_.end(), other.gains_.begin(), other.gains_.end());
}

void ClusterTable::clear() {
  frames_.clear();
  x_.clear();
  y_.clear();
  data_.clear();
  gains_.clear();
}

void ClusterTable::reserve(std::size_t frames, std::size_t clusters) {
  frames_.reserve(frames_.size() + frames);
  x_.reserve(x_.size() + clusters);
  y_.reserve(y_.size() + clusters);
  data_.reserve(data_.size() + clusters * values_per_cluster());
}

std::vector<std::pair<std::size_t, std::size_t>> split_by_clusters(
    std::span<const FrameRecord> frames, std::size_t max_parts, std::size_t min_clusters) {
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  if (frames.empty()) return parts;
  uint64_t total = 0;
  for (const FrameRecord& r : frames) total += r.n_clusters;
  const std::size_t n_parts = std::clamp<std::size_t>(
      total / std::max<std::size_t>(min_clusters, 1), 1,
      std::max<std::size_t>(1, std::min(max_parts, frames.size())));
  std::size_t start = 0;
  uint64_t seen = 0;
  for (std::size_t k = 0; k < frames.size() && parts.size() + 1 < n_parts; ++k) {
    seen += frames[k].n_clusters;
    if (seen * n_parts >= total * (parts.size() + 1)) {
      parts.emplace_back(start, k + 1);
      start = k + 1;
    }
  }
  if (start < frames.size()) parts.emplace_back(start, frames.size());
  return parts;
}

}  // namespace glint
