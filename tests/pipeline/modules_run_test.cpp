// A detector of modules through the whole run, in-process over loopback: the simulator publishes
// every port, an Acquisition assembles the image and finds each module with its own pedestal and
// finder. Each module's clusters (the .clust file, image coordinates) and end pedestal equal
// those of the reference finder run on that module's images alone.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include "glint/clust_file.hpp"
#include "glint/config/config.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/clust_file_consumer.hpp"
#include "glint/pipeline/detector_pixels.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "gpu_test.hpp"
#include "simulated_run.hpp"
#include "stream_test_util.hpp"
#include "test_data.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;

namespace {

using Case = glint::testing::SimulatedRun;
using glint::testing::clusters_in;

struct Alone {
  ClusterTable clusters;  ///< data frames only, module coordinates
  PedestalState pedestal;
};

/// Module `r` found alone by the reference finder: the images the simulator sent, regenerated,
/// cut to the module; dark and data rows as the run file says.
Alone find_alone(const Case& c, const RunFileContents& f, const ModuleRegion& r) {
  FinderParams image;
  image.shape = {c.cfg.detector.rows, c.cfg.detector.cols};
  image.cluster_size = c.cfg.finder.cluster_size;
  image.n_sigma = c.cfg.finder.n_sigma;
  image.pedestal_window = c.cfg.pedestal.window;
  const FinderParams p = module_params(image, r);
  auto finder = make_reference_finder(p);
  const SimImageSource source(c.sim.image, c.sim.dark_frames);
  std::vector<uint16_t> full(image.shape.pixels()), mine(r.shape.pixels());
  Alone out{make_result_table(p), {}};
  for (const FrameRow& row : f.frames) {
    if (row.flags != kFlagDark && row.flags != 0) continue;
    source.fill(row.frame_number - c.sim.first_frame_number, full);
    extract_module(image.shape, r, full, 1, mine);
    if (row.flags == kFlagDark) {
      finder->push_dark(mine);
    } else {
      const std::vector<uint64_t> fn{row.frame_number};
      finder->find(mine, fn, out.clusters);
    }
  }
  out.pedestal = finder->pedestal();
  return out;
}

/// The clusters the run file holds for module `id` (x, y and values native to it), one record
/// per data frame row.
ClusterTable file_module_clusters(const RunFileContents& f, uint32_t id) {
  ClusterTable out(f.clusters.cluster_size(), f.clusters.value_type());
  for (const FrameRow& row : f.frames) {
    if (row.flags != 0) continue;
    out.begin_frame(row.frame_number);
    for (uint64_t i = row.cluster_offset; i < row.cluster_offset + row.n_clusters; ++i)
      if (f.cluster_module.at(i) == id)
        out.add_cluster(f.clusters.x()[i], f.clusters.y()[i], f.clusters.cluster_data(i));
  }
  return out;
}

/// Runs `c` and checks every module against the module found alone; returns the run file.
RunFileContents expect_each_module_as_found_alone(const Case& c, std::size_t frames) {
  Acquisition run(c.cfg, 1, std::nullopt);
  const SimReport sent = run_stream_simulator(c.sim);
  EXPECT_TRUE(sent.subscribers_seen);
  if (!run.wait(30s)) {
    ADD_FAILURE() << "the run did not end on the end message";
    return RunFileContents();
  }
  const RunStats s = run.stats();
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.incomplete, 0u);
  EXPECT_EQ(s.parts, frames * c.cfg.detector.n_ports());
  EXPECT_NE(s.backend.find(fmt::format("{} modules: {}", c.cfg.detector.n_modules(),
                                      c.cfg.finder.backend)),
            std::string::npos)
      << s.backend;
  RunFileContents f = read_run_file(run.file());
  EXPECT_EQ(f.frames.size(), frames);
  if (!f.end_state) {
    ADD_FAILURE() << "no end pedestal";
    return f;
  }
  const ClusterTable clust = read_clust(clust_file_path(run.file()), c.cfg.finder.cluster_size);
  EXPECT_EQ(clust.n_frames(), s.data_frames);
  EXPECT_EQ(clust.n_clusters(), s.clusters);
  // The modules with their orientations: the .clust file and the pedestal are the image's.
  const auto regions = detector_modules(c.cfg.detector);
  std::size_t total = 0, modules_with_clusters = 0;
  for (std::size_t k = 0; k < regions.size(); ++k) {
    SCOPED_TRACE(fmt::format("module {}", k));
    const Alone alone = find_alone(c, f, regions[k]);
    EXPECT_TRUE(clusters_in(clust, regions[k]) == alone.clusters)
        << "module " << k << ": " << clusters_in(clust, regions[k]).n_clusters() << " clusters, "
        << alone.clusters.n_clusters() << " alone";
    EXPECT_TRUE(extract_pedestal(*f.end_state, regions[k]) == alone.pedestal);
    // The run file holds each module's clusters as the module found them.
    if (f.cluster_module.empty()) continue;
    const uint32_t id = c.cfg.detector.first_module + static_cast<uint32_t>(k);
    EXPECT_TRUE(file_module_clusters(f, id) == alone.clusters) << "module " << k;
    EXPECT_EQ(f.module(id).orientation, regions[k].orientation);
    EXPECT_EQ(f.module(id).region(), (ModuleRegion{regions[k].row0, regions[k].col0,
                                                   regions[k].shape, regions[k].orientation}));
    if (s.module_clusters.size() != regions.size()) {
      ADD_FAILURE() << "clusters of " << s.module_clusters.size() << " modules";
      continue;
    }
    EXPECT_EQ(s.module_clusters[k], alone.clusters.n_clusters());
    total += alone.clusters.n_clusters();
    modules_with_clusters += alone.clusters.n_clusters() > 0;
  }
  EXPECT_EQ(clust.n_clusters(), total);
  EXPECT_EQ(modules_with_clusters, regions.size());
  // In image coordinates and orientation, the file's clusters are the .clust file's.
  const ClusterTable image = image_clusters(f);
  EXPECT_TRUE(std::ranges::equal(image.x(), clust.x()));
  EXPECT_TRUE(std::ranges::equal(image.y(), clust.y()));
  EXPECT_TRUE(std::ranges::equal(image.data(), clust.data()));
  return f;
}

}  // namespace

