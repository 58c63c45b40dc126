#include "glint/pipeline/finder_stage.hpp"

#include <stdexcept>
#include <utility>

namespace glint::pipeline {

FinderStage::FinderStage(std::unique_ptr<ClusterFinder> finder, FrameCopier& copier,
                         ConsumerChain& consumers, RunCounters& counters)
    : finder_(std::move(finder)), copier_(copier), consumers_(consumers), counters_(counters),
      pixels_(finder_->params().shape.pixels()),
      capacity_(static_cast<std::size_t>(finder_->batch_frames())) {
  modular_ = dynamic_cast<ModularFinder*>(finder_.get());
  copier_.set_streaming(finder_->staging_read_by_device());
  numbers_.reserve(capacity_);
  timestamps_.reserve(capacity_);
  finder_->set_sink([this](const ClusterTable& batch) { deliver(batch); });
}

FinderStage::~FinderStage() { detach(); }

void FinderStage::deliver(const ClusterTable& batch) {
  // Batches come back in submission order.
  if (in_flight_.empty()) throw std::logic_error("finder stage: a result nobody submitted");
  const std::vector<uint64_t> timestamps = std::move(in_flight_.front());
  in_flight_.pop_front();
  const ClusterTable* handed = &batch;
  if (mask_.active()) {
    const uint64_t removed = mask_.apply(batch, kept_, removed_);
    consumers_.on_batch(FoundBatch{kept_, timestamps, removed_});
    counters_.masked_clusters.fetch_add(removed);
    handed = &kept_;
  } else {
    consumers_.on_batch(FoundBatch{batch, timestamps});
  }
  counters_.clusters.fetch_add(handed->n_clusters());
  if (modular_ && counters_.modules == modular_->modules()) {
    per_module_.assign(counters_.modules, 0);
    for (std::size_t i = 0; i < handed->n_clusters(); ++i)
      ++per_module_[modular_->module_of(handed->x()[i], handed->y()[i])];
    for (std::size_t k = 0; k < per_module_.size(); ++k)
      counters_.module_clusters[k].fetch_add(per_module_[k]);
  }
  counters_.data_frames.fetch_add(batch.n_frames());
  counters_.frames_processed.fetch_add(batch.n_frames());
  counters_.rows_written.fetch_add(batch.n_frames());
}

void FinderStage::add(FramePtr f, FrameKind kind) {
  if (!numbers_.empty() && kind_ != kind) submit();
  kind_ = kind;
  const std::size_t i = numbers_.size();
  numbers_.push_back(f->frame_number);
  timestamps_.push_back(f->timestamp);
  if (modular_) {
    if (module_slots_.empty()) {  // may wait for those slots' old batches
      const auto slots = modular_->module_staging();
      module_slots_.assign(slots.begin(), slots.end());
    }
    copier_.copy_modules(std::move(f), modular_->regions(), module_slots_, i);  // and releases it
  } else {
    if (slot_.empty()) slot_ = finder_->staging();  // may wait for that slot's old batch
    copier_.copy(std::move(f), slot_.subspan(i * pixels_, pixels_));  // and releases it
  }
  if (numbers_.size() == capacity_) submit();
}

void FinderStage::submit() {
  copier_.wait();  // the batch's pixels are all in place
  const std::size_t n = numbers_.size();
  if (n == 0) return;
  const std::span<uint16_t> slot = std::exchange(slot_, {});
  const std::vector<std::span<uint16_t>> module_slots = std::exchange(module_slots_, {});
  if (kind_ == FrameKind::dark) {
    if (dark_gains_ && modular_) {
      const auto regions = modular_->regions();
      for (std::size_t k = 0; k < regions.size(); ++k)
        dark_gains_->add(module_slots[k].first(n * regions[k].shape.pixels()), regions[k],
                         k == 0);
    } else if (dark_gains_) {
      dark_gains_->add(std::span<const uint16_t>(slot.data(), n * pixels_));
    }
    finder_->submit_dark(n);  // may be queued on the device; the run goes on at once
    rows_.clear();
    for (std::size_t i = 0; i < n; ++i)
      rows_.push_back(FrameRow{numbers_[i], timestamps_[i], 0, 0, kFlagDark});
    consumers_.on_rows(rows_);
    counters_.dark_frames.fetch_add(n);
    counters_.frames_processed.fetch_add(n);
    counters_.rows_written.fetch_add(n);
  } else {
    in_flight_.push_back(timestamps_);
    finder_->submit(numbers_);  // the results reach deliver() now or later, in order
  }
  numbers_.clear();
  timestamps_.clear();
}

void FinderStage::drain() {
  submit();
  finder_->flush();
}

void FinderStage::write_rows(std::span<const FrameRow> rows) {
  drain();
  consumers_.on_rows(rows);
  counters_.rows_written.fetch_add(rows.size());
}

void FinderStage::discard() {
  copier_.wait();
  numbers_.clear();
  timestamps_.clear();
  slot_ = {};
  module_slots_.clear();
  finder_->flush();  // batches already submitted are written
}

void FinderStage::detach() { finder_->set_sink({}); }

}  // namespace glint::pipeline
