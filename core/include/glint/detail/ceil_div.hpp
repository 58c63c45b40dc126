#pragma once
// Whole-number division rounded up, one definition for the host-side planning of grids, chunks
// and groups.
#include <concepts>
#include <type_traits>

namespace glint::detail {

/// (a + b - 1) / b in the common type of a and b: a / b rounded up for a >= 0 and b > 0.
template <std::integral A, std::integral B>
constexpr std::common_type_t<A, B> ceil_div(A a, B b) {
  using T = std::common_type_t<A, B>;
  return (static_cast<T>(a) + static_cast<T>(b) - 1) / static_cast<T>(b);
}

}  // namespace glint::detail
