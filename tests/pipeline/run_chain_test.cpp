// The run's chain of stages: the state machine's transitions, the consumer chain's order and
// end, the .clust consumer against the run file, and a fatal (sticky) device error that fails
// the run, leaves its file readable and is reported as fatal.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../daemon/sticky_fault.hpp"
#include "glint/clust_file.hpp"
#include "glint/config/config.hpp"
#include "glint/jungfrau.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/clust_file_consumer.hpp"
#include "glint/pipeline/consumer_chain.hpp"
#include "glint/pipeline/queued_consumer.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/run_state.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "scoped_environment.hpp"
#include "simulated_run.hpp"
#include "stream_test_util.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

TEST(RunStateMachine, OnlyTheRunsTransitionsAreAllowed) {
  using S = RunState;
  RunStateMachine m;
  EXPECT_EQ(m.state(), S::pedestal);
  EXPECT_FALSE(m.advance(S::acquiring, S::finishing)) << "not in acquiring";
  EXPECT_TRUE(m.advance(S::pedestal, S::acquiring));
  EXPECT_THROW(m.to(S::pedestal), std::logic_error);
  m.to(S::finishing);
  EXPECT_THROW(m.to(S::acquiring), std::logic_error);
  m.end();
  EXPECT_EQ(m.state(), S::idle);
  EXPECT_THROW(m.to(S::acquiring), std::logic_error);
  for (S from : {S::idle, S::error})
    for (S to : {S::idle, S::pedestal, S::acquiring, S::finishing, S::error})
      EXPECT_FALSE(allowed(from, to)) << to_string(from) << " -> " << to_string(to);

  RunStateMachine f;
  f.request_stop("time limit");
  f.request_abort();
  EXPECT_TRUE(f.stop_requested());
  EXPECT_TRUE(f.abort_requested());
  EXPECT_EQ(f.end_reason(), "time limit") << "the first reason given";
  f.fail("disk full", false);
  f.fail("later", true);
  f.end();
  EXPECT_EQ(f.state(), S::error) << "an error stays";
  EXPECT_EQ(f.error(), "disk full");
  EXPECT_FALSE(f.fatal()) << "the first failure decides";
}

