// One Backend type and one way of choosing it (glint/backend.hpp), for every engine's factory.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "glint/backend.hpp"

namespace {

using glint::Backend;

struct Engine {
  virtual ~Engine() = default;
  virtual std::string kind() const = 0;
};
struct CpuEngine : Engine {
  std::string kind() const override { return "cpu"; }
};
struct GpuEngine : Engine {
  std::string kind() const override { return "gpu"; }
};

/// make_on_backend with a probe answering `reason` and a GPU engine that throws where
/// gpu_throws; counts the calls of each.
struct Factory {
  std::string reason;
  bool gpu_throws = false;
  int probes = 0, gpus = 0, cpus = 0;
  std::string make(Backend b) {
    return glint::make_on_backend<Engine>(
               b, "test engine",
               [&] {
                 ++probes;
                 return reason;
               },
               [&] {
                 ++gpus;
                 if (gpu_throws) throw std::runtime_error("out of device memory");
                 return std::make_unique<GpuEngine>();
               },
               [&] {
                 ++cpus;
                 return std::make_unique<CpuEngine>();
               })
        ->kind();
  }
};

TEST(Backend, NamesParseAndPrint) {
  for (Backend b : {Backend::cpu, Backend::gpu, Backend::auto_select})
    EXPECT_EQ(glint::parse_backend(glint::to_string(b)), b);
  EXPECT_EQ(glint::to_string(Backend::auto_select), "auto");
  try {
    glint::parse_backend("cuda");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown backend 'cuda' (allowed: cpu, gpu, auto)");
  }
}

TEST(Backend, CpuNeverProbesForAGpu) {
  Factory f{"no CUDA device found"};
  EXPECT_EQ(f.make(Backend::cpu), "cpu");
  EXPECT_EQ(f.probes, 0);
  EXPECT_EQ(f.gpus, 0);
}

TEST(Backend, GpuThrowsTheReasonWhereItCannotRun) {
  Factory f{"no CUDA device found"};
  try {
    f.make(Backend::gpu);
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(),
                 "test engine: GPU backend not available: no CUDA device found; or choose the "
                 "cpu backend (auto takes the GPU when one is usable, else the CPU)");
  }
  EXPECT_EQ(f.gpus, 0);
  EXPECT_EQ(f.cpus, 0);
  Factory usable;
  EXPECT_EQ(usable.make(Backend::gpu), "gpu");
  // A forced GPU engine that fails is not replaced by the CPU one.
  Factory failing{"", true};
  EXPECT_THROW(failing.make(Backend::gpu), std::runtime_error);
  EXPECT_EQ(failing.cpus, 0);
}

TEST(Backend, AutoTakesTheGpuWhereItRunsElseTheCpu) {
  Factory usable;
  EXPECT_EQ(usable.make(Backend::auto_select), "gpu");
  EXPECT_EQ(usable.cpus, 0);
  Factory none{"no CUDA device found"};
  EXPECT_EQ(none.make(Backend::auto_select), "cpu");
  EXPECT_EQ(none.gpus, 0);
  Factory failing{"", true};
  EXPECT_EQ(failing.make(Backend::auto_select), "cpu");
  EXPECT_EQ(failing.gpus, 1);
  EXPECT_EQ(failing.cpus, 1);
}

}  // namespace
