#include "overflow_rerun.hpp"

#include <algorithm>

namespace glint::gpu::detail {

void OverflowRerun::run(const FindSetup& setup, std::span<Lane> lanes, int si, int fb, int n,
                        int batch, uint32_t chunk, std::vector<GpuBandView>& bands) {
  const std::size_t n_lanes = lanes.size();
  const std::size_t np = setup.params.shape.pixels();
  const std::size_t cols = setup.params.shape.cols;
  const int values = setup.params.cluster_size * setup.params.cluster_size;
  const bool gains = setup.params.pixels != PixelMode::raw;
  state_.resize(n_lanes);
  out_.resize(n_lanes);
  dout_.resize(n_lanes);
  layout_.resize(n_lanes);
  max_handed_out_ = 0;
  // Sized from what the first run's find blocks took (its output on the device may already
  // hold the next batch's): the same blocks take the same runs again.
  for (std::size_t li = 0; li < n_lanes; ++li) {
    Lane& lane = lanes[li];
    DeviceGuard g(lane.plan.device);
    const LaneSlot& ls = lane.slots[si];
    const uint64_t need = std::max<uint64_t>(ls.results.handed_out(), 1);
    max_handed_out_ = std::max(max_handed_out_, need);
    layout_[li] = out_layout(batch, lane.plan.segments(), need, values, gains);
    out_[li] = PinnedBuffer<unsigned char>(layout_[li].bytes);
    dout_[li] = DeviceBuffer<unsigned char>(layout_[li].bytes);
    StreamView s = lane.compute;
    zero_output(dout_[li].get(), layout_[li], s);
    if (!state_[li])
      state_[li] = PedestalBuffers(np, lane.plan.segments(), lane.plan.scratch_bytes(), s);
    // Start state: the snapshot, as parity 0, frame counter 0.
    const std::size_t off = static_cast<std::size_t>(lane.plan.fr0) * cols;
    const std::size_t cnt = static_cast<std::size_t>(lane.plan.frame_rows()) * cols;
    auto copy = [&](double* dst, const double* src) {
      GLINT_CUDA_CHECK(cudaMemcpyAsync(dst + off, src + off, cnt * sizeof(double),
                                       cudaMemcpyDeviceToDevice, s.get()));
    };
    PedestalBuffers& st = state_[li];
    const PedestalSnapshot& snap = lane.fbs[fb].snapshot;
    copy(st.sum[0].get(), snap.sum.get());
    copy(st.sum2[0].get(), snap.sum2.get());
    copy(st.mean[0].get(), snap.mean.get());
    copy(st.noise.get(), snap.noise.get());
    st.progress.zero(s);
    st.frames_done.zero(s);
    st.blocks_done.zero(s);
    s.synchronize();
  }
  // Every GPU's re-run state must be in place before any re-run kernel reads a neighbour's.
  std::vector<const PedestalBuffers*> states(n_lanes);
  for (std::size_t li = 0; li < n_lanes; ++li) states[li] = &state_[li];
  for (std::size_t li = 0; li < n_lanes; ++li) {
    Lane& lane = lanes[li];
    DeviceGuard g(lane.plan.device);
    FindLaunch p =
        make_find_launch(setup, lanes, li, states, lane.fbs[fb].frames.get(), n);
    bind_output(p, dout_[li].get(), layout_[li], /*narrow=*/false, chunk);
    launch_find(p, lane.compute);
    GLINT_CUDA_CHECK(cudaMemcpyAsync(out_[li].get(), dout_[li].get(), layout_[li].bytes,
                                     cudaMemcpyDeviceToHost, lane.compute.get()));
  }
  bands.resize(n_lanes);
  for (std::size_t li = 0; li < n_lanes; ++li) {
    DeviceGuard g(lanes[li].plan.device);
    lanes[li].compute.synchronize();
    bands[li] = band_view(out_[li].get(), layout_[li], n, handed_out(out_[li].get()), values,
                          /*narrow=*/false);
  }
}

void OverflowRerun::release(std::span<const Lane> lanes) {
  for (std::size_t li = 0; li < state_.size() && li < lanes.size(); ++li) {
    DeviceGuard g(lanes[li].plan.device);
    state_[li] = PedestalBuffers();
    dout_[li] = DeviceBuffer<unsigned char>();
  }
}

}  // namespace glint::gpu::detail
