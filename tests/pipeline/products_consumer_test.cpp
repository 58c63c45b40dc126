// ProductsConsumer on its own: the same clusters in other batchings, with other numbers of
// workers and queue lengths, give the same products to the byte, written into the run file
// (slices as they complete) and read back.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <numeric>
#include <random>

#include "../common/products_check.hpp"
#include "glint/config/config.hpp"
#include "glint/gpu/device.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/products/eta_calibration_file.hpp"
#include "glint/products/table_eta.hpp"

using namespace glint;
using namespace glint::pipeline;

namespace {

constexpr uint32_t kRows = 30, kCols = 40;

/// 400 frames numbered from 5000 (a gap of 37 missing numbers after frame 5200), up to 40
/// clusters each.
ClusterTable clusters() {
  std::mt19937 rng(11);
  ClusterTable t(3);
  std::uniform_int_distribution<int> n_dist(0, 40), x_dist(0, kCols - 1), y_dist(0, kRows - 1);
  std::uniform_int_distribution<int> v_dist(-30, 400);
  for (uint64_t f = 0; f < 400; ++f) {
    t.begin_frame(5000 + f + (f > 200 ? 37 : 0));
    const int n = n_dist(rng);
    for (int c = 0; c < n; ++c) {
      int32_t v[9];
      for (int k = 0; k < 9; ++k) v[k] = v_dist(rng);
      v[4] += 300;
      t.add_cluster(static_cast<uint16_t>(x_dist(rng)), static_cast<uint16_t>(y_dist(rng)),
                    std::span<const int32_t>(v, 9));
    }
  }
  return t;
}

ClusterTable frames_of(const ClusterTable& t, std::size_t a, std::size_t b) {
  ClusterTable out(3);
  for (std::size_t k = a; k < b; ++k) {
    const FrameRecord& r = t.frames()[k];
    out.begin_frame(r.frame_number);
    for (uint64_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i)
      out.add_cluster(t.x()[i], t.y()[i], t.cluster_data(i));
  }
  return out;
}

/// An eta calibration (cdf) of the clusters' own eta2 whose energy axis ends at 1500 ADU, so
/// that clusters with a larger 2 x 2 sum fall outside it; written once per process.
const std::filesystem::path& calibration_path() {
  static const std::filesystem::path path = [] {
    const auto p = std::filesystem::temp_directory_path() /
                   ("products_consumer_" + std::to_string(::getpid()) + "_eta.h5");
    const ClusterTable t = clusters();
    auto cube = products::EtaCube::regular(10, 0.0, 1.0, 4, 0.0, 1500.0);
    for (std::size_t i = 0; i < t.n_clusters(); ++i) cube.add(products::eta2_int(t, i));
    products::EtaCalibrationFile f{cube, products::EtaCalibration(cube, products::EtaMethod::cdf),
                                   3, cube.added(), {"clusters"}};
    products::write_eta_calibration(p, f, true);
    return p;
  }();
  // Registered once the path exists, so it runs before the path is destroyed.
  [[maybe_unused]] static const bool cleanup =
      std::atexit([] { std::filesystem::remove(calibration_path()); }) == 0;
  return path;
}

/// The calibration as the run reads it.
const products::EtaCalibration& calibration() {
  static const products::EtaCalibrationFile f = products::read_eta_calibration(calibration_path());
  return f.calibration;
}

config::Config products_config() {
  config::Config cfg;
  cfg.detector.rows = kRows;
  cfg.detector.cols = kCols;
  cfg.products.slice_frames = 64;
  cfg.products.pixel_spectra = true;
  cfg.products.eta = true;
  cfg.products.energy_window = {100, 1800};
  cfg.products.cluster_energy = true;
  cfg.products.subpixel_calibration = calibration_path().string();
  cfg.products.subpixel_factor = 4;
  return cfg;
}

/// Runs the clusters through a consumer (`threads` workers, `queue` batches, batches of
/// `batch` frames) into a fresh run file and reads it back.
RunFileContents run(const ClusterTable& all, unsigned threads, std::size_t queue,
                    std::size_t batch, const std::string& name) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("products_consumer_" + std::to_string(::getpid()) + "_" + name + ".h5");
  std::filesystem::remove(path);
  const config::Config cfg = products_config();
  FinderParams finder;
  finder.shape = {kRows, kCols};
  RunMetadata meta;
  meta.finder = finder;
  meta.cluster_energy = true;
  meta.slice_frames = cfg.products.slice_frames;
  {
    RunFileWriter file(path, meta);
    ProductsConsumer products([&file] { return &file; }, threads, queue);
    products.on_start(RunContext{cfg, 1, path, finder, "cpu"});
    for (std::size_t at = 0; at < all.n_frames(); at += batch) {
      const ClusterTable part = frames_of(all, at, std::min(all.n_frames(), at + batch));
      file.append(part);
      products.on_batch(FoundBatch{part, {}});
    }
    products.on_end(RunEnd{});
    EXPECT_EQ(products.stats().frames, all.n_frames());
    EXPECT_EQ(products.stats().dropped, 0u);
    EXPECT_EQ(products.stats().failed, 0u);
    file.close(nullptr);
  }
  RunFileContents f = read_run_file(path);
  std::filesystem::remove(path);
  return f;
}

}  // namespace