TEST(RunStateMachine, WaitWakesWhenTheRunIsDone) {
  RunStateMachine m;
  EXPECT_FALSE(m.wait_done(10ms));
  std::jthread t([&] {
    std::this_thread::sleep_for(30ms);
    m.set_done();
  });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(m.wait_done(10s));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

namespace {

/// Records what reaches it, into a log shared by several.
class Recorder final : public ResultConsumer {
 public:
  Recorder(std::string name, std::vector<std::string>& log, bool throw_at_end = false)
      : name_(std::move(name)), log_(log), throw_at_end_(throw_at_end) {}
  std::string_view name() const override { return name_; }
  void on_start(const RunContext&) override { log_.push_back(name_ + " start"); }
  void on_batch(const FoundBatch& b) override {
    log_.push_back(name_ + " batch " + std::to_string(b.clusters.n_frames()));
    frames_ += b.clusters.n_frames();
  }
  void on_rows(std::span<const FrameRow> rows) override {
    log_.push_back(name_ + " rows " + std::to_string(rows.size()));
    frames_ += rows.size();
  }
  void on_end(const RunEnd& e) override {
    log_.push_back(name_ + (e.failed ? " end failed" : " end"));
    if (throw_at_end_) throw std::runtime_error(name_ + " cannot close");
  }
  ConsumerStats stats() const override { return {name_, frames_, 0, 0}; }

 private:
  std::string name_;
  std::vector<std::string>& log_;
  bool throw_at_end_;
  uint64_t frames_ = 0;
};

}  // namespace

TEST(ConsumerChain, BatchesInOrderEndInReverseAndEveryConsumerIsEnded) {
  std::vector<std::string> log;
  config::Config cfg;
  const RunContext ctx{cfg, 1, "x.h5", FinderParams{}, "cpu"};
  {
    ConsumerChain chain;
    chain.add(std::make_unique<Recorder>("a", log));
    chain.add(std::make_unique<Recorder>("b", log, /*throw_at_end=*/true));
    chain.add(std::make_unique<Recorder>("c", log));
    chain.on_start(ctx);
    ClusterTable t(3);
    t.begin_frame(5);
    t.begin_frame(6);
    const std::vector<uint64_t> ts{50, 60};
    chain.on_batch(FoundBatch{t, ts});
    const FrameRow row{7, 0, 0, 0, kFlagMissing};
    chain.on_rows(std::span(&row, 1));
    // b's failure propagates, after a and c have been ended too; a second end does nothing.
    EXPECT_THROW(chain.on_end(RunEnd{}), std::runtime_error);
    chain.on_end(RunEnd{});
    const auto st = chain.stats();
    ASSERT_EQ(st.size(), 3u);
    EXPECT_EQ(st[2].name, "c");
    EXPECT_EQ(st[2].frames, 3u);
  }
  EXPECT_EQ(log, (std::vector<std::string>{"a start", "b start", "c start", "a batch 2",
                                           "b batch 2", "c batch 2", "a rows 1", "b rows 1",
                                           "c rows 1", "c end", "b end", "a end"}));
  // A consumer whose start failed is not ended; the ones started before are.
  log.clear();
  class FailsToStart final : public ResultConsumer {
   public:
    std::string_view name() const override { return "x"; }
    void on_start(const RunContext&) override { throw std::runtime_error("no"); }
    void on_batch(const FoundBatch&) override {}
    void on_end(const RunEnd&) override { ADD_FAILURE() << "ended without a start"; }
    ConsumerStats stats() const override { return {}; }
  };
  ConsumerChain chain;
  chain.add(std::make_unique<Recorder>("a", log));
  chain.add(std::make_unique<FailsToStart>());
  EXPECT_THROW(chain.on_start(ctx), std::runtime_error);
  chain.on_end(RunEnd{nullptr, false, true, ""});
  EXPECT_EQ(log, (std::vector<std::string>{"a start", "a end failed"}));
}

namespace {

/// Blocks in its first batch until released; records the first frame number of every batch.
class SlowConsumer final : public ResultConsumer {
 public:
  std::string_view name() const override { return "slow"; }
  void on_start(const RunContext&) override {}
  void on_batch(const FoundBatch& b) override {
    std::unique_lock lock(mu_);
    firsts_.push_back(b.clusters.frames()[0].frame_number);
    in_first_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
  }
  void on_rows(std::span<const FrameRow> rows) override {
    std::lock_guard lock(mu_);
    firsts_.push_back(rows[0].frame_number);
  }
  void on_end(const RunEnd&) override {
    std::lock_guard lock(mu_);
    ended_ = true;
  }
  ConsumerStats stats() const override { return {"slow", 0, 0, 0}; }

  void wait_in_first() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return in_first_; });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  std::vector<uint64_t> firsts() const {
    std::lock_guard lock(mu_);
    return firsts_;
  }
  bool ended() const {
    std::lock_guard lock(mu_);
    return ended_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> firsts_;
  bool in_first_ = false, released_ = false, ended_ = false;
};

ClusterTable frames_from(uint64_t first, std::size_t n) {
  ClusterTable t(3);
  for (std::size_t i = 0; i < n; ++i) t.begin_frame(first + i);
  return t;
}

}  // namespace

TEST(QueuedConsumer, AConsumerThatFallsBehindDropsAndCountsButNeverDelaysTheRun) {
  auto slow_owner = std::make_unique<SlowConsumer>();
  SlowConsumer& slow = *slow_owner;
  QueuedConsumer q(std::move(slow_owner), 2);
  config::Config cfg;
  q.on_start(RunContext{cfg, 1, "x.h5", FinderParams{}, "cpu"});
  const std::vector<uint64_t> ts(4, 0);
  const ClusterTable b0 = frames_from(0, 4);
  q.on_batch(FoundBatch{b0, ts});
  slow.wait_in_first();  // the worker holds batch 0; two more fit in the queue
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t k = 1; k <= 4; ++k) {
    const ClusterTable b = frames_from(4 * k, 4);
    q.on_batch(FoundBatch{b, ts});
  }
  const FrameRow row{20, 0, 0, 0, kFlagMissing};
  q.on_rows(std::span(&row, 1));  // the queue is still full: dropped
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the run was held up";
  ConsumerStats s = q.stats();
  EXPECT_EQ(s.name, "slow");
  EXPECT_EQ(s.frames, 21u);
  EXPECT_EQ(s.dropped, 9u) << "batches 3 and 4 and the row";
  slow.release();
  q.on_end(RunEnd{});
  EXPECT_TRUE(slow.ended());
  EXPECT_EQ(slow.firsts(), (std::vector<uint64_t>{0, 4, 8})) << "in frame order, gaps dropped";
  EXPECT_EQ(q.stats().dropped, 9u);
  EXPECT_THROW(QueuedConsumer(std::make_unique<SlowConsumer>(), 0), std::invalid_argument);
}

