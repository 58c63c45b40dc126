// The products' accumulators (ProductSums) against the plain computation of
// tests/common/independent_products.hpp, and their independence of batching and merging.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "../common/independent_products.hpp"
#include "glint/products/run_products.hpp"

using namespace glint;
using namespace glint::products;
using glint::testing::PlainProductParams;
using glint::testing::plain_products;

namespace {

constexpr uint32_t kRows = 24, kCols = 32;

/// `frames` frames numbered from `first` (every `stride`), 0..30 clusters each, values drawn
/// so that sums spread over the spectrum with some below 0 and some beyond its end.
ClusterTable random_clusters(uint32_t seed, int frames, bool calibrated, uint64_t first = 1000,
                             uint64_t stride = 1) {
  std::mt19937 rng(seed);
  ClusterTable t(3, calibrated ? ClusterValues::float32 : ClusterValues::int32);
  std::uniform_int_distribution<int> n_dist(0, 30), x_dist(0, kCols - 1), y_dist(0, kRows - 1);
  std::uniform_int_distribution<int> v_dist(-40, 300), big(0, 20);
  for (int f = 0; f < frames; ++f) {
    t.begin_frame(first + static_cast<uint64_t>(f) * stride);
    const int n = f % 7 == 3 ? 0 : n_dist(rng);  // some frames without clusters
    for (int c = 0; c < n; ++c) {
      int32_t v[9];
      for (int k = 0; k < 9; ++k) v[k] = v_dist(rng);
      v[4] += 200 + (big(rng) == 0 ? 3000 : 0);  // a centre; now and then beyond 2000
      if (big(rng) == 1)  // now and then a deep negative column: a sum below 0, eta3 beyond 1
        v[0] = v[3] = v[6] = -900;
      const auto x = static_cast<uint16_t>(x_dist(rng)), y = static_cast<uint16_t>(y_dist(rng));
      if (calibrated) {
        float fv[9];
        for (int k = 0; k < 9; ++k) fv[k] = static_cast<float>(v[k]) * 0.0371f;
        t.add_cluster(x, y, std::span<const float>(fv, 9));
      } else {
        t.add_cluster(x, y, std::span<const int32_t>(v, 9));
      }
    }
  }
  return t;
}

ProductSettings settings(bool calibrated) {
  ProductSettings s;
  s.rows = kRows;
  s.cols = kCols;
  s.calibrated = calibrated;
  s.spectrum = {0.0, calibrated ? 50.0 : 2000.0, calibrated ? 97u : 500u, false};
  s.pixel_spectra = true;
  s.eta = true;
  s.eta_bins = 37;
  s.slice_frames = 17;
  return s;
}

PlainProductParams plain(const ProductSettings& s) {
  PlainProductParams p;
  p.rows = s.rows;
  p.cols = s.cols;
  p.calibrated = s.calibrated;
  p.quadrant = s.energy == EnergyKind::quadrant;
  p.emin = s.emin;
  p.emax = s.emax;
  p.spectrum_lo = s.spectrum.lo;
  p.spectrum_hi = s.spectrum.hi;
  p.spectrum_bins = s.spectrum.bins;
  p.eta_bins = s.eta_bins;
  p.slice_frames = s.slice_frames;
  return p;
}

/// Every product of `got` equals the plain computation's.
void expect_plain(ProductSums got, const ClusterTable& t, uint64_t origin) {
  const auto want = plain_products(t, plain(got.settings()), origin);
  EXPECT_EQ(got.clusters, want.clusters);
  EXPECT_EQ(got.frames, want.frames);
  EXPECT_EQ(got.hitmap, want.hitmap);
  std::vector<double> energy(got.energy.size());
  for (std::size_t i = 0; i < energy.size(); ++i)
    energy[i] = static_cast<double>(got.energy[i]) / got.settings().energy_scale();
  EXPECT_EQ(energy, want.energy_image);
  EXPECT_EQ(got.spectrum, want.spectrum);
  EXPECT_EQ(got.underflow, want.underflow);
  EXPECT_EQ(got.overflow, want.overflow);
  EXPECT_EQ(got.pixel_spectra, want.pixel_spectra);
  EXPECT_EQ(got.eta2, want.eta2);
  EXPECT_EQ(got.eta3, want.eta3);
  EXPECT_EQ(got.eta2_outside, want.eta2_outside);
  EXPECT_EQ(got.eta3_outside, want.eta3_outside);
  ASSERT_FALSE(want.slices.empty());
  const uint64_t last = want.slices.rbegin()->first;
  for (uint64_t k = 0; k <= last; ++k) {
    const auto it = want.slices.find(k);
    const std::vector<uint32_t> expected =
        it == want.slices.end() ? std::vector<uint32_t>(kRows * kCols, 0) : it->second;
    EXPECT_EQ(got.take_slice(k), expected) << "slice " << k;
  }
}

/// Frames [a, b) of `t` as a table of their own.
ClusterTable frames_of(const ClusterTable& t, std::size_t a, std::size_t b) {
  ClusterTable out(t.cluster_size(), t.value_type());
  for (std::size_t k = a; k < b; ++k) {
    const FrameRecord& r = t.frames()[k];
    out.begin_frame(r.frame_number);
    for (uint64_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i) {
      if (t.value_type() == ClusterValues::float32) {
        float v[9];
        for (int j = 0; j < 9; ++j) v[j] = t.float_value(i, j);
        out.add_cluster(t.x()[i], t.y()[i], std::span<const float>(v, 9));
      } else {
        out.add_cluster(t.x()[i], t.y()[i], t.cluster_data(i));
      }
    }
  }
  return out;
}

}  // namespace

