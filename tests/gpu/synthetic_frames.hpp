#pragma once
// Deterministic detector-like frames for the GPU finder tests: a per-pixel pedestal and noise,
// Gaussian noise, and photons whose charge is shared with the neighbouring pixels.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "glint/frame.hpp"

namespace glint::test {

class FrameSource {
 public:
  FrameSource(FrameShape shape, uint64_t seed) : shape_(shape), rng_(seed) {
    std::uniform_real_distribution<double> ped(900.0, 1300.0), sig(3.0, 12.0);
    pedestal_.resize(shape.pixels());
    sigma_.resize(shape.pixels());
    for (std::size_t i = 0; i < shape.pixels(); ++i) {
      pedestal_[i] = ped(rng_);
      sigma_[i] = sig(rng_);
    }
  }

  /// n frames back to back; `photons` photons per frame of about `charge` ADU each.
  std::vector<uint16_t> frames(std::size_t n, std::size_t photons, double charge = 400.0) {
    const std::size_t np = shape_.pixels();
    std::vector<uint16_t> out(n * np);
    std::normal_distribution<double> g(0.0, 1.0);
    std::uniform_int_distribution<uint32_t> ry(0, shape_.rows - 1), rx(0, shape_.cols - 1);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> img(np);
    for (std::size_t k = 0; k < n; ++k) {
      for (std::size_t i = 0; i < np; ++i) img[i] = pedestal_[i] + sigma_[i] * g(rng_);
      for (std::size_t p = 0; p < photons; ++p) {
        const int y = static_cast<int>(ry(rng_)), x = static_cast<int>(rx(rng_));
        const double q = charge * (0.7 + 0.6 * u(rng_));
        const double share = 0.5 * u(rng_);  // fraction spread to the 8 neighbours
        for (int dy = -1; dy <= 1; ++dy)
          for (int dx = -1; dx <= 1; ++dx) {
            const int yy = y + dy, xx = x + dx;
            if (yy < 0 || xx < 0 || yy >= static_cast<int>(shape_.rows) ||
                xx >= static_cast<int>(shape_.cols))
              continue;
            const double part = (dy == 0 && dx == 0) ? q * (1.0 - share) : q * share / 8.0;
            img[static_cast<std::size_t>(yy) * shape_.cols + xx] += part * (0.5 + u(rng_));
          }
      }
      for (std::size_t i = 0; i < np; ++i)
        out[k * np + i] = static_cast<uint16_t>(std::clamp(std::lround(img[i]), 0L, 65535L));
    }
    return out;
  }

 private:
  FrameShape shape_;
  std::mt19937_64 rng_;
  std::vector<double> pedestal_, sigma_;
};

}  // namespace glint::test
