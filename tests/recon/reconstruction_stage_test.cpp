#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <future>
#include <mutex>
#include <vector>

#include "glint/recon/forward_model.hpp"
#include "glint/recon/reconstruction_stage.hpp"

using glint::ClusterTable;
using glint::recon::ReconstructionStage;
using glint::recon::StageOptions;
using glint::recon::StageResult;

namespace {

StageOptions cpu_options(int w, int h, std::uint32_t fps, std::uint32_t slices, float lambda) {
  StageOptions o;
  o.width = w;
  o.height = h;
  o.frames_per_slice = fps;
  o.slices = slices;
  o.solver.lambda = lambda;
  o.solver.outer = 5;
  o.solver.tv_inner = 5;
  o.backend.backend = glint::recon::Backend::cpu;
  o.backend.threads = 1;
  return o;
}

/// Frame f gets one 3x3 cluster at (f % w, f % h) with values summing to 9 * (f + 1).
ClusterTable frames(std::uint64_t first, int n, int w, int h) {
  ClusterTable t(3);
  for (int k = 0; k < n; ++k) {
    const std::uint64_t f = first + k;
    t.begin_frame(f);
    std::vector<int32_t> v(9, int32_t(f + 1));
    t.add_cluster(uint16_t(f % w), uint16_t(f % h), v);
    if (f % 2 == 0) t.add_cluster(uint16_t(w + 3), 0, v);  // outside the image: ignored
  }
  return t;
}

}  // namespace

TEST(ReconstructionStage, StacksHitImagesIntoSlicesAndReconstructs) {
  std::vector<StageResult> got;
  std::mutex mu;
  {
    ReconstructionStage stage(cpu_options(8, 6, 2, 3, 0.0f), [&](StageResult&& r) {
      std::lock_guard lock(mu);
      got.push_back(std::move(r));
    });
    stage.add(frames(100, 4, 8, 6));
    stage.add(frames(104, 3, 8, 6));  // 7 frames: one volume of 6, one frame left over
    stage.wait_idle();
    EXPECT_EQ(stage.stats().frames, 7u);
    EXPECT_EQ(stage.stats().volumes_done, 1u);
  }
  ASSERT_EQ(got.size(), 1u);
  const StageResult& r = got[0];
  EXPECT_EQ(r.first_frame, 100u);
  EXPECT_EQ(r.last_frame, 105u);
  ASSERT_EQ(r.input.dims, (glint::tv::Dims{8, 6, 3}));
  std::vector<float> expect(8 * 6 * 3, 0.0f);
  for (std::uint64_t f = 100; f < 106; ++f) {
    const std::size_t slice = (f - 100) / 2;
    expect[slice * 48 + (f % 6) * 8 + f % 8] += 1.0f;
  }
  EXPECT_EQ(r.input.data, expect);
  // lambda = 0: the reconstruction is the input (non-negative already).
  for (std::size_t i = 0; i < expect.size(); ++i) EXPECT_NEAR(r.output.data[i], expect[i], 1e-6f);
  EXPECT_NE(r.backend.find("cpu"), std::string::npos);
}

TEST(ReconstructionStage, SignalWeightAndPartialFlush) {
  StageOptions o = cpu_options(8, 6, 2, 4, 0.0f);
  o.weight = glint::recon::HitWeight::signal;
  std::vector<StageResult> got;
  ReconstructionStage stage(o, [&](StageResult&& r) { got.push_back(std::move(r)); });
  stage.add(frames(0, 3, 8, 6));  // slices: {0, 1}, {2}
  stage.flush();
  stage.wait_idle();
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].input.dims.nz, 2);
  EXPECT_EQ(got[0].input.data[0], 9.0f);            // frame 0 at (0, 0): 9 * 1
  EXPECT_EQ(got[0].input.data[1 * 8 + 1], 18.0f);   // frame 1 at (1, 1)
  EXPECT_EQ(got[0].input.data[48 + 2 * 8 + 2], 27.0f);  // frame 2, second slice
  EXPECT_EQ(got[0].last_frame, 2u);
}

TEST(ReconstructionStage, BusyWorkerDropsVolumesInsteadOfWaiting) {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> delivered{0};
  ReconstructionStage stage(cpu_options(8, 6, 1, 2, 0.0f), [&](StageResult&&) {
    gate.wait();
    ++delivered;
  });
  // Five volumes of two frames: one is being reconstructed (held in the sink), two wait, and
  // at least one is dropped; add() returns at once every time.
  for (int v = 0; v < 5; ++v) stage.add(frames(2 * v, 2, 8, 6));
  const auto s = stage.stats();
  EXPECT_GE(s.volumes_dropped, 1u);
  EXPECT_LE(s.volumes_dropped, 3u);  // 3 when the worker had not yet taken the first
  release.set_value();
  stage.wait_idle();
  EXPECT_EQ(stage.stats().volumes_done + stage.stats().volumes_dropped, 5u);
  EXPECT_EQ(delivered.load(), int(stage.stats().volumes_done));
}

TEST(ReconstructionStage, TvSmoothsTheHitVolume) {
  std::vector<StageResult> got;
  ReconstructionStage stage(cpu_options(16, 12, 3, 4, 0.3f),
                            [&](StageResult&& r) { got.push_back(std::move(r)); });
  stage.add(frames(0, 12, 16, 12));
  stage.wait_idle();
  ASSERT_EQ(got.size(), 1u);
  const auto& r = got[0];
  EXPECT_LT(glint::recon::total_variation(r.output.dims, r.output.data),
            0.8 * glint::recon::total_variation(r.input.dims, r.input.data));
}

TEST(ReconstructionStage, BadOptionsAreRefused) {
  EXPECT_THROW(ReconstructionStage(cpu_options(8, 6, 1, 1, 0.1f), [](StageResult&&) {}),
               std::invalid_argument);
  EXPECT_THROW(ReconstructionStage(cpu_options(1, 6, 1, 4, 0.1f), [](StageResult&&) {}),
               std::invalid_argument);
  EXPECT_THROW(glint::recon::parse_hit_weight("photons"), std::invalid_argument);
  // The forward model is built (and checked) when the stage starts, not at its first volume.
  auto bad_model = cpu_options(8, 6, 4, 4, 0.1f);
  bad_model.forward = "mask:/nonexistent/mask.h5:/mask";
  EXPECT_THROW(ReconstructionStage(bad_model, [](StageResult&&) {}), std::invalid_argument);
  bad_model.forward = "gaussian:1,1";
  EXPECT_THROW(ReconstructionStage(bad_model, [](StageResult&&) {}), std::invalid_argument);
}

// Calibrated JUNGFRAU clusters hold float values (keV): the signal weight sums them as floats.
TEST(ReconstructionStage, SignalWeightOfFloatClusters) {
  StageOptions o = cpu_options(8, 6, 1, 2, 0.0f);
  o.weight = glint::recon::HitWeight::signal;
  std::vector<StageResult> got;
  ReconstructionStage stage(o, [&](StageResult&& r) { got.push_back(std::move(r)); });
  glint::ClusterTable t(3, glint::ClusterValues::float32);
  t.begin_frame(0);
  const std::vector<float> v{0.5f, 0.25f, 0.0f, 0.0f, 8.25f, 0.0f, 0.0f, 0.0f, -1.0f};
  t.add_cluster(3, 2, std::span<const float>(v));
  t.begin_frame(1);  // the second slice: the volume is complete
  stage.add(t);
  stage.wait_idle();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].input.data[2 * 8 + 3], 8.0f);
}