TEST(Binning, AValueOnAnEdgeIsInTheBinItStarts) {
  const Binning b{0.0, 2000.0, 500, false};
  EXPECT_EQ(b.bin(0.0), 0);
  EXPECT_EQ(b.bin(3.999), 0);
  EXPECT_EQ(b.bin(4.0), 1);
  EXPECT_EQ(b.bin(1996.0), 499);
  EXPECT_EQ(b.bin(1999.9), 499);
  EXPECT_EQ(b.bin(2000.0), 500);  // overflow
  EXPECT_EQ(b.bin(-0.5), -1);
  EXPECT_EQ(b.bin(std::nan("")), -1);
  // Edges that are not exact in binary: each edge value lands in the bin edge() starts.
  const Binning odd{-1.0, 1.0, 37, true};
  for (uint32_t i = 0; i < 37; ++i) EXPECT_EQ(odd.bin(odd.edge(i)), i) << i;
  EXPECT_EQ(odd.bin(1.0), 36);  // closed: the top value is in the last bin
  EXPECT_EQ(odd.bin(std::nextafter(1.0, 2.0)), 37);
  EXPECT_EQ(b.edges().size(), 501u);
  // The accumulators' table gives the same bins everywhere, edges included.
  for (const Binning& x : {b, odd, Binning{0.0, 50.0, 97, false}, Binning{-3.0, 7.0, 1, true}}) {
    const BinTable table(x);
    for (double v = x.lo - 0.5; v <= x.hi + 0.5; v += (x.hi - x.lo) / 4099)
      ASSERT_EQ(table.bin(v), x.bin(v)) << v;
    for (uint32_t i = 0; i <= x.bins; ++i) {
      ASSERT_EQ(table.bin(x.edge(i)), x.bin(x.edge(i))) << i;
      ASSERT_EQ(table.bin(std::nextafter(x.edge(i), -1e9)), x.bin(std::nextafter(x.edge(i), -1e9)));
    }
  }
  EXPECT_EQ(b.centres()[0], 2.0);
  EXPECT_EQ(b.centres()[499], 1998.0);
}

TEST(ProductSums, RawClustersMatchThePlainComputation) {
  const ClusterTable t = random_clusters(1, 120, false);
  ASSERT_GT(t.n_clusters(), 1000u);
  ProductSums s(settings(false));
  s.add(t, 1000);
  EXPECT_GT(s.overflow, 10u);
  EXPECT_GT(s.underflow, 10u);
  EXPECT_GT(s.eta3_outside, 10u);
  expect_plain(s, t, 1000);
}

