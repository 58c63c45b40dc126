// The slsReceiver stream as real receivers send it, reproduced by the simulator and run into the
// real ingest over loopback: headers checked at their real width, the receiver's dummy header
// before an acquisition, EIGER 12-bit packed pixels, flipped bottom half-modules and quads,
// addJsonHeader dark markers, TCP keepalive on the SUB connections; the loopback ports the tests
// take held until each test program ends.
#include <gtest/gtest.h>

#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "glint/config/config.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/ingest.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "simulated_run.hpp"
#include "stream_test_util.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;

namespace {

using Case = glint::testing::SimulatedRun;

/// A 48 x 64 detector of `ports_x` x `ports_y` ports on `endpoints` fresh loopback ports: 20
/// dark frames, 60 photon frames numbered from 1000.
Case make_case(const std::string& name, uint32_t ports_x = 1, uint32_t ports_y = 1,
               uint32_t endpoints = 1) {
  Case c = glint::testing::small_detector_run(name, ports_x, ports_y, endpoints);
  c.cfg.ingest.reorder_frames = 200;
  return c;
}

struct Result {
  RunStats stats;
  RunFileContents file;
};

Result run_case(const Case& c) {
  Acquisition run(c.cfg, 1, std::nullopt);
  const SimReport sent = run_stream_simulator(c.sim);
  EXPECT_TRUE(sent.subscribers_seen);
  EXPECT_TRUE(run.wait(20s)) << "the run did not end on the end message";
  Result r{run.stats(), read_run_file(run.file())};
  EXPECT_EQ(r.stats.error, "");
  return r;
}

/// The run file's clusters equal the reference finder's on the simulator's (unflipped) images.
void expect_reference_clusters(const Case& c, const Result& r) {
  FinderParams p;
  p.shape = {c.cfg.detector.rows, c.cfg.detector.cols};
  p.cluster_size = c.cfg.finder.cluster_size;
  p.n_sigma = c.cfg.finder.n_sigma;
  p.pedestal_window = c.cfg.pedestal.window;
  const ClusterTable want = glint::testing::expected_clusters(
      r.file, c.sim.image, c.sim.first_frame_number, c.sim.dark_frames, p, c.sim.bitmode);
  EXPECT_GT(want.n_clusters(), 60u * 5);
  EXPECT_EQ(r.file.clusters.n_clusters(), want.n_clusters());
  EXPECT_TRUE(r.file.clusters == want) << "clusters differ from the reference finder";
}

/// 20 dark rows then 60 searched ones, frame numbers 1000..1079.
void expect_all_rows(const Result& r) {
  ASSERT_EQ(r.file.frames.size(), 80u);
  for (std::size_t i = 0; i < r.file.frames.size(); ++i) {
    EXPECT_EQ(r.file.frames[i].frame_number, 1000 + i);
    EXPECT_EQ(r.file.frames[i].flags, i < 20 ? kFlagDark : 0) << i;
  }
  EXPECT_EQ(r.stats.dark_frames, 20u);
  EXPECT_EQ(r.stats.data_frames, 60u);
  EXPECT_EQ(r.stats.incomplete, 0u);
  EXPECT_EQ(r.stats.end_reason, "end of acquisition");
}

/// Waits up to 10 s for `done`.
bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(10ms);
  return done();
}

}  // namespace

TEST(WireFormat, TwelveBitEigerPortsAssembleAndFindAsTheReference) {
  Case c = make_case("wire_12bit", 2, 2, 2);
  c.sim.bitmode = 12;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.bad_total, 0u);
  EXPECT_EQ(r.stats.parts, 320u);
  expect_all_rows(r);
  expect_reference_clusters(c, r);
}

TEST(WireFormat, FlippedBottomHalfModulesAssembleUpright) {
  Case c = make_case("wire_flip", 2, 2, 2);
  c.sim.flip_rows = true;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.bad_total, 0u);
  expect_all_rows(r);
  expect_reference_clusters(c, r);
}

TEST(WireFormat, QuadAssemblesUprightAt12Bits) {
  Case c = make_case("wire_quad", 1, 2, 2);
  c.sim.quad = true;
  c.sim.bitmode = 12;
  const Result r = run_case(c);
  EXPECT_EQ(r.stats.bad_total, 0u);
  expect_all_rows(r);
  expect_reference_clusters(c, r);
}

