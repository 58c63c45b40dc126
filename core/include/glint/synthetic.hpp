#pragma once
// Deterministic synthetic detector frames for tests, benchmarks, demos and the simulator.
//
// A Generator holds per-pixel maps drawn once from the seed (pedestal level, noise level, pixel
// defects) and fills any frame from its index alone, so frames can be produced in any order, by
// any number of threads, and always come out the same. Frames with index < dark_frames are dark
// frames (pedestal + noise only); later frames carry photons and defects.
//
// Everything is integer arithmetic plus exactly rounded double add/multiply (no libm), so the same
// seed gives the same bytes on every platform; the test suite pins digests of generated data.
//
// What the data contains, all switchable through Config:
// - per-pixel pedestal and noise maps; Gaussian-like noise (sum of 12 uniforms: +-6 sigma tails);
// - photons (about `photons` per data frame) whose charge is shared between up to 2x2 pixels by a
//   charge cloud, a fraction of them landing on the frame border;
// - crowded frames (every `crowded_every`-th data frame carries `crowded_factor` times more);
// - hot pixels (a large offset in data frames only), noisy pixels, stuck pixels (constant value:
//   zero or slightly negative variance), negative outliers (undershoots);
// - slow pedestal drift (linear in the frame index, per-pixel rate);
// - exact ties: "twin" pixel pairs that share pedestal, noise realisation and drift, with photons
//   split exactly 50/50 between them.
#include <cstdint>
#include <span>
#include <vector>

#include "glint/frame.hpp"

namespace glint::synth {

struct Config {
  FrameShape shape{400, 400};
  uint64_t seed = 1;
  uint64_t dark_frames = 1000;      ///< frames [0, dark_frames) are dark frames

  double pedestal_min = 1000.0;     ///< per-pixel pedestal level, uniform in [min, max)
  double pedestal_max = 3000.0;
  double noise_min = 8.0;           ///< per-pixel noise rms (ADU), uniform in [min, max)
  double noise_max = 16.0;

  double photons = 500.0;           ///< mean photons per data frame (varies +-sqrt(photons))
  double photon_adu = 300.0;        ///< photon energy in ADU (+-5% per photon)
  double cloud_width = 0.3;         ///< charge-cloud reach (pixels) across a pixel edge
  double border_fraction = 0.02;    ///< fraction of photons placed on the frame border
  uint32_t crowded_every = 50;      ///< every n-th data frame is crowded (0: never)
  double crowded_factor = 12.0;     ///< photon multiplier of a crowded frame

  double hot_fraction = 2e-4;       ///< pixels with a large offset in data frames
  double hot_adu = 500.0;
  double noisy_fraction = 5e-4;     ///< pixels with 8x the noise
  double stuck_fraction = 1e-4;     ///< pixels always reading the same value
  double outlier_rate = 1e-4;       ///< per pixel and data frame: an undershoot of 10-60 sigma
  double drift_per_frame = 0.004;   ///< pedestal drift (ADU/frame), per-pixel rate in [-1, 1]x this
  double twin_fraction = 0.01;      ///< pixels that start a tied twin pair with their right neighbour
  double tie_photon_fraction = 0.02;///< fraction of photons split exactly 50/50 on a twin pair

  // JUNGFRAU frames (jungfrau = true): every pixel carries gain bits 15:14 over a 14-bit ADC value
  // (G0 values are clamped to 16383). Per pixel and frame, with the rates below, a deposit too
  // large for G0 puts the pixel in G1 (70%) or G2 (30%) with the ADC value such a pixel reads:
  // G1 in [8000, 14000), G2 in [10500, 14500) ADU (the ADC falls as the charge grows), plus noise.
  bool jungfrau = false;
  double gain_switch_rate = 1e-3;   ///< data frames: 538 of 524,288 pixels in a real frame
  double dark_switch_rate = 0.0;    ///< dark frames
  double invalid_gain_rate = 0.0;   ///< gain bits 10 (not a stage), any frame

