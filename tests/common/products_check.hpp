#pragma once
// A run file's products against the plain computation (independent_products.hpp) from the
// clusters read back from the same file.
#include <gtest/gtest.h>

#include <bit>

#include "glint/pipeline/run_file.hpp"
#include "independent_products.hpp"

namespace glint::testing {

/// The data frames (flags 0) of a run file and their clusters.
inline ClusterTable data_frames(const pipeline::RunFileContents& f) {
  ClusterTable out(f.cluster_size, f.clusters.value_type());
  for (std::size_t k = 0; k < f.frames.size(); ++k) {
    if (f.frames[k].flags != 0) continue;
    const FrameRecord& r = f.clusters.frames()[k];
    out.begin_frame(r.frame_number);
    for (uint64_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i) {
      if (out.value_type() == ClusterValues::float32) {
        float v[81];
        for (std::size_t j = 0; j < f.clusters.values_per_cluster(); ++j)
          v[j] = f.clusters.float_value(i, j);
        out.add_cluster(f.clusters.x()[i], f.clusters.y()[i],
                        std::span<const float>(v, f.clusters.values_per_cluster()));
      } else {
        out.add_cluster(f.clusters.x()[i], f.clusters.y()[i], f.clusters.cluster_data(i));
      }
    }
  }
  return out;
}

/// /entry/clusters/energy and energy_2x2 are each cluster's 3 x 3 sum and largest quadrant.
inline void expect_cluster_energies(const pipeline::RunFileContents& f) {
  const ClusterTable& t = f.clusters;
  ASSERT_EQ(f.cluster_energy.size(), t.n_clusters());
  ASSERT_EQ(f.cluster_energy_2x2.size(), t.n_clusters());
  for (std::size_t i = 0; i < t.n_clusters(); ++i) {
    const auto d = t.cluster_data(i);
    if (t.value_type() == ClusterValues::float32) {
      float v[9], s = 0.0f;
      for (int k = 0; k < 9; ++k) s = s + (v[k] = std::bit_cast<float>(d[k]));
      const float q = std::max({((v[0] + v[1]) + v[3]) + v[4], ((v[1] + v[2]) + v[4]) + v[5],
                                ((v[3] + v[4]) + v[6]) + v[7], ((v[4] + v[5]) + v[7]) + v[8]});
      ASSERT_EQ(std::bit_cast<float>(f.cluster_energy[i]), s) << "cluster " << i;
      ASSERT_EQ(std::bit_cast<float>(f.cluster_energy_2x2[i]), q) << "cluster " << i;
    } else {
      int32_t s = 0;
      for (int k = 0; k < 9; ++k) s += d[k];
      const int32_t q = std::max({d[0] + d[1] + d[3] + d[4], d[1] + d[2] + d[4] + d[5],
                                  d[3] + d[4] + d[6] + d[7], d[4] + d[5] + d[7] + d[8]});
      ASSERT_EQ(f.cluster_energy[i], s) << "cluster " << i;
      ASSERT_EQ(f.cluster_energy_2x2[i], q) << "cluster " << i;
    }
  }
}

/// Every product group of the file equals the plain computation from its own clusters (3 x 3).
/// `p` says what was configured; hit map, pixel spectra and eta are checked when present.
inline void expect_file_products(const pipeline::RunFileContents& f, PlainProductParams p) {
  ASSERT_TRUE(f.products.present);
  p.rows = f.shape.rows;
  p.cols = f.shape.cols;
  const ClusterTable data = data_frames(f);
  ASSERT_GT(data.n_frames(), 0u);
  const uint64_t origin = data.frames().front().frame_number;
  const PlainProducts want = plain_products(data, p, origin);
  const pipeline::ProductsContents& got = f.products;
  EXPECT_EQ(got.units, p.calibrated ? "keV" : "ADU");
  EXPECT_EQ(got.energy_kind, p.quadrant ? "2x2" : "sum");
  EXPECT_EQ(got.energy_window, (std::vector<double>{p.emin, p.emax}));
  EXPECT_EQ(got.clusters, want.clusters);
  EXPECT_EQ(got.frames, want.frames);
  EXPECT_EQ(got.spectrum, want.spectrum);
  EXPECT_EQ(got.underflow, want.underflow);
  EXPECT_EQ(got.overflow, want.overflow);
  ASSERT_EQ(got.spectrum_edges.size(), p.spectrum_bins + 1);
  for (uint32_t i = 0; i <= p.spectrum_bins; ++i)
    EXPECT_EQ(got.spectrum_edges[i], i == p.spectrum_bins
                                         ? p.spectrum_hi
                                         : p.spectrum_lo + (p.spectrum_hi - p.spectrum_lo) * i /
                                                               p.spectrum_bins);
  if (!got.hitmap.empty()) {
    EXPECT_EQ(got.hitmap, want.hitmap);
    EXPECT_EQ(got.energy_image, want.energy_image);
  }
  if (!got.pixel_spectra.empty()) {
    EXPECT_EQ(got.pixel_spectra, want.pixel_spectra);
  }
  if (!got.eta2.empty()) {
    EXPECT_EQ(got.eta2, want.eta2);
    EXPECT_EQ(got.eta3, want.eta3);
    EXPECT_EQ(got.eta2_outside, want.eta2_outside);
    EXPECT_EQ(got.eta3_outside, want.eta3_outside);
  }
  if (p.calibration) {
    const uint32_t f = p.subpixel_factor;
    EXPECT_EQ(got.subpixel_factor, f);
    ASSERT_EQ(got.subpixel.size(), want.subpixel.size());
    EXPECT_EQ(got.subpixel, want.subpixel);
    EXPECT_EQ(got.subpixel_outside, want.subpixel_outside);
    EXPECT_EQ(got.subpixel_off_detector, want.subpixel_off_detector);
    ASSERT_EQ(got.subpixel_x.size(), std::size_t{p.cols} * f);
    ASSERT_EQ(got.subpixel_y.size(), std::size_t{p.rows} * f);
    for (std::size_t i = 0; i < got.subpixel_x.size(); ++i)
      EXPECT_EQ(got.subpixel_x[i], (static_cast<double>(i) + 0.5) / f);
    for (std::size_t i = 0; i < got.subpixel_y.size(); ++i)
      EXPECT_EQ(got.subpixel_y[i], (static_cast<double>(i) + 0.5) / f);
  } else {
    EXPECT_TRUE(got.subpixel.empty());
  }
  if (p.slice_frames > 0) {
    const uint64_t last = data.frames().back().frame_number;
    const uint64_t n = (last - origin) / p.slice_frames + 1;
    ASSERT_EQ(got.slice_frame_start.size(), n);
    const std::size_t pixels = std::size_t{p.rows} * p.cols;
    ASSERT_EQ(got.slices.size(), n * pixels);
    for (uint64_t k = 0; k < n; ++k) {
      EXPECT_EQ(got.slice_frame_start[k], origin + k * p.slice_frames);
      const auto it = want.slices.find(k);
      const std::vector<uint32_t> expected =
          it == want.slices.end() ? std::vector<uint32_t>(pixels, 0) : it->second;
      EXPECT_TRUE(std::equal(expected.begin(), expected.end(), got.slices.begin() + k * pixels))
          << "slice " << k;
    }
  }
}

}  // namespace glint::testing