namespace {

using Case = glint::testing::SimulatedRun;

Case make_case(const std::string& name) {
  Case c = glint::testing::simulated_run(name, 32, 40, /*dark=*/16, /*batch_frames=*/8);
  c.sim.image.photons = 10;
  c.sim.frames = 100;
  return c;
}

}  // namespace

TEST(RunChain, ClustConsumerWritesTheRunFilesClustersForEveryDataFrame) {
  Case c = make_case("chain_clust");
  c.cfg.output.clust = true;
  c.cfg.detector.ports_x = 2;  // a dropped part makes an incomplete image
  c.sim.ports_x = 2;
  c.sim.faults = {{SimFault::gap, 17}, {SimFault::drop_part, 23}};
  c.cfg.ingest.reorder_frames = 4;
  Acquisition run(c.cfg, 1, std::nullopt);
  run_stream_simulator(c.sim);
  ASSERT_TRUE(run.wait(20s));
  const auto s = run.stats();
  ASSERT_EQ(s.error, "");
  const auto f = read_run_file(run.file());
  ASSERT_GT(s.incomplete, 0u);
  ASSERT_GT(s.missing, 0u);
  // The .clust file holds exactly the data rows (flags 0) of the run file, with their clusters.
  const ClusterTable clust = read_clust(clust_file_path(run.file()), 3);
  ClusterTable want(3);
  for (std::size_t i = 0; i < f.frames.size(); ++i) {
    if (f.frames[i].flags != 0) continue;
    const FrameRecord& r = f.clusters.frames()[i];
    want.begin_frame(r.frame_number);
    for (uint64_t k = r.first_cluster; k < r.first_cluster + r.n_clusters; ++k)
      want.add_cluster(f.clusters.x()[k], f.clusters.y()[k], f.clusters.cluster_data(k));
  }
  EXPECT_EQ(clust.n_frames(), s.data_frames);
  EXPECT_GT(clust.n_clusters(), 100u);
  EXPECT_TRUE(clust == want) << "the .clust file differs from the run file's data frames";
  ASSERT_EQ(s.consumers.size(), 3u);
  EXPECT_EQ(s.consumers[0].name, "run file");
  EXPECT_EQ(s.consumers[0].frames, f.frames.size());
  EXPECT_EQ(s.consumers[1].name, "clust file");
  EXPECT_EQ(s.consumers[1].frames, s.data_frames);
  EXPECT_EQ(s.consumers[2].name, "products");  // every row, as the run file
  EXPECT_EQ(s.consumers[2].frames, f.frames.size());
  EXPECT_EQ(s.consumers[2].dropped, 0u);

  // A second run with the same name does not overwrite it.
  Case d = c;
  fs::remove(run.file());
  Acquisition again(d.cfg, 1, std::nullopt);
  ASSERT_TRUE(again.wait(10s));
  EXPECT_EQ(again.state(), RunState::error);
  EXPECT_NE(again.stats().error.find(".clust: exists"), std::string::npos) << again.stats().error;
}

