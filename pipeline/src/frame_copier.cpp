#include "glint/pipeline/frame_copier.hpp"

#include <pthread.h>

#include <fmt/format.h>

#include <stdexcept>
#include <utility>

namespace glint::pipeline {

unsigned copy_threads(int configured) {
  if (configured >= 0) return static_cast<unsigned>(configured);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw >= 8 ? 4 : hw >= 4 ? 2 : 0;
}

FrameCopier::FrameCopier(unsigned threads, const config::DetectorConfig& det,
                         FrameAssembler& assembler, const FramePreprocessing& preprocessing)
    : det_(det), assembler_(assembler), preprocessing_(preprocessing) {
  for (unsigned i = 0; i < threads; ++i)
    threads_.emplace_back([this, i](std::stop_token st) {
      pthread_setname_np(pthread_self(), fmt::format("glint-copy{}", i).substr(0, 15).c_str());
      loop(st);
    });
}

FrameCopier::~FrameCopier() {
  for (auto& t : threads_) t.request_stop();
  cv_.notify_all();
}

void FrameCopier::write(Task t) {
  const bool streaming = streaming_.load(std::memory_order_relaxed);
  if (t.regions.empty()) {
    const bool pre = preprocessing_.active();  // reads the image back: keep it in the caches
    t.frame->write_to(det_, t.dst, streaming && !pre);
    if (pre) preprocessing_.apply(t.frame->frame_number, t.dst);
  } else {
    for (std::size_t k = 0; k < t.regions.size(); ++k) {
      const std::size_t np = t.regions[k].shape.pixels();
      t.frame->write_region(det_, t.regions[k], t.slots[k].subspan(t.index * np, np),
                            streaming);
    }
  }
  assembler_.release(std::move(t.frame));
}

void FrameCopier::enqueue(Task t) {
  if (threads_.empty()) {
    write(std::move(t));
    return;
  }
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(t));
    ++outstanding_;
  }
  cv_.notify_one();
}

void FrameCopier::copy(FramePtr f, std::span<uint16_t> dst) {
  enqueue(Task{std::move(f), dst, {}, {}, 0});
}

void FrameCopier::copy_modules(FramePtr f, std::span<const ModuleRegion> regions,
                               std::span<const std::span<uint16_t>> slots, std::size_t index) {
  if (slots.size() != regions.size())
    throw std::logic_error("copy_modules: one input slot per module expected");
  enqueue(Task{std::move(f), {}, regions, slots, index});
}

void FrameCopier::wait() {
  if (threads_.empty()) return;
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return outstanding_ == 0; });
}

void FrameCopier::loop(std::stop_token st) {
  while (true) {
    Task t;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return st.stop_requested() || !tasks_.empty(); });
      if (tasks_.empty()) return;
      t = std::move(tasks_.front());
      tasks_.pop_front();
    }
    write(std::move(t));
    std::lock_guard lock(mu_);
    if (--outstanding_ == 0) done_cv_.notify_all();
  }
}

}  // namespace glint::pipeline
