#pragma once
// Runs a consumer that may fall behind (a live view, a slow science product) on a thread of its
// own behind a bounded queue, so that it never delays the run: each batch and each span of rows
// is copied into the queue when there is room, and dropped and counted (ConsumerStats::dropped,
// in frames) when there is not. The wrapped consumer sees what it gets in frame order, with gaps
// where batches were dropped. Never wrap a file writer that must hold every frame (the run file).
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "glint/pipeline/result_consumer.hpp"

namespace glint::pipeline {

class QueuedConsumer final : public ResultConsumer {
 public:
  /// `capacity`: batches (or spans of rows) waiting beside the one being handled, >= 1.
  QueuedConsumer(std::unique_ptr<ResultConsumer> inner, std::size_t capacity);
  ~QueuedConsumer() override;  ///< the worker ends after what is queued

  std::string_view name() const override { return inner_->name(); }
  /// Starts the wrapped consumer (on the caller's thread), then the worker.
  void on_start(const RunContext& run) override;
  /// Queued like a batch but never dropped (the wrapped consumer may depend on it).
  void on_pedestal(const PedestalState& pedestal) override;
  void on_batch(const FoundBatch& batch) override;
  void on_rows(std::span<const FrameRow> rows) override;
  /// Lets the worker finish what is queued, stops it and ends the wrapped consumer. What the
  /// wrapped consumer throws on the worker is logged and counted in ConsumerStats::failed.
  void on_end(const RunEnd& end) override;
  /// The wrapped consumer's counters, with frames as handed in here and the drops added.
  ConsumerStats stats() const override;

 private:
  struct Item {
    std::optional<ClusterTable> clusters;
    std::vector<uint64_t> timestamps;
    std::vector<FrameRow> rows;
    std::optional<PedestalState> pedestal;
  };
  bool push(Item&& item, uint64_t frames, bool may_drop);
  void work(std::stop_token st);

  std::unique_ptr<ResultConsumer> inner_;
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<Item> queue_;
  std::size_t bounded_ = 0;  ///< items in queue_ that count towards the capacity
  bool busy_ = false;
  uint64_t frames_ = 0, dropped_ = 0, failed_ = 0;
  std::jthread worker_;
};

}  // namespace glint::pipeline
