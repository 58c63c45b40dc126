// JUNGFRAU pixels: gain bits, the G0-only finder, calibration, and the CPU backend against the
// reference in both JUNGFRAU modes.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "glint/clust_file.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/jungfrau.hpp"
#include "glint/synthetic.hpp"
#include "test_data.hpp"

namespace {

namespace jf = glint::jungfrau;
using glint::testing::run_finder;
using glint::testing::SyntheticRun;

glint::FinderParams params(glint::FrameShape shape, int size, double n_sigma, uint32_t window,
                           glint::PixelMode mode) {
  glint::FinderParams p;
  p.shape = shape;
  p.cluster_size = size;
  p.n_sigma = n_sigma;
  p.pedestal_window = window;
  p.pixels = mode;
  return p;
}

glint::synth::Config jungfrau_config(glint::FrameShape shape, uint64_t seed) {
  glint::synth::Config c;
  c.shape = shape;
  c.seed = seed;
  c.dark_frames = 120;
  c.photons = 20;
  c.jungfrau = true;
  c.gain_switch_rate = 4e-3;
  c.dark_switch_rate = 1e-3;
  c.invalid_gain_rate = 2e-4;
  return c;
}

/// Per-pixel tables like a module's: G0 about 40 ADU/keV, G1 and G2 negative (the ADC falls as
/// the charge grows), G1/G2 pedestals from a forced-gain pedestal run.
std::shared_ptr<jf::Calibration> calibration(glint::FrameShape shape, uint64_t seed) {
  auto cal = std::make_shared<jf::Calibration>();
  cal->shape = shape;
  const std::size_t np = shape.pixels();
  cal->gain.resize(3 * np);
  cal->pedestal.assign(3 * np, 0.0);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::size_t i = 0; i < np; ++i) {
    cal->gain[i] = 38.0 + 4.0 * u(rng);
    cal->gain[np + i] = -(1.4 + 0.2 * u(rng));
    cal->gain[2 * np + i] = -(0.09 + 0.02 * u(rng));
    cal->pedestal[np + i] = 14000.0 + 50.0 * u(rng);
    cal->pedestal[2 * np + i] = 14500.0 + 50.0 * u(rng);
  }
  cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
  return cal;
}

}  // namespace

TEST(JungfrauPixels, GainBitsAndAdc) {
  EXPECT_EQ(jf::gain_bits(0x3FFF), 0u);
  EXPECT_EQ(jf::gain_bits(16385), 1u);  // 0x4001: G1
  EXPECT_EQ(jf::gain_bits(49153), 3u);  // 0xC001: G2
  EXPECT_EQ(jf::gain_bits(0x8001), 2u);
  EXPECT_EQ(jf::adc(49153), 1);
  EXPECT_EQ(jf::stage(16385), 1);
  EXPECT_EQ(jf::stage(49153), 2);
  EXPECT_EQ(jf::stage(0x8001), 0);  // the invalid code reads as G0, as in aare's get_gain
  EXPECT_TRUE(jf::in_g0(0x3FFF));
  EXPECT_FALSE(jf::in_g0(0x8000));
  const std::vector<uint16_t> f{1, 0x4001, 0x4002, 0xC000, 0x8000, 0x3FFF};
  EXPECT_EQ(jf::count_gains(f), (jf::GainCounts{2, 1, 1}));
  EXPECT_EQ(jf::count_gains(f).switched(), 4u);
}

