// The eta cube, the calibration tables, the photon positions (aare's Interpolator semantics) and
// the sub-pixel image, on small hand-computed cases and the edge cases of aare's last_smaller.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "glint/products/eta_calibration.hpp"
#include "glint/products/subpixel_image.hpp"

namespace {

namespace gp = glint::products;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

gp::BinEdges edges(std::vector<double> e) { return gp::BinEdges(std::move(e), "test"); }

TEST(RegularEdges, AreNumpyLinspace) {
  const auto e = gp::regular_edges(0.0, 1.0, 10);
  ASSERT_EQ(e.size(), 11u);
  EXPECT_EQ(e[0], 0.0);
  EXPECT_EQ(e[3], 3.0 * 0.1);  // 0.30000000000000004, as numpy gives, not 0.3
  EXPECT_NE(e[3], 0.3);
  EXPECT_EQ(e[10], 1.0);
  const auto f = gp::regular_edges(200.0, 380.0, 3);
  EXPECT_EQ(f, (std::vector<double>{200.0, 260.0, 320.0, 380.0}));
  EXPECT_THROW(gp::regular_edges(0.0, 1.0, 0), std::invalid_argument);
  EXPECT_THROW(gp::regular_edges(1.0, 1.0, 4), std::invalid_argument);
  EXPECT_THROW(gp::regular_edges(0.0, kInf, 4), std::invalid_argument);
  EXPECT_THROW(edges({0.0, 0.5, 0.5, 1.0}), std::invalid_argument);
  EXPECT_THROW(edges({0.0}), std::invalid_argument);
  EXPECT_THROW(edges({0.0, kNaN}), std::invalid_argument);
}

// aare's last_smaller: the first edge k >= 1 with edges[k] >= v gives k - 1.
TEST(LastSmaller, ReferenceScanValues) {
  const std::vector<double> e{0.0, 0.5, 1.0};
  EXPECT_EQ(gp::last_smaller(e, -5.0), 0u);  // below the first edge: bin 0, not out of bounds
  EXPECT_EQ(gp::last_smaller(e, -kInf), 0u);
  EXPECT_EQ(gp::last_smaller(e, 0.0), 0u);
  EXPECT_EQ(gp::last_smaller(e, 0.25), 0u);
  EXPECT_EQ(gp::last_smaller(e, 0.5), 0u);   // on an inner edge: the bin below it
  EXPECT_EQ(gp::last_smaller(e, std::nextafter(0.5, 1.0)), 1u);
  EXPECT_EQ(gp::last_smaller(e, 1.0), 1u);   // on the last edge: the last bin
  EXPECT_EQ(gp::last_smaller(e, std::nextafter(1.0, 2.0)), 2u);  // out of bounds
  EXPECT_EQ(gp::last_smaller(e, kInf), 2u);
  EXPECT_EQ(gp::last_smaller(e, kNaN), 2u);  // no comparison holds: the scan runs to the end
}

void expect_fast_equals_scan(const std::vector<double>& e, const std::vector<double>& values) {
  const gp::BinEdges b = edges(e);
  for (double v : values) {
    EXPECT_EQ(b.last_smaller(v), gp::last_smaller(e, v)) << "v = " << v;
    // The cube's rule: edge k <= v < edge k + 1.
    std::size_t want = e.size() - 1;
    for (std::size_t k = 0; k + 1 < e.size(); ++k)
      if (e[k] <= v && v < e[k + 1]) want = k;
    EXPECT_EQ(b.cube_bin(v), want) << "v = " << v;
  }
}

std::vector<double> probes(const std::vector<double>& e, uint32_t seed) {
  std::vector<double> v{kNaN, kInf, -kInf, 0.0, -0.0, 1e300, -1e300};
  for (double x : e)
    for (double y : {x, std::nextafter(x, kInf), std::nextafter(x, -kInf),
                     std::nextafter(std::nextafter(x, kInf), kInf)})
      v.push_back(y);
  std::mt19937_64 rng(seed);
  const double lo = e.front(), span = e.back() - e.front();
  std::uniform_real_distribution<double> u(-0.2, 1.2);
  for (int k = 0; k < 20000; ++k) v.push_back(lo + span * u(rng));
  return v;
}

TEST(LastSmaller, FastLookupEqualsScanOnRegularEdges) {
  for (const auto& e : {gp::regular_edges(0.0, 1.0, 20), gp::regular_edges(-0.1, 1.1, 100),
                        gp::regular_edges(200.0, 380.0, 3), gp::regular_edges(5.0, 9.0, 1),
                        gp::regular_edges(-1.0, 1.0, 201), gp::regular_edges(0.0, 1.0, 1000)})
    expect_fast_equals_scan(e, probes(e, 7));
}

TEST(LastSmaller, FastLookupEqualsScanOnIrregularEdges) {
  // Edges a regular guess lands far from: the walk still finds the scan's bin.
  const std::vector<double> e{0.0, 1e-9, 0.1, 0.5, 0.500001, 0.9, 1.0, 50.0};
  expect_fast_equals_scan(e, probes(e, 9));
}

TEST(EtaCube, BinsAreClosedBelowOpenAbove) {
  gp::EtaCube cube(edges({0.0, 0.5, 1.0}), edges({0.0, 0.5, 1.0}), edges({0.0, 10.0}));
  EXPECT_TRUE(cube.add(0.0, 0.5, 0.0));                        // (0, 1, 0)
  EXPECT_TRUE(cube.add(std::nextafter(0.5, 0.0), 0.0, 9.0));  // (0, 0, 0)
  EXPECT_TRUE(cube.add(0.5, std::nextafter(1.0, 0.0), 5.0));  // (1, 1, 0)
  EXPECT_FALSE(cube.add(1.0, 0.2, 5.0));   // the last edge is outside
  EXPECT_FALSE(cube.add(0.2, 0.2, 10.0));
  EXPECT_FALSE(cube.add(-0.1, 0.2, 5.0));
  EXPECT_FALSE(cube.add(0.2, kNaN, 5.0));
  EXPECT_FALSE(cube.add(0.2, 0.2, -1.0));
  gp::Eta<int32_t> eta{0.75, 0.25, gp::Corner::top_left, 7};
  EXPECT_TRUE(cube.add(eta));  // (1, 0, 0)
  EXPECT_EQ(cube.added(), 4u);
  EXPECT_EQ(cube.outside(), 5u);
  EXPECT_EQ(std::vector<double>(cube.counts().begin(), cube.counts().end()),
            (std::vector<double>{1.0, 1.0, 1.0, 1.0}));
  EXPECT_TRUE(cube.add(0.75, 0.25, 3.0));
  EXPECT_EQ(cube.count(1, 0, 0), 2.0);

  gp::EtaCube other(edges({0.0, 0.5, 1.0}), edges({0.0, 0.5, 1.0}), edges({0.0, 10.0}));
  other.add(0.1, 0.6, 1.0);
  other.add(2.0, 0.6, 1.0);
  cube.merge(other);
  EXPECT_EQ(cube.count(0, 1, 0), 2.0);
  EXPECT_EQ(cube.added(), 6u);
  EXPECT_EQ(cube.outside(), 6u);
  const gp::EtaCube different(edges({0.0, 0.5, 1.0}), edges({0.0, 0.5, 1.0}),
                              edges({0.0, 20.0}));
  EXPECT_THROW(cube.merge(different), std::invalid_argument);
}

// The iota cube 1..9 over (3, 3, 1): cdf tables by hand.
// ietax(i, j) = (cumsum_i - cube(0, j)) / (total_j - cube(0, j)): column j = 0 has 1, 5, 12.
// ietay(i, j) = (cumsum_j - cube(i, 0)) / (total_i - cube(i, 0)): row i = 1 has 4, 9, 15.
gp::EtaCube iota_cube() {
  gp::EtaCube cube(edges({0.0, 0.3, 0.6, 1.0}), edges({0.0, 0.3, 0.6, 1.0}),
                   edges({0.0, 100.0}));
  std::iota(cube.counts().begin(), cube.counts().end(), 1.0);
  return cube;
}

TEST(EtaCalibration, CdfTablesByHand) {
  const gp::EtaCalibration cal(iota_cube(), gp::EtaMethod::cdf);
  const std::vector<double> ietax{0.0, 0.0, 0.0, 4.0 / 11.0, 5.0 / 13.0, 6.0 / 15.0,
                                  1.0, 1.0, 1.0};
  const std::vector<double> ietay{0.0, 2.0 / 5.0, 1.0, 0.0, 5.0 / 11.0, 1.0,
                                  0.0, 8.0 / 17.0, 1.0};
  EXPECT_EQ(std::vector<double>(cal.ietax().begin(), cal.ietax().end()), ietax);
  EXPECT_EQ(std::vector<double>(cal.ietay().begin(), cal.ietay().end()), ietay);
}

TEST(EtaCalibration, RosenblattTablesByHand) {
  // Marginal of eta x: 6, 15, 24; cumulative with the first bin set to 0: 0, 15, 39; / 39.
  const gp::EtaCalibration cal(iota_cube(), gp::EtaMethod::rosenblatt);
  const double m = 15.0 / 39.0;
  EXPECT_EQ(std::vector<double>(cal.ietax().begin(), cal.ietax().end()),
            (std::vector<double>{0.0, 0.0, 0.0, m, m, m, 1.0, 1.0, 1.0}));
  const std::vector<double> ietay{0.0, 2.0 / 5.0, 1.0, 0.0, 5.0 / 11.0, 1.0,
                                  0.0, 8.0 / 17.0, 1.0};
  EXPECT_EQ(std::vector<double>(cal.ietay().begin(), cal.ietay().end()), ietay);
}

TEST(EtaCalibration, AaresQuirksKept) {
  // One eta x bin: aare never resets or normalises the marginal (its loops start at 1).
  gp::EtaCube one(edges({0.0, 1.0}), edges({0.0, 0.5, 1.0}), edges({0.0, 1.0}));
  one.counts()[0] = 3.0;
  one.counts()[1] = 5.0;
  const gp::EtaCalibration r(one, gp::EtaMethod::rosenblatt);
  EXPECT_EQ(std::vector<double>(r.ietax().begin(), r.ietax().end()),
            (std::vector<double>{8.0, 8.0}));
  // A column with all counts in its first bin (total - first = 0) is divided by 1: all zero.
  const gp::EtaCalibration c(one, gp::EtaMethod::cdf);
  EXPECT_EQ(std::vector<double>(c.ietax().begin(), c.ietax().end()),
            (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(std::vector<double>(c.ietay().begin(), c.ietay().end()),
            (std::vector<double>{0.0, 1.0}));
  // An empty cube gives zero tables, positions at the quadrant's corner pixel edge.
  gp::EtaCube empty(edges({0.0, 0.5, 1.0}), edges({0.0, 0.5, 1.0}), edges({0.0, 1.0}));
  const gp::EtaCalibration z(empty, gp::EtaMethod::cdf);
  for (double v : z.ietax()) EXPECT_EQ(v, 0.0);
  const auto p = z.position(4, 6, gp::Eta<int32_t>{0.7, 0.2, gp::Corner::bottom_right, 0});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->x, 4.5);
  EXPECT_EQ(p->y, 6.5);
}

TEST(EtaCalibration, PositionsByHand) {
  const gp::EtaCalibration cal(iota_cube(), gp::EtaMethod::cdf);
  // eta x 0.45 -> bin 1 (0.3 < 0.45 <= 0.6), eta y 0.1 -> bin 0; ietax(1, 0) = 4/11, ietay 0.
  const gp::Eta<int32_t> tl{0.45, 0.1, gp::Corner::top_left, 50};
  auto p = cal.position(10, 20, tl);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->x, 10.5 + 4.0 / 11.0 - 1.0);
  EXPECT_EQ(p->y, 19.5);
  EXPECT_EQ(p->energy, 50.0);
  // The corner shifts: top right (0, -1), bottom left (-1, 0), bottom right (0, 0).
  for (auto [corner, dx, dy] : {std::tuple{gp::Corner::top_right, 0.0, -1.0},
                                std::tuple{gp::Corner::bottom_left, -1.0, 0.0},
                                std::tuple{gp::Corner::bottom_right, 0.0, 0.0}}) {
    p = cal.position(10, 20, gp::Eta<int32_t>{0.45, 0.1, corner, 50});
    ASSERT_TRUE(p);
    EXPECT_EQ(p->x, 10.5 + 4.0 / 11.0 + dx);
    EXPECT_EQ(p->y, 20.5 + 0.0 + dy);
  }
  // eta exactly on an inner edge takes the bin below; on the last edge the last bin.
  p = cal.position(0, 0, gp::Eta<int32_t>{0.6, 1.0, gp::Corner::bottom_right, 100});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->x, 0.5 + 6.0 / 15.0);  // ietax(1, 2)
  EXPECT_EQ(p->y, 1.5);               // ietay(1, 2) = 1
  // Energy below the first edge: bin 0 (aare's last_smaller), not rejected.
  EXPECT_TRUE(cal.position(0, 0, gp::Eta<int32_t>{0.5, 0.5, gp::Corner::top_left, -40}));
  // Above the last edge of any axis, or NaN: rejected (aare throws).
  EXPECT_FALSE(cal.position(0, 0, gp::Eta<int32_t>{0.5, 0.5, gp::Corner::top_left, 101}));
  EXPECT_FALSE(cal.position(0, 0, gp::Eta<int32_t>{1.25, 0.5, gp::Corner::top_left, 50}));
  EXPECT_FALSE(cal.position(0, 0, gp::Eta<int32_t>{0.5, 1.0000001, gp::Corner::top_left, 50}));
  EXPECT_FALSE(cal.position(0, 0, gp::Eta<float>{0.5, 0.5, gp::Corner::top_left,
                                                  std::numeric_limits<float>::quiet_NaN()}));
  EXPECT_TRUE(cal.position(0, 0, gp::Eta<float>{0.5, 0.5, gp::Corner::top_left, -1e30f}));
  // eta3 (aare's else branch): x + ietax, y + ietay, no half-pixel or corner shift.
  p = cal.position_eta3(10, 20, gp::Eta<int32_t>{0.45, 0.45, gp::Corner::top_left, 50});
  ASSERT_TRUE(p);
  EXPECT_EQ(p->x, 10.0 + 5.0 / 13.0);
  EXPECT_EQ(p->y, 20.0 + 5.0 / 11.0);
}