TEST(WireFormat, MarkedDarkFramesDriveThePedestal) {
  Case c = make_case("wire_mark_dark");
  c.sim.mark_dark = true;
  // Far more dark frames configured than are sent: the markers end the dark phase.
  c.cfg.pedestal.dark_frames = 1000;
  c.cfg.pedestal.dark_marker = "frame_mode";
  const Result r = run_case(c);
  expect_all_rows(r);
  expect_reference_clusters(c, r);
}

TEST(WireFormat, MarkersAreIgnoredUnlessConfigured) {
  Case c = make_case("wire_no_marker");
  c.sim.mark_dark = true;
  c.cfg.pedestal.dark_frames = 30;  // the default: the first 30 frames are dark, markers or not
  const Result r = run_case(c);
  ASSERT_EQ(r.file.frames.size(), 80u);
  EXPECT_EQ(r.stats.dark_frames, 30u);
  EXPECT_EQ(r.stats.data_frames, 50u);
}

TEST(WireFormat, DummyHeaderBeforeTheAcquisitionIsNotItsEnd) {
  Case c = make_case("wire_dummy");
  c.sim.dummy_start = true;
  const Result r = run_case(c);
  expect_all_rows(r);
  EXPECT_EQ(r.stats.end_messages, 2u);  // the dummy and the end
  EXPECT_EQ(r.stats.stray_ends, 1u);
  expect_reference_clusters(c, r);
}

TEST(WireFormat, OutOfRangeHeadersAreCountedNeverEnds) {
  Case c = make_case("wire_out_of_range");
  c.sim.faults = {{SimFault::out_of_range, 1}};
  const Result r = run_case(c);
  expect_all_rows(r);
  EXPECT_EQ(r.stats.bad[std::size_t(BadInput::out_of_range)], 160u);  // row 2^32, data 0.5
  EXPECT_EQ(r.stats.bad_total, 160u);
  EXPECT_EQ(r.stats.late_parts, 0u);  // row 2^32 was not taken as row 0
  EXPECT_EQ(r.stats.end_messages, 1u);
  expect_reference_clusters(c, r);
}

TEST(WireFormat, StrayEndsOnAPortWithoutDataCountOnceAnotherPortHasEnded) {
  // One port on two endpoints: all data goes to the first, the second only ever sends end
  // headers (a dummy before the acquisition, and the end).
  glint::config::Config cfg;
  cfg.detector.rows = 16;
  cfg.detector.cols = 16;
  SimOptions sim;
  sim.endpoints.clear();
  cfg.ingest.endpoints.clear();
  for (int i = 0; i < 2; ++i) {
    const auto ep = glint::testing::loopback(glint::testing::free_tcp_port());
    cfg.ingest.endpoints.push_back(ep);
    sim.endpoints.push_back(ep);
  }
  sim.image.rows = sim.image.cols = 16;
  sim.frames = 5;
  sim.dummy_start = true;
  FrameAssembler assembler(cfg.detector, cfg.ingest);
  Ingest ingest(cfg, assembler);
  sim.send_end = false;
  run_stream_simulator(sim);
  // A message is counted as it arrives, its effects (a stray end, a frame) once its thread has
  // handled it: wait for all of them. Both dummies arrived before any data on their endpoint.
  ASSERT_TRUE(eventually([&] {
    const auto c = ingest.counters();
    return c.messages == 7 && c.stray_ends == 2 && c.end_messages == 2 &&
           assembler.counters().frames_complete == 5;
  })) << ingest.counters().messages << " messages, " << ingest.counters().stray_ends
      << " strays, " << ingest.counters().end_messages << " ends, "
      << assembler.counters().frames_complete << " frames";
  // No end yet: neither dummy ended the run.
  EXPECT_FALSE(ingest.any_ended());
  EXPECT_FALSE(ingest.all_ended());
  // The first endpoint ends; the second, which never had data, counts as ended with it.
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::pub);
  pub.set(zmq::sockopt::linger, 1000);
  pub.bind(cfg.ingest.endpoints[0]);
  ASSERT_TRUE(eventually([&] {
    pub.send(zmq::buffer(format_sls_end()), zmq::send_flags::none);
    std::this_thread::sleep_for(20ms);
    return ingest.any_ended();
  }));
  EXPECT_TRUE(ingest.all_ended());
  EXPECT_EQ(ingest.counters().stray_ends, 2u);
  EXPECT_EQ(ingest.counters().bad_total(), 0u);
  ingest.stop();
}

