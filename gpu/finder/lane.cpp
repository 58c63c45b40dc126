#include "lane.hpp"

namespace glint::gpu::detail {

FindLaunch make_find_launch(const FindSetup& setup, std::span<const Lane> lanes, std::size_t li,
                            std::span<const PedestalBuffers* const> states,
                            const uint16_t* frames, int n) {
  const LanePlan& lane = lanes[li].plan;
  FindLaunch p;
  p.rows = setup.params.shape.rows;
  p.cols = setup.params.shape.cols;
  p.band_begin = lane.r0;
  p.band_end = lane.r1;
  p.frame_row0 = lane.fr0;
  p.frame_rows = lane.frame_rows();
  p.cluster_size = setup.params.cluster_size;
  p.segment_max = lane.segment_max;
  p.threads = lane.threads;
  p.resident = lane.resident;
  p.blocks = lane.blocks;
  p.chunks = lane.chunks;
  p.segments = lane.segments();
  p.spill = lane.spill;
  p.scratch = states[li]->scratch.get();
  p.scratch_stride = lane.scratch_stride;
  p.window = setup.params.pedestal_window;
  p.thresholds = setup.thresholds;
  p.own = states[li]->arrays(lanes[li].live.count.get());
  p.above = p.own;
  p.below = p.own;
  if (li > 0) {
    const Lane& up = lanes[li - 1];
    p.above = states[li - 1]->arrays(up.live.count.get());
    p.progress_above = states[li - 1]->progress.get() + (up.plan.segments() - 1);
  }
  if (li + 1 < lanes.size()) {
    const Lane& down = lanes[li + 1];
    p.below = states[li + 1]->arrays(down.live.count.get());
    p.progress_below = states[li + 1]->progress.get();
  }
  p.progress = states[li]->progress.get();
  p.frames_done = states[li]->frames_done.get();
  p.blocks_done = states[li]->blocks_done.get();
  p.frames = frames;
  p.n_frames = static_cast<uint32_t>(n);
  p.pixels = setup.params.pixels;
  p.cal_pedestal = lanes[li].cal_pedestal.get();
  p.cal_gain = lanes[li].cal_gain.get();
  return p;
}

void upload_rows(const FinderParams& params, const LanePlan& lane, uint16_t* dst,
                 const uint16_t* staging, std::size_t n, StreamView s) {
  const std::size_t cols = params.shape.cols;
  const std::size_t np = params.shape.pixels();
  const std::size_t rows_here = lane.frame_rows();
  if (rows_here == params.shape.rows) {
    GLINT_CUDA_CHECK(cudaMemcpyAsync(dst, staging, n * np * sizeof(uint16_t),
                                     cudaMemcpyHostToDevice, s.get()));
  } else {
    GLINT_CUDA_CHECK(cudaMemcpy2DAsync(dst, rows_here * cols * sizeof(uint16_t),
                                       staging + lane.fr0 * cols, np * sizeof(uint16_t),
                                       rows_here * cols * sizeof(uint16_t), n,
                                       cudaMemcpyHostToDevice, s.get()));
  }
}

}  // namespace glint::gpu::detail