TEST(ProductsConsumer, ProductsDoNotDependOnBatchesWorkersOrQueueLength) {
  const ClusterTable all = clusters();
  const RunFileContents one = run(all, 1, 1, 400, "one");
  glint::testing::PlainProductParams p;
  p.emin = 100;
  p.emax = 1800;
  p.slice_frames = 64;
  p.calibration = &calibration();
  p.subpixel_factor = 4;
  glint::testing::expect_file_products(one, p);
  // Real values: most positions land on the detector, some clusters fall outside the
  // calibration's energy axis.
  EXPECT_GT(std::accumulate(one.products.subpixel.begin(), one.products.subpixel.end(),
                            uint64_t{0}),
            one.products.clusters / 2);
  EXPECT_GT(one.products.subpixel_outside, 0u);
  EXPECT_EQ(one.products.subpixel_calibration, calibration_path().string());
  glint::testing::expect_cluster_energies(one);
  // 400 frames over 437 frame numbers from 5000: 7 slices of 64, the last one partial.
  EXPECT_EQ(one.products.slice_frame_start,
            (std::vector<uint64_t>{5000, 5064, 5128, 5192, 5256, 5320, 5384}));
  // Batches of 400 frames are copied into the queue in parts by the run's thread and the
  // workers at once (about 2048 clusters a part); smaller ones whole.
  for (auto [threads, queue, batch] : {std::tuple{4u, 1u, 7u}, std::tuple{3u, 8u, 64u},
                                       std::tuple{2u, 2u, 1u}, std::tuple{4u, 3u, 400u},
                                       std::tuple{2u, 1u, 200u}}) {
    const RunFileContents other = run(all, threads, queue, batch, "other");
    const ProductsContents& a = one.products;
    const ProductsContents& b = other.products;
    SCOPED_TRACE(::testing::Message() << threads << " workers, queue " << queue << ", batches of "
                                      << batch);
    EXPECT_EQ(a.clusters, b.clusters);
    EXPECT_EQ(a.frames, b.frames);
    EXPECT_EQ(a.hitmap, b.hitmap);
    EXPECT_EQ(a.energy_image, b.energy_image);
    EXPECT_EQ(a.slices, b.slices);
    EXPECT_EQ(a.slice_frame_start, b.slice_frame_start);
    EXPECT_EQ(a.spectrum, b.spectrum);
    EXPECT_EQ(a.underflow, b.underflow);
    EXPECT_EQ(a.overflow, b.overflow);
    EXPECT_EQ(a.pixel_spectra, b.pixel_spectra);
    EXPECT_EQ(a.eta2, b.eta2);
    EXPECT_EQ(a.eta3, b.eta3);
    EXPECT_EQ(a.subpixel, b.subpixel);
    EXPECT_EQ(a.subpixel_outside, b.subpixel_outside);
    EXPECT_EQ(a.subpixel_off_detector, b.subpixel_off_detector);
    EXPECT_EQ(other.cluster_energy, one.cluster_energy);
  }
}

namespace {

/// The products_config() products of `t`, computed plainly from its clusters.
auto plain_of_config(const ClusterTable& t) {
  glint::testing::PlainProductParams p;
  p.rows = kRows;
  p.cols = kCols;
  p.emin = 100;
  p.emax = 1800;
  p.calibration = &calibration();
  p.subpixel_factor = 4;
  return glint::testing::plain_products(t, p, 5000);
}

}  // namespace

TEST(ProductsConsumer, PreviewImagesFollowTheRunAndNeedNoFile) {
  const ClusterTable all = clusters();
  config::Config cfg = products_config();
  cfg.products.slice_frames = 0;
  FinderParams finder;
  finder.shape = {kRows, kCols};
  ProductsConsumer products({}, 2, 2);
  EXPECT_TRUE(products.preview_images().empty());  // before the start
  products.on_start(RunContext{cfg, 1, "", finder, "cpu"});
  products.on_batch(FoundBatch{frames_of(all, 0, 100), {}});
  products.on_end(RunEnd{});
  const auto images = products.preview_images();
  ASSERT_EQ(images.size(), 4u);
  const auto want = plain_of_config(frames_of(all, 0, 100));
  EXPECT_EQ(images[0].frames, 100u);
  for (std::size_t i = 0; i < want.hitmap.size(); ++i) {
    ASSERT_EQ(images[0].values[i], static_cast<double>(want.hitmap[i]));
    ASSERT_EQ(images[1].values[i], want.energy_image[i]);
  }
  for (std::size_t i = 0; i < want.spectrum.size(); ++i)
    ASSERT_EQ(images[2].values[i], static_cast<double>(want.spectrum[i]));
  EXPECT_EQ(images[3].what, "subpixel");
  EXPECT_EQ(images[3].rows, kRows * 4);
  EXPECT_EQ(images[3].cols, kCols * 4);
  ASSERT_EQ(images[3].values.size(), want.subpixel.size());
  for (std::size_t i = 0; i < want.subpixel.size(); ++i)
    ASSERT_EQ(images[3].values[i], static_cast<double>(want.subpixel[i]));
  EXPECT_EQ(products.snapshot().clusters, want.clusters);
}