TEST(RunChain, StickyDeviceErrorFailsTheRunAsFatalAndTheFileKeepsItsRows) {
  Case c = make_case("chain_sticky");
  std::atomic<uint64_t> ok{0};
  Acquisition run(c.cfg, 1, std::nullopt, glint::testing::sticky_fault_factory(3, &ok));
  std::atomic<bool> stop{false};
  std::jthread sender([&] { run_stream_simulator(c.sim, &stop); });
  ASSERT_TRUE(run.wait(20s));
  stop = true;
  const auto s = run.stats();
  EXPECT_EQ(s.state, RunState::error);
  EXPECT_TRUE(s.fatal);
  EXPECT_NE(s.error.find("cudaErrorIllegalAddress"), std::string::npos) << s.error;
  EXPECT_NE(s.error.find("(sticky: "), std::string::npos) << s.error;
  EXPECT_FALSE(run.end_pedestal().has_value());
  const auto f = read_run_file(run.file());
  EXPECT_FALSE(f.end_time.empty()) << "the file is closed";
  EXPECT_EQ(glint::testing::count_rows(f, kFlagDark), 16u);
  EXPECT_EQ(glint::testing::count_rows(f, 0), ok.load());
  EXPECT_GE(ok.load(), 2u);
  EXPECT_EQ(s.data_frames, ok.load());

  // A CUDA error that is not sticky fails the run without being fatal.
  Case d = make_case("chain_not_sticky");
  auto factory = [](const FinderParams&, const FinderOptions&) -> std::unique_ptr<ClusterFinder> {
    throw gpu::CudaError("cudaMalloc failed: cudaErrorMemoryAllocation", 2, false);
  };
  Acquisition other(d.cfg, 1, std::nullopt, factory);
  ASSERT_TRUE(other.wait(10s));
  EXPECT_EQ(other.state(), RunState::error);
  EXPECT_FALSE(other.stats().fatal);
  EXPECT_EQ(other.stats().error, "cudaMalloc failed: cudaErrorMemoryAllocation");
}

TEST(RunChain, TheFinderTakesTheRunsTuningNotTheEnvironment) {
  Case c = make_case("chain_tuning");
  constexpr const char* kThreads[] = {"GLINT_FIND_THREADS"};
  glint::testing::ScopedEnvironment env(kThreads, {{"GLINT_FIND_THREADS", "128"}});
  RunTuning tuning;
  tuning.find.find_threads = 256;
  tuning.find.out_chunk = 3;
  std::optional<gpu::FindTuning> seen;
  auto factory = [&seen](const FinderParams&, const FinderOptions& o)
      -> std::unique_ptr<ClusterFinder> {
    seen = o.tuning;
    throw std::runtime_error("no finder in this test");
  };
  Acquisition run(c.cfg, 1, std::nullopt, factory, tuning);
  ASSERT_TRUE(run.wait(10s));
  EXPECT_EQ(run.state(), RunState::error);
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->find_threads, 256);
  EXPECT_EQ(seen->out_chunk, 3);
}

// A JUNGFRAU run through the whole chain: gain switching in dark and data frames, no cluster
// centred on a pixel out of G0, every frame's switched pixels counted in the run file, and the
// clusters those of the reference finder in G0-only mode.
TEST(RunChain, JungfrauGainBitsAreNotPhotons) {
  Case c = make_case("chain_jungfrau");
  c.cfg.detector.type = "jungfrau";
  c.sim.image.jungfrau = true;
  c.sim.image.gain_switch_rate = 5e-3;
  c.sim.image.dark_switch_rate = 2e-3;
  c.sim.image.invalid_gain_rate = 1e-3;
  Acquisition run(c.cfg, 1, std::nullopt);
  run_stream_simulator(c.sim);
  ASSERT_TRUE(run.wait(20s));
  ASSERT_EQ(run.stats().error, "");
  const auto f = read_run_file(run.file());
  ASSERT_EQ(f.frames.size(), 116u);
  ASSERT_EQ(f.gain_switched.size(), f.frames.size());
  FinderParams p;
  p.shape = {32, 40};
  p.pedestal_window = 16;
  p.pixels = PixelMode::jungfrau_g0;
  const ClusterTable want = glint::testing::expected_clusters(f, c.sim.image, 1, 16, p);
  ASSERT_EQ(want.n_frames(), f.clusters.n_frames());
  EXPECT_TRUE(std::ranges::equal(want.frames(), f.clusters.frames()));
  EXPECT_TRUE(std::ranges::equal(want.x(), f.clusters.x()));
  EXPECT_TRUE(std::ranges::equal(want.y(), f.clusters.y()));
  EXPECT_TRUE(std::ranges::equal(want.data(), f.clusters.data()));
  const SimImageSource source(c.sim.image, 16);
  std::vector<uint16_t> image(32 * 40);
  uint64_t switched = 0;
  for (std::size_t k = 16; k < f.frames.size(); ++k) {
    source.fill(f.frames[k].frame_number - 1, image);
    const auto g = jungfrau::count_gains(image);
    EXPECT_EQ(f.gain_switched[k], g.g1 + g.g2) << k;
    EXPECT_EQ(f.gain_invalid[k], g.invalid) << k;
    switched += g.switched();
    const FrameRecord r = f.clusters.frames()[k];
    for (uint64_t i = r.first_cluster; i < r.first_cluster + r.n_clusters; ++i)
      EXPECT_TRUE(jungfrau::in_g0(image[f.clusters.y()[i] * 40u + f.clusters.x()[i]]));
  }
  EXPECT_GT(switched, 500u);
  EXPECT_GT(f.clusters.n_clusters(), 100u);
}

