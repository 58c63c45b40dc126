// The GPU engine on JUNGFRAU frames (G0-only and calibrated) against the CPU backend: the same
// clusters (float values bit for bit when calibrated), per-frame gain counts and pedestal state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <ostream>
#include <span>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "glint/clust_file.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/jungfrau.hpp"
#include "glint/synthetic.hpp"
#include "gpu_test.hpp"
#include "test_data.hpp"

namespace {

using glint::ClusterTable;
using glint::FinderParams;
using glint::PedestalState;
using glint::PixelMode;

/// glint::synth's detector with gain switching in data and dark frames and the invalid code.
struct JungfrauFrames {
  std::vector<uint16_t> dark, data;
  std::vector<uint64_t> numbers;
};

JungfrauFrames jungfrau_frames(glint::FrameShape shape, uint64_t seed, std::size_t dark,
                               std::size_t n) {
  glint::synth::Config c;
  c.shape = shape;
  c.seed = seed;
  c.dark_frames = dark;
  c.photons = std::max(20.0, static_cast<double>(shape.pixels()) / 400.0);
  c.jungfrau = true;
  c.gain_switch_rate = 4e-3;
  c.dark_switch_rate = 1e-3;
  c.invalid_gain_rate = 2e-4;
  const glint::synth::Generator gen(c);
  JungfrauFrames f;
  f.dark.resize(dark * shape.pixels());
  f.data.resize(n * shape.pixels());
  gen.fill_many(0, dark, f.dark);
  gen.fill_many(dark, n, f.data);
  f.numbers.resize(n);
  std::iota(f.numbers.begin(), f.numbers.end(), 9000);
  return f;
}

/// Tables as `glint synth --gain-file --pedestal-file` writes them: G0 pedestal from the dark
/// frames, G1 and G2 from the file.
std::shared_ptr<glint::jungfrau::Calibration> calibration(glint::FrameShape shape, uint64_t seed) {
  auto cal = std::make_shared<glint::jungfrau::Calibration>();
  cal->shape = shape;
  const std::vector<double> maps = glint::synth::jungfrau_gain_maps(shape, seed);
  cal->gain.assign(maps.begin(),
                   maps.begin() + static_cast<std::ptrdiff_t>(3 * shape.pixels()));
  cal->pedestal = glint::synth::jungfrau_stage_pedestals(shape, seed);
  cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
  return cal;
}

void expect_same_bits(const PedestalState& got, const PedestalState& want) {
  ASSERT_EQ(got.count, want.count);
  ASSERT_EQ(0, std::memcmp(got.sum.data(), want.sum.data(), want.sum.size() * sizeof(double)));
  ASSERT_EQ(0, std::memcmp(got.sum2.data(), want.sum2.data(), want.sum2.size() * sizeof(double)));
  const auto gm = got.means(), wm = want.means(), gn = got.noises(), wn = want.noises();
  ASSERT_EQ(0, std::memcmp(gm.data(), wm.data(), wm.size() * sizeof(double)));
  ASSERT_EQ(0, std::memcmp(gn.data(), wn.data(), wn.size() * sizeof(double)));
}

void expect_same(const ClusterTable& got, const ClusterTable& want) {
  ASSERT_EQ(got.value_type(), want.value_type());
  ASSERT_TRUE(got.has_gain_counts());
  ASSERT_EQ(got.n_frames(), want.n_frames());
  for (std::size_t i = 0; i < want.n_frames(); ++i) {
    ASSERT_EQ(got.frames()[i], want.frames()[i]) << "frame record " << i;
    ASSERT_EQ(got.gain_counts()[i], want.gain_counts()[i]) << "gain counts of frame " << i;
  }
  ASSERT_EQ(got.n_clusters(), want.n_clusters());
  for (std::size_t i = 0; i < want.n_clusters(); ++i) {
    ASSERT_EQ(got.x()[i], want.x()[i]) << "cluster " << i;
    ASSERT_EQ(got.y()[i], want.y()[i]) << "cluster " << i;
  }
  // int32 entries, or the float entries' bits.
  ASSERT_TRUE(std::equal(got.data().begin(), got.data().end(), want.data().begin()));
  EXPECT_EQ(got, want);
}

struct Results {
  ClusterTable table;
  PedestalState after_dark, after;
  std::vector<double> adc_pedestal;  ///< calibrated: the ADC pedestal the calibration subtracts
};

/// Dark frames in two pushes, the first half of the data, more dark frames (calibrated: pushed
/// with the fixed ADC pedestal), the rest of the data: the same calls for every backend.
Results run(glint::ClusterFinder& f, const JungfrauFrames& fr) {
  const std::size_t np = f.params().shape.pixels();
  const std::size_t n_dark = fr.dark.size() / np, n = fr.numbers.size(), half = n / 2;
  Results r{glint::make_result_table(f.params()), {}, {}, {}};
  f.push_dark(std::span(fr.dark).first(50 * np));
  f.push_dark(std::span(fr.dark).subspan(50 * np, (n_dark - 60) * np));
  r.after_dark = f.pedestal();
  f.find(std::span(fr.data).first(half * np), std::span(fr.numbers).first(half), r.table);
  f.push_dark(std::span(fr.dark).subspan((n_dark - 10) * np));
  f.find(std::span(fr.data).subspan(half * np), std::span(fr.numbers).subspan(half), r.table);
  r.after = f.pedestal();
  r.adc_pedestal = f.calibration_pedestal();
  return r;
}

struct Case {
  uint32_t rows, cols;
  int size;
  std::size_t frames;
  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << c.rows << "x" << c.cols << " S" << c.size << " " << c.frames << "f";
  }
};

