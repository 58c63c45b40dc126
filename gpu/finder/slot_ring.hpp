#pragma once
// The batch slots' host side: pinned staging for one batch of whole frames per slot, used in
// turn, and the ring of device frame buffers (one more than the slots, so that the next batch's
// copy may start before the batch that last used its slot has been delivered). Each slot's device
// side (streams, events, result buffers) is a LaneSlot on every GPU. Internal to the GPU finder.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda_owners.hpp"

namespace glint::gpu::detail {

struct HostSlot {
  PinnedBuffer<uint16_t> staging;
  std::vector<uint64_t> numbers;  // frame numbers of the batch in flight
  int n_frames = 0;
  int fb = 0;                // the frame buffer its frames went to
  bool narrow = false;       // its values come back as int16
  bool in_flight = false;
  bool dark_upload = false;  // submit_dark's copy of the staging may still be running
  uint64_t sequence = 0;     // batches submitted before this one
  double host_submit = 0;    // timeline: when it was submitted
};

class SlotRing {
 public:
  SlotRing() = default;
  /// `slots` slots of staging for `batch` frames of `pixels` pixels each.
  SlotRing(int slots, std::size_t pixels, int batch) : slots_(static_cast<std::size_t>(slots)) {
    for (HostSlot& s : slots_) {
      s.staging = PinnedBuffer<uint16_t>(pixels * static_cast<std::size_t>(batch));
      s.numbers.reserve(static_cast<std::size_t>(batch));
    }
  }
  int size() const { return static_cast<int>(slots_.size()); }
  HostSlot& operator[](int si) { return slots_[static_cast<std::size_t>(si)]; }
  /// The slot the next batch (or dark batch) takes.
  int next() const { return next_; }
  /// Passes the turn to the following slot.
  void advance() { next_ = (next_ + 1) % size(); }
  /// The i-th slot counted from the next one: i = 0, 1, ... is the oldest batch first.
  int oldest(int i) const { return (next_ + i) % size(); }
  /// The frame buffer of the next batch: the one used size()+1 batches ago, delivered by now.
  int take_frame_buffer() {
    const int fb = next_fb_;
    next_fb_ = (next_fb_ + 1) % (size() + 1);
    return fb;
  }

 private:
  std::vector<HostSlot> slots_;
  int next_ = 0;
  int next_fb_ = 0;
};

}  // namespace glint::gpu::detail
