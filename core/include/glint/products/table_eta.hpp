#pragma once
// eta2 and eta3 (cluster_quantities.hpp) of a cluster of a ClusterTable, whose values are int32
// (raw frames) or the bit patterns of floats (calibrated frames).
#include <bit>
#include <cstddef>
#include <cstdint>

#include "glint/cluster_table.hpp"
#include "glint/products/cluster_quantities.hpp"

namespace glint::products {

/// eta2 of cluster i of an int32 table.
inline Eta<int32_t> eta2_int(const ClusterTable& t, std::size_t i) {
  return eta2(t.cluster_data(i).data(), t.cluster_size());
}

/// eta2 of cluster i of a float table.
inline Eta<float> eta2_float(const ClusterTable& t, std::size_t i) {
  float v[81];  // 9 x 9, the largest cluster
  const auto d = t.cluster_data(i);
  for (std::size_t k = 0; k < d.size(); ++k) v[k] = std::bit_cast<float>(d[k]);
  return eta2(v, t.cluster_size());
}

/// eta3 of cluster i of an int32 table.
inline Eta<int32_t> eta3_int(const ClusterTable& t, std::size_t i) {
  return eta3(t.cluster_data(i).data(), t.cluster_size());
}

/// eta3 of cluster i of a float table.
inline Eta<float> eta3_float(const ClusterTable& t, std::size_t i) {
  float v[81];
  const auto d = t.cluster_data(i);
  for (std::size_t k = 0; k < d.size(); ++k) v[k] = std::bit_cast<float>(d[k]);
  return eta3(v, t.cluster_size());
}

}  // namespace glint::products