TEST(WireFormat, KeepaliveOptionsOfTheSubSockets) {
  zmq::context_t ctx(1);
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  EXPECT_EQ(sub.get(zmq::sockopt::tcp_keepalive), -1);  // ZeroMQ's default: the system's
  set_tcp_keepalive(sub);
  EXPECT_EQ(sub.get(zmq::sockopt::tcp_keepalive), 1);
  EXPECT_EQ(sub.get(zmq::sockopt::tcp_keepalive_idle), 60);
  EXPECT_EQ(sub.get(zmq::sockopt::tcp_keepalive_intvl), 1);
  EXPECT_EQ(sub.get(zmq::sockopt::tcp_keepalive_cnt), 10);
}

TEST(WireFormat, IngestConnectionsHaveTcpKeepalive) {
  // The kernel's view of the ingest's TCP connection to a publisher: this process's sockets
  // whose peer is the publisher's port.
  glint::config::Config cfg;
  cfg.detector.rows = cfg.detector.cols = 16;
  const int port = glint::testing::free_tcp_port();
  cfg.ingest.endpoints = {glint::testing::loopback(port)};
  zmq::context_t ctx(1);
  zmq::socket_t pub(ctx, zmq::socket_type::xpub);
  pub.set(zmq::sockopt::linger, 0);
  pub.bind(cfg.ingest.endpoints[0]);
  FrameAssembler assembler(cfg.detector, cfg.ingest);
  Ingest ingest(cfg, assembler);
  zmq::message_t subscription;
  pub.set(zmq::sockopt::rcvtimeo, 10000);
  ASSERT_TRUE(pub.recv(subscription)) << "the ingest never subscribed";
  struct Options {
    int keepalive = -1, idle = -1, interval = -1, count = -1;
  };
  const auto ingest_side = [&]() -> std::optional<Options> {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return std::nullopt;
    std::optional<Options> found;
    while (dirent* e = readdir(d)) {
      const int fd = std::atoi(e->d_name);
      if (fd <= 2) continue;
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 ||
          peer.sin_family != AF_INET || ntohs(peer.sin_port) != port)
        continue;
      Options o;
      socklen_t n = sizeof(int);
      getsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &o.keepalive, &n);
      getsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &o.idle, &n);
      getsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &o.interval, &n);
      getsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &o.count, &n);
      found = o;
    }
    closedir(d);
    return found;
  };
  const auto o = ingest_side();
  ASSERT_TRUE(o.has_value()) << "no connection to port " << port;
  EXPECT_EQ(o->keepalive, 1);
  EXPECT_EQ(o->idle, 60);
  EXPECT_EQ(o->interval, 1);
  EXPECT_EQ(o->count, 10);
  ingest.stop();
}

TEST(TestPorts, HeldForTheProgramYetOneListenerBindsThem) {
  // free_tcp_port's port stays this program's: a plain bind (what another program's bind to port
  // 0 or a connection's ephemeral port would need) is refused, a ZeroMQ listener binds and
  // carries messages, and a second listener is still refused.
  const int port = glint::testing::free_tcp_port();
  EXPECT_NE(glint::testing::free_tcp_port(), port);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_NE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(errno, EADDRINUSE);
  ::close(fd);
  zmq::context_t ctx(1);
  zmq::socket_t push(ctx, zmq::socket_type::push), pull(ctx, zmq::socket_type::pull),
      second(ctx, zmq::socket_type::push);
  for (auto* s : {&push, &pull, &second}) s->set(zmq::sockopt::linger, 0);
  const std::string ep = glint::testing::loopback(port);
  push.bind(ep);
  EXPECT_THROW(second.bind(ep), zmq::error_t);
  pull.connect(ep);
  pull.set(zmq::sockopt::rcvtimeo, 10000);
  push.send(zmq::str_buffer("frame"), zmq::send_flags::none);
  zmq::message_t m;
  ASSERT_TRUE(pull.recv(m));
  EXPECT_EQ(m.to_string(), "frame");
}
