// The streaming interface of the CPU backends: frames written into the input slot, submitted as
// dark or data batches, results through the sink, give the bits of the whole-array calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "test_data.hpp"

namespace {

using glint::ClusterFinder;
using glint::ClusterTable;
using glint::testing::SyntheticRun;

struct Streamed {
  ClusterTable clusters{3};
  std::vector<std::size_t> batch_frames;  ///< frames per sink call, in order
};

/// Streams `run` through the finder's interface: dark frames in batches of `dark_chunk`, data
/// frames in batches of `chunk` (both at most the finder's batch), the results gathered from the
/// sink.
Streamed stream(ClusterFinder& f, const SyntheticRun& run, std::size_t dark_chunk,
                std::size_t chunk) {
  Streamed s;
  s.clusters = ClusterTable(f.params().cluster_size);
  f.set_sink([&s](const ClusterTable& batch) {
    s.batch_frames.push_back(batch.n_frames());
    s.clusters.append(batch);
  });
  const std::size_t np = run.config.shape.pixels();
  const auto dark = run.dark();
  for (std::size_t k = 0; k * np < dark.size(); k += dark_chunk) {
    const std::size_t n = std::min(dark_chunk, dark.size() / np - k);
    auto slot = f.staging();
    EXPECT_EQ(slot.size(), static_cast<std::size_t>(f.batch_frames()) * np);
    std::memcpy(slot.data(), dark.data() + k * np, n * np * sizeof(uint16_t));
    f.submit_dark(n);
  }
  const auto numbers = run.data_numbers();
  for (std::size_t k = 0; k < numbers.size(); k += chunk) {
    const std::size_t n = std::min(chunk, numbers.size() - k);
    auto slot = f.staging();
    std::memcpy(slot.data(), run.data().data() + k * np, n * np * sizeof(uint16_t));
    f.submit(std::span(numbers).subspan(k, n));
  }
  f.flush();
  return s;
}

SyntheticRun small_run() {
  glint::synth::Config c;
  c.shape = {21, 34};
  c.seed = 11;
  c.photons = 20;
  c.dark_frames = 40;
  return SyntheticRun(c, 50);
}

glint::FinderParams params_of(const SyntheticRun& run) {
  glint::FinderParams p;
  p.shape = run.config.shape;
  p.pedestal_window = 40;
  return p;
}

}  // namespace

TEST(FinderStream, CpuBackendsGiveTheWholeArrayResultsThroughTheSink) {
  const SyntheticRun run = small_run();
  const auto p = params_of(run);
  auto ref = glint::make_reference_finder(p);
  const ClusterTable want = glint::testing::run_finder(*ref, run);
  ASSERT_GT(want.n_clusters(), 50u);
  std::vector<std::unique_ptr<ClusterFinder>> finders;
  finders.push_back(glint::make_reference_finder(p, 9));
  finders.push_back(glint::make_cpu_finder(p, 3, 9));
  for (auto& f : finders) {
    EXPECT_EQ(f->batch_frames(), 9);
    const Streamed got = stream(*f, run, 7, 9);  // dark: 5 of 7, one of 5; data: 5 of 9, one of 5
    EXPECT_EQ(got.clusters, want) << f->description();
    EXPECT_EQ(f->pedestal(), ref->pedestal()) << f->description();
    EXPECT_EQ(got.batch_frames, (std::vector<std::size_t>{9, 9, 9, 9, 9, 5}))
        << "one sink call per data batch, one record per frame";
  }
}

TEST(FinderStream, SubmitBeyondTheSlotIsRefusedAndAnEmptySinkDiscards) {
  const SyntheticRun run = small_run();
  const auto p = params_of(run);
  auto f = glint::make_cpu_finder(p, 2, 4);
  f->staging();
  EXPECT_THROW(f->submit_dark(5), std::invalid_argument);
  const std::vector<uint64_t> five{1, 2, 3, 4, 5};
  EXPECT_THROW(f->submit(five), std::invalid_argument);
  EXPECT_THROW(glint::make_reference_finder(p, 0), std::invalid_argument);
  // Without a sink the batch is still searched: the pedestal moves on as with a sink.
  f->push_dark(run.dark());
  auto g = glint::make_cpu_finder(p, 2, 4);
  g->push_dark(run.dark());
  ClusterTable seen(3);
  g->set_sink([&seen](const ClusterTable& b) { seen.append(b); });
  const std::size_t np = p.shape.pixels();
  for (ClusterFinder* x : {f.get(), g.get()}) {
    auto slot = x->staging();
    std::memcpy(slot.data(), run.data().data(), 4 * np * sizeof(uint16_t));
    x->submit(std::span(five).first(4));
  }
  EXPECT_EQ(seen.n_frames(), 4u);
  EXPECT_EQ(f->pedestal(), g->pedestal());
  g->set_sink({});
  auto slot = g->staging();
  std::memcpy(slot.data(), run.data().data(), 4 * np * sizeof(uint16_t));
  g->submit(std::span(five).first(4));
  EXPECT_EQ(seen.n_frames(), 4u);
}