// Read as raw ADC, a switched pixel is a pedestal of 16385 or 49153 and a photon of ~40,000 ADU:
// glint found about 153k false clusters per JUNGFRAU frame. In G0-only mode no pixel out of G0
// is a cluster centre or enters a pedestal, and every frame counts its switched pixels.
TEST(JungfrauG0Only, SwitchedPixelsAreNeverPhotonsAndAreCounted) {
  const glint::FrameShape shape{64, 96};
  const SyntheticRun run(jungfrau_config(shape, 7), 40);
  const std::size_t np = shape.pixels();

  auto raw = glint::make_reference_finder(params(shape, 3, 5.0, 100, glint::PixelMode::raw));
  const glint::ClusterTable raw_out = run_finder(*raw, run);
  auto g0 = glint::make_reference_finder(params(shape, 3, 5.0, 100, glint::PixelMode::jungfrau_g0));
  const glint::ClusterTable out = run_finder(*g0, run);

  auto centred_out_of_g0 = [&](const glint::ClusterTable& t) {
    std::size_t n = 0;
    for (std::size_t k = 0; k < t.n_frames(); ++k) {
      const auto rec = t.frames()[k];
      const auto f = run.data().subspan(k * np, np);
      for (std::size_t c = rec.first_cluster; c < rec.first_cluster + rec.n_clusters; ++c)
        if (!jf::in_g0(f[std::size_t{t.y()[c]} * shape.cols + t.x()[c]])) ++n;
    }
    return n;
  };
  EXPECT_GT(centred_out_of_g0(raw_out), 100u);  // what raw reading does
  EXPECT_EQ(centred_out_of_g0(out), 0u);
  // Dark frames: a pixel's G0 pedestal counts only the frames where it was in G0; read as raw
  // ADC, one switched dark frame shifts its pedestal by hundreds of ADU.
  const glint::PedestalState ped = g0->pedestal(), raw_ped = raw->pedestal();
  double worst_shift = 0.0;
  std::size_t partial = 0;
  for (std::size_t i = 0; i < np; ++i) {
    uint32_t in_g0 = 0;
    for (std::size_t k = 0; k < run.config.dark_frames; ++k)
      in_g0 += jf::in_g0(run.dark()[k * np + i]) ? 1 : 0;
    EXPECT_EQ(ped.count[i], std::min(in_g0, 100u)) << i;
    partial += in_g0 < run.config.dark_frames ? 1 : 0;
    worst_shift = std::max(worst_shift, std::abs(raw_ped.mean(i) - ped.mean(i)));
    EXPECT_LT(ped.mean(i), 16384.0);
  }
  EXPECT_GT(partial, 100u);
  EXPECT_GT(worst_shift, 100.0);

  ASSERT_TRUE(out.has_gain_counts());
  ASSERT_EQ(out.gain_counts().size(), run.data_frames);
  uint64_t switched = 0;
  for (std::size_t k = 0; k < run.data_frames; ++k) {
    const auto want = jf::count_gains(run.data().subspan(k * np, np));
    EXPECT_EQ(out.gain_counts()[k], want) << "frame " << k;
    switched += want.switched();
  }
  EXPECT_GT(switched, 400u);
}

// The rule on a hand-built frame: an out-of-G0 pixel counts as pedestal level (d = 0) in its
// neighbours' windows, is stored as 0 in their clusters, is never a centre and is never pushed.
TEST(JungfrauG0Only, HandBuiltFrame) {
  const glint::FrameShape shape{5, 5};
  const auto p = params(shape, 3, 5.0, 10, glint::PixelMode::jungfrau_g0);
  std::vector<uint16_t> dark(10 * 25, 100);
  dark[3 * 25 + 2 * 5 + 2] = 0x4000 | 100;  // (2,2) in G1 in one dark frame: not pushed
  std::vector<uint16_t> data(25, 100);
  data[2 * 5 + 1] = 300;                    // photon at x=1, y=2
  data[2 * 5 + 2] = 0xC000 | 9000;          // G2 right of it
  data[4 * 5 + 4] = 0x4000 | 16000;         // G1 in the corner, alone

  for (int cpu = 0; cpu < 2; ++cpu) {
    auto f = cpu ? glint::make_cpu_finder(p, 3) : glint::make_reference_finder(p);
    f->push_dark(dark);
    EXPECT_EQ(f->pedestal().count[12], 9u);
    glint::ClusterTable out = glint::make_result_table(p);
    const uint64_t n = 7;
    f->find(data, std::span(&n, 1), out);
    ASSERT_EQ(out.n_clusters(), 1u) << cpu;
    EXPECT_EQ(out.x()[0], 1);
    EXPECT_EQ(out.y()[0], 2);
    const std::vector<int32_t> want{0, 0, 0, 0, 200, 0, 0, 0, 0};
    EXPECT_EQ(std::vector<int32_t>(out.cluster_data(0).begin(), out.cluster_data(0).end()), want);
    EXPECT_EQ(out.gain_counts()[0], (jf::GainCounts{1, 1, 0}));
    const glint::PedestalState s = f->pedestal();
    EXPECT_EQ(s.sum[12], 900.0);   // not pushed in the data frame either
    EXPECT_EQ(s.sum[24], 1000.0);
    EXPECT_EQ(s.sum[0], 1000.0);   // an ordinary pixel: fast push of 100 into a full window
  }
}