TEST(ProductSums, CalibratedClustersMatchThePlainComputation) {
  const ClusterTable t = random_clusters(2, 120, true);
  ProductSums s(settings(true));
  s.add(t, 1000);
  EXPECT_GT(s.clusters, 1000u);
  // keV energies are accumulated as micro-keV: not a multiple of the float's value.
  int64_t total = 0;
  for (int64_t e : s.energy) total += e;
  EXPECT_NE(total % 1000000, 0);
  expect_plain(s, t, 1000);
}

TEST(ProductSums, TheEnergyWindowAndThe2x2EnergyRestrictEveryProduct) {
  const ClusterTable t = random_clusters(3, 100, false);
  ProductSettings st = settings(false);
  st.energy = EnergyKind::quadrant;
  st.emin = 400;
  st.emax = 900;
  ProductSums s(st);
  s.add(t, 1000);
  ProductSums all(settings(false));
  all.add(t, 1000);
  EXPECT_LT(s.clusters, all.clusters - 500);
  EXPECT_GT(s.clusters, 100u);
  // Inclusive window: nothing outside [400, 900] in the spectrum; no under/overflow.
  EXPECT_EQ(s.underflow, 0u);
  EXPECT_EQ(s.overflow, 0u);
  for (uint32_t b = 0; b < st.spectrum.bins; ++b) {
    if (st.spectrum.edge(b + 1) <= 400 || st.spectrum.edge(b) > 900) {
      EXPECT_EQ(s.spectrum[b], 0u) << b;
    }
  }
  expect_plain(s, t, 1000);
}

TEST(ProductSums, AnyBatchingAndAnyMergeGiveTheSameSums) {
  for (const bool calibrated : {false, true}) {
    const ClusterTable t = random_clusters(4, 150, calibrated, 77, 3);
    const ProductSettings st = settings(calibrated);
    ProductSums whole(st);
    whole.add(t, 77);
    // Batches of varying length handed round-robin to 3 accumulators (the per-pixel spectra
    // shared between them, as the consumer's workers do), merged in another order.
    std::mt19937 rng(9);
    std::uniform_int_distribution<std::size_t> len(1, 20);
    std::vector<ProductSums> parts(3, ProductSums(st, false));
    std::vector<uint32_t> shared(st.pixels() * st.spectrum.bins, 0);
    std::size_t at = 0, turn = 0;
    while (at < t.n_frames()) {
      const std::size_t b = std::min(t.n_frames(), at + len(rng));
      parts[turn++ % 3].add(frames_of(t, at, b), 77, shared);
      at = b;
    }
    ProductSums merged(st, false);
    for (int i : {2, 0, 1}) merged.merge(parts[i]);
    merged.pixel_spectra = shared;
    EXPECT_TRUE(merged == whole) << "calibrated " << calibrated;
    expect_plain(merged, t, 77);
  }
}

TEST(ProductSums, ClusterEnergiesAreTheSumAndTheLargestQuadrant) {
  ClusterTable t(3);
  t.begin_frame(1);
  const int32_t a[9] = {1, 2, 3, 4, 100, 6, 7, 8, 50};
  t.add_cluster(3, 4, std::span<const int32_t>(a, 9));
  std::vector<int32_t> sum, quad;
  cluster_energies(t, sum, quad);
  ASSERT_EQ(sum.size(), 1u);
  EXPECT_EQ(sum[0], 181);
  EXPECT_EQ(quad[0], 100 + 6 + 8 + 50);
  ClusterTable f(3, ClusterValues::float32);
  f.begin_frame(1);
  const float b[9] = {0.5f, 0.25f, 0, 0, 8.0f, 0, 0, 0, 1.0f};
  f.add_cluster(3, 4, std::span<const float>(b, 9));
  cluster_energies(f, sum, quad);
  EXPECT_EQ(std::bit_cast<float>(sum[0]), 9.75f);
  EXPECT_EQ(std::bit_cast<float>(quad[0]), 9.0f);
}
