#include "glint/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

namespace glint::synth {
namespace {

// Pixel kinds (bit flags).
constexpr uint8_t kHot = 1;
constexpr uint8_t kStuck = 2;
constexpr uint8_t kTwinRight = 4;  // copies the noise realisation of its left neighbour

// splitmix64: small, fast, and enough for detector noise; one stream per (seed, frame, purpose).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1), 53 random bits, exact.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n).
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  /// Approximately standard normal: the sum of 12 uniform 16-bit integers (Irwin-Hall), centred
  /// and scaled by 2^-16; integer arithmetic plus one exact scaling.
  double gaussian() {
    int64_t s = 0;
    for (int k = 0; k < 3; ++k) {
      const uint64_t r = next();
      s += static_cast<int64_t>(r & 0xffff) + static_cast<int64_t>((r >> 16) & 0xffff) +
           static_cast<int64_t>((r >> 32) & 0xffff) + static_cast<int64_t>(r >> 48);
    }
    return static_cast<double>(2 * s - 12 * 65535) * 0x1.0p-17;
  }

 private:
  uint64_t state_;
};

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xd1342543de82ef95ULL));
  r.next();
  return r.next();
}

enum Stream : uint64_t {
  kMaps = 1, kNoise = 2, kPhotons = 3, kOutliers = 4, kGains = 5, kCalibration = 6
};

uint64_t stream_seed(uint64_t seed, uint64_t index, Stream s) {
  return mix(mix(seed, s), index);
}

uint16_t to_adu(double x) {
  const double r = std::floor(x + 0.5);
  if (!(r > 0.0)) return 0;
  if (r >= 65535.0) return 65535;
  return static_cast<uint16_t>(r);
}

}  // namespace

void validate(const Config& c) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("synthetic data: " + what); };
  if (c.shape.rows == 0 || c.shape.cols == 0) fail("frame shape must not be empty");
  if (!(c.pedestal_min >= 0.0 && c.pedestal_max >= c.pedestal_min && c.pedestal_max < 60000.0))
    fail("pedestal range must satisfy 0 <= pedestal_min <= pedestal_max < 60000");
  if (!(c.noise_min >= 0.0 && c.noise_max >= c.noise_min)) fail("noise range must be >= 0");
  if (!(c.photons >= 0.0)) fail("photons must be >= 0");
  if (!(c.photon_adu >= 0.0)) fail("photon_adu must be >= 0");
  if (!(c.cloud_width > 0.0 && c.cloud_width <= 0.5)) fail("cloud_width must be in (0, 0.5]");
  for (double f : {c.border_fraction, c.hot_fraction, c.noisy_fraction, c.stuck_fraction,
                   c.outlier_rate, c.twin_fraction, c.tie_photon_fraction, c.gain_switch_rate,
                   c.dark_switch_rate, c.invalid_gain_rate})
    if (!(f >= 0.0 && f <= 1.0)) fail("fractions and rates must be in [0, 1]");
  if (!(c.crowded_factor >= 0.0)) fail("crowded_factor must be >= 0");
  for (double o : {c.photon_grid_x, c.photon_grid_y})
    if (!(o < 1.0)) fail("photon_grid_x and photon_grid_y must be < 1 (negative: uniform)");
  for (const auto* list : {&c.stuck_pixels, &c.noisy_pixels, &c.dark_g1_pixels})
    for (uint32_t i : *list)
      if (i >= c.shape.pixels())
        fail("defect pixel " + std::to_string(i) + " is outside the frame");
}

std::vector<double> jungfrau_gain_maps(FrameShape shape, uint64_t seed) {
  const std::size_t np = shape.pixels();
  std::vector<double> g(6 * np);
  Rng rng(stream_seed(seed, 0, kCalibration));
  const double centre[6] = {40.0, -1.5, -0.1, 120.0, -1.5, -0.1};
  for (int s = 0; s < 6; ++s)
    for (std::size_t i = 0; i < np; ++i)
      g[s * np + i] = centre[s] * (0.95 + 0.1 * rng.uniform());
  return g;
}