TEST(ModulesRun, TwoModulesEachAsFoundAlone) {
  // Two modules side by side, one port each, on two endpoints.
  Case c = glint::testing::small_detector_run("modules_two", 2, 1, 2);
  c.cfg.detector.modules_x = 2;
  c.cfg.output.clust = true;
  c.cfg.ingest.copy_threads = 2;
  c.cfg.ingest.reorder_frames = 200;
  c.sim.image.photons = 20;
  expect_each_module_as_found_alone(c, 80);
}

TEST(ModulesRun, ModuleUpsideDownFoundNativeShownFlipped) {
  // Two modules side by side, the second mounted upside down (flip_rows): its finder reads the
  // rows as its port sends them; the image, the .clust file and the pedestal show it flipped.
  Case c = glint::testing::small_detector_run("modules_flipped", 2, 1, 2);
  c.cfg.detector.modules_x = 2;
  c.cfg.detector.module_orientation = {"normal", "flip_rows"};
  c.cfg.output.clust = true;
  c.cfg.ingest.copy_threads = 2;
  c.cfg.ingest.reorder_frames = 200;
  c.sim.image.photons = 20;
  const RunFileContents f = expect_each_module_as_found_alone(c, 80);
  ASSERT_EQ(f.modules.size(), 2u);
  EXPECT_EQ(f.modules[0].orientation, ModuleOrientation::normal);
  EXPECT_EQ(f.modules[1].orientation, ModuleOrientation::flip_rows);

  // A cluster of module 1 at native (x, y) is at image (32 + x, 47 - y), its window upside down.
  const ClusterTable image = image_clusters(f);
  const int S = f.clusters.cluster_size();
  std::size_t checked = 0;
  for (std::size_t i = 0; i < f.clusters.n_clusters(); ++i) {
    if (f.cluster_module[i] != 1) continue;
    EXPECT_EQ(image.x()[i], 32 + f.clusters.x()[i]);
    EXPECT_EQ(image.y()[i], 47 - f.clusters.y()[i]);
    const auto native = f.clusters.cluster_data(i), shown = image.cluster_data(i);
    for (int r = 0; r < S; ++r)
      for (int col = 0; col < S; ++col)
        EXPECT_EQ(shown[static_cast<std::size_t>(r * S + col)],
                  native[static_cast<std::size_t>((S - 1 - r) * S + col)]);
    ++checked;
  }
  EXPECT_GT(checked, 0u);
  // Module 0 is as it was: local coordinates are image ones.
  for (std::size_t i = 0; i < f.clusters.n_clusters(); ++i)
    if (f.cluster_module[i] == 0) {
      EXPECT_EQ(image.x()[i], f.clusters.x()[i]);
      EXPECT_EQ(image.y()[i], f.clusters.y()[i]);
    }
}