TEST(ProductsConsumer, DrainAccumulatesEverythingHandedInAndEndsNothing) {
  const ClusterTable all = clusters();
  config::Config cfg = products_config();
  cfg.products.slice_frames = 0;
  FinderParams finder;
  finder.shape = {kRows, kCols};
  ProductsConsumer products({}, 3, 1);  // a short queue: the batches wait for the workers
  products.on_start(RunContext{cfg, 1, "", finder, "cpu"});
  products.drain();  // nothing handed in yet
  for (uint64_t f = 0; f < 100; f += 10) products.on_batch(FoundBatch{frames_of(all, f, f + 10), {}});
  products.drain();
  const auto want = plain_of_config(frames_of(all, 0, 100));
  products::ProductSums got = products.snapshot();
  EXPECT_EQ(got.clusters, want.clusters);
  EXPECT_EQ(got.frames, 100u);
  EXPECT_EQ(got.hitmap, want.hitmap);
  // Still running: more batches are taken after a drain.
  products.on_batch(FoundBatch{frames_of(all, 100, 120), {}});
  products.on_end(RunEnd{});
  EXPECT_EQ(products.snapshot().frames, 120u);
}

TEST(ProductsConsumer, DeviceChoiceFollowsProductsDevice) {
  config::ProductsConfig pc;
  EXPECT_EQ(products_backend(pc), Backend::auto_select);  // the default
  pc.device = "cpu";
  EXPECT_EQ(products_backend(pc), Backend::cpu);
  pc.device = "gpu";
  EXPECT_EQ(products_backend(pc), Backend::gpu);
  pc.device = "cuda";
  try {
    products_backend(pc);
    ADD_FAILURE() << "products.device: cuda accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "products.device: 'cuda' (allowed: auto, cpu, gpu)");
  }

  const std::string why = gpu::unavailable_reason();  // empty where a GPU is usable
  const ClusterTable all = clusters();
  config::Config cfg = products_config();
  cfg.products.slice_frames = 0;
  FinderParams finder;
  finder.shape = {kRows, kCols};
  // cpu: the workers, whatever the machine; auto: the GPU exactly when one is usable. Either
  // way the same products.
  for (const char* device : {"cpu", "auto"}) {
    SCOPED_TRACE(device);
    cfg.products.device = device;
    ProductsConsumer products({}, 2, 2);
    products.on_start(RunContext{cfg, 1, "", finder, "cpu"});
    const bool gpu = std::string(device) == "auto" && why.empty();
    EXPECT_EQ(products.on_gpu(), gpu);
    EXPECT_EQ(products.threads(), gpu ? 0u : 2u);
    products.on_batch(FoundBatch{frames_of(all, 0, 150), {}});
    products.on_end(RunEnd{});
    products::ProductSums want(product_settings(cfg.products, finder));
    want.subpixel.reset();
    products::ProductSums got = products.snapshot();
    got.subpixel.reset();  // the file's calibration: compared in the other tests
    got.subpixel_outside = 0;
    want.add(frames_of(all, 0, 150), 5000);
    EXPECT_EQ(want.clusters, 985u);  // the window leaves some out
    EXPECT_TRUE(got == want);
  }
  // gpu: refused at the run's start, with the reason, where no GPU is usable.
  cfg.products.device = "gpu";
  ProductsConsumer products({}, 2, 2);
  if (why.empty()) {
    products.on_start(RunContext{cfg, 1, "", finder, "cpu"});
    EXPECT_TRUE(products.on_gpu());
    products.on_end(RunEnd{});
  } else {
    try {
      products.on_start(RunContext{cfg, 1, "", finder, "cpu"});
      ADD_FAILURE() << "products.device: gpu accepted without a GPU";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("products.device: GPU backend not available: " + why,
                                            0),
                0u)
          << e.what();
    }
    EXPECT_FALSE(products.on_gpu());
    EXPECT_TRUE(products.preview_images().empty());
  }
}
