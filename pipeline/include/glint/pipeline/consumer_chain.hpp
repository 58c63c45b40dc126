#pragma once
// The consumers registered for one run, called in registration order for each batch and in the
// reverse order at the end.
#include <memory>
#include <span>
#include <vector>

#include "glint/pipeline/result_consumer.hpp"

namespace glint::pipeline {

class ConsumerChain {
 public:
  ConsumerChain() = default;
  /// Destroys the consumers in the reverse order of registration, like on_end.
  ~ConsumerChain();
  ConsumerChain(const ConsumerChain&) = delete;
  ConsumerChain& operator=(const ConsumerChain&) = delete;

  /// Registers a consumer (before on_start); returns it for the caller's typed access.
  template <class T>
  T& add(std::unique_ptr<T> consumer) {
    T& ref = *consumer;
    consumers_.push_back(std::move(consumer));
    return ref;
  }

  void on_start(const RunContext& run);
  void on_pixel_mask(std::span<const uint32_t> mask);
  void on_pedestal(const PedestalState& pedestal);
  void on_batch(const FoundBatch& batch);
  void on_rows(std::span<const FrameRow> rows);
  void flush();
  /// Ends every consumer, the last registered first. After a failure (end.failed) every
  /// consumer is still ended and what they throw is logged; otherwise the first exception
  /// propagates once all have been ended.
  void on_end(const RunEnd& end);

  std::vector<ConsumerStats> stats() const;

 private:
  std::vector<std::unique_ptr<ResultConsumer>> consumers_;
  std::size_t started_ = 0;  ///< consumers whose on_start returned (only they are ended)
  bool ended_ = false;
};

}  // namespace glint::pipeline
