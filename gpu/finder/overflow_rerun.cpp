#include "overflow_rerun.hpp"

#include <algorithm>
#include <cstring>

namespace glint::gpu::detail {

void OverflowRerun::run(const FindSetup& setup, std::span<Lane> lanes, int si, int fb, int n,
                        int batch, std::vector<GpuBandView>& bands) {
  const std::size_t n_lanes = lanes.size();
  const std::size_t np = setup.params.shape.pixels();
  const std::size_t cols = setup.params.shape.cols;
  const int values = setup.params.cluster_size * setup.params.cluster_size;
  const bool gains = setup.params.pixels != PixelMode::raw;
  state_.resize(n_lanes);
  regions_.resize(n_lanes);
  out_.resize(n_lanes);
  capacity_.assign(n_lanes, 0);
  max_region_ = 0;
  max_frame_total_ = 0;
  // Sizes from the true counts of the overflowed run (its regions on the device already hold the
  // next batch's): a region as large as the largest that did not fit, or as the slot's regions.
  for (std::size_t li = 0; li < n_lanes; ++li) {
    Lane& lane = lanes[li];
    DeviceGuard g(lane.plan.device);
    const LaneSlot& ls = lane.slots[si];
    const uint32_t mx =
        std::max({1u, ls.results.max_region_over(), ls.results.regions().capacity()});
    uint64_t tot = 0;
    for (uint32_t c : ls.results.frame_counts(n)) {
      tot += c;
      max_frame_total_ = std::max<uint64_t>(max_frame_total_, c);
    }
    max_region_ = std::max(max_region_, mx);
    regions_[li] =
        RegionBuffers(static_cast<std::size_t>(n), lane.plan.segments(), mx, values, gains);
    capacity_[li] = std::max<uint64_t>(tot, 1);
    out_[li] = PinnedBuffer<unsigned char>(out_layout(batch, capacity_[li], values, gains).bytes);
    StreamView s = lane.compute;
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
    regions_[li].zero(n, s);
    s.synchronize();
  }
  // Every GPU's re-run state must be in place before any re-run kernel reads a neighbour's.
  std::vector<const PedestalBuffers*> states(n_lanes);
  for (std::size_t li = 0; li < n_lanes; ++li) states[li] = &state_[li];
  for (std::size_t li = 0; li < n_lanes; ++li) {
    Lane& lane = lanes[li];
    DeviceGuard g(lane.plan.device);
    StreamView s = lane.compute;
    // The overflow flag and largest region (never set here).
    std::memset(out_[li].get(), 0, 2 * sizeof(uint32_t));
    launch_find(make_find_launch(setup, lanes, li, states, lane.fbs[fb].frames.get(), n,
                                 regions_[li]),
                s);
    const OutLayout l = out_layout(batch, capacity_[li], values, gains);
    launch_pack(regions_[li].pack(n, lane.plan.segments(), values, l, out_[li].get(),
                                  capacity_[li]),
                64, s);
  }
  bands.resize(n_lanes);
  for (std::size_t li = 0; li < n_lanes; ++li) {
    DeviceGuard g(lanes[li].plan.device);
    lanes[li].compute.synchronize();
    bands[li] =
        band_view(out_[li].get(), out_layout(batch, capacity_[li], values, gains), n, values);
  }
}

void OverflowRerun::release(std::span<const Lane> lanes) {
  for (std::size_t li = 0; li < state_.size() && li < lanes.size(); ++li) {
    DeviceGuard g(lanes[li].plan.device);
    state_[li] = PedestalBuffers();
    regions_[li] = RegionBuffers();
  }
}

}  // namespace glint::gpu::detail
