#pragma once
// Helpers shared by the tests: synthetic runs through any finder, SHA-256 digests of data and files.
#include <openssl/evp.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/modular_finder.hpp"
#include "glint/synthetic.hpp"

namespace glint::testing {

inline std::string sha256(const void* data, std::size_t bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data, bytes, md, &len, EVP_sha256(), nullptr);
  std::string hex;
  char buf[3];
  for (unsigned int i = 0; i < len; ++i) {
    std::snprintf(buf, sizeof buf, "%02x", md[i]);
    hex += buf;
  }
  return hex;
}

template <class T>
std::string sha256(const std::vector<T>& v) {
  return sha256(v.data(), v.size() * sizeof(T));
}

/// The SHA-256 of a file's bytes (of no bytes when it cannot be read).
inline std::string file_sha256(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  return sha256(bytes.data(), bytes.size());
}

/// A synthetic run held in memory: dark frames then data frames (frame number = index).
struct SyntheticRun {
  synth::Config config;
  uint64_t data_frames = 0;
  std::vector<uint16_t> frames;  // dark then data

  SyntheticRun(const synth::Config& c, uint64_t n_data) : config(c), data_frames(n_data) {
    const synth::Generator gen(config);
    frames.resize((config.dark_frames + data_frames) * config.shape.pixels());
    gen.fill_many(0, config.dark_frames + data_frames, frames, 2);
  }
  std::span<const uint16_t> dark() const {
    return std::span<const uint16_t>(frames).first(config.dark_frames * config.shape.pixels());
  }
  std::span<const uint16_t> data() const {
    return std::span<const uint16_t>(frames).subspan(config.dark_frames * config.shape.pixels());
  }
  std::vector<uint64_t> data_numbers() const {
    std::vector<uint64_t> n(data_frames);
    for (uint64_t k = 0; k < data_frames; ++k) n[k] = config.dark_frames + k;
    return n;
  }
};

/// Runs `finder` over the run: all dark frames, then the data frames in chunks of `chunk` frames.
inline ClusterTable run_finder(ClusterFinder& finder, const SyntheticRun& run,
                               std::size_t chunk = 1u << 30) {
  finder.push_dark(run.dark());
  ClusterTable out = make_result_table(finder.params());
  const auto numbers = run.data_numbers();
  const std::size_t np = run.config.shape.pixels();
  for (std::size_t k = 0; k < numbers.size(); k += chunk) {
    const std::size_t n = std::min(chunk, numbers.size() - k);
    finder.find(run.data().subspan(k * np, n * np), std::span(numbers).subspan(k, n), out);
  }
  return out;
}

/// The clusters of `t` (in image coordinates and orientation) centred in module `r`, moved to the
/// module's native coordinates and orientation, one record per frame of `t` (a detector of
/// modules against each module found alone).
inline ClusterTable clusters_in(const ClusterTable& t, const ModuleRegion& r) {
  ClusterTable out(t.cluster_size(), t.value_type(), t.has_gain_counts());
  std::vector<int32_t> values;
  for (const FrameRecord& rec : t.frames()) {
    out.begin_frame(rec.frame_number);
    for (std::size_t i = rec.first_cluster; i < rec.first_cluster + rec.n_clusters; ++i) {
      const uint32_t x = t.x()[i], y = t.y()[i];
      if (x < r.col0 || x >= r.col0 + r.shape.cols || y < r.row0 || y >= r.row0 + r.shape.rows)
        continue;
      const auto d = t.cluster_data(i);
      values.assign(d.begin(), d.end());
      orient_window(r.orientation, t.cluster_size(), values);
      const auto nx = static_cast<uint16_t>(r.native_x(x));
      const auto ny = static_cast<uint16_t>(r.native_y(y));
      if (t.value_type() == ClusterValues::int32) {
        out.add_cluster(nx, ny, values);
      } else {
        std::vector<float> f(values.size());
        for (std::size_t k = 0; k < f.size(); ++k) f[k] = std::bit_cast<float>(values[k]);
        out.add_cluster(nx, ny, f);
      }
    }
  }
  return out;
}

/// Finder parameters for the tests: `shape`, cluster size, n_sigma and pedestal window.
inline FinderParams finder_params(FrameShape shape, int size, double n_sigma,
                                  uint32_t window = 1000) {
  FinderParams p;
  p.shape = shape;
  p.cluster_size = size;
  p.n_sigma = n_sigma;
  p.pedestal_window = window;
  return p;
}

/// The JUNGFRAU frames aare's own chain was run on (docs/cluster-finding.md, "Checked against
/// aare"): `glint synth --rows 128 --cols 256 --dark 1000 --frames 300 --photons 60 --jungfrau
/// --gain-switch-rate 2e-3 --dark-switch-rate 2e-4 --invalid-gain-rate 1e-4 --seed 21`.
inline synth::Config aare_jungfrau_frames() {
  synth::Config c;
  c.shape = {128, 256};
  c.seed = 21;
  c.dark_frames = 1000;
  c.photons = 60;
  c.jungfrau = true;
  c.gain_switch_rate = 2e-3;
  c.dark_switch_rate = 2e-4;
  c.invalid_gain_rate = 1e-4;
  return c;
}
inline constexpr uint64_t kAareJungfrauDataFrames = 300;

/// The .clust digests aare's apply_calibration + ClusterFinder<Cluster<float, S, S>, double,
/// double> + ClusterFile gave for those frames, with the generator's gain maps and G1/G2
/// pedestals.
struct AareDigest {
  int size;
  double n_sigma;
  const char* sha;
};
inline constexpr AareDigest kAareJungfrauDigests[] = {
    {3, 5.0, "9607e86dedfc2f01d2765bfa0ced23a5c25426d28c557c5f15e4fd822723ed92"},
    {3, 3.0, "57c8a1ed0da00eee3546c1650295697f2ca2a9079faff24308497822be93ec89"},
    {5, 5.0, "7f9348decd171de841ca5a53a81ef6140460cfe9ec93c7e49bfde4f68e4f2648"},
    {5, 3.0, "a764d7a98016e75449a1387a045f47267f4efc74cf665361597cec71fff7b95c"},
};

}  // namespace glint::testing
