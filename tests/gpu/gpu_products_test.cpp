// The products of a GPU run against those of the CPU backend on the same frames: the clusters are
// byte-identical, so every product (hit map, energy image, slices, spectra, eta, sub-pixel
// image) must be too.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <numeric>
#include <vector>

#include "glint/config/config.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/products/eta_calibration_file.hpp"
#include "glint/synthetic.hpp"
#include "gpu_test.hpp"

namespace {

using namespace glint;

/// All products of `frames` (after `dark` dark frames) found by `backend`, through the products'
/// consumer with 3 workers into a run file, read back.
pipeline::RunFileContents products_of(Backend backend, const FinderParams& params,
                                  const std::vector<uint16_t>& dark,
                                  const std::vector<uint16_t>& frames, std::size_t n,
                                  const std::string& calibration) {
  pipeline::FinderOptions options;
  options.backend = backend;
  options.batch_frames = 64;
  auto finder = pipeline::make_finder(params, options);
  finder->push_dark(dark);
  config::Config cfg;
  cfg.detector.rows = params.shape.rows;
  cfg.detector.cols = params.shape.cols;
  cfg.products.slice_frames = 50;
  cfg.products.pixel_spectra = true;
  cfg.products.eta = true;
  cfg.products.energy_window = {40, 5000};
  cfg.products.subpixel_calibration = calibration;
  cfg.products.subpixel_factor = 4;
  const auto path = std::filesystem::temp_directory_path() /
                    ("gpu_products_" + std::to_string(::getpid()) + ".h5");
  std::filesystem::remove(path);
  pipeline::RunMetadata meta;
  meta.finder = params;
  meta.cluster_energy = true;
  meta.slice_frames = cfg.products.slice_frames;
  pipeline::RunFileWriter file(path, meta);
  pipeline::ProductsConsumer consumer([&file] { return &file; }, 3, 4);
  consumer.on_start(pipeline::RunContext{cfg, 1, "", params, finder->description()});
  const std::size_t np = params.shape.pixels();
  ClusterTable table = make_result_table(params);
  for (std::size_t f = 0; f < n; f += 64) {
    const std::size_t k = std::min<std::size_t>(64, n - f);
    std::vector<uint64_t> numbers(k);
    for (std::size_t i = 0; i < k; ++i) numbers[i] = 1000 + f + i;
    table.clear();
    finder->find(std::span<const uint16_t>(frames).subspan(f * np, k * np), numbers, table);
    file.append(table);
    consumer.on_batch(pipeline::FoundBatch{table, {}});
  }
  consumer.on_end(pipeline::RunEnd{});
  file.close(nullptr);
  pipeline::RunFileContents contents = pipeline::read_run_file(path);
  std::filesystem::remove(path);
  return contents;
}

}  // namespace

TEST(GpuProducts, EveryProductOfTheGpuFinderEqualsTheCpuBackendsByteForByte) {
  GLINT_REQUIRE_GPU();
  FinderParams params;
  params.shape = {256, 384};
  params.pedestal_window = 200;
  synth::Config c;
  c.shape = params.shape;
  c.seed = 17;
  c.dark_frames = 200;
  c.photons = 400;
  const synth::Generator gen(c);
  const std::size_t n = 600;
  std::vector<uint16_t> dark(200 * params.shape.pixels()), frames(n * params.shape.pixels());
  gen.fill_many(0, 200, dark);
  gen.fill_many(200, n, frames);
  // An eta calibration of a flat cube (every eta bin alike, one energy bin up to 5000 ADU).
  const auto eta = std::filesystem::temp_directory_path() /
                   ("gpu_products_" + std::to_string(::getpid()) + "_eta.h5");
  auto cube = products::EtaCube::regular(20, -0.1, 1.1, 1, 0.0, 5000.0);
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 20; ++j) cube.add(-0.1 + (i + 0.5) * 0.06, -0.1 + (j + 0.5) * 0.06, 300);
  products::write_eta_calibration(
      eta, {cube, products::EtaCalibration(cube, products::EtaMethod::cdf), 3, 400, {"flat"}},
      true);
  const pipeline::RunFileContents cpu_file =
      products_of(Backend::cpu, params, dark, frames, n, eta.string());
  const pipeline::RunFileContents gpu_file =
      products_of(Backend::gpu, params, dark, frames, n, eta.string());
  std::filesystem::remove(eta);
  ASSERT_EQ(gpu_file.clusters, cpu_file.clusters);
  EXPECT_EQ(gpu_file.cluster_energy, cpu_file.cluster_energy);
  EXPECT_EQ(gpu_file.cluster_energy_2x2, cpu_file.cluster_energy_2x2);
  const pipeline::ProductsContents& cpu = cpu_file.products;
  const pipeline::ProductsContents& gpu = gpu_file.products;
  ASSERT_GT(cpu.clusters, 100000u);
  EXPECT_EQ(gpu.frames, n);
  EXPECT_EQ(gpu.clusters, cpu.clusters);
  EXPECT_EQ(gpu.hitmap, cpu.hitmap);
  EXPECT_EQ(gpu.energy_image, cpu.energy_image);
  EXPECT_EQ(gpu.slices, cpu.slices);
  EXPECT_EQ(gpu.slice_frame_start, cpu.slice_frame_start);
  EXPECT_EQ(gpu.slice_frame_start.size(), 12u);
  EXPECT_EQ(gpu.spectrum, cpu.spectrum);
  EXPECT_EQ(gpu.underflow, cpu.underflow);
  EXPECT_EQ(gpu.overflow, cpu.overflow);
  EXPECT_EQ(gpu.pixel_spectra, cpu.pixel_spectra);
  EXPECT_EQ(gpu.eta2, cpu.eta2);
  EXPECT_EQ(gpu.eta3, cpu.eta3);
  EXPECT_EQ(gpu.eta2_outside, cpu.eta2_outside);
  EXPECT_EQ(gpu.eta3_outside, cpu.eta3_outside);
  EXPECT_GT(std::accumulate(cpu.subpixel.begin(), cpu.subpixel.end(), uint64_t{0}),
            cpu.clusters / 2);
  EXPECT_EQ(gpu.subpixel, cpu.subpixel);
  EXPECT_EQ(gpu.subpixel_outside, cpu.subpixel_outside);
  EXPECT_EQ(gpu.subpixel_off_detector, cpu.subpixel_off_detector);
}
