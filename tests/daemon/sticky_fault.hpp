#pragma once
// A test-only finder backend that fails like a GPU whose context is lost: it wraps a real finder
// and, from its `fail_at`-th data batch on, throws the sticky CUDA error the engine would throw
// (glint::gpu::CudaError, cudaErrorIllegalAddress, sticky). Runs anywhere: no GPU needed.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "glint/cluster_finder.hpp"
#include "glint/gpu/error.hpp"
#include "glint/pipeline/finder_factory.hpp"

namespace glint::testing {

class StickyFaultFinder final : public ClusterFinder {
 public:
  /// `data_frames_ok` counts the data frames of the batches that went through, before the fault.
  StickyFaultFinder(std::unique_ptr<ClusterFinder> inner, uint64_t fail_at,
                    std::atomic<uint64_t>* data_frames_ok)
      : inner_(std::move(inner)), fail_at_(fail_at), ok_(data_frames_ok) {}

  const FinderParams& params() const override { return inner_->params(); }
  int batch_frames() const override { return inner_->batch_frames(); }
  std::span<uint16_t> staging() override { return inner_->staging(); }
  void submit(std::span<const uint64_t> frame_numbers) override {
    if (frame_numbers.empty()) return;
    if (++batches_ >= fail_at_) {
      failed_ = true;
      std::fprintf(stderr, "sticky fault injected after %llu data frames\n",
                   static_cast<unsigned long long>(ok_->load()));
      std::fflush(stderr);
      throw gpu::CudaError("gpu_finder.cpp:1: cudaStreamSynchronize failed: "
                           "cudaErrorIllegalAddress (an illegal memory access was encountered; "
                           "injected by a test)",
                           700, true);
    }
    inner_->submit(frame_numbers);
    ok_->fetch_add(frame_numbers.size());
  }
  void submit_dark(std::size_t n) override { inner_->submit_dark(n); }
  void flush() override { inner_->flush(); }
  void set_sink(ResultSink sink) override { inner_->set_sink(std::move(sink)); }
  void push_dark(std::span<const uint16_t> frames) override { inner_->push_dark(frames); }
  void find(std::span<const uint16_t> frames, std::span<const uint64_t> numbers,
            ClusterTable& out) override {
    inner_->find(frames, numbers, out);
  }
  /// After the fault the context is gone: reading the pedestal fails the same way.
  PedestalState pedestal() const override {
    if (failed_) throw gpu::CudaError("cudaMemcpyAsync failed: cudaErrorIllegalAddress", 700, true);
    return inner_->pedestal();
  }
  void load_pedestal(const PedestalState& s) override { inner_->load_pedestal(s); }
  std::string description() const override {
    return "sticky-fault test (" + inner_->description() + ")";
  }

 private:
  std::unique_ptr<ClusterFinder> inner_;
  uint64_t fail_at_;
  uint64_t batches_ = 0;
  bool failed_ = false;
  std::atomic<uint64_t>* ok_;
};

/// A finder factory whose finders fail at their `fail_at`-th data batch.
inline pipeline::FinderFactory sticky_fault_factory(uint64_t fail_at,
                                                    std::atomic<uint64_t>* data_frames_ok) {
  return [fail_at, data_frames_ok](const FinderParams& p, const pipeline::FinderOptions& o) {
    return std::unique_ptr<ClusterFinder>(
        std::make_unique<StickyFaultFinder>(pipeline::make_finder(p, o), fail_at, data_frames_ok));
  };
}

}  // namespace glint::testing