std::vector<double> jungfrau_stage_pedestals(FrameShape shape, uint64_t seed) {
  const std::size_t np = shape.pixels();
  std::vector<double> p(3 * np, 0.0);
  Rng rng(stream_seed(seed, 1, kCalibration));
  for (std::size_t i = 0; i < np; ++i) {
    p[np + i] = 14000.0 + 50.0 * rng.uniform();
    p[2 * np + i] = 14500.0 + 50.0 * rng.uniform();
  }
  return p;
}

Generator::Generator(const Config& config) : config_(config) {
  validate(config_);
  const std::size_t np = config_.shape.pixels();
  const uint32_t cols = config_.shape.cols;
  pedestal_.resize(np);
  drift_.resize(np);
  sigma_.resize(np);
  kind_.assign(np, 0);
  Rng rng(stream_seed(config_.seed, 0, kMaps));
  const double ped_span = config_.pedestal_max - config_.pedestal_min;
  const double noise_span = config_.noise_max - config_.noise_min;
  for (std::size_t i = 0; i < np; ++i) {
    pedestal_[i] = config_.pedestal_min + ped_span * rng.uniform();
    sigma_[i] = config_.noise_min + noise_span * rng.uniform();
    drift_[i] = config_.drift_per_frame * (2.0 * rng.uniform() - 1.0);
    const double u = rng.uniform();
    if (u < config_.hot_fraction) {
      kind_[i] = kHot;
    } else if (u < config_.hot_fraction + config_.stuck_fraction) {
      kind_[i] = kStuck;
    } else if (u < config_.hot_fraction + config_.stuck_fraction + config_.noisy_fraction) {
      sigma_[i] = 8.0 * sigma_[i];
    }
  }
  // Twin pairs (i, i+1) on the same row: identical pedestal, drift, noise level and realisation.
  for (std::size_t i = 0; i + 1 < np; ++i) {
    if ((i + 1) % cols == 0) continue;
    if (rng.uniform() >= config_.twin_fraction) continue;
    if (kind_[i] != 0 || kind_[i + 1] != 0) continue;
    pedestal_[i] = std::floor(pedestal_[i]);
    pedestal_[i + 1] = pedestal_[i];
    drift_[i + 1] = drift_[i];
    sigma_[i + 1] = sigma_[i];
    kind_[i + 1] = kTwinRight;
    twins_.push_back(static_cast<uint32_t>(i));
    ++i;  // pairs do not overlap
  }
  for (uint32_t i : config_.stuck_pixels) kind_.at(i) = kStuck;
  for (uint32_t i : config_.noisy_pixels) sigma_.at(i) = 8.0 * sigma_.at(i);
}

double Generator::pedestal(uint64_t index, std::size_t i) const {
  return pedestal_[i] + drift_[i] * static_cast<double>(index);
}

void Generator::add_photon(std::vector<double>& signal, double x, double y, double energy) const {
  const int rows = static_cast<int>(config_.shape.rows);
  const int cols = static_cast<int>(config_.shape.cols);
  const double w = config_.cloud_width;
  const int px = std::min(static_cast<int>(x), cols - 1);
  const int py = std::min(static_cast<int>(y), rows - 1);
  // Charge crossing the nearer pixel edge: half of it at the edge, none beyond the cloud width.
  auto share = [w](double frac, int& dir) {
    const double e = frac < 0.5 ? frac : 1.0 - frac;
    dir = frac < 0.5 ? -1 : 1;
    return e < w ? 0.5 * (1.0 - e / w) : 0.0;
  };
  int dxn = 0, dyn = 0;
  const double sx = share(x - px, dxn);
  const double sy = share(y - py, dyn);
  const double fx[2] = {1.0 - sx, sx};
  const double fy[2] = {1.0 - sy, sy};
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      const double f = fy[a] * fx[b];
      if (f == 0.0) continue;
      const int yy = py + a * dyn;
      const int xx = px + b * dxn;
      if (yy < 0 || yy >= rows || xx < 0 || xx >= cols) continue;  // charge leaves the sensor
      signal[static_cast<std::size_t>(yy) * cols + xx] += energy * f;
    }
  }
}

