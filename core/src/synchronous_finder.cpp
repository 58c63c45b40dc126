// The streaming interface of the CPU backends: each batch completes inside the call that
// submits it.
#include <stdexcept>
#include <string>

#include "glint/cluster_finder.hpp"

namespace glint {

SynchronousFinder::SynchronousFinder(int batch_frames) : batch_frames_(batch_frames) {
  if (batch_frames_ < 1)
    throw std::invalid_argument("finder: batch_frames must be at least 1 (got " +
                                std::to_string(batch_frames_) + ")");
}

std::span<uint16_t> SynchronousFinder::staging() {
  if (input_.empty())
    input_.resize(params().shape.pixels() * static_cast<std::size_t>(batch_frames_));
  return input_;
}

std::span<const uint16_t> SynchronousFinder::input(std::size_t n, const char* what) {
  if (n > static_cast<std::size_t>(batch_frames_))
    throw std::invalid_argument(std::string("finder: ") + what + " of " + std::to_string(n) +
                                " frames exceeds the batch of " + std::to_string(batch_frames_));
  return std::span<const uint16_t>(staging()).first(n * params().shape.pixels());
}

void SynchronousFinder::submit(std::span<const uint64_t> frame_numbers) {
  if (frame_numbers.empty()) return;
  const std::span<const uint16_t> frames = input(frame_numbers.size(), "submit");
  ClusterTable fresh = make_result_table(params());
  if (results_.cluster_size() != fresh.cluster_size() ||
      results_.value_type() != fresh.value_type() ||
      results_.has_gain_counts() != fresh.has_gain_counts())
    results_ = std::move(fresh);
  results_.clear();
  find(frames, frame_numbers, results_);
  if (sink_) sink_(results_);
}

void SynchronousFinder::submit_dark(std::size_t n) {
  if (n == 0) return;
  push_dark(input(n, "submit_dark"));
}

}  // namespace glint
