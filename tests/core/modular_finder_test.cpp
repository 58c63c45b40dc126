// A detector of modules: each module's clusters and pedestal are exactly those of the module's
// image found alone (its own pedestal chain and finder), whatever the backend and the input path.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <memory>
#include <random>
#include <vector>

#include "glint/modular_finder.hpp"
#include "test_data.hpp"

namespace {

using glint::testing::clusters_in;
using glint::testing::run_finder;
using glint::testing::SyntheticRun;

glint::FinderParams params(glint::FrameShape shape, int size, double n_sigma) {
  return glint::testing::finder_params(shape, size, n_sigma, 100);
}

/// The frames of module `r` of every frame of `run`.
std::vector<uint16_t> module_frames(const SyntheticRun& run, const glint::ModuleRegion& r) {
  const std::size_t n = run.frames.size() / run.config.shape.pixels();
  std::vector<uint16_t> out(n * r.shape.pixels());
  glint::extract_module(run.config.shape, r, run.frames, n, out);
  return out;
}

/// The module alone: the reference finder over the module's own frames.
struct Alone {
  glint::ClusterTable clusters;
  glint::PedestalState pedestal;
};
Alone find_alone(const SyntheticRun& run, const glint::FinderParams& image,
                 const glint::ModuleRegion& r) {
  const glint::FinderParams p = glint::module_params(image, r);
  auto ref = glint::make_reference_finder(p);
  const std::vector<uint16_t> frames = module_frames(run, r);
  const std::size_t dark = run.config.dark_frames * r.shape.pixels();
  ref->push_dark(std::span<const uint16_t>(frames).first(dark));
  glint::ClusterTable out = glint::make_result_table(p);
  const auto numbers = run.data_numbers();
  ref->find(std::span<const uint16_t>(frames).subspan(dark), numbers, out);
  return {std::move(out), ref->pedestal()};
}

glint::ModularFinder::Factory cpu_modules(unsigned threads, int batch) {
  return [threads, batch](const glint::FinderParams& p, std::size_t) {
    return glint::make_cpu_finder(p, threads, batch);
  };
}

}  // namespace

TEST(ModuleGrid, RowMajorBlocksAndErrors) {
  const auto g = glint::module_grid({512, 2048}, 2, 2);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[1], (glint::ModuleRegion{0, 1024, {256, 1024}}));
  EXPECT_EQ(g[2], (glint::ModuleRegion{256, 0, {256, 1024}}));
  EXPECT_THROW(glint::module_grid({10, 10}, 3, 1), std::invalid_argument);
  const auto p = params({40, 60}, 3, 5.0);
  // Regions that overlap or leave pixels out are refused.
  const glint::ModuleRegion half{0, 0, {20, 60}};
  EXPECT_THROW(glint::ModularFinder(p, {half, half}, cpu_modules(1, 8), false),
               std::invalid_argument);
  EXPECT_THROW(glint::ModularFinder(p, {half}, cpu_modules(1, 8), false), std::invalid_argument);
}

namespace {

/// 100 dark and 40 data frames of 36 x 50 pixels, ~30 photons each: the modules tests' run.
SyntheticRun modules_run(uint64_t seed) {
  glint::synth::Config c;
  c.shape = {36, 50};
  c.seed = seed;
  c.dark_frames = 100;
  c.photons = 30;
  return SyntheticRun(c, 40);
}

}  // namespace

class ModularFinderModules : public ::testing::TestWithParam<int> {};

