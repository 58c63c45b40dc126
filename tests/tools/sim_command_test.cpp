// `glint sim`: its arguments are checked before any socket is bound; it reports what it sent
// (out of the process, not queued), what it could not send, and when it falls behind its rate.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "../pipeline/stream_test_util.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "tool_test.hpp"

using glint::testing::expect_failure;
using glint::testing::run_glint;
using glint::testing::ToolResult;

TEST(GlintSim, RejectsABadFaultPeriod) {
  for (const std::string every : {"x", "-1", "0", "", "3x"})
    expect_failure("sim --frames 1 --fault gap:" + every, 2,
                   "--fault gap:" + every + ": EVERY must be a whole number >= 1");
  expect_failure("sim --frames 1 --fault nonsense", 2, "unknown fault 'nonsense'");
}

TEST(GlintSim, RejectsBadStreamFaultOptions) {
  for (const std::string v : {"x", "3", "3:", ":4", "3:4x"}) {
    expect_failure("sim --frames 1 --glitch " + v, 2,
                   "--glitch " + v + ": expected two whole numbers A:B");
    expect_failure("sim --frames 1 --port-delay " + v, 2,
                   "--port-delay " + v + ": expected two whole numbers A:B");
  }
  expect_failure("sim --frames 1 --jump 0:5", 2, "--jump: EVERY must be at least 1");
  expect_failure("sim --frames 1 --ports 2 1 --port-delay 2:100", 2,
                 "--port-delay 2:100: PORT must be below 2 (the ports)");
  expect_failure("sim --frames 1 --every 0", 2, "--every: N must be at least 1");
  expect_failure("sim --frames 1 --acquisitions 0", 2, "--acquisitions must be at least 1");
}

TEST(GlintSim, ImagesSentToNobodyAreReportedAndFail) {
  const std::string ep = glint::testing::loopback(glint::testing::free_tcp_port());
  // No receiver: every image is dropped by the PUB socket. The rate cannot be kept either.
  const ToolResult r = run_glint("sim --endpoint " + ep +
                                 " --wait-ms 0 --rows 200 --cols 200 --frames 40 --rate 1000000");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("glint sim: 40 of 40 images were sent while a port had no subscriber "
                          "and are lost (start the receiver, e.g. `glint ctl start`, before "
                          "glint sim)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("the end-of-acquisition message went to a port without a subscriber"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("glint sim: could not keep --rate 1e+06: sent "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("40 images (0 dark) as 41 messages"), std::string::npos) << r.output;
}

namespace {

/// A SUB on `ep` that counts the messages it receives, or (reading = false) reads nothing.
struct Receiver {
  zmq::context_t ctx{1};
  zmq::socket_t sub{ctx, zmq::socket_type::sub};
  std::atomic<uint64_t> messages{0};
  std::atomic<bool> stop{false};
  std::jthread thread;
  Receiver(const std::string& ep, bool reading) {
    sub.set(zmq::sockopt::subscribe, "");
    sub.set(zmq::sockopt::rcvhwm, 2);
    sub.set(zmq::sockopt::rcvbuf, 65536);
    sub.set(zmq::sockopt::rcvtimeo, 50);
    sub.set(zmq::sockopt::linger, 0);
    sub.connect(ep);
    if (reading)
      thread = std::jthread([this] {
        while (!stop.load()) {
          zmq::message_t m;
          if (sub.recv(m)) ++messages;
        }
      });
  }
  ~Receiver() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

}  // namespace

TEST(GlintSim, ReportCountsWhatLeftAndWhatWasStillQueued) {
  const std::string ep = glint::testing::loopback(glint::testing::free_tcp_port());
  glint::pipeline::SimOptions o;
  o.endpoints = {ep};
  o.image.rows = o.image.cols = 400;  // 320 kB a message
  o.frames = 200;
  o.image_pool = 4;
  {
    // A receiver that reads everything: every image left, the end message too.
    Receiver rx(ep, true);
    const auto r = glint::pipeline::run_stream_simulator(o);
    EXPECT_TRUE(r.subscribers_seen);
    EXPECT_TRUE(r.drained);
    EXPECT_EQ(r.images, 200u);
    EXPECT_EQ(r.images_to_nobody, 0u);
    EXPECT_FALSE(r.end_to_nobody);
    EXPECT_GE(r.seconds, r.queued_seconds);
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
         rx.messages.load() < 2 * 200 + 1 && std::chrono::steady_clock::now() < until;)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(rx.messages.load(), 2u * 200 + 1);  // header + pixels per image, the end message
  }
  {
    // A receiver that reads nothing: 64 MB cannot leave through its socket buffers; after
    // drain_ms the rest is lost, and the report says so (before, the summary read as if all of
    // it had been sent, at the rate it was queued).
    Receiver rx(ep, false);
    o.drain_ms = 300;
    const auto r = glint::pipeline::run_stream_simulator(o);
    EXPECT_TRUE(r.subscribers_seen);
    EXPECT_FALSE(r.drained);
    EXPECT_GE(r.seconds, r.queued_seconds + 0.28);
  }
}