// A calibrated JUNGFRAU run keeps the ADC pedestal the calibration subtracted: G0 from the run's
// dark frames (aare's calculate_pedestal over them), G1 and G2 from the pedestal file.
TEST(RunChain, CalibratedJungfrauRunFileHoldsTheAdcPedestalOfEachGain) {
  Case c = make_case("chain_jungfrau_calibrated");
  c.cfg.detector.type = "jungfrau";
  c.sim.image.jungfrau = true;
  c.sim.image.gain_switch_rate = 5e-3;
  c.sim.image.dark_switch_rate = 2e-3;
  constexpr std::size_t np = 32 * 40;
  const std::filesystem::path dir = c.cfg.output.directory;
  const std::vector<double> gain(3 * np, 40.0);
  std::vector<double> ped(3 * np);
  for (std::size_t i = 0; i < np; ++i) {
    ped[i] = 1.0;  // G0 comes from the dark frames: never used
    ped[np + i] = 14000.0 + 0.5 * double(i);
    ped[2 * np + i] = 14500.0 + 0.25 * double(i);
  }
  jungfrau::write_pedestal_file(dir / "gain.bin", gain);
  jungfrau::write_pedestal_file(dir / "ped.bin", ped);
  c.cfg.calibration.gain_file = (dir / "gain.bin").string();
  c.cfg.calibration.pedestal_file = (dir / "ped.bin").string();
  Acquisition run(c.cfg, 1, std::nullopt);
  run_stream_simulator(c.sim);
  ASSERT_TRUE(run.wait(20s));
  ASSERT_EQ(run.stats().error, "");
  const auto f = read_run_file(run.file());
  ASSERT_EQ(f.frames.size(), 116u);
  EXPECT_EQ(f.clusters.value_type(), ClusterValues::float32);
  ASSERT_EQ(f.calibration_pedestal.size(), 3 * np);

  const SimImageSource source(c.sim.image, 16);
  std::vector<uint16_t> image(np);
  jungfrau::StagePedestal dark({32, 40});
  for (std::size_t k = 0; k < 16; ++k) {
    ASSERT_EQ(f.frames[k].flags, kFlagDark);
    source.fill(f.frames[k].frame_number - 1, image);
    dark.add(image);
  }
  const std::vector<double> g0 = dark.means();
  EXPECT_TRUE(std::equal(f.calibration_pedestal.begin(), f.calibration_pedestal.begin() + np,
                         g0.begin()));
  EXPECT_TRUE(std::equal(f.calibration_pedestal.begin() + np, f.calibration_pedestal.end(),
                         ped.begin() + np));
  EXPECT_GT(g0[0], 100.0);  // a real dark level, not the file's 1.0
}

