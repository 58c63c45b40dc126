#pragma once
#include <cstddef>
#include <cstdint>

namespace glint {

/// Shape of one (assembled) detector image: rows (y) by columns (x), row-major, x fastest.
struct FrameShape {
  uint32_t rows = 0;
  uint32_t cols = 0;
  constexpr std::size_t pixels() const { return std::size_t{rows} * cols; }
  friend constexpr bool operator==(const FrameShape&, const FrameShape&) = default;
};

}  // namespace glint
