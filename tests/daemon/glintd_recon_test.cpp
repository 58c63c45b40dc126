// The reconstruction stage inside real glintd runs over loopback: /entry/reconstruction holds the
// hit images of the file's own clusters and their TV reconstruction, appended during the run
// (visible to a reader then, and kept when the daemon is killed); clusters are unchanged by it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "../pipeline/stream_test_util.hpp"
#include "control_client.hpp"
#include "glintd_rig.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/recon/solver_factory.hpp"
#include "gpu_test.hpp"
#include "process.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;

namespace {

constexpr uint32_t kSize = 64, kDark = 20, kFramesPerSlice = 10, kSlices = 4;
constexpr uint64_t kDataFrames = 190;  // four full volumes of 40 frames and a partial one of 30

struct RunResult {
  pipeline::RunFileContents file;
  json stats;
};

class ReconRig {
 public:
  ReconRig(const std::string& name, const std::string& backend) : c_(name, kSize, kDark) {
    c_.finder = "backend: " + backend + ", batch_frames: 16";
    c_.run_name = "recon";
    c_.extra = "reconstruction: {enabled: true, frames_per_slice: " + std::to_string(kFramesPerSlice) +
               ", slices: " + std::to_string(kSlices) + ", weight: centres, lambda: 0.5, outer: 20, " +
               "tv_inner: 10, backend: " + backend + "}\n";
    c_.write();
    daemon_ = std::make_unique<Process>(c_.glintd(), c_.dir / "glintd.log");
  }
  ~ReconRig() {
    if (daemon_->running()) {
      daemon_->signal(SIGTERM);
      daemon_->wait_exit(20s);
    }
  }

  std::string log() { return daemon_->log(); }

  /// Starts a run with `overrides`; returns its file (empty on failure).
  std::string start(const json& overrides) {
    EXPECT_TRUE(wait_status(c_.control_ep, [](const json&) { return true; }, 10s).value("ok", false)) << log();
    json req{{"command", "start"}, {"overrides", overrides}};
    const json started = control(c_.control_ep, req);
    EXPECT_TRUE(started.value("ok", false)) << started.dump() << log();
    if (!started.value("ok", false)) return {};
    return started["file"].get<std::string>();
  }

  /// The simulator sending kDark dark and `frames` photon frames at `rate` per second.
  std::unique_ptr<Process> sim(uint64_t frames, int rate, const std::string& tag) {
    const auto argv = glint::testing::sim_argv(c_, frames, std::to_string(rate), "12", "11");
    return std::make_unique<Process>(argv, c_.dir / ("sim_" + tag + ".log"));
  }

  /// One run of kDark dark and kDataFrames photon frames, started with `overrides`.
  RunResult run(const json& overrides, uint64_t runs_before) {
    RunResult out;
    const std::string file = start(overrides);
    if (file.empty()) return out;
    auto s = sim(kDataFrames, 500, std::to_string(runs_before));
    EXPECT_EQ(s->wait_exit(30s), 0) << s->log();
    const json st = wait_status(
        c_.control_ep, [&](const json& j) { return j.value("runs_completed", 0u) > runs_before; }, 60s);
    EXPECT_GT(st.value("runs_completed", 0u), runs_before) << st.dump() << log();
    out.stats = control(c_.control_ep, "stats");
    out.file = pipeline::read_run_file(file);
    return out;
  }

  /// Ends the daemon at once (no close of the run file).
  void kill() {
    daemon_->signal(SIGKILL);
    daemon_->wait_exit(10s);
  }