template <class OnPhoton, class OnTie>
void Generator::place_photons(uint64_t index, OnPhoton&& photon, OnTie&& tie) const {
  const uint32_t rows = config_.shape.rows, cols = config_.shape.cols;
  if (config_.photon_grid > 0) {
    Rng rng(stream_seed(config_.seed, index, kPhotons));
    const uint32_t g = config_.photon_grid;
    for (uint32_t y0 = 0; y0 + g <= rows; y0 += g)
      for (uint32_t x0 = 0; x0 + g <= cols; x0 += g) {
        const double energy = config_.photon_adu * (0.95 + 0.1 * rng.uniform());
        const double ux = rng.uniform();
        const double uy = rng.uniform();
        const double x = static_cast<double>(x0 + g / 2) +
                         (config_.photon_grid_x >= 0.0 ? config_.photon_grid_x : ux);
        const double y = static_cast<double>(y0 + g / 2) +
                         (config_.photon_grid_y >= 0.0 ? config_.photon_grid_y : uy);
        photon(x, y, energy);
      }
    return;
  }
  Rng rng(stream_seed(config_.seed, index, kPhotons));
  double mean = config_.photons;
  const uint64_t data_index = index - config_.dark_frames;
  if (config_.crowded_every != 0 && data_index % config_.crowded_every == config_.crowded_every - 1)
    mean = mean * config_.crowded_factor;
  const double spread = std::sqrt(mean);
  const double n = std::floor(mean + spread * (2.0 * rng.uniform() - 1.0) + 0.5);
  const uint64_t n_photons = n > 0.0 ? static_cast<uint64_t>(n) : 0;
  for (uint64_t k = 0; k < n_photons; ++k) {
    const double energy = config_.photon_adu * (0.95 + 0.1 * rng.uniform());
    const double what = rng.uniform();
    if (what < config_.tie_photon_fraction && !twins_.empty()) {
      const std::size_t i = twins_[rng.below(twins_.size())];
      tie(i, std::floor(energy) * 0.5);
      continue;
    }
    double x = rng.uniform() * cols;
    double y = rng.uniform() * rows;
    if (what < config_.tie_photon_fraction + config_.border_fraction) {
      switch (rng.below(4)) {  // centre of a border pixel, or on its outer half
        case 0: y = 0.5 * rng.uniform(); break;
        case 1: y = rows - 0.5 * rng.uniform(); break;
        case 2: x = 0.5 * rng.uniform(); break;
        default: x = cols - 0.5 * rng.uniform(); break;
      }
      x = std::min(x, std::nextafter(static_cast<double>(cols), 0.0));
      y = std::min(y, std::nextafter(static_cast<double>(rows), 0.0));
    }
    photon(x, y, energy);
  }
}

std::vector<PlacedPhoton> Generator::photons(uint64_t index) const {
  std::vector<PlacedPhoton> out;
  if (is_dark(index)) return out;
  place_photons(
      index, [&](double x, double y, double energy) { out.push_back({x, y, energy}); },
      [](std::size_t, double) {});
  return out;
}