TEST_P(ModularFinderModules, EachModuleAsFoundAloneOnEveryGridAndPath) {
  const int S = GetParam();
  const SyntheticRun run = modules_run(500 + S);
  const glint::synth::Config& c = run.config;
  const auto p = params(c.shape, S, 4.0);
  for (const auto& [mx, my] : {std::pair{2u, 1u}, std::pair{1u, 3u}, std::pair{2u, 2u}}) {
    const auto regions = glint::module_grid(c.shape, mx, my);
    std::vector<Alone> alone;
    for (const auto& r : regions) alone.push_back(find_alone(run, p, r));

    // Whole arrays (find), concurrent modules.
    glint::ModularFinder whole(p, regions, cpu_modules(2, 16), true);
    const glint::ClusterTable found = run_finder(whole, run, 7);
    std::size_t total = 0;
    for (std::size_t k = 0; k < regions.size(); ++k) {
      SCOPED_TRACE(fmt::format("S {} grid {}x{} module {}", S, mx, my, k));
      EXPECT_GT(alone[k].clusters.n_clusters(), 0u);
      EXPECT_EQ(clusters_in(found, regions[k]), alone[k].clusters);
      EXPECT_EQ(glint::extract_pedestal(whole.pedestal(), regions[k]), alone[k].pedestal);
      total += alone[k].clusters.n_clusters();
    }
    EXPECT_EQ(found.n_clusters(), total);
    EXPECT_EQ(found.n_frames(), run.data_frames);

    // Streaming: image-shaped slot and per-module slots give the same batches.
    for (const bool per_module : {false, true}) {
      glint::ModularFinder streamed(p, regions, cpu_modules(1, 16), false);
      glint::ClusterTable got = glint::make_result_table(p);
      streamed.set_sink([&](const glint::ClusterTable& b) { got.append(b); });
      const std::size_t np = c.shape.pixels();
      const std::size_t n_all = c.dark_frames + run.data_frames;
      std::vector<uint64_t> numbers;
      for (std::size_t f0 = 0; f0 < n_all; f0 += 16) {
        const std::size_t n = std::min<std::size_t>(16, n_all - f0);
        const bool dark = f0 < c.dark_frames;  // 100 dark frames: batches never mix kinds
        const std::size_t n_here = dark ? std::min<std::size_t>(n, c.dark_frames - f0) : n;
        const auto src = std::span<const uint16_t>(run.frames).subspan(f0 * np, n_here * np);
        if (per_module) {
          const auto slots = streamed.module_staging();
          for (std::size_t k = 0; k < regions.size(); ++k)
            glint::extract_module(c.shape, regions[k], src, n_here, slots[k]);
        } else {
          std::copy(src.begin(), src.end(), streamed.staging().begin());
        }
        if (dark) {
          streamed.submit_dark(n_here);
          if (n_here < n) f0 -= n - n_here;  // the rest of this block as data next time
          continue;
        }
        numbers.clear();
        for (std::size_t i = 0; i < n_here; ++i) numbers.push_back(f0 + i);
        streamed.submit(numbers);
      }
      streamed.flush();
      EXPECT_EQ(got, found) << "per_module " << per_module;
      EXPECT_EQ(streamed.pedestal(), whole.pedestal());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ClusterSizes, ModularFinderModules, ::testing::Values(3, 5),
                         [](const auto& info) { return fmt::format("S{}", info.param); });

TEST(ModularFinder, OneModuleIsTheFinderItself) {
  const auto p = params({20, 30}, 3, 5.0);
  auto f = glint::make_modular_finder(p, glint::module_grid(p.shape, 1, 1), cpu_modules(1, 8),
                                      false);
  EXPECT_EQ(dynamic_cast<glint::ModularFinder*>(f.get()), nullptr);
  EXPECT_EQ(f->description(), glint::make_cpu_finder(p, 1, 8)->description());
}

namespace {

/// A pedestal of a full window of 100 frames: means 1000-1049, noises of about 2 (random).
glint::PedestalState full_window_pedestal(glint::FrameShape shape, unsigned seed) {
  glint::PedestalState s(shape, 100);
  std::mt19937 rng(seed);
  for (std::size_t i = 0; i < shape.pixels(); ++i) {
    s.count[i] = 100;
    s.sum[i] = 100.0 * (1000 + rng() % 50);
    s.sum2[i] = s.sum[i] * s.sum[i] / 100.0 + 400.0 + rng() % 100;
  }
  return s;
}

}  // namespace

TEST(ModularFinder, LoadPedestalSplitsAndPlaces) {
  const auto p = params({12, 20}, 3, 5.0);
  const glint::PedestalState s = full_window_pedestal(p.shape, 3);
  glint::ModularFinder f(p, glint::module_grid(p.shape, 2, 2), cpu_modules(1, 8), true);
  f.load_pedestal(s);
  EXPECT_EQ(f.pedestal(), s);
  const auto r = f.regions()[3];
  EXPECT_EQ(f.module(3).pedestal(), glint::extract_pedestal(s, r));
  EXPECT_EQ(f.module(3).pedestal().sum[0], s.sum[std::size_t{r.row0} * 20 + r.col0]);
  EXPECT_THROW(f.load_pedestal(glint::PedestalState({12, 21}, 100)), std::invalid_argument);
  EXPECT_EQ(f.description(), "4 modules: " + f.module(0).description());
}

// Modules mounted flipped (docs/modules.md, "Orientation"): each module's finder reads its native
// frames, so its clusters and pedestal are those of the module alone; the image shows it flipped.

TEST(ModuleOrientation, NamesGridAndWindows) {
  using O = glint::ModuleOrientation;
  for (const O o : {O::normal, O::flip_rows, O::flip_cols, O::rotate_180})
    EXPECT_EQ(glint::parse_module_orientation(glint::to_string(o)), o);
  EXPECT_EQ(glint::to_string(O::flip_rows), "flip_rows");
  EXPECT_EQ(glint::parse_module_orientation("upside_down"), std::nullopt);

  const std::vector<O> each{O::normal, O::flip_rows, O::flip_cols, O::rotate_180};
  const auto g = glint::module_grid({40, 60}, 2, 2, each);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[1], (glint::ModuleRegion{0, 30, {20, 30}, O::flip_rows}));
  EXPECT_EQ(g[3].orientation, O::rotate_180);
  const std::vector<O> one{O::flip_cols};
  for (const auto& r : glint::module_grid({40, 60}, 2, 2, one)) {
    EXPECT_EQ(r.orientation, O::flip_cols);
  }
  EXPECT_THROW(glint::module_grid({40, 60}, 2, 2, std::vector<O>{O::normal, O::flip_rows}),
               std::invalid_argument);
  // Native (x, y) of module 1 (flip_rows, at column 30): image column 30 + x, row 19 - y.
  EXPECT_EQ(g[1].image_x(4), 34u);
  EXPECT_EQ(g[1].image_y(0), 19u);
  EXPECT_EQ(g[1].image_y(19), 0u);
  EXPECT_EQ(g[3].image_x(0), 59u);  // rotate_180 at (20, 30)
  EXPECT_EQ(g[3].image_y(0), 39u);
  EXPECT_EQ(g[3].native_x(59), 0u);
  EXPECT_EQ(g[3].native_y(21), 18u);
  EXPECT_EQ(g[2].image_x(2), 27u);  // flip_cols at (20, 0)
  EXPECT_EQ(g[2].image_y(2), 22u);

  std::vector<int32_t> w{1, 2, 3, 4, 5, 6, 7, 8, 9};
  glint::orient_window(O::flip_rows, 3, w);
  EXPECT_EQ(w, (std::vector<int32_t>{7, 8, 9, 4, 5, 6, 1, 2, 3}));
  glint::orient_window(O::flip_rows, 3, w);  // its own inverse
  glint::orient_window(O::flip_cols, 3, w);
  EXPECT_EQ(w, (std::vector<int32_t>{3, 2, 1, 6, 5, 4, 9, 8, 7}));
  w = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  glint::orient_window(O::rotate_180, 3, w);
  EXPECT_EQ(w, (std::vector<int32_t>{9, 8, 7, 6, 5, 4, 3, 2, 1}));
  EXPECT_THROW(glint::orient_window(O::normal, 3, std::span<int32_t>(w).first(8)),
               std::invalid_argument);
}

namespace {

/// Value (row, col) of an S x S window as the image shows module `o`'s native window `native`,
/// written out for each orientation (independent of orient_window).
int32_t shown(glint::ModuleOrientation o, std::span<const int32_t> native, int S, int row,
              int col) {
  using O = glint::ModuleOrientation;
  const int r = (o == O::flip_rows || o == O::rotate_180) ? S - 1 - row : row;
  const int c = (o == O::flip_cols || o == O::rotate_180) ? S - 1 - col : col;
  return native[static_cast<std::size_t>(r * S + c)];
}

}  // namespace

class ModularFinderOrientation : public ::testing::TestWithParam<int> {};

TEST_P(ModularFinderOrientation, EachModuleAsFoundAloneShownFlipped) {
  using O = glint::ModuleOrientation;
  const int S = GetParam();
  const SyntheticRun run = modules_run(700 + S);  // raw frames: each module's native block at its place
  const glint::synth::Config& c = run.config;
  const auto p = params(c.shape, S, 4.0);
  const std::vector<O> each{O::normal, O::flip_rows, O::flip_cols, O::rotate_180};
  const auto regions = glint::module_grid(c.shape, 2, 2, each);
  std::vector<Alone> alone;
  for (const auto& r : regions) alone.push_back(find_alone(run, p, r));

  glint::ModularFinder whole(p, regions, cpu_modules(2, 16), true);
  EXPECT_TRUE(whole.oriented());
  const glint::ClusterTable found = run_finder(whole, run, 7);
  const glint::PedestalState image = whole.pedestal();
  std::size_t total = 0;
  for (std::size_t k = 0; k < regions.size(); ++k) {
    SCOPED_TRACE(fmt::format("S {} module {} ({})", S, k, glint::to_string(each[k])));
    const glint::ModuleRegion& r = regions[k];
    const glint::ClusterTable& own = alone[k].clusters;
    ASSERT_GT(own.n_clusters(), 0u);
    // Mapped back to native, the module's clusters and pedestal are those found alone.
    EXPECT_EQ(clusters_in(found, r), own);
    EXPECT_EQ(glint::extract_pedestal(image, r), alone[k].pedestal);
    total += own.n_clusters();

    // The module's first cluster, where the image shows it, by hand.
    const uint32_t nx = own.x()[0], ny = own.y()[0];
    const bool fr = k == 1 || k == 3, fc = k == 2 || k == 3;
    const uint32_t ix = r.col0 + (fc ? r.shape.cols - 1 - nx : nx);
    const uint32_t iy = r.row0 + (fr ? r.shape.rows - 1 - ny : ny);
    uint64_t fn = 0;
    for (const auto& rec : own.frames())
      if (rec.n_clusters > 0) {
        fn = rec.frame_number;
        break;
      }
    bool seen = false;
    for (const auto& rec : found.frames()) {
      if (rec.frame_number != fn) continue;
      for (std::size_t i = rec.first_cluster; i < rec.first_cluster + rec.n_clusters; ++i) {
        if (found.x()[i] != ix || found.y()[i] != iy) continue;
        seen = true;
        const auto got = found.cluster_data(i);
        for (int row = 0; row < S; ++row)
          for (int col = 0; col < S; ++col)
            EXPECT_EQ(got[static_cast<std::size_t>(row * S + col)],
                      shown(each[k], own.cluster_data(0), S, row, col))
                << "window (" << row << ", " << col << ")";
        // A flipped window is not the native one (the photon's charge is not symmetric).
        if (k != 0) {
          EXPECT_FALSE(std::equal(got.begin(), got.end(), own.cluster_data(0).begin()));
        }
      }
    }
    EXPECT_TRUE(seen) << "no cluster at image (" << ix << ", " << iy << ") in frame " << fn;

    // pedestal(): native pixel (y, x) of the module at its image place.
    const auto& ped = alone[k].pedestal;
    for (const auto& [y, x] : {std::pair{0u, 0u}, std::pair{3u, 7u}, std::pair{17u, 24u}}) {
      const std::size_t ni = std::size_t{y} * r.shape.cols + x;
      const std::size_t ii = std::size_t{fr ? r.row0 + r.shape.rows - 1 - y : r.row0 + y} *
                                 c.shape.cols +
                             (fc ? r.col0 + r.shape.cols - 1 - x : r.col0 + x);
      EXPECT_EQ(image.sum[ii], ped.sum[ni]);
      EXPECT_EQ(image.sum2[ii], ped.sum2[ni]);
      EXPECT_EQ(image.count[ii], ped.count[ni]);
    }
  }
  EXPECT_EQ(found.n_clusters(), total);

  // Streaming, through the image-shaped slot of raw frames and the modules' slots, gives the same.
  for (const bool per_module : {false, true}) {
    glint::ModularFinder streamed(p, regions, cpu_modules(1, 16), false);
    glint::ClusterTable got = glint::make_result_table(p);
    streamed.set_sink([&](const glint::ClusterTable& b) { got.append(b); });
    const std::size_t np = c.shape.pixels();
    const auto dark = run.dark();
    for (std::size_t f0 = 0; f0 < c.dark_frames; f0 += 10) {
      const auto src = dark.subspan(f0 * np, 10 * np);
      if (per_module) {
        const auto slots = streamed.module_staging();
        for (std::size_t k = 0; k < regions.size(); ++k)
          glint::extract_module(c.shape, regions[k], src, 10, slots[k]);
      } else {
        std::copy(src.begin(), src.end(), streamed.staging().begin());
      }
      streamed.submit_dark(10);
    }
    const auto numbers = run.data_numbers();
    for (std::size_t f0 = 0; f0 < numbers.size(); f0 += 16) {
      const std::size_t n = std::min<std::size_t>(16, numbers.size() - f0);
      const auto src = run.data().subspan(f0 * np, n * np);
      if (per_module) {
        const auto slots = streamed.module_staging();
        for (std::size_t k = 0; k < regions.size(); ++k)
          glint::extract_module(c.shape, regions[k], src, n, slots[k]);
      } else {
        std::copy(src.begin(), src.end(), streamed.staging().begin());
      }
      streamed.submit(std::span(numbers).subspan(f0, n));
    }
    streamed.flush();
    EXPECT_EQ(got, found) << "per_module " << per_module;
    EXPECT_EQ(streamed.pedestal(), image);
  }

  // All normal: the modules' clusters sit at their native places, so the flipped ones moved.
  glint::ModularFinder plain(p, glint::module_grid(c.shape, 2, 2), cpu_modules(2, 16), true);
  const glint::ClusterTable unflipped = run_finder(plain, run, 7);
  EXPECT_EQ(unflipped.n_clusters(), found.n_clusters());
  EXPECT_NE(unflipped, found);
}

INSTANTIATE_TEST_SUITE_P(ClusterSizes, ModularFinderOrientation, ::testing::Values(3, 5),
                         [](const auto& info) { return fmt::format("S{}", info.param); });

TEST(ModularFinder, OrientedPedestalAndTablesRoundTrip) {
  using O = glint::ModuleOrientation;
  const auto p = params({12, 20}, 3, 5.0);
  const glint::PedestalState s = full_window_pedestal(p.shape, 5);
  const std::vector<O> each{O::rotate_180, O::flip_rows, O::normal, O::flip_cols};
  glint::ModularFinder f(p, glint::module_grid(p.shape, 2, 2, each), cpu_modules(1, 8), true);
  f.load_pedestal(s);  // a whole-image pedestal (a file, the previous run): image orientation
  EXPECT_EQ(f.pedestal(), s);
  // Module 1 (flip_rows, rows 0-5 at column 10): its native row 0 is image row 5.
  EXPECT_EQ(f.module(1).pedestal().sum[0], s.sum[5 * 20 + 10]);
  EXPECT_EQ(f.module(1).pedestal().sum[5 * 10 + 9], s.sum[0 * 20 + 19]);
  // Module 0 (rotate_180): native (0, 0) is image (5, 9).
  EXPECT_EQ(f.module(0).pedestal().sum[0], s.sum[5 * 20 + 9]);
  // Module 3 (flip_cols at (6, 10)): native (2, 0) is image (8, 19).
  EXPECT_EQ(f.module(3).pedestal().sum[2 * 10], s.sum[8 * 20 + 19]);
  EXPECT_EQ(f.module(2).pedestal(), glint::extract_pedestal(s, f.regions()[2]));

  // One module mounted flipped is a modular finder of one module (not the finder itself).
  const std::vector<O> upside_down{O::flip_rows};
  auto one = glint::make_modular_finder(p, glint::module_grid(p.shape, 1, 1, upside_down),
                                        cpu_modules(1, 8), false);
  ASSERT_NE(dynamic_cast<glint::ModularFinder*>(one.get()), nullptr);
  EXPECT_EQ(one->description(), "1 module: " + f.module(0).description());
  one->load_pedestal(s);
  EXPECT_EQ(one->pedestal(), s);
  EXPECT_EQ(dynamic_cast<glint::ModularFinder&>(*one).module(0).pedestal().sum[0],
            s.sum[11 * 20]);  // native row 0 is image row 11

  // Image-shaped planes (JUNGFRAU gain or pedestal tables) to a module and back.
  const auto& r = f.regions()[0];
  std::vector<double> planes(2 * p.shape.pixels());
  for (std::size_t i = 0; i < planes.size(); ++i) planes[i] = static_cast<double>(i);
  std::vector<double> mine(2 * r.shape.pixels());
  glint::extract_module_planes(p.shape, r, 2, planes, mine);
  EXPECT_EQ(mine[0], 5 * 20 + 9);                        // plane 0, native (0, 0)
  EXPECT_EQ(mine[60 + 1 * 10 + 2], 240 + 4 * 20 + 7);    // plane 1, native (1, 2) = image (4, 7)
  std::vector<double> back(planes.size(), -1.0);
  glint::place_module_planes(p.shape, r, 2, mine, back);
  for (uint32_t y = 0; y < 6; ++y)
    for (uint32_t x = 0; x < 10; ++x) EXPECT_EQ(back[y * 20 + x], planes[y * 20 + x]);
  EXPECT_EQ(back[6 * 20], -1.0);  // outside the module: untouched

  // A whole-image calibration table reaches each module through its orientation.
  glint::FinderParams cal = p;
  auto table = std::make_shared<glint::jungfrau::Calibration>();
  table->shape = p.shape;
  table->gain.resize(glint::jungfrau::kStages * p.shape.pixels());
  table->pedestal.resize(table->gain.size());
  for (std::size_t i = 0; i < table->gain.size(); ++i) {
    table->gain[i] = 1.0 + static_cast<double>(i);
    table->pedestal[i] = 1000.0 + static_cast<double>(i);
  }
  cal.calibration = table;
  const glint::FinderParams m1 = glint::module_params(cal, f.regions()[1]);
  EXPECT_EQ(m1.calibration->gain[0], 1.0 + 5 * 20 + 10);
  EXPECT_EQ(m1.calibration->pedestal[60 + 0], 1000.0 + 240 + 5 * 20 + 10);
}
