#pragma once
// What each cluster's values give a scientist: its energy (the S x S sum and the largest 2 x 2
// quadrant sum) and its eta values (eta2, eta3), with aare's definitions (Cluster::sum,
// Cluster::max_sum_2x2, CalculateEta.hpp at ee75030) and aare's arithmetic: sums in the cluster's
// value type (int32 for raw frames, float in keV for calibrated ones) in aare's order, ratios in
// double. Written once for host and device; every operation is one correctly rounded IEEE
// operation (glint/rounded.hpp), so every backend computes the same bits.
//
// Values are row-major, top row first (the order of a cluster in the run file and the .clust
// file): value k of an S x S cluster is at row k / S, column k % S; the centre is k = (S*S)/2.
#include <cstdint>

#include "glint/detail/hd.hpp"
#include "glint/rounded.hpp"

namespace glint::products {

/// The 2 x 2 quadrant of a cluster around its centre, as aare's `corner`.
enum class Corner : uint8_t { top_left = 0, top_right = 1, bottom_left = 2, bottom_right = 3 };

template <typename T>
struct QuadrantSum {
  T sum{};
  Corner corner = Corner::top_left;
};

/// aare's Eta2<T>: x and y in double, the quadrant the 2 x 2 values came from, and the energy
/// the eta was formed with (the 2 x 2 maximum for eta2, the S x S sum for eta3).
template <typename T>
struct Eta {
  double x = 0.0;
  double y = 0.0;
  Corner corner = Corner::top_left;
  T sum{};
};

namespace detail {
GLINT_HD int32_t add(int32_t a, int32_t b) { return a + b; }
GLINT_HD float add(float a, float b) { return rounded::add(a, b); }
GLINT_HD int32_t neg(int32_t a) { return -a; }
GLINT_HD float neg(float a) { return -a; }

/// std::max_element over four sums: the first of the largest (a later one wins only when the
/// current best compares less than it).
template <typename T>
GLINT_HD QuadrantSum<T> first_max(const T (&s)[4]) {
  int best = 0;
  for (int i = 1; i < 4; ++i)
    if (s[best] < s[i]) best = i;
  return QuadrantSum<T>{s[best], static_cast<Corner>(best)};
}

/// aare's private calculate_eta2(eta, left, right, bottom, top).
template <typename T>
GLINT_HD void eta2_from(Eta<T>& eta, T left, T right, T bottom, T top) {
  const T lr = add(right, left);
  if (lr != T{}) eta.x = rounded::div(static_cast<double>(right), static_cast<double>(lr));
  const T bt = add(top, bottom);
  if (bt != T{}) eta.y = rounded::div(static_cast<double>(top), static_cast<double>(bt));
}
}  // namespace detail

/// Cluster::sum(): the S*S values accumulated in order from T{}.
template <typename T>
GLINT_HD T cluster_sum(const T* v, int size) {
  T s{};
  const int n = size * size;
  for (int k = 0; k < n; ++k) s = detail::add(s, v[k]);
  return s;
}

/// Cluster::max_sum_2x2(): the four 2 x 2 sums around the centre, each added left to right in
/// aare's order (3 x 3 has its own order), and the first of the largest.
template <typename T>
GLINT_HD QuadrantSum<T> max_quadrant(const T* v, int size) {
  using detail::add;
  T s[4];
  if (size == 3) {
    s[0] = add(add(add(v[0], v[1]), v[3]), v[4]);
    s[1] = add(add(add(v[1], v[2]), v[4]), v[5]);
    s[2] = add(add(add(v[3], v[4]), v[6]), v[7]);
    s[3] = add(add(add(v[4], v[5]), v[7]), v[8]);
  } else {
    const int c = size / 2 + (size / 2) * size;
    s[0] = add(add(add(v[c], v[c - 1]), v[c - size]), v[c - 1 - size]);
    s[1] = add(add(add(v[c], v[c + 1]), v[c - size]), v[c - size + 1]);
    s[2] = add(add(add(v[c], v[c - 1]), v[c + size]), v[c + size - 1]);
    s[3] = add(add(add(v[c], v[c + 1]), v[c + size]), v[c + size + 1]);
  }
  return detail::first_max(s);
}

/// calculate_eta2: the ratios right / (left + right) and top / (bottom + top) of the two pixels
/// of the largest quadrant in each direction (0 where the pair sums to 0), in aare's pairing.
template <typename T>
GLINT_HD Eta<T> eta2(const T* v, int size) {
  Eta<T> eta;
  const int c = size / 2 + (size / 2) * size;
  const QuadrantSum<T> q = max_quadrant(v, size);
  eta.sum = q.sum;
  switch (q.corner) {
    case Corner::top_left:
      detail::eta2_from(eta, v[c - 1], v[c], v[c - size], v[c]);
      break;
    case Corner::top_right:
      detail::eta2_from(eta, v[c], v[c + 1], v[c - size], v[c]);
      break;
    case Corner::bottom_left:
      detail::eta2_from(eta, v[c - 1], v[c], v[c], v[c + size]);
      break;
    case Corner::bottom_right:
      detail::eta2_from(eta, v[c], v[c + 1], v[c], v[c + size]);
      break;
  }
  eta.corner = q.corner;
  return eta;
}

/// calculate_eta3 on the central 3 x 3 (all of a 3 x 3 cluster; aare reduces larger clusters to
/// their central 3 x 3 first): (right column - left column) / sum and (bottom row - top row) /
/// sum, with sum the 3 x 3 sum (0 when the sum is 0).
template <typename T>
GLINT_HD Eta<T> eta3(const T* v, int size) {
  using detail::add;
  const int c = size / 2 + (size / 2) * size;
  const T w[9] = {v[c - size - 1], v[c - size], v[c - size + 1], v[c - 1], v[c],
                  v[c + 1],        v[c + size - 1], v[c + size], v[c + size + 1]};
  Eta<T> eta;
  const T e = cluster_sum(w, 3);
  eta.sum = e;
  if (e != T{}) {
    const T col0 = add(add(w[0], w[3]), w[6]);
    const T col2 = add(add(w[2], w[5]), w[8]);
    eta.x = rounded::div(static_cast<double>(add(detail::neg(col0), col2)),
                         static_cast<double>(e));
    const T row0 = add(add(w[0], w[1]), w[2]);
    const T row2 = add(add(w[6], w[7]), w[8]);
    eta.y = rounded::div(static_cast<double>(add(detail::neg(row0), row2)),
                         static_cast<double>(e));
  }
  return eta;
}

}  // namespace glint::products
