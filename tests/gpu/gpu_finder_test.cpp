// The GPU engine against the CPU reference: byte-identical clusters and pedestal state for every
// batch size, stream count and GPU count, crowded frames, n_sigma 3, all cluster sizes, overflow.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <memory>
#include <numeric>
#include <ostream>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/synthetic.hpp"
#include "gpu_test.hpp"

namespace {

using glint::ClusterTable;
using glint::FinderParams;
using glint::PedestalState;

struct Scenario {
  uint32_t rows, cols;
  int size;
  double n_sigma;
  std::size_t frames, photons;
  uint64_t seed;
  auto key() const { return std::tie(rows, cols, size, n_sigma, frames, photons, seed); }
  bool operator<(const Scenario& o) const { return key() < o.key(); }
  friend void PrintTo(const Scenario& s, std::ostream* os) {
    *os << s.rows << "x" << s.cols << " S" << s.size << " n" << s.n_sigma << " " << s.frames
        << "f " << s.photons << "ph";
  }
};

struct Data {
  FinderParams params;
  std::vector<uint16_t> dark, frames;
  std::vector<uint64_t> numbers;
  ClusterTable expected{3};
  PedestalState expected_pedestal;
  PedestalState mid_pedestal;  // after the first half of the frames
};

/// Frames of glint::synth's detector (per-pixel pedestal and noise, charge-shared photons,
/// defects, drift, ties, a crowded frame every 50): `dark` dark frames, then `n` data frames.
struct SynthFrames {
  std::vector<uint16_t> dark, data;
};

SynthFrames synth_frames(glint::FrameShape shape, uint64_t seed, std::size_t dark, std::size_t n,
                         double photons) {
  glint::synth::Config c;
  c.shape = shape;
  c.seed = seed;
  c.dark_frames = dark;
  c.photons = photons;
  const glint::synth::Generator gen(c);
  SynthFrames f;
  f.dark.resize(dark * shape.pixels());
  f.data.resize(n * shape.pixels());
  gen.fill_many(0, dark, f.dark);
  gen.fill_many(dark, n, f.data);
  return f;
}

const Data& data(const Scenario& s) {
  static std::map<Scenario, Data> cache;
  auto it = cache.find(s);
  if (it != cache.end()) return it->second;
  Data d;
  d.params.shape = {s.rows, s.cols};
  d.params.cluster_size = s.size;
  d.params.n_sigma = s.n_sigma;
  SynthFrames src = synth_frames(d.params.shape, s.seed, 1000, s.frames, double(s.photons));
  d.dark = std::move(src.dark);
  d.frames = std::move(src.data);
  d.numbers.resize(s.frames);
  std::iota(d.numbers.begin(), d.numbers.end(), 5000);
  auto ref = glint::make_reference_finder(d.params);
  ref->push_dark(d.dark);
  d.expected = ClusterTable(s.size);
  const std::size_t np = d.params.shape.pixels();
  const std::size_t half = s.frames / 2;
  ref->find(std::span(d.frames).first(half * np), std::span(d.numbers).first(half), d.expected);
  d.mid_pedestal = ref->pedestal();
  ref->find(std::span(d.frames).subspan(half * np), std::span(d.numbers).subspan(half),
            d.expected);
  d.expected_pedestal = ref->pedestal();
  return cache.emplace(s, std::move(d)).first->second;
}

void expect_same(const ClusterTable& got, const ClusterTable& want) {
  ASSERT_EQ(got.n_frames(), want.n_frames());
  ASSERT_EQ(got.n_clusters(), want.n_clusters());
  for (std::size_t i = 0; i < want.n_frames(); ++i)
    ASSERT_EQ(got.frames()[i], want.frames()[i]) << "frame record " << i;
  for (std::size_t i = 0; i < want.n_clusters(); ++i) {
    ASSERT_EQ(got.x()[i], want.x()[i]) << "cluster " << i;
    ASSERT_EQ(got.y()[i], want.y()[i]) << "cluster " << i;
  }
  ASSERT_TRUE(std::equal(got.data().begin(), got.data().end(), want.data().begin()));
}

void expect_same_bits(const PedestalState& got, const PedestalState& want) {
  ASSERT_EQ(got.count, want.count);
  ASSERT_EQ(0, std::memcmp(got.sum.data(), want.sum.data(), want.sum.size() * sizeof(double)));
  ASSERT_EQ(0, std::memcmp(got.sum2.data(), want.sum2.data(), want.sum2.size() * sizeof(double)));
  const auto gm = got.means(), wm = want.means(), gn = got.noises(), wn = want.noises();
  ASSERT_EQ(0, std::memcmp(gm.data(), wm.data(), wm.size() * sizeof(double)));
  ASSERT_EQ(0, std::memcmp(gn.data(), wn.data(), wn.size() * sizeof(double)));
}

glint::gpu::GpuFinderStats run_gpu(const Scenario& s, glint::gpu::GpuFinderOptions o,
                                   ClusterTable& out, PedestalState* pedestal = nullptr) {
  const Data& d = data(s);
  auto f = glint::gpu::make_gpu_finder(d.params, o);
  f->push_dark(d.dark);
  f->find(d.frames, d.numbers, out);
  if (pedestal) *pedestal = f->pedestal();
  return f->stats();
}

/// Runs the GPU finder with options `o` on scenario `s` and expects the reference's clusters and
/// final pedestal state, bit for bit. Returns the finder's stats.
glint::gpu::GpuFinderStats expect_reference_results(const Scenario& s,
                                                    const glint::gpu::GpuFinderOptions& o) {
  ClusterTable out(s.size);
  PedestalState ped;
  const auto st = run_gpu(s, o, out, &ped);
  expect_same(out, data(s).expected);
  expect_same_bits(ped, data(s).expected_pedestal);
  return st;
}

/// The reference finder's and the GPU finder's results on the same frames.
struct BothResults {
  ClusterTable want, got;
  PedestalState want_pedestal, got_pedestal;  ///< after the last frame
  glint::gpu::GpuFinderStats stats;           ///< the GPU finder's, read last
};

/// Pushes `dark` into the reference finder and into a GPU finder with options `o`, then has each
/// find the clusters of `frames`.
BothResults run_both(const FinderParams& p, const glint::gpu::GpuFinderOptions& o,
                     std::span<const uint16_t> dark, std::span<const uint16_t> frames,
                     std::span<const uint64_t> numbers) {
  BothResults r{ClusterTable(p.cluster_size), ClusterTable(p.cluster_size), {}, {}, {}};
  auto ref = glint::make_reference_finder(p);
  ref->push_dark(dark);
  ref->find(frames, numbers, r.want);
  r.want_pedestal = ref->pedestal();
  auto f = glint::gpu::make_gpu_finder(p, o);
  f->push_dark(dark);
  f->find(frames, numbers, r.got);
  r.got_pedestal = f->pedestal();
  r.stats = f->stats();
  return r;
}

/// A streaming sink that appends each batch's clusters to `out`.
glint::gpu::GpuClusterFinder::Sink appending_to(ClusterTable& out) {
  return [&out](const glint::gpu::GpuBatchView& v) { glint::gpu::append_clusters(out, v); };
}
const Scenario kSmall{96, 128, 3, 5.0, 300, 40, 11};

TEST(GpuBatchView, BandsAreJoinedFrameByFrameInRowOrder) {
  // Two GPUs' bands of a 3-frame batch (1x1 clusters for brevity): frame 0 has 1 + 2 clusters,
  // frame 1 none in band 0 and 1 in band 1, frame 2 two in band 0 and none in band 1.
  const std::vector<uint32_t> c0{1, 0, 2}, c1{2, 1, 0};
  const std::vector<uint16_t> x0{10, 11, 12}, y0{0, 5, 6}, x1{20, 21, 22}, y1{100, 101, 150};
  const std::vector<int32_t> d0{1, 2, 3}, d1{4, 5, 6};
  const std::vector<uint64_t> numbers{7, 8, 9};
  const std::vector<glint::gpu::GpuBandView> bands{{c0, x0, y0, d0}, {c1, x1, y1, d1}};
  const glint::gpu::GpuBatchView v{numbers, bands};
  EXPECT_EQ(v.n_clusters(), 6u);
  ClusterTable t(1);
  t.begin_frame(6);
  t.add_cluster(1, 1, std::vector<int32_t>{9});
  glint::gpu::append_clusters(t, v);
  ASSERT_EQ(t.n_frames(), 4u);
  EXPECT_EQ(t.frames()[1], (glint::FrameRecord{7, 1, 3}));
  EXPECT_EQ(t.frames()[2], (glint::FrameRecord{8, 4, 1}));
  EXPECT_EQ(t.frames()[3], (glint::FrameRecord{9, 5, 2}));
  EXPECT_EQ(std::vector<uint16_t>(t.x().begin(), t.x().end()),
            (std::vector<uint16_t>{1, 10, 20, 21, 22, 11, 12}));
  EXPECT_EQ(std::vector<uint16_t>(t.y().begin(), t.y().end()),
            (std::vector<uint16_t>{1, 0, 100, 101, 150, 5, 6}));
  EXPECT_EQ(std::vector<int32_t>(t.data().begin(), t.data().end()),
            (std::vector<int32_t>{9, 1, 4, 5, 6, 2, 3}));
  ClusterTable wrong(3);
  EXPECT_THROW(glint::gpu::append_clusters(wrong, v), std::invalid_argument);
}

TEST(GpuBatchView, SixteenBitValuesAreWidenedAndBandsMayDiffer) {
  // Band 0 came back narrow (int16), band 1 wide (int32); 1x1 clusters, frame 0 has one in each
  // band, frame 1 one in band 0.
  const std::vector<uint32_t> c0{1, 1}, c1{1, 0};
  const std::vector<uint16_t> x0{1, 2}, y0{3, 4}, x1{9}, y1{8};
  const std::vector<int16_t> d0{-5, 32767};
  const std::vector<int32_t> d1{70000};
  const std::vector<uint64_t> numbers{4, 5};
  const std::vector<glint::gpu::GpuBandView> bands{{c0, x0, y0, {}, {}, d0}, {c1, x1, y1, d1}};
  ClusterTable t(1);
  glint::gpu::append_clusters(t, glint::gpu::GpuBatchView{numbers, bands});
  ASSERT_EQ(t.n_frames(), 2u);
  EXPECT_EQ(t.frames()[0], (glint::FrameRecord{4, 0, 2}));
  EXPECT_EQ(t.frames()[1], (glint::FrameRecord{5, 2, 1}));
  EXPECT_EQ(std::vector<uint16_t>(t.x().begin(), t.x().end()), (std::vector<uint16_t>{1, 9, 2}));
  EXPECT_EQ(std::vector<int32_t>(t.data().begin(), t.data().end()),
            (std::vector<int32_t>{-5, 70000, 32767}));
  // Values in both widths, or too few of them, are refused.
  const std::vector<int32_t> d0_wide{-5, 32767};
  const std::vector<glint::gpu::GpuBandView> both{{c0, x0, y0, d0_wide, {}, d0}};
  ClusterTable u(1);
  EXPECT_THROW(glint::gpu::append_clusters(u, glint::gpu::GpuBatchView{numbers, both}),
               std::invalid_argument);
  const std::vector<glint::gpu::GpuBandView> short_values{
      {c0, x0, y0, {}, {}, std::span<const int16_t>(d0).first(1)}};
  EXPECT_THROW(glint::gpu::append_clusters(u, glint::gpu::GpuBatchView{numbers, short_values}),
               std::invalid_argument);
  EXPECT_EQ(u.n_clusters(), 0u);
}

TEST(GpuBatchView, PiecesWrittenInPlaceAreReadInFrameAndRasterOrder) {
  // As the GPU finder writes them: 2 frames of 3 segments (pieces), 1x1 clusters, each piece
  // where its block had room, with unused room between (the 99s). Frame 0: pieces of 2, 0 and 1
  // clusters; frame 1: 1, 2, 0. Pieces 1 and 2 of frame 1 lie one after the other.
  const std::vector<uint32_t> counts{3, 3};
  const std::vector<uint32_t> piece_counts{2, 0, 1, 1, 2, 0};
  const std::vector<uint32_t> piece_first{6, 99, 0, 3, 4, 11};
  const std::vector<uint16_t> x{20, 99, 99, 30, 31, 32, 10, 11, 99};
  const std::vector<uint16_t> y{2, 99, 99, 3, 3, 4, 1, 1, 99};
  const std::vector<int16_t> d{-2, 99, 99, 5, 6, 7, 1, -1, 99};
  glint::gpu::GpuBandView b{counts, x, y, {}, {}, d};
  b.piece_counts = piece_counts;
  b.piece_first = piece_first;
  b.pieces_per_frame = 3;
  EXPECT_EQ(b.n_clusters(), 6u);  // not the 9 clusters' room
  const std::vector<uint64_t> numbers{40, 41};
  const std::vector<glint::gpu::GpuBandView> bands{b};
  const glint::gpu::GpuBatchView v{numbers, bands};
  EXPECT_EQ(v.n_clusters(), 6u);
  ClusterTable t(1);
  glint::gpu::append_clusters(t, v);
  ASSERT_EQ(t.n_frames(), 2u);
  EXPECT_EQ(t.frames()[0], (glint::FrameRecord{40, 0, 3}));
  EXPECT_EQ(t.frames()[1], (glint::FrameRecord{41, 3, 3}));
  EXPECT_EQ(std::vector<uint16_t>(t.x().begin(), t.x().end()),
            (std::vector<uint16_t>{10, 11, 20, 30, 31, 32}));
  EXPECT_EQ(std::vector<uint16_t>(t.y().begin(), t.y().end()),
            (std::vector<uint16_t>{1, 1, 2, 3, 3, 4}));
  EXPECT_EQ(std::vector<int32_t>(t.data().begin(), t.data().end()),
            (std::vector<int32_t>{1, -1, -2, 5, 6, 7}));
  // A directory that does not add up to the counts, or points beyond the clusters, is refused.
  ClusterTable u(1);
  const std::vector<uint32_t> short_counts{2, 0, 1, 1, 1, 0};
  glint::gpu::GpuBandView off = b;
  off.piece_counts = short_counts;
  EXPECT_THROW(glint::gpu::append_clusters(u, glint::gpu::GpuBatchView{numbers, {&off, 1}}),
               std::invalid_argument);
  const std::vector<uint32_t> far_first{6, 99, 0, 3, 8, 11};
  off = b;
  off.piece_first = far_first;
  EXPECT_THROW(glint::gpu::append_clusters(u, glint::gpu::GpuBatchView{numbers, {&off, 1}}),
               std::invalid_argument);
  EXPECT_EQ(u.n_clusters(), 0u);
}

TEST(GpuFinder, WithoutGpuSaysWhy) {
  if (glint::gpu::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  FinderParams p;
  p.shape = {16, 16};
  EXPECT_THROW(glint::gpu::make_gpu_finder(p, {}), std::runtime_error);
}

TEST(GpuFinder, RejectsBadOptions) {
  GLINT_REQUIRE_GPU();
  FinderParams p;
  p.shape = {64, 64};
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 0;
  EXPECT_THROW(glint::gpu::make_gpu_finder(p, o), std::invalid_argument);
  o = {};
  o.streams = 0;
  EXPECT_THROW(glint::gpu::make_gpu_finder(p, o), std::invalid_argument);
  o = {};
  o.devices = {glint::gpu::device_count()};
  EXPECT_THROW(glint::gpu::make_gpu_finder(p, o), std::invalid_argument);
}

TEST(GpuFinder, DarkFramesGiveTheReferencePedestal) {
  GLINT_REQUIRE_GPU();
  const Data& d = data(kSmall);
  auto f = glint::gpu::make_gpu_finder(d.params, {});
  auto ref = glint::make_reference_finder(d.params);
  // Uneven pushes: 37 frames, then the rest (window filling and running update).
  const std::size_t np = d.params.shape.pixels();
  f->push_dark(std::span(d.dark).first(37 * np));
  ref->push_dark(std::span(d.dark).first(37 * np));
  expect_same_bits(f->pedestal(), ref->pedestal());
  f->push_dark(std::span(d.dark).subspan(37 * np));
  ref->push_dark(std::span(d.dark).subspan(37 * np));
  f->push_dark(std::span(d.dark).first(120 * np));  // past the window: running update
  ref->push_dark(std::span(d.dark).first(120 * np));
  expect_same_bits(f->pedestal(), ref->pedestal());
}

class BatchesAndStreams : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(BatchesAndStreams, IdenticalToReference) {
  GLINT_REQUIRE_GPU();
  const auto [batch, streams] = GetParam();
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = batch;
  o.streams = streams;
  ASSERT_GT(data(kSmall).expected.n_clusters(), 1000u);  // the data really has photons
  const auto st = expect_reference_results(kSmall, o);
  EXPECT_EQ(st.frames, kSmall.frames);
  EXPECT_EQ(st.host_syncs, st.batches);  // one completion wait per batch, none per frame
  EXPECT_EQ(st.overflow_reruns, 0u);
}

INSTANTIATE_TEST_SUITE_P(GpuFinder, BatchesAndStreams,
                         ::testing::Combine(::testing::Values(1, 7, 64, 256),
                                            ::testing::Values(1, 2, 4)));

class Shapes : public ::testing::TestWithParam<Scenario> {};

TEST_P(Shapes, IdenticalToReference) {
  GLINT_REQUIRE_GPU();
  const Scenario s = GetParam();
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 32;
  o.streams = 2;
  ASSERT_GT(data(s).expected.n_clusters(), 0u);
  expect_reference_results(s, o);
}

INSTANTIATE_TEST_SUITE_P(
    GpuFinder, Shapes,
    ::testing::Values(Scenario{96, 128, 5, 5.0, 120, 40, 21},     // 5x5
                      Scenario{64, 80, 7, 5.0, 60, 20, 22},       // 7x7
                      Scenario{64, 80, 9, 5.0, 60, 20, 23},       // 9x9
                      Scenario{96, 128, 3, 3.0, 150, 40, 24},     // n_sigma 3
                      Scenario{96, 128, 5, 3.0, 100, 40, 25},     // 5x5, n_sigma 3
                      Scenario{96, 128, 3, 5.0, 100, 1500, 26},   // crowded
                      Scenario{96, 128, 5, 3.0, 60, 1500, 27},    // crowded 5x5 n_sigma 3
                      Scenario{400, 400, 3, 5.0, 40, 500, 28},    // the detector size
                      Scenario{37, 53, 3, 5.0, 80, 30, 29}));     // odd sizes, few bands

// Detector shapes whose segments do not all fit in shared memory at once: JUNGFRAU modules at
// every cluster size, 1M and 4M-sized images, odd sizes, and frames so wide that a window's reach
// exceeds shared memory. Against the CPU backend, byte for byte, with few frames (a short pedestal
// window keeps the dark frames few while every pixel holds a full window, the path of real runs).
struct LargeShape {
  uint32_t rows, cols;
  int size;
  double n_sigma;
  std::size_t frames;
  double photons;  ///< per frame
  uint32_t window, dark;
  friend void PrintTo(const LargeShape& s, std::ostream* os) {
    *os << s.rows << "x" << s.cols << " S" << s.size << " n" << s.n_sigma << " " << s.frames
        << "f window " << s.window << " dark " << s.dark;
  }
};

class LargeShapes : public ::testing::TestWithParam<LargeShape> {};

TEST_P(LargeShapes, IdenticalToCpuBackend) {
  GLINT_REQUIRE_GPU();
  const LargeShape s = GetParam();
  FinderParams p;
  p.shape = {s.rows, s.cols};
  p.cluster_size = s.size;
  p.n_sigma = s.n_sigma;
  p.pedestal_window = s.window;
  const SynthFrames f = synth_frames(p.shape, 1000 + s.rows + s.cols + s.size, s.dark, s.frames,
                                     s.photons);
  std::vector<uint64_t> numbers(s.frames);
  std::iota(numbers.begin(), numbers.end(), 100);
  ClusterTable want(s.size), got(s.size);
  auto cpu = glint::make_cpu_finder(p, 0);
  cpu->push_dark(f.dark);
  cpu->find(f.data, numbers, want);
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 3;  // several launches, a partial last batch
  o.streams = 2;
  auto gpu = glint::gpu::make_gpu_finder(p, o);
  gpu->push_dark(f.dark);
  gpu->find(f.data, numbers, got);
  ASSERT_GT(want.n_clusters(), 10 * s.frames);
  expect_same(got, want);
  expect_same_bits(gpu->pedestal(), cpu->pedestal());
}

INSTANTIATE_TEST_SUITE_P(
    GpuFinder, LargeShapes,
    ::testing::Values(LargeShape{512, 1024, 3, 5.0, 8, 1600, 64, 70},
                      LargeShape{512, 1024, 5, 5.0, 8, 1600, 64, 70},
                      LargeShape{512, 1024, 7, 5.0, 8, 1600, 64, 70},
                      LargeShape{512, 1024, 9, 5.0, 8, 1600, 64, 70},
                      LargeShape{640, 1024, 3, 5.0, 7, 2000, 64, 70},
                      LargeShape{768, 1024, 3, 5.0, 7, 2400, 1000, 20},  // partial windows
                      LargeShape{896, 1024, 3, 5.0, 7, 2800, 64, 70},
                      LargeShape{1024, 1024, 3, 5.0, 7, 3300, 64, 70},
                      LargeShape{1024, 1024, 3, 3.0, 7, 3300, 64, 70},   // many undecided
                      LargeShape{2048, 2048, 3, 5.0, 5, 13000, 64, 70},
                      LargeShape{1031, 1553, 5, 5.0, 5, 5000, 64, 70},  // odd, no multiple
                      LargeShape{64, 4096, 9, 5.0, 8, 800, 64, 70},     // f - mean spilled
                      LargeShape{24, 20000, 9, 5.0, 8, 1500, 64, 70},   // everything spilled
                      LargeShape{5, 700, 9, 5.0, 8, 20, 64, 70}));      // band < window reach

TEST(GpuFinder, OverflowIsRerunExactlyAndCounted) {
  GLINT_REQUIRE_GPU();
  const Scenario s{96, 128, 3, 5.0, 100, 300, 31};
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 16;
  o.streams = 2;
  o.cluster_capacity = 1;
  const auto st = expect_reference_results(s, o);
  EXPECT_GE(st.overflow_reruns, 1u);
}

TEST(GpuFinder, ResultsOutgrowingTheCopyAreCompleted) {
  // The result copy of a batch is sized from the batches before it; quiet frames, then busy
  // ones: the first busy batches find more than that copy brings back, and are found again.
  GLINT_REQUIRE_GPU();
  FinderParams p;
  p.shape = {96, 128};
  // One generator: frames [0, 1100) are dark (the last 24 of them go in as quiet data frames,
  // after more dark frames than the pedestal window), then 40 frames of ~400 photons.
  glint::synth::Config c;
  c.shape = p.shape;
  c.seed = 53;
  c.dark_frames = 1100;
  c.photons = 400.0;
  c.crowded_every = 0;
  const glint::synth::Generator gen(c);
  const std::size_t np = p.shape.pixels();
  std::vector<uint16_t> dark(1076 * np), frames(64 * np);
  gen.fill_many(0, 1076, dark);
  gen.fill_many(1076, 64, frames);
  std::vector<uint64_t> numbers(64);
  std::iota(numbers.begin(), numbers.end(), 1076);
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 8;
  o.streams = 2;
  const BothResults r = run_both(p, o, dark, frames, numbers);
  ASSERT_GT(r.want.n_clusters(), 40u * 200u);  // the busy frames really are busy
  expect_same(r.got, r.want);
  expect_same_bits(r.got_pedestal, r.want_pedestal);
  EXPECT_GE(r.stats.outgrown_reruns, 1u);
  EXPECT_EQ(r.stats.overflow_reruns, 0u);
}

TEST(GpuFinder, ValuesBeyondSixteenBitsComeBackWideAndExact) {
  // Values come back as int16 while they fit. A pixel of 65,000 ADU in frame 20 (batch 2 of
  // 8-frame batches) is a value far beyond int16: that batch is found again with int32 values,
  // and the batches submitted after its delivery are found wide from the start, so the second
  // such pixel, in frame 44 (batch 5), costs no re-run. The same frames without them stay narrow.
  GLINT_REQUIRE_GPU();
  FinderParams p;
  p.shape = {96, 128};
  const std::size_t np = p.shape.pixels();
  const SynthFrames quiet = synth_frames(p.shape, 61, 1000, 48, 150.0);
  std::vector<uint16_t> bright = quiet.data;
  bright[20 * np + 40 * p.shape.cols + 60] = 65000;
  bright[44 * np + 70 * p.shape.cols + 11] = 65000;
  std::vector<uint64_t> numbers(48);
  std::iota(numbers.begin(), numbers.end(), 1000);
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 8;
  o.streams = 2;

  // Streamed batch by batch: which batches came back narrow, and the clusters.
  const auto stream = [&](const std::vector<uint16_t>& frames, ClusterTable& out,
                          std::vector<bool>& narrow) {
    auto f = glint::gpu::make_gpu_finder(p, o);
    f->push_dark(quiet.dark);
    f->set_view_sink([&](const glint::gpu::GpuBatchView& v) {
      ASSERT_GT(v.n_clusters(), 0u);
      narrow.push_back(v.bands[0].data.empty() && !v.bands[0].data16.empty());
      glint::gpu::append_clusters(out, v);
    });
    for (std::size_t f0 = 0; f0 < 48; f0 += 8) {
      std::span<uint16_t> st = f->staging();
      std::memcpy(st.data(), frames.data() + f0 * np, 8 * np * sizeof(uint16_t));
      f->submit(std::span(numbers).subspan(f0, 8));
    }
    f->flush();
    return f->stats();
  };
  for (const bool with_bright : {false, true}) {
    SCOPED_TRACE(with_bright ? "with 65,000 ADU pixels" : "without");
    const std::vector<uint16_t>& frames = with_bright ? bright : quiet.data;
    ClusterTable want(3);
    auto ref = glint::make_reference_finder(p);
    ref->push_dark(quiet.dark);
    ref->find(frames, numbers, want);
    ClusterTable got(3);
    std::vector<bool> narrow;
    const glint::gpu::GpuFinderStats st = stream(frames, got, narrow);
    expect_same(got, want);
    int32_t most = 0;
    for (const int32_t v : want.data()) most = std::max(most, v);
    if (with_bright) {
      EXPECT_GT(most, 32767);
      EXPECT_EQ(st.wide_reruns, 1u);
      // Batches 0 and 1 narrow; 2 re-run wide; 3 and 4 were found before 2 was delivered and
      // fit; 5 on are wide.
      EXPECT_EQ(narrow, (std::vector<bool>{true, true, false, true, true, false}));
    } else {
      EXPECT_LE(most, 32767);
      EXPECT_EQ(st.wide_reruns, 0u);
      EXPECT_EQ(narrow, std::vector<bool>(6, true));
    }
    EXPECT_EQ(st.overflow_reruns, 0u);
  }
  // Turned off: int32 throughout, the same clusters.
  o.tuning.narrow = false;
  ClusterTable want(3), got(3);
  auto ref = glint::make_reference_finder(p);
  ref->push_dark(quiet.dark);
  ref->find(quiet.data, numbers, want);
  std::vector<bool> narrow;
  stream(quiet.data, got, narrow);
  expect_same(got, want);
  EXPECT_EQ(narrow, std::vector<bool>(6, false));
}

/// Tuning settings (glint::gpu::FindTuning) change kernel shapes and the work's layout, never a
/// result.
struct TuningCase {
  const char* name;
  glint::gpu::FindTuning tuning;
  friend void PrintTo(const TuningCase& c, std::ostream* os) {
    *os << c.name << " (threads " << c.tuning.find_threads << ", output runs of "
        << c.tuning.out_chunk << ", resident " << c.tuning.resident << ", segments "
        << c.tuning.max_segments << ")";
  }
};

glint::gpu::FindTuning tuned(int threads, int out_chunk, bool resident, long long segments) {
  glint::gpu::FindTuning t;
  t.find_threads = threads;
  t.out_chunk = out_chunk;
  t.resident = resident;
  t.max_segments = segments;
  return t;
}

class Tunings : public ::testing::TestWithParam<std::tuple<TuningCase, Scenario>> {};

TEST_P(Tunings, IdenticalToReference) {
  GLINT_REQUIRE_GPU();
  const auto& [c, s] = GetParam();
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 20;
  o.streams = 2;
  o.tuning = c.tuning;
  expect_reference_results(s, o);
}

INSTANTIATE_TEST_SUITE_P(
    GpuFinder, Tunings,
    ::testing::Combine(
        ::testing::Values(TuningCase{"state_in_global_memory", tuned(512, 32, false, 0)},
                          TuningCase{"few_long_segments", tuned(512, 32, true, 3)},
                          TuningCase{"one_segment_global", tuned(512, 32, false, 1)},
                          TuningCase{"threads_128", tuned(128, 32, true, 0)},
                          TuningCase{"threads_512", tuned(512, 32, true, 0)},
                          TuningCase{"threads_1024", tuned(1024, 32, true, 0)},
                          TuningCase{"output_runs_of_one_cluster", tuned(256, 1, true, 0)},
                          TuningCase{"output_runs_of_4096", tuned(512, 4096, true, 0)}),
        ::testing::Values(kSmall, Scenario{64, 400, 5, 4.0, 120, 30, 17})),
    [](const auto& info) {
      const Scenario& s = std::get<1>(info.param);
      return std::string(std::get<0>(info.param).name) + "_" + std::to_string(s.rows) + "x" +
             std::to_string(s.cols);
    });

TEST(GpuFinder, ProfileAndTimelineChangeNoResultAndReport) {
  GLINT_REQUIRE_GPU();
  const Scenario s = kSmall;
  const std::string path = ::testing::TempDir() + "glint_find_timeline.csv";
  const std::string trace_path = ::testing::TempDir() + "glint_find_trace.csv";
  std::remove(path.c_str());
  std::remove(trace_path.c_str());
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 16;
  o.streams = 2;
  o.tuning.profile = true;
  o.tuning.timeline = path;
  o.tuning.trace = trace_path;
  const auto st = expect_reference_results(s, o);  // the finder is destroyed on return
  {
    // The trace: one record per segment and frame of a launch, its steps in time order.
    std::ifstream tin(trace_path);
    ASSERT_TRUE(tin) << trace_path;
    std::string line;
    std::getline(tin, line);
    EXPECT_EQ(line.rfind("segment,k,g,ready,above,below,go,loop1,loop2,resolve,release0,", 0),
              0u)
        << line;
    uint64_t records = 0;
    std::set<std::string> segments;
    while (std::getline(tin, line)) {
      std::vector<unsigned long long> v;
      std::stringstream ls(line);
      std::string cell;
      while (std::getline(ls, cell, ',')) v.push_back(std::stoull(cell));
      ASSERT_EQ(v.size(), 18u) << line;
      // ready <= above, below <= go <= loop1 <= loop2 <= resolve <= end, release0 <= release1
      EXPECT_LE(v[3], v[4]);
      EXPECT_LE(v[3], v[5]);
      EXPECT_LE(v[4], v[6]);
      EXPECT_LE(v[5], v[6]);
      for (int i = 6; i < 9; ++i) EXPECT_LE(v[i], v[i + 1]) << line;
      EXPECT_LE(v[10], v[11]);  // the release's fence
      EXPECT_LE(v[9], v[12]);
      EXPECT_GE(v[2], v[1]);  // frame g of the run at position k of its launch
      segments.insert(line.substr(0, line.find(',')));
      ++records;
    }
    EXPECT_GT(segments.size(), 1u);
    EXPECT_GE(records, segments.size() * 16u);  // every segment, a whole batch at least
  }
  std::remove(trace_path.c_str());
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line.rfind("seq,slot,fb,frames,clusters,", 0), 0u) << line;
  uint64_t rows = 0;
  while (std::getline(in, line)) ++rows;
  EXPECT_EQ(rows, st.batches);  // one row per data batch
  std::remove(path.c_str());
}

TEST(GpuFinder, UnusableTuningIsRefused) {
  GLINT_REQUIRE_GPU();
  FinderParams p;
  p.shape = {64, 64};
  glint::gpu::GpuFinderOptions o;
  o.tuning.find_threads = 100;
  EXPECT_THROW(glint::gpu::make_gpu_finder(p, o), std::invalid_argument);
  o.tuning = {};
  o.tuning.out_chunk = 0;
  EXPECT_THROW(glint::gpu::make_gpu_finder(p, o), std::invalid_argument);
}

TEST(GpuFinder, StreamingAndPedestalReadBackMidRun) {
  GLINT_REQUIRE_GPU();
  const Scenario s = kSmall;
  const Data& d = data(s);
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 25;
  o.streams = 3;
  auto f = glint::gpu::make_gpu_finder(d.params, o);
  f->push_dark(d.dark);
  ClusterTable out(3);
  f->set_view_sink(appending_to(out));
  const std::size_t np = d.params.shape.pixels();
  const std::size_t half = s.frames / 2;  // 150 frames: 6 batches of 25
  for (std::size_t f0 = 0; f0 < half; f0 += 25) {
    auto st = f->staging();
    std::memcpy(st.data(), d.frames.data() + f0 * np, 25 * np * sizeof(uint16_t));
    f->submit(std::span(d.numbers).subspan(f0, 25));
  }
  // Batches are still in flight: the read-back is ordered after them, nothing is drained.
  expect_same_bits(f->pedestal(), d.mid_pedestal);
  for (std::size_t f0 = half; f0 < s.frames; f0 += 25) {
    auto st = f->staging();
    std::memcpy(st.data(), d.frames.data() + f0 * np, 25 * np * sizeof(uint16_t));
    f->submit(std::span(d.numbers).subspan(f0, 25));
  }
  f->flush();
  expect_same(out, d.expected);
  expect_same_bits(f->pedestal(), d.expected_pedestal);
}

TEST(GpuFinder, StreamedDarkFramesIdenticalToReference) {
  GLINT_REQUIRE_GPU();
  // Dark frames through the staging (submit_dark, queued without a wait) in partial batches, data
  // batches in flight, then more dark frames between data batches: the same pedestal and the
  // same clusters, in frame order, as the reference given the same sequence.
  const Scenario s = kSmall;
  const Data& d = data(s);
  const std::size_t np = d.params.shape.pixels();
  const std::size_t half = s.frames / 2;
  const auto extra_dark = std::span(d.dark).first(30 * np);
  auto ref = glint::make_reference_finder(d.params);
  ref->push_dark(d.dark);
  const PedestalState after_dark = ref->pedestal();
  ClusterTable want(3);
  ref->find(std::span(d.frames).first(half * np), std::span(d.numbers).first(half), want);
  ref->push_dark(extra_dark);
  ref->find(std::span(d.frames).subspan(half * np), std::span(d.numbers).subspan(half), want);

  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 25;
  o.streams = 3;
  auto f = glint::gpu::make_gpu_finder(d.params, o);
  ClusterTable out(3);
  f->set_view_sink(appending_to(out));
  const auto stream_dark = [&](std::span<const uint16_t> dark, std::size_t chunk) {
    for (std::size_t f0 = 0; f0 * np < dark.size(); f0 += chunk) {
      const std::size_t n = std::min(chunk, dark.size() / np - f0);
      auto st = f->staging();
      std::memcpy(st.data(), dark.data() + f0 * np, n * np * sizeof(uint16_t));
      f->submit_dark(n);
    }
  };
  const auto stream_data = [&](std::size_t from, std::size_t to) {
    for (std::size_t f0 = from; f0 < to; f0 += 25) {
      const std::size_t n = std::min<std::size_t>(25, to - f0);
      auto st = f->staging();
      std::memcpy(st.data(), d.frames.data() + f0 * np, n * np * sizeof(uint16_t));
      f->submit(std::span(d.numbers).subspan(f0, n));
    }
  };
  stream_dark(d.dark, 23);  // 1000 frames: 43 of 23 and one of 11
  expect_same_bits(f->pedestal(), after_dark);
  stream_data(0, half);
  stream_dark(extra_dark, 7);
  stream_data(half, s.frames);
  f->flush();
  expect_same(out, want);
  expect_same_bits(f->pedestal(), ref->pedestal());
  EXPECT_THROW(f->submit_dark(26), std::invalid_argument);
}

TEST(GpuFinder, TheFinderInterfaceStreamsTheReferenceResults) {
  GLINT_REQUIRE_GPU();
  // Through glint::ClusterFinder only, as the pipeline uses it: dark and data batches in the
  // input slots, one sink call per data batch with one record per frame, in order.
  const Scenario s = kSmall;
  const Data& d = data(s);
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 40;
  o.streams = 2;
  std::unique_ptr<glint::ClusterFinder> f = glint::gpu::make_gpu_finder(d.params, o);
  ASSERT_EQ(f->batch_frames(), 40);
  ClusterTable out(3);
  std::vector<std::size_t> per_call;
  f->set_sink([&](const ClusterTable& batch) {
    per_call.push_back(batch.n_frames());
    out.append(batch);
  });
  const std::size_t np = d.params.shape.pixels();
  const std::size_t n_dark = d.dark.size() / np;
  for (std::size_t f0 = 0; f0 < n_dark; f0 += 40) {
    const std::size_t n = std::min<std::size_t>(40, n_dark - f0);
    auto st = f->staging();
    std::memcpy(st.data(), d.dark.data() + f0 * np, n * np * sizeof(uint16_t));
    f->submit_dark(n);
  }
  std::vector<std::size_t> want_calls;
  for (std::size_t f0 = 0; f0 < s.frames; f0 += 40) {
    const std::size_t n = std::min<std::size_t>(40, s.frames - f0);
    auto st = f->staging();
    std::memcpy(st.data(), d.frames.data() + f0 * np, n * np * sizeof(uint16_t));
    f->submit(std::span(d.numbers).subspan(f0, n));
    want_calls.push_back(n);
  }
  f->flush();
  expect_same(out, d.expected);
  expect_same_bits(f->pedestal(), d.expected_pedestal);
  EXPECT_EQ(per_call, want_calls);
}

TEST(GpuFinder, LoadPedestalContinuesExactly) {
  GLINT_REQUIRE_GPU();
  const Data& d = data(kSmall);
  const std::size_t np = d.params.shape.pixels();
  const std::size_t half = kSmall.frames / 2;
  auto f = glint::gpu::make_gpu_finder(d.params, {});
  f->load_pedestal(d.mid_pedestal);
  ClusterTable out(3);
  f->find(std::span(d.frames).subspan(half * np), std::span(d.numbers).subspan(half), out);
  expect_same_bits(f->pedestal(), d.expected_pedestal);
  // The second half of the reference table.
  const auto first = d.expected.frames()[half].first_cluster;
  ASSERT_EQ(out.n_clusters(), d.expected.n_clusters() - first);
  for (std::size_t i = 0; i < out.n_clusters(); ++i) {
    ASSERT_EQ(out.x()[i], d.expected.x()[first + i]);
    ASSERT_EQ(out.y()[i], d.expected.y()[first + i]);
  }
}

TEST(GpuFinder, FewerDarkFramesThanTheWindow) {
  // count < N: the cached mean is sum/count, not sum/N; the pass-0 bounds take the exact path.
  GLINT_REQUIRE_GPU();
  FinderParams p;
  p.shape = {64, 96};
  const SynthFrames src = synth_frames(p.shape, 41, 250, 60, 30.0);
  const auto& dark = src.dark;
  const auto& frames = src.data;
  std::vector<uint64_t> numbers(60);
  std::iota(numbers.begin(), numbers.end(), 0);
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 16;
  const BothResults r = run_both(p, o, dark, frames, numbers);
  expect_same(r.got, r.want);
  expect_same_bits(r.got_pedestal, r.want_pedestal);
}

// glint::synth's detector: defects (hot, noisy, stuck pixels with NaN noise, undershoots),
// drift, exact ties on twin pixels, crowded frames.
TEST(GpuFinder, SyntheticDetectorDataIdenticalToReference) {
  GLINT_REQUIRE_GPU();
  for (const double n_sigma : {5.0, 3.0}) {
    glint::synth::Config c;
    c.shape = {128, 160};
    c.seed = 77;
    c.photons = 120;
    c.crowded_every = 8;
    const glint::synth::Generator gen(c);
    const std::size_t np = c.shape.pixels();
    std::vector<uint16_t> dark(c.dark_frames * np), data(96 * np);
    gen.fill_many(0, c.dark_frames, dark);
    gen.fill_many(c.dark_frames, 96, data);
    std::vector<uint64_t> numbers(96);
    std::iota(numbers.begin(), numbers.end(), c.dark_frames);
    FinderParams p;
    p.shape = c.shape;
    p.n_sigma = n_sigma;
    glint::gpu::GpuFinderOptions o;
    o.batch_frames = 24;
    o.streams = 2;
    const BothResults r = run_both(p, o, dark, data, numbers);
    ASSERT_GT(r.want.n_clusters(), 0u);
    expect_same(r.got, r.want);
    expect_same_bits(r.got_pedestal, r.want_pedestal);
  }
}

TEST(GpuFinder, TwoGpusIdenticalToReference) {
  GLINT_REQUIRE_GPU();
  if (glint::gpu::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  for (const Scenario& s : {kSmall, Scenario{400, 400, 3, 5.0, 40, 500, 28},
                            Scenario{96, 128, 5, 3.0, 60, 1500, 27}}) {
    for (int batch : {7, 64}) {
      glint::gpu::GpuFinderOptions o;
      o.batch_frames = batch;
      o.streams = 2;
      o.devices = {0, 1};
      expect_reference_results(s, o);
    }
  }
  // Overflow with two GPUs.
  glint::gpu::GpuFinderOptions o;
  o.batch_frames = 16;
  o.devices = {0, 1};
  o.cluster_capacity = 1;
  ClusterTable out(3);
  const auto st = run_gpu(kSmall, o, out);
  expect_same(out, data(kSmall).expected);
  EXPECT_GE(st.overflow_reruns, 1u);
}

}  // namespace
