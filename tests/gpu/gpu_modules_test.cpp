// A detector of modules on the GPU: each module's finder on its GPU gives the CPU backend's
// bytes (clusters, pedestal), whichever way the modules are placed over the devices (skips
// without a GPU).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "glint/gpu/gpu_finder.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/synthetic.hpp"
#include "gpu_test.hpp"

namespace {

struct Frames {
  std::vector<uint16_t> dark, data;
  std::vector<uint64_t> numbers;
};

Frames synth_frames(glint::FrameShape shape, uint64_t seed, std::size_t dark, std::size_t n,
                    double photons, bool jungfrau = false) {
  glint::synth::Config c;
  c.shape = shape;
  c.seed = seed;
  c.dark_frames = dark;
  c.photons = photons;
  c.jungfrau = jungfrau;
  const glint::synth::Generator gen(c);
  Frames f;
  f.dark.resize(dark * shape.pixels());
  f.data.resize(n * shape.pixels());
  gen.fill_many(0, dark, f.dark, 2);
  gen.fill_many(dark, n, f.data, 2);
  for (std::size_t i = 0; i < n; ++i) f.numbers.push_back(dark + i);
  return f;
}

glint::FinderParams params(glint::FrameShape shape, int size) {
  glint::FinderParams p;
  p.shape = shape;
  p.cluster_size = size;
  p.n_sigma = 4.0;
  p.pedestal_window = 100;
  return p;
}

/// Streams the frames through `f` in batches (module_staging when `per_module`, else
/// staging()), returning every batch's results appended.
glint::ClusterTable stream(glint::ClusterFinder& f, const Frames& in, bool per_module) {
  auto* m = dynamic_cast<glint::ModularFinder*>(&f);
  const glint::FrameShape shape = f.params().shape;
  const std::size_t np = shape.pixels();
  glint::ClusterTable out = glint::make_result_table(f.params());
  f.set_sink([&](const glint::ClusterTable& b) { out.append(b); });
  auto put = [&](std::span<const uint16_t> src, std::size_t n) {
    if (per_module && m) {
      const auto slots = m->module_staging();
      for (std::size_t k = 0; k < m->regions().size(); ++k)
        glint::extract_module(shape, m->regions()[k], src, n, slots[k]);
    } else {
      std::copy(src.begin(), src.end(), f.staging().begin());
    }
  };
  const std::size_t b = static_cast<std::size_t>(f.batch_frames());
  for (std::size_t i = 0; i < in.dark.size() / np; i += b) {
    const std::size_t n = std::min(b, in.dark.size() / np - i);
    put(std::span<const uint16_t>(in.dark).subspan(i * np, n * np), n);
    f.submit_dark(n);
  }
  for (std::size_t i = 0; i < in.numbers.size(); i += b) {
    const std::size_t n = std::min(b, in.numbers.size() - i);
    put(std::span<const uint16_t>(in.data).subspan(i * np, n * np), n);
    f.submit(std::span<const uint64_t>(in.numbers).subspan(i, n));
  }
  f.flush();
  f.set_sink({});
  return out;
}

glint::ModularFinder::Factory cpu(int batch) {
  return [batch](const glint::FinderParams& p, std::size_t) {
    return glint::make_cpu_finder(p, 2, batch);
  };
}

glint::ModularFinder::Factory gpu(int batch, int streams) {
  return [batch, streams](const glint::FinderParams& p, std::size_t) {
    glint::gpu::GpuFinderOptions o;
    o.batch_frames = batch;
    o.streams = streams;
    return glint::gpu::make_gpu_finder(p, o);
  };
}

}  // namespace

TEST(GpuModules, EveryModuleAsTheCpuBackendOnEveryGridAndPath) {
  GLINT_REQUIRE_GPU();
  const glint::FrameShape shape{128, 192};
  const Frames in = synth_frames(shape, 41, 100, 120, 60);
  for (const int size : {3, 5}) {
    const auto p = params(shape, size);
    for (const auto& [mx, my] : {std::pair{2u, 1u}, std::pair{1u, 2u}, std::pair{2u, 2u}}) {
      SCOPED_TRACE(fmt::format("S {} grid {} x {}", size, mx, my));
      const auto regions = glint::module_grid(shape, mx, my);
      glint::ModularFinder want_f(p, regions, cpu(32), true);
      const glint::ClusterTable want = stream(want_f, in, false);
      ASSERT_GT(want.n_clusters(), 1000u);
      for (const bool per_module : {false, true}) {
        glint::ModularFinder got_f(p, regions, gpu(32, 2), false);
        const glint::ClusterTable got = stream(got_f, in, per_module);
        EXPECT_TRUE(got == want) << "per_module " << per_module << ": " << got.n_clusters()
                                 << " clusters, CPU " << want.n_clusters();
        EXPECT_TRUE(got_f.pedestal() == want_f.pedestal());
      }
    }
  }
}