 private:
  glint::testing::GlintdRig c_;
  std::unique_ptr<Process> daemon_;
};

/// The volumes the stage must have been given: hit images (counts of cluster centres) of the
/// data frames in file order, kFramesPerSlice frames per slice, kSlices slices per volume, and
/// with `partial` the last one partial.
std::vector<pipeline::ReconstructionVolume> expected_inputs(const pipeline::RunFileContents& f,
                                                            bool partial) {
  std::vector<std::size_t> data_rows;
  for (std::size_t i = 0; i < f.frames.size(); ++i)
    if ((f.frames[i].flags & ~uint8_t(pipeline::kFlagClusterOverflow)) == 0) data_rows.push_back(i);
  const auto recs = f.clusters.frames();
  const auto xs = f.clusters.x();
  const auto ys = f.clusters.y();
  const std::size_t per_volume = std::size_t(kFramesPerSlice) * kSlices;
  const std::size_t plane = std::size_t(kSize) * kSize;
  std::vector<pipeline::ReconstructionVolume> out;
  for (std::size_t first = 0; first < data_rows.size(); first += per_volume) {
    const std::size_t n = std::min(per_volume, data_rows.size() - first);
    const uint32_t slices = static_cast<uint32_t>((n + kFramesPerSlice - 1) / kFramesPerSlice);
    if (n < per_volume && (!partial || slices < 2)) break;  // never a single slice
    pipeline::ReconstructionVolume v;
    v.nx = v.ny = kSize;
    v.nz = slices;
    v.partial = n < per_volume;
    v.input.assign(plane * slices, 0.0f);
    v.first_frame = f.frames[data_rows[first]].frame_number;
    v.last_frame = f.frames[data_rows[first + n - 1]].frame_number;
    for (std::size_t k = 0; k < n; ++k) {
      const auto& r = recs[data_rows[first + k]];
      float* img = v.input.data() + (k / kFramesPerSlice) * plane;
      for (uint64_t c = r.first_cluster; c < r.first_cluster + r.n_clusters; ++c) img[std::size_t(ys[c]) * kSize + xs[c]] += 1.0f;
    }
    out.push_back(std::move(v));
  }
  return out;
}

/// Every volume in the file: the hit images of its frames in (one of `want`, in order), a TV
/// reconstruction of them out (the same solve on the CPU here, within `tolerance`).
void check_volumes(const pipeline::RunFileContents& f, const std::vector<pipeline::ReconstructionVolume>& want,
                   const std::string& backend, double tolerance) {
  std::size_t next = 0;
  for (const auto& got : f.reconstruction) {
    while (next < want.size() && want[next].first_frame != got.first_frame) ++next;
    ASSERT_LT(next, want.size()) << "a volume starting at frame " << got.first_frame << " was not expected";
    const auto& w = want[next++];
    EXPECT_EQ(got.last_frame, w.last_frame);
    ASSERT_EQ(got.nx, kSize);
    ASSERT_EQ(got.ny, kSize);
    ASSERT_EQ(got.nz, w.nz);
    EXPECT_EQ(got.partial, w.partial);
    EXPECT_EQ(got.input, w.input) << "input volume from " << got.first_frame << " is not the hit image";
    EXPECT_EQ(got.lambda, 0.5);
    EXPECT_EQ(got.outer, 20u);
    EXPECT_EQ(got.tv_inner, 10u);
    EXPECT_TRUE(got.warm_start);
    EXPECT_TRUE(got.nonneg);
    EXPECT_EQ(got.forward, "identity");
    EXPECT_EQ(got.backend.rfind(backend, 0), 0u) << got.backend;
    EXPECT_GT(got.solve_seconds, 0.0);
    // The same solve on the CPU here.
    const tv::Dims d{int(got.nx), int(got.ny), int(got.nz)};
    recon::BackendOptions bo;
    bo.backend = recon::Backend::cpu;
    bo.with_fft = false;
    auto solver = recon::make_reconstructor(d, bo);
    tv::SolverOptions so;
    so.lambda = 0.5f;
    std::vector<float> x(d.voxels());
    solver->solve(got.input, tv::TransferFunction{}, so, x);
    float peak = 0, diff = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      peak = std::max(peak, std::abs(x[i]));
      diff = std::max(diff, std::abs(x[i] - got.output[i]));
      ASSERT_GE(got.output[i], 0.0f) << i;
    }
    EXPECT_LE(diff, tolerance * std::max(peak, 1.0f)) << "output of volume " << got.first_frame;
    EXPECT_NE(got.output, got.input) << "lambda 0.5 must change the hit image";
  }
}