  // Defects at given pixels (row-major indices), on top of the fractions above: stuck pixels
  // (a constant value: a noise of 0 in the pedestal), noisy pixels (8x the noise) and, in
  // JUNGFRAU frames, pixels in G1 in every odd-indexed dark frame (a gain switch in the dark).
  std::vector<uint32_t> stuck_pixels{}, noisy_pixels{}, dark_g1_pixels{};

  // Photons on a grid (photon_grid > 0), in place of the photons above (photons, border, tie
  // and crowded settings are then unused): one photon in every photon_grid x photon_grid cell of
  // a data frame, in the cell's central pixel (offset photon_grid / 2 on each axis) at a
  // sub-pixel position uniform over that pixel. Isolated photons at known positions
  // (Generator::photons): a flat field for an eta calibration, and truths to check sub-pixel
  // positions against.
  uint32_t photon_grid = 0;
  // With photon_grid: every grid photon at this offset within its pixel (x along columns, y
  // along rows, each in [0, 1)) in place of the uniform one; negative: uniform. The random
  // draws are made all the same, so the energies do not change with the offset.
  double photon_grid_x = -1.0;
  double photon_grid_y = -1.0;
};

/// A photon as placed in a data frame: x (column) and y (row) in pixel units (pixel (r, c)
/// spans [c, c + 1) x [r, r + 1)), and its charge in ADU.
struct PlacedPhoton {
  double x = 0.0;
  double y = 0.0;
  double energy = 0.0;
};

/// Throws std::invalid_argument naming the bad field.
void validate(const Config& config);

/// Synthetic JUNGFRAU gain maps in the layout of PSI's module file: G0, G1, G2, HG0, HG1, HG2
/// arrays of `shape` pixels (ADU/keV; G0 about 40, HG0 about 120, G1 about -1.5, G2 about -0.1:
/// the ADC falls with the charge in G1 and G2). Deterministic in the seed.
std::vector<double> jungfrau_gain_maps(FrameShape shape, uint64_t seed);
/// Synthetic G0, G1, G2 pedestals (ADU) as a forced-gain pedestal run gives them: G1 about 14000,
/// G2 about 14500, G0 0 (taken from the run's dark frames). Deterministic in the seed.
std::vector<double> jungfrau_stage_pedestals(FrameShape shape, uint64_t seed);

class Generator {
 public:
  explicit Generator(const Config& config);

  const Config& config() const { return config_; }
  bool is_dark(uint64_t index) const { return index < config_.dark_frames; }

  /// Fills `frame` (shape.pixels() values) with frame number `index`: a dark frame when
  /// index < dark_frames, a data frame otherwise. Thread-safe (const).
  void fill(uint64_t index, std::span<uint16_t> frame) const;

  /// Fills `count` consecutive frames starting at `first` into `frames` (count whole frames back to
  /// back), using up to `threads` threads (0: all hardware threads).
  void fill_many(uint64_t first, uint64_t count, std::span<uint16_t> frames,
                 unsigned threads = 0) const;

  /// The pedestal level the generator used for pixel i in frame `index` (drift included).
  double pedestal(uint64_t index, std::size_t i) const;

  /// The photons frame `index` carries, where they were placed (empty for a dark frame). Photons
  /// split exactly 50/50 on a twin pair have no position and are left out.
  std::vector<PlacedPhoton> photons(uint64_t index) const;

 private:
  /// Calls photon(x, y, energy) for every photon of data frame `index` and tie(i, half) for
  /// every one split on the twin pair (i, i + 1), in the order they are drawn.
  template <class OnPhoton, class OnTie>
  void place_photons(uint64_t index, OnPhoton&& photon, OnTie&& tie) const;

  void add_photon(std::vector<double>& signal, double x, double y, double energy) const;

  Config config_;
  std::vector<double> pedestal_;   // level at frame 0
  std::vector<double> drift_;      // ADU per frame
  std::vector<double> sigma_;
  std::vector<uint8_t> kind_;      // see synthetic.cpp
  std::vector<uint32_t> twins_;    // left pixel index of every twin pair
  void switch_gains(uint64_t index, std::span<uint16_t> frame) const;
};

}  // namespace glint::synth