// Calibrated frames: (adc - pedestal[g]) / gain[g], found with float cluster values; the
// pedestal of G0 comes from the dark frames (aare's calculate_pedestal), G1/G2 from the tables.
TEST(JungfrauCalibrated, HandBuiltFrame) {
  const glint::FrameShape shape{4, 4};
  auto cal = std::make_shared<jf::Calibration>();
  cal->shape = shape;
  cal->gain.assign(48, 40.0);
  std::fill(cal->gain.begin() + 16, cal->gain.end(), -2.0);
  cal->pedestal.assign(48, 0.0);
  std::fill(cal->pedestal.begin() + 16, cal->pedestal.end(), 15000.0);
  cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
  auto p = params(shape, 3, 5.0, 4, glint::PixelMode::jungfrau_calibrated);
  p.calibration = cal;

  std::vector<uint16_t> dark(4 * 16);
  for (std::size_t k = 0; k < dark.size(); ++k) dark[k] = (k / 16) % 2 ? 1002 : 1000;
  std::vector<uint16_t> data(16, 1001);
  data[5] = 1401;                 // 10 keV at (1,1)
  data[10] = 0x4000 | 14000;      // G1 at (2,2): (14000 - 15000) / -2 = 500 keV
  for (int cpu = 0; cpu < 2; ++cpu) {
    auto f = cpu ? glint::make_cpu_finder(p, 2) : glint::make_reference_finder(p);
    f->push_dark(dark);
    glint::ClusterTable out = glint::make_result_table(p);
    ASSERT_EQ(out.value_type(), glint::ClusterValues::float32);
    const uint64_t n = 0;
    f->find(data, std::span(&n, 1), out);
    // The keV pedestal: +-0.025 alternating sums to exactly 0 over four dark frames.
    EXPECT_EQ(f->pedestal().sum[0], 0.0);
    ASSERT_EQ(out.n_clusters(), 1u) << cpu;
    EXPECT_EQ(out.x()[0], 2);
    EXPECT_EQ(out.y()[0], 2);
    const float want[9] = {10.0f, 0.0f, 0.0f, 0.0f, 500.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int k = 0; k < 9; ++k) EXPECT_EQ(out.float_value(0, k), want[k]) << k;
    EXPECT_EQ(out.gain_counts()[0], (jf::GainCounts{1, 0, 0}));
  }
}

TEST(JungfrauCalibrated, NeedsDarkFramesAndMatchingTables) {
  const glint::FrameShape shape{8, 8};
  auto p = params(shape, 3, 5.0, 10, glint::PixelMode::jungfrau_calibrated);
  EXPECT_THROW(glint::make_reference_finder(p), std::invalid_argument);  // no tables
  p.calibration = calibration({8, 9}, 1);
  EXPECT_THROW(glint::make_cpu_finder(p, 1), std::invalid_argument);  // other shape
  p.calibration = calibration(shape, 1);
  auto f = glint::make_cpu_finder(p, 1);
  glint::ClusterTable out = glint::make_result_table(p);
  std::vector<uint16_t> data(64, 1000);
  const uint64_t n = 0;
  EXPECT_THROW(f->find(data, std::span(&n, 1), out), std::runtime_error);
  glint::ClusterTable wrong(3);
  f->push_dark(data);
  EXPECT_THROW(f->find(data, std::span(&n, 1), wrong), std::invalid_argument);
}

class JungfrauCpuMatchesReference : public ::testing::TestWithParam<int> {};