void Generator::fill(uint64_t index, std::span<uint16_t> frame) const {
  const std::size_t np = config_.shape.pixels();
  if (frame.size() != np)
    throw std::invalid_argument("synthetic data: frame buffer holds " +
                                std::to_string(frame.size()) + " pixels, shape needs " +
                                std::to_string(np));
  const bool dark = is_dark(index);
  const double t = static_cast<double>(index);

  // Photon and outlier charge per pixel; dark frames carry none and need no buffer.
  std::vector<double> signal;
  if (!dark) {
    signal.assign(np, 0.0);
    place_photons(
        index, [&](double x, double y, double energy) { add_photon(signal, x, y, energy); },
        [&](std::size_t i, double half) {
          signal[i] += half;
          signal[i + 1] += half;
        });
    Rng out(stream_seed(config_.seed, index, kOutliers));
    const double expected = config_.outlier_rate * static_cast<double>(np);
    const uint64_t n_out = static_cast<uint64_t>(std::floor(expected * (2.0 * out.uniform()) + 0.5));
    for (uint64_t k = 0; k < n_out; ++k) {
      const std::size_t i = out.below(np);
      signal[i] -= (10.0 + 50.0 * out.uniform()) * sigma_[i];
    }
  }

  Rng noise(stream_seed(config_.seed, index, kNoise));
  double g = 0.0;
  for (std::size_t i = 0; i < np; ++i) {
    const uint8_t kind = kind_[i];
    if (kind & kStuck) {
      frame[i] = to_adu(std::floor(pedestal_[i]));
      continue;
    }
    if (!(kind & kTwinRight)) g = noise.gaussian();
    double v = pedestal_[i] + drift_[i] * t;
    v = v + sigma_[i] * g;
    if (!dark) {
      v = v + signal[i];
      if (kind & kHot) v = v + config_.hot_adu;
    }
    frame[i] = to_adu(v);
  }
  if (config_.jungfrau) switch_gains(index, frame);
  if (config_.jungfrau && dark && index % 2 == 1)
    for (uint32_t i : config_.dark_g1_pixels)
      frame[i] = static_cast<uint16_t>(0x4000 | (frame[i] & 0x3FFF));
}

void Generator::switch_gains(uint64_t index, std::span<uint16_t> frame) const {
  const std::size_t np = config_.shape.pixels();
  for (uint16_t& v : frame) v = std::min<uint16_t>(v, 0x3FFF);
  Rng rng(stream_seed(config_.seed, index, kGains));
  auto events = [&](double rate) {
    const double expected = rate * static_cast<double>(np);
    return static_cast<uint64_t>(std::floor(expected * (2.0 * rng.uniform()) + 0.5));
  };
  const uint64_t n_switch = events(is_dark(index) ? config_.dark_switch_rate
                                                  : config_.gain_switch_rate);
  for (uint64_t k = 0; k < n_switch; ++k) {
    const std::size_t i = rng.below(np);
    const bool g2 = rng.uniform() >= 0.7;
    const double level = g2 ? 14500.0 - 4000.0 * rng.uniform() : 14000.0 - 6000.0 * rng.uniform();
    const uint16_t adc = std::min<uint16_t>(to_adu(level + 4.0 * rng.gaussian()), 0x3FFF);
    frame[i] = static_cast<uint16_t>((g2 ? 0xC000 : 0x4000) | adc);
  }
  const uint64_t n_invalid = events(config_.invalid_gain_rate);
  for (uint64_t k = 0; k < n_invalid; ++k) {
    const std::size_t i = rng.below(np);
    frame[i] = static_cast<uint16_t>(0x8000 | (frame[i] & 0x3FFF));
  }
}

void Generator::fill_many(uint64_t first, uint64_t count, std::span<uint16_t> frames,
                          unsigned threads) const {
  const std::size_t np = config_.shape.pixels();
  if (frames.size() != np * count)
    throw std::invalid_argument("synthetic data: buffer does not hold " + std::to_string(count) +
                                " whole frames");
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<uint64_t>(threads, std::max<uint64_t>(count, 1)));
  if (threads <= 1) {
    for (uint64_t k = 0; k < count; ++k) fill(first + k, frames.subspan(k * np, np));
    return;
  }
  std::vector<std::jthread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (uint64_t k = t; k < count; k += threads) fill(first + k, frames.subspan(k * np, np));
    });
}

}  // namespace glint::synth
