#pragma once
// eta2 and eta3 (cluster_quantities.hpp) of a cluster of a ClusterTable, whose values are int32
// (raw frames) or the bit patterns of floats (calibrated frames).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "glint/cluster_table.hpp"
#include "glint/products/cluster_quantities.hpp"

namespace glint::products {

/// A cluster's S*S values as T: an int32 table's values as they are; a float table's bit
/// patterns as floats, copied into `buf` (room for n values).
template <typename T>
inline const T* cluster_values(const int32_t* v, T* buf, std::size_t n) {
  if constexpr (std::is_same_v<T, int32_t>) {
    (void)buf;
    (void)n;
    return v;
  } else {
    for (std::size_t k = 0; k < n; ++k) buf[k] = std::bit_cast<float>(v[k]);
    return buf;
  }
}

namespace detail {
/// `fn` (eta2 or eta3) of cluster i of `t`, read as T.
template <typename T, typename Fn>
Eta<T> table_eta(const ClusterTable& t, std::size_t i, Fn fn) {
  T buf[81];  // 9 x 9, the largest cluster
  const auto d = t.cluster_data(i);
  return fn(cluster_values<T>(d.data(), buf, d.size()), t.cluster_size());
}
}  // namespace detail

/// eta2 of cluster i of an int32 table.
inline Eta<int32_t> eta2_int(const ClusterTable& t, std::size_t i) {
  return detail::table_eta<int32_t>(t, i, eta2<int32_t>);
}
/// eta2 of cluster i of a float table.
inline Eta<float> eta2_float(const ClusterTable& t, std::size_t i) {
  return detail::table_eta<float>(t, i, eta2<float>);
}
/// eta3 of cluster i of an int32 table.
inline Eta<int32_t> eta3_int(const ClusterTable& t, std::size_t i) {
  return detail::table_eta<int32_t>(t, i, eta3<int32_t>);
}
/// eta3 of cluster i of a float table.
inline Eta<float> eta3_float(const ClusterTable& t, std::size_t i) {
  return detail::table_eta<float>(t, i, eta3<float>);
}

}  // namespace glint::products
