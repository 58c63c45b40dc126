#pragma once
// The S x S window of a pixel as the cluster finder visits it (step 3 of
// docs/cluster-finding.md), written once for the CPU reference and the GPU kernels so
// that both sum the same values in the same order.
#include "glint/cluster_math.hpp"

namespace glint::cluster_math {

/// Calls visit(dy, dx) for every pixel of the window of half-width h around column x, row y that
/// lies inside a frame of `rows` x `cols`, row-major from the window's top-left (dy, dx in
/// [-h, h]).
template <class Visit>
GLINT_HD void for_each_in_window(int x, int y, int h, int rows, int cols, Visit&& visit) {
  for (int dy = -h; dy <= h; ++dy) {
    const int yy = y + dy;
    if (yy < 0 || yy >= rows) continue;
    for (int dx = -h; dx <= h; ++dx) {
      const int xx = x + dx;
      if (xx < 0 || xx >= cols) continue;
      visit(dy, dx);
    }
  }
}

/// The window's total and max as classify() takes them.
struct WindowSum {
  double total;
  double max;
};

/// Step 3: over the in-frame window pixels, row-major, d = value(dy, dx) (the pixel's f - mean
/// as the caller knows it); the total is summed from 0.0 in that order, the max starts at 0.0.
template <class Value>
GLINT_HD WindowSum window_sum(int x, int y, int h, int rows, int cols, Value&& value) {
  WindowSum w{0.0, 0.0};
  for_each_in_window(x, y, h, rows, cols, [&](int dy, int dx) {
    const double d = value(dy, dx);
    w.total = add(w.total, d);
    if (w.max < d) w.max = d;
  });
  return w;
}

}  // namespace glint::cluster_math