/// The stage's totals in the file and in `stats`, for `want` volumes given to the stage.
void check_totals(const RunResult& r, std::size_t want) {
  const auto& f = r.file;
  ASSERT_TRUE(f.reconstruction_layout.has_value());
  EXPECT_EQ(f.reconstruction_layout->weight, "centres");
  EXPECT_EQ(f.reconstruction_layout->frames_per_slice, kFramesPerSlice);
  EXPECT_EQ(f.reconstruction_layout->slices, kSlices);
  ASSERT_TRUE(f.reconstruction_summary.has_value());
  const auto& sum = *f.reconstruction_summary;
  EXPECT_EQ(sum.frames, kDataFrames);
  EXPECT_EQ(sum.volumes_failed, 0u);
  EXPECT_EQ(sum.volumes_done + sum.volumes_dropped, want);
  EXPECT_GE(sum.volumes_done, 1u);
  EXPECT_EQ(f.reconstruction.size(), sum.volumes_done);
  const json& rs = r.stats["reconstruction"];
  EXPECT_TRUE(rs["enabled"].get<bool>()) << r.stats.dump();
  EXPECT_EQ(rs["frames"].get<uint64_t>(), kDataFrames);
  EXPECT_EQ(rs["volumes_done"].get<uint64_t>(), sum.volumes_done);
  EXPECT_EQ(rs["volumes_dropped"].get<uint64_t>(), sum.volumes_dropped);
  EXPECT_EQ(rs["volumes_failed"].get<uint64_t>(), 0u);
}

/// Runs with reconstruction (the partial volume solved), without it, and with the default
/// (partial volume not solved) on the same daemon, and checks the files.
void check_reconstruction_run(const std::string& name, const std::string& backend, double tolerance) {
  ReconRig rig(name, backend);
  const RunResult with = rig.run(json{{"reconstruction", {{"solve_partial", true}}}}, 0);
  const RunResult without = rig.run(json{{"reconstruction", {{"enabled", false}}}, {"output", {{"run_name", "plain"}}}}, 1);
  const RunResult plain = rig.run(json{{"output", {{"run_name", "full"}}}}, 2);
  const auto& f = with.file;
  ASSERT_FALSE(f.end_time.empty()) << rig.log();
  ASSERT_EQ(glint::testing::count_rows(f, 0), kDataFrames) << rig.log();
  ASSERT_GT(f.clusters.n_clusters(), 0u);

  // Cluster finding does not depend on the stage.
  EXPECT_EQ(f.frames, without.file.frames);
  EXPECT_TRUE(f.clusters == without.file.clusters) << "clusters differ with reconstruction enabled";
  EXPECT_FALSE(without.file.reconstruction_summary.has_value());
  EXPECT_FALSE(without.file.reconstruction_layout.has_value());
  EXPECT_TRUE(without.file.reconstruction.empty());
  EXPECT_FALSE(without.stats["reconstruction"]["enabled"].get<bool>());

  // With solve_partial: four full volumes and the partial one of three slices.
  const auto want = expected_inputs(f, true);
  ASSERT_EQ(want.size(), 5u);
  EXPECT_EQ(want.back().nz, 3u);
  ASSERT_TRUE(f.reconstruction_layout.has_value()) << rig.log();
  EXPECT_TRUE(f.reconstruction_layout->solve_partial);
  EXPECT_EQ(f.reconstruction_layout->nx, kSize);
  EXPECT_EQ(f.reconstruction_layout->slices, kSlices);
  EXPECT_EQ(f.reconstruction_layout->backend, backend);
  check_totals(with, want.size());
  check_volumes(f, want, backend, tolerance);

  // By default the partial volume is not solved: only the four full ones.
  ASSERT_FALSE(plain.file.end_time.empty()) << rig.log();
  EXPECT_TRUE(plain.file.clusters == f.clusters);
  const auto want_full = expected_inputs(plain.file, false);
  ASSERT_EQ(want_full.size(), 4u);
  ASSERT_TRUE(plain.file.reconstruction_layout.has_value());
  EXPECT_FALSE(plain.file.reconstruction_layout->solve_partial);
  check_totals(plain, want_full.size());
  for (const auto& v : plain.file.reconstruction) EXPECT_FALSE(v.partial) << v.first_frame;
  check_volumes(plain.file, want_full, backend, tolerance);
}

}  // namespace