namespace {

/// Holds each batch's results until the next batch is submitted, as the GPU engine's ring of
/// slots does, and counts the flushes that found a batch in flight.
class HoldingFinder final : public ClusterFinder {
 public:
  explicit HoldingFinder(std::unique_ptr<ClusterFinder> inner) : inner_(std::move(inner)) {
    inner_->set_sink([this](const ClusterTable& t) { held_.push_back(t); });
  }
  const FinderParams& params() const override { return inner_->params(); }
  int batch_frames() const override { return inner_->batch_frames(); }
  std::span<uint16_t> staging() override { return inner_->staging(); }
  void submit(std::span<const uint64_t> frame_numbers) override {
    if (frame_numbers.empty()) return;
    inner_->submit(frame_numbers);
    while (held_.size() > 1) deliver_front();  // the newest batch stays "in flight"
  }
  void submit_dark(std::size_t n) override { inner_->submit_dark(n); }
  void flush() override {
    inner_->flush();
    if (!held_.empty()) ++drains;  // a batch was still in flight
    while (!held_.empty()) deliver_front();
  }
  void set_sink(ResultSink sink) override { sink_ = std::move(sink); }
  void push_dark(std::span<const uint16_t> frames) override { inner_->push_dark(frames); }
  void find(std::span<const uint16_t> frames, std::span<const uint64_t> numbers,
            ClusterTable& out) override {
    inner_->find(frames, numbers, out);
  }
  PedestalState pedestal() const override { return inner_->pedestal(); }
  void load_pedestal(const PedestalState& s) override { inner_->load_pedestal(s); }
  std::string description() const override { return "holding (" + inner_->description() + ")"; }

  std::atomic<uint64_t> drains{0};  ///< flushes that found a batch in flight

 private:
  void deliver_front() {
    ClusterTable t = std::move(held_.front());
    held_.pop_front();
    if (sink_) sink_(t);
  }
  std::unique_ptr<ClusterFinder> inner_;
  std::deque<ClusterTable> held_;
  ResultSink sink_;
};

}  // namespace

// The flush step drains the finder only when nothing came back since the last flush: while
// results flow it would stop the run loop for the batches in flight (with large images, long
// enough for the images to pile up); when the stream pauses, what was received reaches the file.
TEST(RunChain, TheFlushDrainsTheFinderOnlyWhenNothingCameBack) {
  Case c = make_case("chain_flush_drain");
  c.cfg.output.flush_interval_ms = 100;
  c.cfg.run.idle_end_seconds = 0;
  c.sim.frames = 40;
  c.sim.send_end = false;
  // Room for every frame of the run: on a loaded machine the run loop may fall behind the 2 kHz
  // stream below for longer than the default 256 queued frames, and the receiver then drops
  // images (by design: rows flagged dropped), which is not what this test is about.
  c.cfg.ingest.queue_frames = 4096;
  HoldingFinder* holding = nullptr;
  auto factory = [&holding](const FinderParams& p, const FinderOptions& o) {
    auto f = std::make_unique<HoldingFinder>(make_finder(p, o));
    holding = f.get();
    return std::unique_ptr<ClusterFinder>(std::move(f));
  };
  Acquisition run(c.cfg, 1, std::nullopt, factory);
  run_stream_simulator(c.sim);  // 16 dark and 40 data frames, then a pause
  // The last batch is held by the finder until a flush finds that nothing came back.
  const auto until = std::chrono::steady_clock::now() + 10s;
  std::size_t data_rows = 0;
  while (std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(50ms);
    data_rows = glint::testing::count_rows(read_run_file(run.file()), 0);
    if (data_rows == 40) break;
  }
  EXPECT_EQ(data_rows, 40u) << "the paused stream's frames reached the file";
  ASSERT_NE(holding, nullptr);
  const uint64_t after_pause = holding->drains.load();
  EXPECT_GE(after_pause, 1u);

  // Now two seconds of stream with flushes every 100 ms: batches of 8 frames come back every
  // 4 ms, so no flush drains the finder until the stream ends (before, each of ~20 did).
  Case more = c;
  more.sim.frames = 4000;
  more.sim.rate_hz = 2000;
  more.sim.skip_images = 16 + 40;
  more.sim.send_end = true;
  more.sim.wait_subscribers_ms = 5000;
  const auto t0 = std::chrono::steady_clock::now();
  run_stream_simulator(more.sim);
  ASSERT_TRUE(run.wait(60s));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto s = run.stats();
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.data_frames, 4000u) << "received " << s.frames_received << ", missing " << s.missing
                                  << ", dropped " << s.dropped << ", incomplete " << s.incomplete
                                  << ", messages " << s.messages << ", end " << s.end_reason;
  EXPECT_EQ(glint::testing::count_rows(read_run_file(run.file()), 0), 4000u);
  // The end drains once; a stall of a whole flush interval on a loaded machine may add one.
  EXPECT_LE(holding->drains.load() - after_pause, 3u)
      << "over " << seconds << " s of streaming, " << int(seconds / 0.1) << " flushes";
}