TEST(ModulesRun, Jungfrau4MGeometryAtSmallSizeEndToEnd) {
  // A JUNGFRAU 4M's layout: 2 x 4 modules of two ports each (16 streams), each port its own
  // endpoint; modules of 16 x 32 pixels instead of 512 x 1024.
  Case c = glint::testing::simulated_run("modules_4m", 64, 64, /*dark=*/20, /*batch_frames=*/8);
  c.cfg.detector.ports_x = c.sim.ports_x = 2;
  c.cfg.detector.ports_y = c.sim.ports_y = 8;
  c.cfg.detector.modules_x = 2;
  c.cfg.detector.modules_y = 4;
  for (int i = 1; i < 16; ++i) {
    const auto ep = glint::testing::loopback(glint::testing::free_tcp_port());
    c.cfg.ingest.endpoints.push_back(ep);
    c.sim.endpoints.push_back(ep);
  }
  c.cfg.output.clust = true;
  c.cfg.ingest.reorder_frames = 200;
  c.cfg.finder.threads = 4;
  c.sim.image.photons = 40;
  c.sim.frames = 40;
  c.sim.first_frame_number = 7;
  expect_each_module_as_found_alone(c, 60);
}

TEST(ModulesRun, TwoModulesOnTheGpuEachAsFoundAlone) {
  GLINT_REQUIRE_GPU();
  Case c = glint::testing::small_detector_run("modules_two_gpu", 2, 1, 2);
  c.cfg.detector.modules_x = 2;
  c.cfg.finder.backend = "gpu";
  c.cfg.finder.gpu_ids = {0, 0};  // two module groups on one GPU
  c.cfg.output.clust = true;
  c.cfg.ingest.reorder_frames = 200;
  c.sim.image.photons = 20;
  expect_each_module_as_found_alone(c, 80);
}

TEST(ModulePlacement, ContiguousGroupsOnePerGpuEntry) {
  const std::vector<int> two{0, 1}, three{2, 0, 1}, one{3};
  std::vector<int> got;
  for (std::size_t k = 0; k < 8; ++k) got.push_back(module_device(two, k, 8));
  EXPECT_EQ(got, (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1}));
  got.clear();
  for (std::size_t k = 0; k < 4; ++k) got.push_back(module_device(three, k, 4));
  EXPECT_EQ(got, (std::vector<int>{2, 2, 0, 1}));
  EXPECT_EQ(module_device(one, 5, 8), 3);
  EXPECT_EQ(module_device(two, 0, 1), 0) << "more GPUs than modules: the first";
  EXPECT_THROW(module_device(two, 8, 8), std::invalid_argument);
  EXPECT_THROW(module_device({}, 0, 8), std::invalid_argument);
}

TEST(ModulesRun, OneReceiverHostsShareOfALargerDetector) {
  // The lower half of a 96 x 64 detector of 2 x 2 ports: this glintd's receivers put their ports
  // in the whole detector (detshape [2, 2], row 1), as slsReceiver does on every host.
  Case c = glint::testing::small_detector_run("modules_share", 2, 1, 2);
  c.cfg.detector.modules_x = 2;
  c.cfg.detector.detector_rows = 96;
  c.cfg.detector.detector_cols = 64;
  c.cfg.detector.origin_row = 48;
  c.cfg.detector.first_module = 2;
  c.cfg.output.clust = true;
  c.cfg.ingest.reorder_frames = 200;
  c.sim.whole_ports_x = 2;
  c.sim.whole_ports_y = 2;
  c.sim.port_row0 = 1;
  expect_each_module_as_found_alone(c, 80);

  // The other host's ports are not this image's: bad input, counted, nothing assembled.
  Case other = glint::testing::small_detector_run("modules_share_other", 2, 1, 2);
  other.cfg.detector = c.cfg.detector;
  other.sim.whole_ports_x = other.sim.whole_ports_y = 2;
  other.sim.port_row0 = 0;
  other.sim.frames = 5;
  other.sim.dark_frames = 0;
  Acquisition run(other.cfg, 1, std::nullopt);
  run_stream_simulator(other.sim);
  // Every part was refused; the pedestal never began, so the run is stopped here.
  for (int i = 0; i < 200 && run.stats().bad_total < 10; ++i) std::this_thread::sleep_for(10ms);
  run.stop();
  ASSERT_TRUE(run.wait(20s));
  const RunStats s = run.stats();
  EXPECT_EQ(s.parts, 0u);
  EXPECT_EQ(s.bad_total, 10u);
  EXPECT_EQ(s.dark_frames + s.data_frames, 0u);
}

