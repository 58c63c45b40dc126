// `glint sim` reproduces the slsReceiver stream variants (EIGER 12-bit quad with a flipped port,
// frameMode dark markers, the dummy header before the acquisition, out-of-range header numbers):
// the real binary publishes, glint's ingest and assembler receive in this process.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "../pipeline/stream_test_util.hpp"
#include "glint/config/config.hpp"
#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/ingest.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "tool_test.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;

TEST(GlintSim, WireVariantsReachTheIngestAsSlsReceiverSendsThem) {
  config::Config cfg;
  cfg.detector.rows = 16;
  cfg.detector.cols = 24;
  cfg.detector.ports_x = 1;
  cfg.detector.ports_y = 2;
  const std::string ep = glint::testing::loopback(glint::testing::free_tcp_port());
  cfg.ingest.endpoints = {ep};
  FrameAssembler assembler(cfg.detector, cfg.ingest);
  Ingest ingest(cfg, assembler);
  glint::testing::ToolResult sim;
  std::thread sender([&] {
    sim = glint::testing::run_glint(
        "sim -q --endpoint " + ep +
        " --rows 16 --cols 24 --ports 1 2 --quad --bitmode 12 --mark-dark --dummy-start"
        " --dark 2 --frames 4 --seed 5 --fault out-of-range:1");
  });
  SimImageParams params;
  params.rows = 16;
  params.cols = 24;
  params.seed = 5;
  const SimImageSource source(params, 2);
  std::vector<uint16_t> got(16 * 24), want(16 * 24);
  std::vector<uint64_t> numbers;
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    FramePtr f = assembler.pop(100ms);
    if (!f) {
      if (ingest.all_ended()) break;
      continue;
    }
    numbers.push_back(f->frame_number);
    EXPECT_FALSE(f->incomplete);
    EXPECT_EQ(f->dark_marked, f->frame_number <= 2) << f->frame_number;
    f->write_to(cfg.detector, got);
    source.fill(f->frame_number - 1, want);
    for (auto& v : want) v = std::min<uint16_t>(v, 4095);  // 12 bits on the wire
    EXPECT_EQ(got, want) << "frame " << f->frame_number;
    assembler.release(std::move(f));
  }
  sender.join();
  EXPECT_EQ(sim.status, 0) << sim.output;
  EXPECT_EQ(numbers, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(ingest.all_ended());
  const IngestCounters c = ingest.counters();
  EXPECT_EQ(c.stray_ends, 1u);    // the dummy before the first image
  EXPECT_EQ(c.end_messages, 2u);  // the dummy and the end
  EXPECT_EQ(c.bad[std::size_t(BadInput::out_of_range)], 12u);  // row 2^32, data 0.5 per image
  EXPECT_EQ(c.bad_total(), 12u);
  EXPECT_EQ(assembler.counters().late_parts, 0u);
  ingest.stop();
}