TEST(EtaCalibration, StoredTablesMustMatchTheEdges) {
  EXPECT_THROW(gp::EtaCalibration(edges({0.0, 1.0}), edges({0.0, 1.0}), edges({0.0, 1.0}),
                                  std::vector<double>(2), std::vector<double>(1),
                                  gp::EtaMethod::cdf),
               std::invalid_argument);
  EXPECT_EQ(gp::parse_eta_method("rosenblatt"), gp::EtaMethod::rosenblatt);
  EXPECT_THROW(gp::parse_eta_method("linear"), std::invalid_argument);
}

TEST(SubpixelImage, CountsOnTheFineGrid) {
  gp::SubpixelImage img(2, 3, 4);  // 8 x 12 sub-pixels
  ASSERT_EQ(img.counts().size(), 96u);
  img.add(0.0, 0.0);                         // (0, 0)
  img.add(0.24, 0.26);                       // (1, 0)
  img.add(2.999, 1.999);                     // (7, 11)
  img.add(1.5, 0.75);                        // (3, 6)
  img.add(1.5, 0.75);
  img.add(3.0, 0.5);                         // outside: column 3 does not exist
  img.add(1.0, 2.0);
  img.add(-1e-12, 0.5);
  img.add(kNaN, 0.5);
  EXPECT_EQ(img.counts()[0], 1u);
  EXPECT_EQ(img.counts()[1 * 12 + 0], 1u);
  EXPECT_EQ(img.counts()[7 * 12 + 11], 1u);
  EXPECT_EQ(img.counts()[3 * 12 + 6], 2u);
  EXPECT_EQ(img.total(), 5u);
  EXPECT_EQ(img.outside(), 4u);
  gp::SubpixelImage other(2, 3, 4);
  other.add(0.1, 0.1);
  other.add(5.0, 5.0);
  img.merge(other);
  EXPECT_EQ(img.counts()[0], 2u);
  EXPECT_EQ(img.outside(), 5u);
  EXPECT_THROW(img.merge(gp::SubpixelImage(2, 3, 5)), std::invalid_argument);
  EXPECT_THROW(gp::SubpixelImage(0, 3, 4), std::invalid_argument);
  EXPECT_THROW(gp::SubpixelImage(2, 3, 0), std::invalid_argument);
}

}  // namespace