TEST(GlintdReconstruction, CpuRunWritesHitImagesAndTheirReconstruction) {
  check_reconstruction_run("recon_cpu", "cpu", 1e-5);
}

TEST(GlintdReconstruction, GpuRunWritesHitImagesAndTheirReconstruction) {
  GLINT_REQUIRE_GPU();
  check_reconstruction_run("recon_gpu", "gpu", 1e-3);
}

TEST(GlintdReconstruction, MissingMaskFileIsCountedAndTheRunGoesOn) {
  ReconRig rig("recon_badmask", "cpu");
  const RunResult r = rig.run(json{{"reconstruction", {{"forward", "mask:/nonexistent/m.h5:/mask"}}}}, 0);
  // Cluster finding is not affected: the run ends normally with every frame.
  EXPECT_EQ(r.stats.value("error", std::string()), "") << r.stats.dump();
  EXPECT_EQ(glint::testing::count_rows(r.file, 0), kDataFrames);
  EXPECT_FALSE(r.file.end_time.empty());
  EXPECT_EQ(r.stats["reconstruction"]["volumes_failed"].get<uint64_t>(), 1u) << r.stats.dump();
  EXPECT_EQ(r.stats["reconstruction"]["volumes_done"].get<uint64_t>(), 0u);
  ASSERT_TRUE(r.file.reconstruction_summary.has_value());
  EXPECT_EQ(r.file.reconstruction_summary->volumes_failed, 1u);
  EXPECT_TRUE(r.file.reconstruction.empty());
  const std::string log = rig.log();
  EXPECT_NE(log.find("reconstruction disabled for this run"), std::string::npos) << log;
  EXPECT_NE(log.find("/nonexistent/m.h5"), std::string::npos) << log;
}

// A reader sees volumes appear in the run file while the run goes on, and they stay readable
// when the daemon is killed in the middle of the run.
TEST(GlintdReconstruction, VolumesAppearDuringTheRunAndSurviveAKill) {
  ReconRig rig("recon_live", "cpu");
  const std::string file = rig.start(json{{"output", {{"flush_interval_ms", 50}}}});
  ASSERT_FALSE(file.empty());
  auto sim = rig.sim(20000, 100, "live");  // 200 s: the run is still going when it is killed
  std::size_t seen = 0;
  std::vector<std::size_t> counts;
  const auto deadline = std::chrono::steady_clock::now() + 40s;
  while (seen < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    if (!fs::exists(file)) continue;
    pipeline::RunFileContents live;
    try {
      live = pipeline::read_run_file(file);
    } catch (const pipeline::OutputError&) {
      continue;  // created but not yet in SWMR mode
    }
    ASSERT_TRUE(live.end_time.empty()) << "the run ended early: " << rig.log();
    ASSERT_TRUE(live.reconstruction_layout.has_value());
    if (live.reconstruction.size() != seen) counts.push_back(live.reconstruction.size());
    seen = live.reconstruction.size();
  }
  ASSERT_GE(seen, 3u) << "no volumes appeared during the run: " << rig.log();
  EXPECT_GE(counts.size(), 2u) << "volumes should appear one after another, not at once";
  rig.kill();
  const auto f = pipeline::read_run_file(file);
  EXPECT_TRUE(f.end_time.empty());
  ASSERT_GE(f.reconstruction.size(), seen);
  // Every volume whose frames are in the file is the hit image of the file's own clusters.
  const auto want = expected_inputs(f, false);
  std::vector<pipeline::ReconstructionVolume> covered;
  for (const auto& v : f.reconstruction)
    if (!f.frames.empty() && v.last_frame <= f.frames.back().frame_number) covered.push_back(v);
  ASSERT_GE(covered.size(), 1u);
  pipeline::RunFileContents part = f;
  part.reconstruction = covered;
  check_volumes(part, want, "cpu", 1e-5);
  ASSERT_TRUE(f.reconstruction_summary.has_value());
  EXPECT_EQ(f.reconstruction_summary->volumes_done, f.reconstruction.size());
}
