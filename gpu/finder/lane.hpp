#pragma once
// What the GPU finder holds on each GPU (a lane): its plan, streams, pedestal state, frame buffers
// and its part of every batch slot. Internal to the GPU finder.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "cuda_owners.hpp"
#include "find_kernels.hpp"
#include "lane_plan.hpp"
#include "pedestal_buffers.hpp"
#include "result_buffers.hpp"

namespace glint::gpu::detail {

/// One batch slot on one GPU.
struct LaneSlot {
  Stream copy{StreamPriority::high};  // host-to-device copies
  Stream out_stream;                  // device-to-host copies of the results
  Event in_done, found, done;
  Event d0{true}, d1{true};  // timeline: result copy
  int fb = 0;                // frame buffer of the batch whose find was enqueued last
  ResultBuffers results;
  std::vector<GraphExec> graphs;  // the find work of a full batch, per frame buffer
  bool graphs_narrow = false;     // whether the graphs write int16 values
};

/// What belongs to the batch on one frame buffer until it is delivered (a batch's find is
/// enqueued before the batch that last used its slot is collected, so this cannot be the slot's).
struct FrameBufferBatch {
  DeviceBuffer<uint16_t> frames;
  PedestalSnapshot snapshot;  // the state at the start of the batch (an overflow re-runs from it)
  Event t0{true}, t1{true};   // around the find work
  Event up0{true}, up1{true};  // timeline: frame copy
  Event free;                 // the find that last read the frames has run
};

struct Lane {
  LanePlan plan;
  Stream compute{StreamPriority::high};
  PedestalBuffers live;
  DeviceBuffer<uint16_t> dark_frames;
  DeviceBuffer<double> cal_pedestal, cal_gain;  // calibrated JUNGFRAU: the whole frame's tables
  std::vector<FrameBufferBatch> fbs;  // slots + 1 frame buffers
  uint64_t copy_clusters = 0;   // clusters per batch the result copies bring back (0: all)
  Event origin{true};           // timeline: time zero
  std::vector<LaneSlot> slots;
};

/// What every find launch of a finder shares.
struct FindSetup {
  FinderParams params;
  cluster_math::Thresholds thresholds{};
};

/// The find launch of lane `li` over n frames in `frames`, on the state `states[l]` of each lane l
/// (the live state, or a re-run's; the count arrays are always the live ones); its output is
/// bound separately (ResultBuffers::bind, bind_output).
FindLaunch make_find_launch(const FindSetup& setup, std::span<const Lane> lanes, std::size_t li,
                            std::span<const PedestalBuffers* const> states,
                            const uint16_t* frames, int n);

/// Copies rows [fr0, fr1) of n whole frames from pinned `staging` into `dst` on `s`.
void upload_rows(const FinderParams& params, const LanePlan& lane, uint16_t* dst,
                 const uint16_t* staging, std::size_t n, StreamView s);

}  // namespace glint::gpu::detail
