#pragma once
// Run files of parts of a modular detector, written through RunFileWriter as glintd writes them
// (clusters in image coordinates, the placement in RunMetadata::modules), for the master-file
// tests.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "glint/pipeline/run_file.hpp"
#include "glint/products/run_products.hpp"

namespace glint::testing {

/// What one part of the detector holds.
struct ModuleRun {
  FrameShape shape{4, 6};
  pipeline::ModuleLayout layout;
  ClusterTable clusters{3};
  double start_base = 0, end_base = 0;  ///< pedestal mean of pixel i: base + i
  bool products = true;                 ///< hit map and energy image
  bool cluster_energy = true;
  bool pixel_mask = false;
  uint32_t mask_base = 0;               ///< pixel_mask value of pixel i: mask_base + i % 3
  bool close = true;                    ///< false: the run never closes (no end_time)
};

/// A pedestal whose mean of pixel i is base + i and whose noise is 2.
inline PedestalState module_pedestal(FrameShape s, double base) {
  PedestalState p(s, 100);
  for (std::size_t i = 0; i < s.pixels(); ++i) {
    p.count[i] = 100;
    p.sum[i] = (base + i) * 100.0;
    p.sum2[i] = (base + i) * (base + i) * 100.0 + 400.0;
  }
  return p;
}

/// `frames` frames starting at frame number `first`; frame f has a cluster at every pixel
/// (x, y) with (x + y + f + seed) % 5 == 0, values from the position.
inline ClusterTable module_clusters(FrameShape s, uint64_t first, int frames, int seed) {
  ClusterTable t(3);
  for (int f = 0; f < frames; ++f) {
    t.begin_frame(first + f);
    for (uint16_t y = 0; y < s.rows; ++y)
      for (uint16_t x = 0; x < s.cols; ++x) {
        if ((x + y + f + seed) % 5 != 0) continue;
        std::vector<int32_t> v(9);
        for (int i = 0; i < 9; ++i) v[i] = seed * 1000 + f * 100 + y * 10 + x + i;
        t.add_cluster(x, y, v);
      }
  }
  return t;
}

/// Writes `run` to `path` (the writer is left open, and the file without end_time, when
/// run.close is false: it is returned then, to be closed by the caller).
inline std::unique_ptr<pipeline::RunFileWriter> write_module_run(
    const std::filesystem::path& path, const ModuleRun& run) {
  pipeline::RunMetadata meta;
  meta.finder.shape = run.shape;
  meta.finder.cluster_size = 3;
  meta.finder.pedestal_window = 100;
  meta.config_yaml = "detector: {}\n";
  meta.detector_type = "moench";
  meta.source = "test";
  meta.backend = "cpu";
  meta.modules = run.layout;
  meta.cluster_energy = run.cluster_energy;
  meta.pixel_mask = run.pixel_mask;
  auto w = std::make_unique<pipeline::RunFileWriter>(path, meta);
  w->write_start_pedestal(module_pedestal(run.shape, run.start_base));
  if (run.pixel_mask) {
    std::vector<uint32_t> mask(run.shape.pixels());
    for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = run.mask_base + i % 3;
    w->write_pixel_mask(mask);
  }
  w->append(run.clusters);
  if (run.products) {
    products::ProductSettings s;
    s.rows = run.shape.rows;
    s.cols = run.shape.cols;
    auto sums = std::make_shared<products::ProductSums>(s);
    sums->add(run.clusters);
    w->set_products(sums);
  }
  w->flush();
  if (!run.close) return w;
  const PedestalState end = module_pedestal(run.shape, run.end_base);
  w->close(&end);
  return nullptr;
}

/// Part `k` (0: top, 1: bottom) of a detector of 8 x 6 pixels and 4 modules of 4 x 3: a 4 x 6
/// image of two modules (ids 2k, 2k + 1) at row 4k.
inline ModuleRun half_of_four_modules(int k) {
  ModuleRun r;
  r.shape = {4, 6};
  r.layout.modules_x = 2;
  r.layout.detector_rows = 8;
  r.layout.detector_cols = 6;
  r.layout.origin_row = 4u * k;
  r.layout.first_module = 2u * k;
  r.clusters = module_clusters(r.shape, 100, 3, k);
  r.start_base = 1000.0 * (k + 1);
  r.end_base = 1000.0 * (k + 1) + 500;
  return r;
}

}  // namespace glint::testing
