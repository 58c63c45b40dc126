#pragma once
// The clusters, cube and calibration aare's Interpolator was run on (docs/products.md, "Checked
// against aare"), and the SHA-256 digests of what aare computed from them.
#include <cstdint>
#include <memory>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/jungfrau.hpp"
#include "glint/products/eta_calibration.hpp"
#include "test_data.hpp"

namespace glint::testing {

/// Raw frames: `glint synth --rows 96 --cols 96 --dark 200 --frames 300 --photons 30 --seed 11`.
inline synth::Config eta_raw_frames() {
  synth::Config c;
  c.shape = {96, 96};
  c.seed = 11;
  c.dark_frames = 200;
  c.photons = 30;
  return c;
}
inline constexpr uint64_t kEtaRawDataFrames = 300;

/// The clusters of those frames through the CPU finder (n_sigma 5, pedestal window 200), S x S.
inline ClusterTable eta_raw_clusters(int size) {
  const SyntheticRun run(eta_raw_frames(), kEtaRawDataFrames);
  FinderParams p;
  p.shape = run.config.shape;
  p.cluster_size = size;
  p.n_sigma = 5.0;
  p.pedestal_window = 200;
  auto finder = make_cpu_finder(p, 2);
  return run_finder(*finder, run);
}

/// Float clusters (keV): the JUNGFRAU frames of aare_jungfrau_frames() calibrated with the
/// generator's gain maps and G1/G2 pedestals, 3 x 3 at n_sigma 5 (the first of
/// kAareJungfrauDigests: the clusters of aare's own chain).
inline ClusterTable eta_float_clusters() {
  const synth::Config c = aare_jungfrau_frames();
  const SyntheticRun run(c, kAareJungfrauDataFrames);
  auto cal = std::make_shared<jungfrau::Calibration>();
  cal->shape = c.shape;
  cal->gain = synth::jungfrau_gain_maps(c.shape, c.seed);
  cal->gain.resize(3 * c.shape.pixels());
  cal->pedestal = synth::jungfrau_stage_pedestals(c.shape, c.seed);
  cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
  FinderParams p;
  p.shape = c.shape;
  p.cluster_size = 3;
  p.n_sigma = 5.0;
  p.pedestal_window = 1000;
  p.pixels = PixelMode::jungfrau_calibrated;
  p.calibration = cal;
  auto finder = make_cpu_finder(p, 2);
  return run_finder(*finder, run, 64);
}

/// The cube of each check: 20 eta bins over [0, 1] (values of 1 and above, and below 0, fall
/// outside the cube, and above 1 outside the calibration), 3 energy bins over [200, 380] ADU
/// (raw) or [5, 9] keV (float): lower energies take bin 0 in aare's lookup, higher ones are out
/// of bounds.
inline products::EtaCube eta_reference_cube(bool calibrated) {
  return calibrated ? products::EtaCube::regular(20, 0.0, 1.0, 3, 5.0, 9.0)
                    : products::EtaCube::regular(20, 0.0, 1.0, 3, 200.0, 380.0);
}

/// What aare computed from those clusters and cubes (SHA-256 of little-endian doubles):
/// eta2 x and y per cluster (calculate_eta2), the cube, ietax and ietay of both methods, and the
/// photons (x, y, energy) of Interpolator::interpolate<calculate_eta2> for the clusters it does
/// not reject, `outside` being the number it rejects.
struct AareEtaDigest {
  const char* name;
  const char* clust;  ///< the clusters as aare read them: the .clust file's SHA-256
  uint64_t clusters;
  uint64_t outside;
  const char* eta;
  const char* cube;
  const char* cdf_ietax;
  const char* cdf_ietay;
  const char* cdf_photons;
  const char* rosenblatt_ietax;
  const char* rosenblatt_ietay;
  const char* rosenblatt_photons;
};

/// The same for eta3 (3 x 3 clusters; aare at this commit does not build calculate_eta3 for
/// larger ones): the eta3 values, a cube of 20 x 20 bins over [-1, 1] with the energy bins
/// above and the 3 x 3 sum as energy, its cdf tables, and the photons of
/// interpolate<calculate_eta3> (aare's other branch: x + ietax, y + ietay).
struct AareEta3Digest {
  const char* name;
  uint64_t outside;
  const char* eta;
  const char* cube;
  const char* ietax;
  const char* ietay;
  const char* photons;
};

inline products::EtaCube eta3_reference_cube(bool calibrated) {
  return calibrated ? products::EtaCube::regular(20, -1.0, 1.0, 3, 5.0, 9.0)
                    : products::EtaCube::regular(20, -1.0, 1.0, 3, 200.0, 380.0);
}

}  // namespace glint::testing