TEST(GpuModules, JungfrauModulesG0OnlyAndCalibratedAsTheCpuBackend) {
  GLINT_REQUIRE_GPU();
  const glint::FrameShape shape{64, 128};
  const uint64_t seed = 43;
  const Frames in = synth_frames(shape, seed, 100, 60, 30, /*jungfrau=*/true);
  for (const auto mode : {glint::PixelMode::jungfrau_g0, glint::PixelMode::jungfrau_calibrated}) {
    SCOPED_TRACE(std::string(glint::to_string(mode)));
    auto p = params(shape, 3);
    p.pixels = mode;
    if (mode == glint::PixelMode::jungfrau_calibrated) {
      // glint synth's gain maps and G1/G2 pedestals for these frames; G0 from the dark frames.
      auto cal = std::make_shared<glint::jungfrau::Calibration>();
      cal->shape = shape;
      const std::vector<double> maps = glint::synth::jungfrau_gain_maps(shape, seed);
      cal->gain.assign(maps.begin(), maps.begin() + static_cast<std::ptrdiff_t>(3 * shape.pixels()));
      cal->pedestal = glint::synth::jungfrau_stage_pedestals(shape, seed);
      cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
      p.calibration = cal;
    }
    const auto regions = glint::module_grid(shape, 2, 2);
    glint::ModularFinder want_f(p, regions, cpu(16), true);
    const glint::ClusterTable want = stream(want_f, in, false);
    ASSERT_GT(want.n_clusters(), 100u);
    glint::ModularFinder got_f(p, regions, gpu(16, 2), false);
    EXPECT_TRUE(stream(got_f, in, true) == want);
    EXPECT_TRUE(got_f.pedestal() == want_f.pedestal());
    const std::vector<double> a = got_f.calibration_pedestal(), b = want_f.calibration_pedestal();
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(double)));
  }
}

TEST(GpuModules, TwoModuleGroupsOnOneGpuGiveTheBytesOfOneGroup) {
  // The placement logic on one GPU: gpu_ids [0, 0] puts the modules in two groups (0-1 and 2-3)
  // on device 0, [0] in one; both are every module on device 0, so the bytes are the same, and
  // the same as the CPU backend's.
  GLINT_REQUIRE_GPU();
  const glint::FrameShape shape{96, 160};
  const Frames in = synth_frames(shape, 47, 100, 100, 50);
  const auto p = params(shape, 3);
  const auto regions = glint::module_grid(shape, 2, 2);
  glint::pipeline::FinderOptions o;
  o.batch_frames = 16;
  o.backend = glint::Backend::gpu;
  std::vector<int> devices_seen;
  const glint::pipeline::FinderFactory make = [&](const glint::FinderParams& mp,
                                                 const glint::pipeline::FinderOptions& mo) {
    devices_seen.insert(devices_seen.end(), mo.gpu_ids.begin(), mo.gpu_ids.end());
    return glint::pipeline::make_finder(mp, mo);
  };
  o.gpu_ids = {0};
  auto one = glint::pipeline::make_module_finders(p, regions, o, make);
  EXPECT_EQ(devices_seen, (std::vector<int>{0, 0, 0, 0}));
  o.gpu_ids = {0, 0};
  auto two = glint::pipeline::make_module_finders(p, regions, o, make);
  EXPECT_NE(one->description().find("4 modules: gpu"), std::string::npos) << one->description();
  const glint::ClusterTable a = stream(*one, in, true);
  const glint::ClusterTable b = stream(*two, in, true);
  ASSERT_GT(a.n_clusters(), 500u);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(one->pedestal() == two->pedestal());
  o.backend = glint::Backend::cpu;
  auto c = glint::pipeline::make_module_finders(p, regions, o, make);
  EXPECT_TRUE(stream(*c, in, true) == a);
}