TEST_P(JungfrauCpuMatchesReference, BothModes) {
  const int S = GetParam();
  const glint::FrameShape shape{37, 53};
  const SyntheticRun run(jungfrau_config(shape, 30 + S), 40);
  for (const auto mode : {glint::PixelMode::jungfrau_g0, glint::PixelMode::jungfrau_calibrated}) {
    for (const double n_sigma : {5.0, 3.0}) {
      for (const uint32_t window : {100u, 1000u}) {  // full window (steady) and filling
        auto p = params(shape, S, n_sigma, window, mode);
        if (mode == glint::PixelMode::jungfrau_calibrated) p.calibration = calibration(shape, 3);
        auto ref = glint::make_reference_finder(p);
        const glint::ClusterTable want = run_finder(*ref, run);
        ASSERT_GT(want.n_clusters(), 0u);
        for (const unsigned threads : {1u, 3u, 8u}) {
          auto cpu = glint::make_cpu_finder(p, threads);
          EXPECT_EQ(run_finder(*cpu, run, 7), want)
              << glint::to_string(mode) << " n=" << n_sigma << " w=" << window << " t=" << threads;
          EXPECT_EQ(cpu->pedestal(), ref->pedestal());
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ClusterSizes, JungfrauCpuMatchesReference, ::testing::Values(3, 5, 9));

TEST(JungfrauFiles, GainFileLayout) {
  const glint::FrameShape shape{2, 3};
  const auto dir = std::filesystem::temp_directory_path() / "glint_jungfrau_test";
  std::filesystem::create_directories(dir);
  std::vector<double> six(36);
  for (std::size_t k = 0; k < six.size(); ++k) six[k] = 1.0 + static_cast<double>(k);
  const auto path = dir / "gains.bin";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(six.data()), 36 * sizeof(double));
  }
  const auto g = jf::read_gain_file(path, shape, false);
  EXPECT_EQ(g, std::vector<double>(six.begin(), six.begin() + 18));
  const auto hg = jf::read_gain_file(path, shape, true);
  EXPECT_EQ(hg[0], 19.0);  // HG0 (the fourth array) replaces G0
  EXPECT_EQ(hg[6], 7.0);
  try {
    jf::read_gain_file(path, {2, 2}, false);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("gains.bin"), std::string::npos) << e.what();
  }
  jf::write_pedestal_file(dir / "ped.bin", std::span(six).first(18));
  EXPECT_EQ(jf::read_pedestal_file(dir / "ped.bin", shape),
            std::vector<double>(six.begin(), six.begin() + 18));
  std::filesystem::remove_all(dir);
}

TEST(JungfrauFiles, StagePedestalIsAaresCalculatePedestal) {
  jf::StagePedestal p({1, 2});
  p.add(std::vector<uint16_t>{1000, 0x4000 | 14000});
  p.add(std::vector<uint16_t>{1003, 0xC000 | 14501});
  p.add(std::vector<uint16_t>{0x8000 | 998, 0xC000 | 14500});  // invalid reads as G0
  const auto m = p.means();
  EXPECT_EQ(m[0], 3001.0 / 3.0);
  EXPECT_EQ(m[1], 0.0);       // pixel 0 never in G1/G2: 0, as aare's safe_divide gives
  EXPECT_EQ(m[3], 14000.0);
  EXPECT_EQ(m[5], 14500.5);
}

// aare's own chain, built outside the repository (calculate_pedestal over the dark frames, G1/G2
// pedestals from the file, apply_calibration, ClusterFinder<Cluster<float, S, S>, double, double>,
// ClusterFile), gave these .clust digests for the frames of
// `glint synth --rows 128 --cols 256 --dark 1000 --frames 300 --photons 60 --jungfrau
//  --gain-switch-rate 2e-3 --dark-switch-rate 2e-4 --invalid-gain-rate 1e-4 --seed 21`
// (docs/cluster-finding.md). The reference and the CPU backend give the same bytes.
TEST(JungfrauCalibrated, SameBytesAsAare) {
  const glint::synth::Config c = glint::testing::aare_jungfrau_frames();
  const SyntheticRun run(c, glint::testing::kAareJungfrauDataFrames);
  auto cal = std::make_shared<jf::Calibration>();
  cal->shape = c.shape;
  cal->gain = glint::synth::jungfrau_gain_maps(c.shape, c.seed);
  cal->gain.resize(3 * c.shape.pixels());
  cal->pedestal = glint::synth::jungfrau_stage_pedestals(c.shape, c.seed);
  cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
  // Two of the four digests (the reference finder is slow): S 3 at n_sigma 5, S 5 at 3.
  const auto& digests = glint::testing::kAareJungfrauDigests;
  const auto path = std::filesystem::temp_directory_path() / "glint_jungfrau_aare.clust";
  for (const glint::testing::AareDigest& k : {digests[0], digests[3]}) {
    auto p = params(c.shape, k.size, k.n_sigma, 1000, glint::PixelMode::jungfrau_calibrated);
    p.calibration = cal;
    for (int cpu = 0; cpu < 2; ++cpu) {
      auto f = cpu ? glint::make_cpu_finder(p, 4) : glint::make_reference_finder(p);
      const glint::ClusterTable out = run_finder(*f, run, cpu ? 64 : 1u << 30);
      {
        glint::ClustWriter w(path, k.size);
        w.write(out);
        w.close();
      }
      EXPECT_EQ(glint::testing::file_sha256(path), k.sha) << "S=" << k.size << " cpu=" << cpu;
    }
  }
  std::filesystem::remove(path);
}
