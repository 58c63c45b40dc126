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

class ModularFinderModules : public ::testing::TestWithParam<int> {};

TEST_P(ModularFinderModules, EachModuleAsFoundAloneOnEveryGridAndPath) {
  const int S = GetParam();
  glint::synth::Config c;
  c.shape = {36, 50};
  c.seed = 500 + S;
  c.dark_frames = 100;
  c.photons = 30;
  const SyntheticRun run(c, 40);
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

TEST(ModularFinder, LoadPedestalSplitsAndPlaces) {
  const auto p = params({12, 20}, 3, 5.0);
  glint::PedestalState s(p.shape, 100);
  std::mt19937 rng(3);
  for (std::size_t i = 0; i < p.shape.pixels(); ++i) {
    s.count[i] = 100;
    s.sum[i] = 100.0 * (1000 + rng() % 50);
    s.sum2[i] = s.sum[i] * s.sum[i] / 100.0 + 400.0 + rng() % 100;
  }
  glint::ModularFinder f(p, glint::module_grid(p.shape, 2, 2), cpu_modules(1, 8), true);
  f.load_pedestal(s);
  EXPECT_EQ(f.pedestal(), s);
  const auto r = f.regions()[3];
  EXPECT_EQ(f.module(3).pedestal(), glint::extract_pedestal(s, r));
  EXPECT_EQ(f.module(3).pedestal().sum[0], s.sum[std::size_t{r.row0} * 20 + r.col0]);
  EXPECT_THROW(f.load_pedestal(glint::PedestalState({12, 21}, 100)), std::invalid_argument);
  EXPECT_EQ(f.description(), "4 modules: " + f.module(0).description());
}
