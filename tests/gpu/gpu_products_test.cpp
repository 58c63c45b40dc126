// The products on the GPU (gpu::ProductsAccumulator, products.device: gpu) against the CPU's
// (products::ProductSums, products.device: cpu), byte for byte: raw 3 x 3 and 5 x 5 and calibrated
// float clusters, both energies, a window, eta, per-pixel spectra, slices and a sub-pixel image,
// over several batches and mid-run; and a whole GPU run (GPU finder, GPU products) against a CPU
// run (CPU finder, CPU products) on the same frames.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "glint/config/config.hpp"
#include "glint/gpu/products_accumulator.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/products/eta_calibration_file.hpp"
#include "glint/products/table_eta.hpp"
#include "glint/synthetic.hpp"
#include "gpu_test.hpp"

namespace {

using namespace glint;

/// All products of `frames` (after `dark` dark frames) found by `backend`, through the products'
/// consumer (on `device`: 3 CPU workers, or the GPU) into a run file, read back.
pipeline::RunFileContents products_of(Backend backend, const FinderParams& params,
                                  const std::vector<uint16_t>& dark,
                                  const std::vector<uint16_t>& frames, std::size_t n,
                                  const std::string& calibration, const std::string& device) {
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
  cfg.products.device = device;
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
  EXPECT_EQ(consumer.on_gpu(), device == "gpu");
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
      products_of(Backend::cpu, params, dark, frames, n, eta.string(), "cpu");
  const pipeline::RunFileContents gpu_file =
      products_of(Backend::gpu, params, dark, frames, n, eta.string(), "gpu");
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

namespace {

constexpr uint32_t kRows = 48, kCols = 64;

/// `frames` frames numbered from `first` (a gap of 29 numbers in the middle), up to `max_per`
/// clusters each, of `size` x `size` values: a photon of uniform energy (0 to 2000 ADU, or 0 to
/// 45 keV for floats) shared between the centre and up to two of its neighbours, over noise.
/// Some clusters are all zeros (eta 0 / 0), some all equal (tied quadrants), and a few lie off the
/// 48 x 64 detector (never counted).
ClusterTable random_clusters(int size, bool calibrated, uint64_t first, std::size_t frames,
                             int max_per, uint32_t seed) {
  std::mt19937 rng(seed);
  ClusterTable t(size, calibrated ? ClusterValues::float32 : ClusterValues::int32);
  std::uniform_int_distribution<int> n_dist(0, max_per), x_dist(0, kCols + 1),
      y_dist(0, kRows + 1), kind(0, 39), neighbour(0, 7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int n = size * size;
  const int c = n / 2;
  const int around[8] = {c - size - 1, c - size, c - size + 1, c - 1,
                         c + 1,        c + size - 1, c + size, c + size + 1};
  std::vector<double> e(n);
  std::vector<int32_t> iv(n);
  std::vector<float> fv(n);
  const double top = calibrated ? 45.0 : 2000.0, noise = calibrated ? 0.3 : 30.0;
  for (std::size_t f = 0; f < frames; ++f) {
    t.begin_frame(first + f + (f >= frames / 2 ? 29 : 0));
    const int count = n_dist(rng);
    for (int k = 0; k < count; ++k) {
      const int what = kind(rng);
      for (int j = 0; j < n; ++j) e[j] = (unit(rng) * 2.0 - 1.0) * noise;
      const double amp = unit(rng) * top, f1 = 0.3 + 0.7 * unit(rng), f2 = unit(rng);
      e[c] += amp * f1;
      e[around[neighbour(rng)]] += amp * (1.0 - f1) * f2;
      e[around[neighbour(rng)]] += amp * (1.0 - f1) * (1.0 - f2);
      for (int j = 0; j < n; ++j) {
        const double v = what == 0 ? 0.0 : (what == 1 ? top / 40 : e[j]);
        iv[j] = static_cast<int32_t>(std::lround(v));
        fv[j] = static_cast<float>(v);
      }
      const auto x = static_cast<uint16_t>(x_dist(rng));
      const auto y = static_cast<uint16_t>(y_dist(rng));
      if (calibrated) t.add_cluster(x, y, std::span<const float>(fv));
      else t.add_cluster(x, y, std::span<const int32_t>(iv));
    }
  }
  return t;
}

/// Frames [a, b) of `t` as a table of their own.
ClusterTable frames_of(const ClusterTable& t, std::size_t a, std::size_t b) {
  ClusterTable out(t.cluster_size(), t.value_type());
  const bool floats = t.value_type() == ClusterValues::float32;
  std::vector<float> v(t.values_per_cluster());
  for (std::size_t k = a; k < b; ++k) {
    const FrameRecord& r = t.frames()[k];
    out.begin_frame(r.frame_number);
    for (uint64_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i) {
      if (!floats) {
        out.add_cluster(t.x()[i], t.y()[i], t.cluster_data(i));
        continue;
      }
      for (std::size_t j = 0; j < v.size(); ++j) v[j] = t.float_value(i, j);
      out.add_cluster(t.x()[i], t.y()[i], std::span<const float>(v));
    }
  }
  return out;
}

/// An eta calibration (cdf) of the clusters' own eta2, whose energy axis ends below the largest
/// 2 x 2 sums (so that some clusters fall outside it).
std::shared_ptr<const products::EtaCalibration> calibration_of(const ClusterTable& t,
                                                               bool calibrated) {
  auto cube = products::EtaCube::regular(12, 0.0, 1.0, 3, 0.0, calibrated ? 33.0 : 1500.0);
  for (std::size_t i = 0; i < t.n_clusters(); ++i) {
    if (calibrated) cube.add(products::eta2_float(t, i));
    else cube.add(products::eta2_int(t, i));
  }
  return std::make_shared<const products::EtaCalibration>(cube, products::EtaMethod::cdf);
}

products::ProductSettings settings_for(int size, bool calibrated, products::EnergyKind energy,
                                       std::shared_ptr<const products::EtaCalibration> cal) {
  products::ProductSettings s;
  s.rows = kRows;
  s.cols = kCols;
  s.cluster_size = size;
  s.calibrated = calibrated;
  s.energy = energy;
  s.emin = calibrated ? 1.5 : 100.0;
  s.emax = calibrated ? 40.0 : 1800.0;
  s.slice_frames = 64;
  // From above the window's low end to below its high end: underflow and overflow both.
  s.spectrum = calibrated ? products::Binning{2.0, 30.0, 300, false}
                          : products::Binning{150.0, 1500.0, 250, false};
  s.pixel_spectra = true;
  s.eta = true;
  s.eta_bins = 40;
  s.subpixel = std::move(cal);
  s.subpixel_calibration = "in memory";
  s.subpixel_factor = 3;
  return s;
}

/// Every field, for a readable failure, then the whole (operator== also compares the slices).
void expect_same(const products::ProductSums& gpu, const products::ProductSums& cpu) {
  EXPECT_EQ(gpu.clusters, cpu.clusters);
  EXPECT_EQ(gpu.frames, cpu.frames);
  EXPECT_EQ(gpu.hitmap, cpu.hitmap);
  EXPECT_EQ(gpu.energy, cpu.energy);
  EXPECT_EQ(gpu.spectrum, cpu.spectrum);
  EXPECT_EQ(gpu.underflow, cpu.underflow);
  EXPECT_EQ(gpu.overflow, cpu.overflow);
  EXPECT_EQ(gpu.pixel_spectra, cpu.pixel_spectra);
  EXPECT_EQ(gpu.eta2, cpu.eta2);
  EXPECT_EQ(gpu.eta3, cpu.eta3);
  EXPECT_EQ(gpu.eta2_outside, cpu.eta2_outside);
  EXPECT_EQ(gpu.eta3_outside, cpu.eta3_outside);
  EXPECT_EQ(gpu.slices(), cpu.slices());
  ASSERT_EQ(gpu.subpixel.has_value(), cpu.subpixel.has_value());
  if (cpu.subpixel) {
    EXPECT_TRUE(std::ranges::equal(gpu.subpixel->counts(), cpu.subpixel->counts()));
    EXPECT_EQ(gpu.subpixel->outside(), cpu.subpixel->outside());
  }
  EXPECT_EQ(gpu.subpixel_outside, cpu.subpixel_outside);
  EXPECT_TRUE(gpu == cpu);
}

struct Case {
  int size;
  bool calibrated;
  products::EnergyKind energy;
};

}  // namespace

TEST(GpuProducts, AccumulatorEqualsProductSumsByteForByteOverBatchesAndMidRun) {
  GLINT_REQUIRE_GPU();
  for (const Case c : {Case{3, false, products::EnergyKind::sum},
                       Case{3, false, products::EnergyKind::quadrant},
                       Case{5, false, products::EnergyKind::sum},
                       Case{5, false, products::EnergyKind::quadrant},
                       Case{3, true, products::EnergyKind::sum},
                       Case{3, true, products::EnergyKind::quadrant},
                       Case{5, true, products::EnergyKind::sum}}) {
    SCOPED_TRACE(::testing::Message() << c.size << " x " << c.size
                                      << (c.calibrated ? " float" : " int32") << ", energy "
                                      << products::energy_kind_name(c.energy));
    // 3400 frames, the last 3000 in one batch of ~150000 clusters: more than a staging buffer
    // holds at first (131072), so it grows mid-run.
    const ClusterTable all = random_clusters(c.size, c.calibrated, 7000, 3400, 100, 23 + c.size);
    const products::ProductSettings s =
        settings_for(c.size, c.calibrated, c.energy, calibration_of(all, c.calibrated));
    gpu::ProductsAccumulator acc(s, 0, 3);  // large batches copied in parts by 4 threads
    products::ProductSums cpu(s);
    const uint64_t origin = all.frames().front().frame_number;
    std::size_t at = 0;
    int batch = 0;
    for (std::size_t n : {1, 7, 0, 64, 200, 128, 3000}) {
      const ClusterTable part = frames_of(all, at, std::min(all.n_frames(), at + n));
      at += n;
      acc.add(part, origin);
      cpu.add(part, origin);
      if (++batch == 4) {
        // Mid-run: the sums so far (slices included), then a slice taken from both.
        expect_same(acc.sums(), cpu);
        EXPECT_EQ(acc.batches_done(), 4u);
        EXPECT_EQ(acc.take_slice(0), cpu.take_slice(0));
        EXPECT_EQ(acc.take_slice(99), cpu.take_slice(99));  // none: zeros
      }
    }
    ASSERT_EQ(at, all.n_frames());
    acc.flush();
    EXPECT_EQ(acc.batches_done(), 7u);
    const products::ProductSums gpu = acc.sums();
    // Real values: the window, the spectrum, eta and the calibration each leave some out.
    EXPECT_GT(cpu.clusters, 50000u);
    EXPECT_LT(cpu.clusters, all.n_clusters());
    EXPECT_GT(cpu.overflow, 0u);
    EXPECT_GT(cpu.underflow, 0u);
    EXPECT_GT(cpu.eta2_outside, 0u);
    EXPECT_GT(cpu.eta3_outside, 0u);
    EXPECT_GT(cpu.subpixel->outside(), 0u);  // positions off the detector
    EXPECT_GT(cpu.subpixel_outside, 0u);
    EXPECT_GT(cpu.subpixel->total(), cpu.clusters / 2);
    EXPECT_GT(cpu.slices().size(), 40u);
    expect_same(gpu, cpu);
    // Without the per-pixel spectra (the live view's download) the rest is the same.
    products::ProductSums light = acc.sums(false);
    EXPECT_TRUE(light.pixel_spectra.empty());
    light.pixel_spectra = cpu.pixel_spectra;
    EXPECT_TRUE(light == cpu);
  }
}

TEST(GpuProducts, AccumulatorWithoutOptionalProductsAndWithoutWindow) {
  GLINT_REQUIRE_GPU();
  const ClusterTable all = random_clusters(3, false, 10, 300, 60, 5);
  products::ProductSettings s = settings_for(3, false, products::EnergyKind::sum, nullptr);
  s.emin = -std::numeric_limits<double>::infinity();
  s.emax = std::numeric_limits<double>::infinity();
  s.hitmap = false;
  s.slice_frames = 0;
  s.pixel_spectra = false;
  s.eta = false;
  s.spectrum = {-100.0, 2500.0, 5000, false};  // more bins than the kernel keeps per block
  gpu::ProductsAccumulator acc(s);
  products::ProductSums cpu(s);
  for (std::size_t at = 0; at < all.n_frames(); at += 37) {
    const ClusterTable part = frames_of(all, at, std::min(all.n_frames(), at + 37));
    acc.add(part, 10);
    cpu.add(part, 10);
  }
  const products::ProductSums gpu = acc.sums();
  EXPECT_TRUE(gpu.hitmap.empty());
  EXPECT_TRUE(gpu.eta2.empty());
  EXPECT_FALSE(gpu.subpixel.has_value());
  // Every cluster on the detector counts (no window).
  uint64_t on = 0;
  for (std::size_t i = 0; i < all.n_clusters(); ++i)
    on += all.x()[i] < kCols && all.y()[i] < kRows;
  EXPECT_EQ(cpu.clusters, on);
  expect_same(gpu, cpu);
}

TEST(GpuProducts, AccumulatorRefusesTablesThatDoNotFitAndOtherClusters) {
  GLINT_REQUIRE_GPU();
  products::ProductSettings s = settings_for(3, false, products::EnergyKind::sum, nullptr);
  s.rows = 20000;
  s.cols = 20000;
  s.spectrum.bins = 1000;  // 1.6 TB of per-pixel spectra
  try {
    gpu::ProductsAccumulator acc(s);
    ADD_FAILURE() << "tables larger than the device accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("MiB of device memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("products.device: cpu"), std::string::npos) << e.what();
  }
  gpu::ProductsAccumulator acc(settings_for(3, false, products::EnergyKind::sum, nullptr));
  EXPECT_THROW(acc.add(ClusterTable(5)), std::invalid_argument);
  EXPECT_THROW(acc.add(ClusterTable(3, ClusterValues::float32)), std::invalid_argument);
}

TEST(GpuProducts, ConsumerOnTheGpuEqualsTheConsumerOnTheCpu) {
  GLINT_REQUIRE_GPU();
  const ClusterTable all = random_clusters(3, false, 500, 900, 80, 41);
  config::Config cfg;
  cfg.detector.rows = kRows;
  cfg.detector.cols = kCols;
  cfg.products.slice_frames = 0;  // mid-run snapshots hold no slices taken at worker pace
  cfg.products.pixel_spectra = true;
  cfg.products.eta = true;
  cfg.products.energy_window = {100, 1800};
  FinderParams finder;
  finder.shape = {kRows, kCols};
  auto run = [&](const std::string& device, bool check_mid_run) -> products::ProductSums {
    cfg.products.device = device;
    pipeline::ProductsConsumer consumer({}, 2, 2);
    consumer.on_start(pipeline::RunContext{cfg, 1, "", finder, "cpu"});
    EXPECT_EQ(consumer.on_gpu(), device == "gpu");
    EXPECT_EQ(consumer.threads(), device == "gpu" ? 0u : 2u);
    products::ProductSums direct(pipeline::product_settings(cfg.products, finder));
    for (std::size_t at = 0; at < all.n_frames(); at += 100) {
      const ClusterTable part = frames_of(all, at, std::min(all.n_frames(), at + 100));
      consumer.on_batch(pipeline::FoundBatch{part, {}});
      direct.add(part, 500);
      if (check_mid_run && at == 300) {
        // The GPU's snapshot waits for the batches added: exactly the sums so far.
        expect_same(consumer.snapshot(), direct);
        const auto images = consumer.preview_images();
        std::vector<double> hitmap(direct.hitmap.begin(), direct.hitmap.end());
        EXPECT_EQ(images.at(0).values, hitmap);
      }
    }
    consumer.on_end(pipeline::RunEnd{});
    EXPECT_EQ(consumer.stats().frames, all.n_frames());
    EXPECT_EQ(consumer.stats().failed, 0u);
    products::ProductSums result = consumer.snapshot();
    expect_same(result, direct);
    return result;
  };
  const products::ProductSums gpu = run("gpu", true);
  const products::ProductSums cpu = run("cpu", false);
  EXPECT_GT(cpu.clusters, 10000u);
  expect_same(gpu, cpu);
}