class GpuJungfrau : public ::testing::TestWithParam<Case> {};

TEST_P(GpuJungfrau, SameAsCpuBackend) {
  GLINT_REQUIRE_GPU();
  const Case c = GetParam();
  const glint::FrameShape shape{c.rows, c.cols};
  const JungfrauFrames fr = jungfrau_frames(shape, 40 + c.size, 120, c.frames);
  for (const PixelMode mode : {PixelMode::jungfrau_g0, PixelMode::jungfrau_calibrated}) {
    for (const uint32_t window : {100u, 1000u}) {  // full window (steady) and filling
      FinderParams p;
      p.shape = shape;
      p.cluster_size = c.size;
      p.n_sigma = 5.0;
      p.pedestal_window = window;
      p.pixels = mode;
      if (mode == PixelMode::jungfrau_calibrated) p.calibration = calibration(shape, 7);
      auto cpu = glint::make_cpu_finder(p, 0);
      const Results want = run(*cpu, fr);
      // The frames really have photons (few found while the window is far from full).
      ASSERT_GT(want.table.n_clusters(), window == 100 ? c.frames : 0u);
      uint64_t switched = 0;
      for (const auto& g : want.table.gain_counts()) switched += g.switched();
      ASSERT_GT(switched, 0u);  // and gain switching
      // Several batches with a partial last one; one output slot per frame forces the exact
      // re-run of every batch (the overflow path).
      for (const int capacity : {0, 1}) {
        glint::gpu::GpuFinderOptions o;
        o.batch_frames = 8;
        o.streams = 2;
        o.cluster_capacity = capacity;
        auto gpu = glint::gpu::make_gpu_finder(p, o);
        const Results got = run(*gpu, fr);
        SCOPED_TRACE(std::string(glint::to_string(mode)) + " window " + std::to_string(window) +
                     " capacity " + std::to_string(capacity));
        expect_same_bits(got.after_dark, want.after_dark);
        expect_same(got.table, want.table);
        expect_same_bits(got.after, want.after);
        EXPECT_EQ(got.adc_pedestal, want.adc_pedestal);
        if (capacity == 1) {
          EXPECT_GT(gpu->stats().overflow_reruns, 0u);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GpuFinder, GpuJungfrau,
                         ::testing::Values(Case{512, 1024, 3, 12}, Case{512, 1024, 5, 12},
                                           Case{37, 53, 3, 41}, Case{37, 53, 5, 41}));

// aare's own chain (docs/cluster-finding.md, "Checked against aare") gave these .clust digests
// for the frames of `glint synth --rows 128 --cols 256 --dark 1000 --frames 300 --photons 60
// --jungfrau --gain-switch-rate 2e-3 --dark-switch-rate 2e-4 --invalid-gain-rate 1e-4 --seed 21`
// with the generator's gain maps and G1/G2 pedestals; the GPU engine gives the same bytes.
TEST(GpuJungfrau, SameBytesAsAare) {
  GLINT_REQUIRE_GPU();
  const glint::synth::Config c = glint::testing::aare_jungfrau_frames();
  const glint::testing::SyntheticRun run(c, glint::testing::kAareJungfrauDataFrames);
  const auto path = std::filesystem::temp_directory_path() / "glint_gpu_jungfrau_aare.clust";
  for (const glint::testing::AareDigest& k : glint::testing::kAareJungfrauDigests) {
    FinderParams p;
    p.shape = c.shape;
    p.cluster_size = k.size;
    p.n_sigma = k.n_sigma;
    p.pixels = PixelMode::jungfrau_calibrated;
    p.calibration = calibration(c.shape, c.seed);
    glint::gpu::GpuFinderOptions o;
    o.batch_frames = 64;
    auto gpu = glint::gpu::make_gpu_finder(p, o);
    const ClusterTable out = glint::testing::run_finder(*gpu, run, 100);
    {
      glint::ClustWriter w(path, k.size);
      w.write(out);
      w.close();
    }
    EXPECT_EQ(glint::testing::file_sha256(path), k.sha) << "S=" << k.size << " n=" << k.n_sigma;
  }
  std::filesystem::remove(path);
}

// Streamed batches: the interface's sink gets each batch's table with its gain counts.
TEST(GpuJungfrauStreaming, SinkTablesCarryGainCounts) {
  GLINT_REQUIRE_GPU();
  const glint::FrameShape shape{37, 53};
  const JungfrauFrames fr = jungfrau_frames(shape, 9, 120, 30);
  FinderParams p;
  p.shape = shape;
  p.cluster_size = 3;
  p.pixels = PixelMode::jungfrau_calibrated;
  p.calibration = calibration(shape, 9);
  auto cpu = glint::make_cpu_finder(p, 2);
  const Results want = run(*cpu, fr);
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 5;
  auto gpu = glint::gpu::make_gpu_finder(p, o);
  ClusterTable got = glint::make_result_table(p);
  gpu->set_sink([&](const ClusterTable& batch) { got.append(batch); });
  const std::size_t np = shape.pixels();
  const auto dark = [&](std::size_t f0) {
    std::span<uint16_t> st = gpu->staging();
    std::memcpy(st.data(), fr.dark.data() + f0 * np, 5 * np * sizeof(uint16_t));
    gpu->submit_dark(5);
  };
  // As run(): 110 dark frames (kept until the first data frame fixes the ADC pedestal), the first
  // half of the data, the last 10 dark frames, the rest.
  for (std::size_t f0 = 0; f0 < 110; f0 += 5) dark(f0);
  for (std::size_t f0 = 0; f0 < 30; f0 += 3) {
    if (f0 == 15) {
      dark(110);
      dark(115);
    }
    std::span<uint16_t> st = gpu->staging();
    std::memcpy(st.data(), fr.data.data() + f0 * np, 3 * np * sizeof(uint16_t));
    gpu->submit(std::span(fr.numbers).subspan(f0, 3));
  }
  gpu->flush();
  expect_same(got, want.table);
  expect_same_bits(gpu->pedestal(), want.after);
}

TEST(GpuBatchView, GainCountsAreSummedOverBands) {
  // Two bands of a 2-frame batch without clusters; frame 0 has 1 + 2 pixels in G1, frame 1 one
  // invalid pixel in band 0 and 4 in G2 in band 1.
  const std::vector<uint32_t> counts{0, 0};
  const std::vector<uint32_t> g0{1, 0, 0, 0, 0, 1}, g1{2, 0, 0, 0, 4, 0};
  const std::vector<uint64_t> numbers{3, 4};
  const std::vector<glint::gpu::GpuBandView> bands{{counts, {}, {}, {}, g0},
                                                   {counts, {}, {}, {}, g1}};
  const glint::gpu::GpuBatchView v{numbers, bands};
  ClusterTable t(3, glint::ClusterValues::float32, true);
  glint::gpu::append_clusters(t, v);
  ASSERT_EQ(t.n_frames(), 2u);
  EXPECT_EQ(t.gain_counts()[0], (glint::jungfrau::GainCounts{3, 0, 0}));
  EXPECT_EQ(t.gain_counts()[1], (glint::jungfrau::GainCounts{0, 4, 1}));
  // A table that keeps gain counts needs them from every band.
  const std::vector<glint::gpu::GpuBandView> without{{counts, {}, {}, {}}, {counts, {}, {}, {}}};
  ClusterTable u(3, glint::ClusterValues::float32, true);
  EXPECT_THROW(glint::gpu::append_clusters(u, glint::gpu::GpuBatchView{numbers, without}),
               std::invalid_argument);
}

}  // namespace