TEST(ModuleCalibration, OneGainFilePerModulePlacedInTheImage) {
  // calibration.gain_file with {module}: module k's file is named by its id (first_module + k)
  // and holds that module's G0, G1, G2 gains (float64, module-shaped).
  const auto dir = std::filesystem::path(glint::testing::fresh_dir("module_gains"));
  config::Config cfg = config::parse("", "test");
  cfg.detector.type = "jungfrau";
  cfg.detector.rows = 8;
  cfg.detector.cols = 12;
  cfg.detector.ports_x = 2;
  cfg.detector.modules_x = 2;
  cfg.detector.first_module = 4;
  const FrameShape module{8, 6};
  auto gain = [](uint32_t id, std::size_t stage, std::size_t i) {
    return stage == 0 ? 40.0 + id + 1e-3 * static_cast<double>(i) : -1.5 - 0.1 * stage;
  };
  for (uint32_t id : {4u, 5u}) {
    std::vector<double> values;
    for (std::size_t s = 0; s < 3; ++s)
      for (std::size_t i = 0; i < module.pixels(); ++i) values.push_back(gain(id, s, i));
    std::ofstream(dir / fmt::format("M{}.bin", id), std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()),
               static_cast<std::streamsize>(values.size() * sizeof(double)));
  }
  cfg.calibration.gain_file = (dir / "M{module}.bin").string();
  FinderParams p;
  p.shape = {8, 12};
  const FinderParams got = with_detector_pixels(cfg, p);
  ASSERT_EQ(got.pixels, PixelMode::jungfrau_calibrated);
  ASSERT_TRUE(got.calibration);
  const std::size_t np = p.shape.pixels();
  for (std::size_t s = 0; s < 3; ++s)
    for (uint32_t y = 0; y < 8; ++y)
      for (uint32_t x = 0; x < 12; ++x) {
        const uint32_t id = 4 + x / 6;
        ASSERT_EQ(got.calibration->gain[s * np + y * 12 + x], gain(id, s, y * 6 + x % 6))
            << "stage " << s << " y " << y << " x " << x;
      }

  // Modules mounted upside down: each file is the module's native rows, the image shows them
  // flipped.
  cfg.detector.module_orientation = {"flip_rows"};
  const FinderParams flipped = with_detector_pixels(cfg, p);
  for (std::size_t s = 0; s < 3; ++s)
    for (uint32_t y = 0; y < 8; ++y)
      for (uint32_t x = 0; x < 12; ++x) {
        const uint32_t id = 4 + x / 6;
        ASSERT_EQ(flipped.calibration->gain[s * np + y * 12 + x],
                  gain(id, s, (7 - y) * 6 + x % 6))
            << "stage " << s << " y " << y << " x " << x;
      }
  // Each module's finder gets its file back as it was (module_params undoes the flip).
  const auto regions = detector_modules(cfg.detector);
  const FinderParams m5 = module_params(flipped, regions[1]);
  for (std::size_t i = 0; i < module.pixels(); ++i)
    ASSERT_EQ(m5.calibration->gain[i], gain(5, 0, i)) << i;
  cfg.detector.module_orientation.clear();

  // A module's missing file is named; a whole-image pedestal file beside per-module gains is
  // refused.
  std::filesystem::remove(dir / "M5.bin");
  try {
    with_detector_pixels(cfg, p);
    ADD_FAILURE() << "no error for a missing module file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("M5.bin"), std::string::npos) << e.what();
  }
  cfg.calibration.pedestal_file = (dir / "pedestal.bin").string();
  EXPECT_THROW(with_detector_pixels(cfg, p), std::runtime_error);
}
