#include "glint/pipeline/consumer_chain.hpp"

#include <exception>

#include "glint/log.hpp"

namespace glint::pipeline {

ConsumerChain::~ConsumerChain() {
  while (!consumers_.empty()) consumers_.pop_back();
}

void ConsumerChain::on_start(const RunContext& run) {
  for (auto& c : consumers_) {
    c->on_start(run);
    ++started_;
  }
}

void ConsumerChain::on_pixel_mask(std::span<const uint32_t> mask) {
  for (auto& c : consumers_) c->on_pixel_mask(mask);
}

void ConsumerChain::on_pedestal(const PedestalState& pedestal) {
  for (auto& c : consumers_) c->on_pedestal(pedestal);
}

void ConsumerChain::on_batch(const FoundBatch& batch) {
  for (auto& c : consumers_) c->on_batch(batch);
}

void ConsumerChain::on_rows(std::span<const FrameRow> rows) {
  for (auto& c : consumers_) c->on_rows(rows);
}

void ConsumerChain::flush() {
  for (auto& c : consumers_) c->flush();
}

void ConsumerChain::on_end(const RunEnd& end) {
  if (ended_) return;
  ended_ = true;
  std::exception_ptr first;
  for (std::size_t i = started_; i-- > 0;) {
    ResultConsumer& c = *consumers_[i];
    try {
      c.on_end(end);
    } catch (const std::exception& e) {
      if (end.failed || first) {
        // The run has already failed (or is failing): its error is the first one.
        log::error("{}: ending after the run failed: {}", c.name(), e.what());
      } else {
        first = std::current_exception();
      }
    }
  }
  if (first) std::rethrow_exception(first);
}

std::vector<ConsumerStats> ConsumerChain::stats() const {
  std::vector<ConsumerStats> s;
  s.reserve(consumers_.size());
  for (const auto& c : consumers_) s.push_back(c->stats());
  return s;
}

}  // namespace glint::pipeline
