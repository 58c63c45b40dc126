#include "glint/pipeline/queued_consumer.hpp"

#include <stdexcept>
#include <string>

#include "glint/log.hpp"

namespace glint::pipeline {

QueuedConsumer::QueuedConsumer(std::unique_ptr<ResultConsumer> inner, std::size_t capacity)
    : inner_(std::move(inner)), capacity_(capacity) {
  if (capacity_ < 1) throw std::invalid_argument("QueuedConsumer: capacity must be at least 1");
}

QueuedConsumer::~QueuedConsumer() {
  worker_.request_stop();
  if (worker_.joinable()) worker_.join();
}

void QueuedConsumer::on_start(const RunContext& run) {
  inner_->on_start(run);
  worker_ = std::jthread([this](std::stop_token st) { work(st); });
}

bool QueuedConsumer::push(Item&& item, uint64_t frames, bool may_drop) {
  {
    std::lock_guard lock(mu_);
    frames_ += frames;
    if (may_drop && bounded_ >= capacity_) {
      dropped_ += frames;
      return false;
    }
    bounded_ += may_drop;
    queue_.push_back(std::move(item));
  }
  cv_.notify_all();
  return true;
}

void QueuedConsumer::on_pedestal(const PedestalState& pedestal) {
  Item item;
  item.pedestal = pedestal;
  push(std::move(item), 0, false);
}

void QueuedConsumer::on_batch(const FoundBatch& batch) {
  const uint64_t n = batch.clusters.n_frames();
  {
    std::lock_guard lock(mu_);
    if (bounded_ >= capacity_) {  // no copy of a batch that would be dropped
      frames_ += n;
      dropped_ += n;
      return;
    }
  }
  Item item;
  item.clusters = batch.clusters;
  item.timestamps.assign(batch.timestamps.begin(), batch.timestamps.end());
  push(std::move(item), n, true);
}

void QueuedConsumer::on_rows(std::span<const FrameRow> rows) {
  Item item;
  item.rows.assign(rows.begin(), rows.end());
  push(std::move(item), rows.size(), true);
}

void QueuedConsumer::work(std::stop_token st) {
  while (true) {
    Item item;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, st, [&] { return !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
      if (!item.pedestal) --bounded_;
      busy_ = true;
    }
    try {
      if (item.pedestal) inner_->on_pedestal(*item.pedestal);
      else if (item.clusters) inner_->on_batch(FoundBatch{*item.clusters, item.timestamps});
      else inner_->on_rows(item.rows);
    } catch (const std::exception& e) {
      log::error("{}: {}", inner_->name(), e.what());
      std::lock_guard lock(mu_);
      ++failed_;
    }
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

void QueuedConsumer::on_end(const RunEnd& end) {
  if (worker_.joinable()) {
    if (!end.failed) {
      // What is queued is handed over before the end.
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
    }
    worker_.request_stop();
    cv_.notify_all();
    worker_.join();
  }
  inner_->on_end(end);
}

ConsumerStats QueuedConsumer::stats() const {
  ConsumerStats s = inner_->stats();
  std::lock_guard lock(mu_);
  s.frames = frames_;
  s.dropped += dropped_;
  s.failed += failed_;
  return s;
}

}  // namespace glint::pipeline
