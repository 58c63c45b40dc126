// The live view's publisher and consumer: what a real SUB socket receives (the naming message,
// each image in slsReceiver's format at bitmode 32 with its scale), the rate limit, and a stuck
// subscriber that must never hold up the run.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "glint/pipeline/preview_publisher.hpp"
#include "glint/pipeline/sls_stream.hpp"

using namespace glint;
using namespace glint::pipeline;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

PreviewImage make_image(std::string what, std::string units, uint32_t rows, uint32_t cols,
                        std::vector<double> values) {
  PreviewImage im;
  im.what = std::move(what);
  im.units = std::move(units);
  im.rows = rows;
  im.cols = cols;
  im.values = std::move(values);
  return im;
}

/// One update as a subscriber sees it.
struct Received {
  json naming;
  std::vector<SlsHeader> headers;
  std::vector<std::vector<uint32_t>> pixels;
};

/// A SUB socket on the publisher's endpoint.
struct Subscriber {
  zmq::context_t ctx{1};
  zmq::socket_t sub{ctx, zmq::socket_type::sub};
  explicit Subscriber(const std::string& ep, int rcvhwm = 1000) {
    sub.set(zmq::sockopt::rcvhwm, rcvhwm);
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(ep);
  }
  /// The next whole update (naming message, then its images), or nullopt after `timeout`.
  std::optional<Received> next(std::chrono::milliseconds timeout) {
    sub.set(zmq::sockopt::rcvtimeo, static_cast<int>(timeout.count()));
    zmq::message_t m;
    for (;;) {
      if (!sub.recv(m)) return std::nullopt;
      if (!m.more()) break;
      zmq::message_t rest;  // an image of an update whose naming message came before we joined
      (void)sub.recv(rest);
    }
    Received r;
    r.naming = json::parse(m.to_string_view());
    for (std::size_t i = 0; i < r.naming["images"].size(); ++i) {
      zmq::message_t h, p;
      if (!sub.recv(h) || !h.more() || !sub.recv(p) || p.more()) return std::nullopt;
      const ParsedHeader parsed = parse_sls_header(h.to_string_view());
      if (!parsed.header) {
        ADD_FAILURE() << "header rejected: " << parsed.detail;
        return std::nullopt;
      }
      r.headers.push_back(*parsed.header);
      std::vector<uint32_t> px(p.size() / 4);
      std::memcpy(px.data(), p.data(), px.size() * 4);
      r.pixels.push_back(std::move(px));
    }
    return r;
  }
};

/// Publishes `u` until `s` receives an update (a SUB socket joins some time after connecting).
Received publish_until_received(PreviewPublisher& pub, Subscriber& s, const PreviewUpdate& u) {
  for (int i = 0; i < 200; ++i) {
    pub.publish(u);
    if (auto r = s.next(50ms)) return *r;
  }
  ADD_FAILURE() << "nothing received from " << pub.endpoint();
  return {};
}

std::shared_ptr<const PreviewImage> shared(PreviewImage im) {
  return std::make_shared<const PreviewImage>(std::move(im));
}

}  // namespace

TEST(PreviewScaling, IntegerImagesAreExactOthersScaledByAPowerOfTen) {
  auto s = scale_to_uint32(make_image("hitmap", "counts", 1, 4, {0, 1, 17, 4294967295.0}));
  EXPECT_EQ(s.scale, 1.0);
  EXPECT_EQ(s.offset, 0.0);
  EXPECT_EQ(s.pixels, (std::vector<uint32_t>{0, 1, 17, 4294967295u}));
  // A float range of 4000.5: the finest scale, 1e-6.
  s = scale_to_uint32(make_image("pedestal", "ADU", 1, 3, {0.0, 1234.5678914, 4000.5}));
  EXPECT_EQ(s.scale, 1e-6);
  EXPECT_EQ(s.pixels, (std::vector<uint32_t>{0, 1234567891, 4000500000u}));
  // A range of 1e12: 10^ceil(log10(1e12 / (2^32 - 1))) = 1000.
  s = scale_to_uint32(make_image("energy", "keV", 1, 2, {0.5, 1e12}));
  EXPECT_EQ(s.scale, 1000.0);
  EXPECT_EQ(s.pixels, (std::vector<uint32_t>{0, 1000000000u}));
  // A negative smallest value becomes the offset; integers stay exact.
  s = scale_to_uint32(make_image("energy", "ADU", 1, 3, {-5, 0, 7}));
  EXPECT_EQ(s.scale, 1.0);
  EXPECT_EQ(s.offset, -5.0);
  EXPECT_EQ(s.pixels, (std::vector<uint32_t>{0, 5, 12}));
  // NaN (a noise where rounding made the variance negative) is pixel 0 and counted.
  s = scale_to_uint32(make_image("noise", "ADU", 1, 3,
                                 {2.5, std::numeric_limits<double>::quiet_NaN(), 3.25}));
  EXPECT_EQ(s.non_finite, 1u);
  EXPECT_EQ(s.scale, 1e-6);
  EXPECT_EQ(s.pixels, (std::vector<uint32_t>{2500000, 0, 3250000}));
}

TEST(PreviewPublisher, ARealSubscriberDecodesTheNamingMessageAndEachImage) {
  PreviewPublisher pub("tcp://127.0.0.1:*", 2);
  ASSERT_TRUE(pub.endpoint().starts_with("tcp://127.0.0.1:")) << pub.endpoint();
  ASSERT_EQ(pub.endpoint().find('*'), std::string::npos) << pub.endpoint();
  Subscriber sub(pub.endpoint());

  PreviewUpdate u;
  u.run_index = 42;
  u.file = "/data/runs/run_000042.h5";
  u.sequence = 3;
  u.frames = 1200;
  std::vector<double> hits(3 * 4);
  for (std::size_t i = 0; i < hits.size(); ++i) hits[i] = 7.0 * i;
  PreviewImage hitmap = make_image("hitmap", "counts", 3, 4, hits);
  hitmap.frames = 1200;
  PreviewImage noise = make_image("noise", "ADU", 2, 2, {3.125, 0.5, 12.75, 4.0625});
  noise.frames = 20;
  PreviewImage spectrum = make_image("spectrum", "counts", 1, 5, {0, 3, 9, 4, 1});
  spectrum.x_min = 0;
  spectrum.x_max = 2000;
  spectrum.x_label = "energy (ADU)";
  u.images = {shared(hitmap), shared(noise), shared(spectrum)};

  const Received r = publish_until_received(pub, sub, u);
  ASSERT_EQ(r.headers.size(), 3u);
  const json& n = r.naming;
  EXPECT_EQ(n["glint_preview"], kPreviewFormatVersion);
  EXPECT_EQ(n["run"], 42);
  EXPECT_EQ(n["file"], "/data/runs/run_000042.h5");
  EXPECT_EQ(n["update"], 3);
  EXPECT_EQ(n["final"], false);
  EXPECT_EQ(n["frames"], 1200);
  ASSERT_EQ(n["images"].size(), 3u);
  EXPECT_EQ(n["images"][0], json({{"what", "hitmap"}, {"units", "counts"}, {"rows", 3},
                                  {"cols", 4}, {"scale", 1.0}, {"offset", 0.0},
                                  {"frames", 1200}, {"non_finite", 0}}));
  EXPECT_EQ(n["images"][1]["what"], "noise");
  EXPECT_EQ(n["images"][1]["scale"], 1e-6);
  EXPECT_EQ(n["images"][2]["x_label"], "energy (ADU)");
  EXPECT_EQ(n["images"][2]["x_max"], 2000.0);

  // The hit map: bitmode 32, exact counts, the header as slsReceiver's.
  const SlsHeader& h = r.headers[0];
  EXPECT_EQ(h.jsonversion, 5u);
  EXPECT_EQ(h.bitmode, 32u);
  EXPECT_EQ(h.shape, (std::array<uint32_t, 2>{4, 3}));  // [x (cols), y (rows)]
  EXPECT_EQ(h.detshape, (std::array<uint32_t, 2>{1, 1}));
  EXPECT_EQ(h.size, 48u);
  EXPECT_EQ(h.acq_index, 42u);
  EXPECT_EQ(h.frame_index, 3u);
  EXPECT_EQ(h.frame_number, 4u);
  EXPECT_EQ(h.fname, "/data/runs/run_000042.h5");
  EXPECT_EQ(h.data, 1u);
  EXPECT_EQ(h.add_json_header, (std::map<std::string, std::string>{{"glint_what", "hitmap"},
                                                                   {"units", "counts"},
                                                                   {"scale", "1"},
                                                                   {"offset", "0"},
                                                                   {"frames", "1200"}}));
  ASSERT_EQ(r.pixels[0].size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) EXPECT_EQ(r.pixels[0][i], 7u * i) << i;

  // The noise map: scaled by 1e-6, value = offset + scale * pixel.
  const SlsHeader& hn = r.headers[1];
  EXPECT_EQ(hn.add_json_header.at("glint_what"), "noise");
  EXPECT_EQ(hn.add_json_header.at("scale"), "1e-06");
  EXPECT_EQ(hn.add_json_header.at("frames"), "20");
  EXPECT_EQ(r.pixels[1], (std::vector<uint32_t>{3125000, 500000, 12750000, 4062500}));
  const double scale = std::stod(hn.add_json_header.at("scale"));
  EXPECT_NEAR(scale * r.pixels[1][2], 12.75, 1e-9);

  // The spectrum carries its axis.
  const SlsHeader& hs = r.headers[2];
  EXPECT_EQ(hs.shape, (std::array<uint32_t, 2>{5, 1}));
  EXPECT_EQ(hs.add_json_header.at("x_label"), "energy (ADU)");
  EXPECT_EQ(hs.add_json_header.at("x_max"), "2000");
  EXPECT_EQ(r.pixels[2], (std::vector<uint32_t>{0, 3, 9, 4, 1}));
}

TEST(PreviewPublisher, AnEndpointThatCannotBeBoundIsNamed) {
  PreviewPublisher first("tcp://127.0.0.1:*", 2);
  try {
    PreviewPublisher second(first.endpoint(), 2);
    FAIL() << "a second bind of " << first.endpoint() << " succeeded";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("preview.endpoint " + first.endpoint() + ": cannot bind"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("preview.enabled: false"), std::string::npos) << what;
  }
}

namespace {

/// A run's context for the consumer: `rate_hz`, `images`.
struct RunSetup {
  config::Config cfg;
  FinderParams params;
  RunContext context() const { return RunContext{cfg, 7, "/runs/run_000007.h5", params, "cpu"}; }
};

PedestalState small_pedestal() {
  PedestalState p(FrameShape{2, 3}, 4);
  for (std::size_t i = 0; i < 6; ++i) {
    // 4 samples of i*100 + {0, 1, 2, 3}: mean i*100 + 1.5, variance 1.25.
    for (int k = 0; k < 4; ++k) {
      p.sum[i] += i * 100.0 + k;
      p.sum2[i] += (i * 100.0 + k) * (i * 100.0 + k);
    }
    p.count[i] = 4;
  }
  return p;
}

/// A batch of `frames` data frames without clusters.
struct Batch {
  ClusterTable table;
  std::vector<uint64_t> timestamps;
  explicit Batch(uint64_t frames) : timestamps(frames, 0) {
    for (uint64_t f = 0; f < frames; ++f) table.begin_frame(f + 1);
  }
  FoundBatch found() const { return FoundBatch{table, timestamps}; }
};

}  // namespace

TEST(PreviewConsumer, SendsTheProvidersImagesAndThePedestalMaps) {
  auto pub = std::make_shared<PreviewPublisher>("tcp://127.0.0.1:*", 2);
  Subscriber sub(pub->endpoint());
  {  // join first: the consumer's updates are then all seen
    PreviewUpdate probe;
    probe.run_index = 999;
    publish_until_received(*pub, sub, probe);
    ASSERT_TRUE(pub->wait_idle(2s));
    while (sub.next(100ms)) {
    }
  }
  int calls = 0;
  PreviewConsumer c(pub, [&] {
    ++calls;
    PreviewImage h = make_image("hitmap", "counts", 2, 3, std::vector<double>(6, calls));
    return std::vector<PreviewImage>{h, make_image("energy", "ADU", 2, 3, {})};
  });
  RunSetup run;
  run.cfg.preview.rate_hz = 100;
  run.cfg.preview.images = {"hitmap", "pedestal", "noise"};  // not "energy"
  c.on_start(run.context());
  const PedestalState ped = small_pedestal();
  c.on_pedestal(ped);  // an update at once: the maps are known
  ASSERT_TRUE(pub->wait_idle(2s));
  auto r = sub.next(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->naming["run"], 7);
  EXPECT_EQ(r->naming["file"], "/runs/run_000007.h5");
  EXPECT_EQ(r->naming["update"], 0);
  ASSERT_EQ(r->naming["images"].size(), 3u) << r->naming.dump();
  EXPECT_EQ(r->naming["images"][0]["what"], "hitmap");
  EXPECT_EQ(r->naming["images"][1]["what"], "pedestal");
  EXPECT_EQ(r->naming["images"][2]["what"], "noise");
  EXPECT_EQ(r->naming["images"][1]["frames"], 4);
  // Pedestal: i * 100 + 1.5 ADU; noise sqrt(1.25), both at scale 1e-6.
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r->pixels[1][i], static_cast<uint32_t>((i * 100 + 1.5) * 1e6)) << i;
    EXPECT_EQ(r->pixels[2][i], static_cast<uint32_t>(std::lround(std::sqrt(1.25) * 1e6))) << i;
  }
  std::this_thread::sleep_for(20ms);
  Batch b(5);
  c.on_batch(b.found());
  ASSERT_TRUE(pub->wait_idle(2s));
  r = sub.next(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->naming["update"], 1);
  EXPECT_EQ(r->naming["frames"], 5);
  EXPECT_EQ(r->pixels[0], std::vector<uint32_t>(6, 2));  // the provider's second image
  RunEnd end;
  end.end_pedestal = &ped;
  c.on_end(end);
  ASSERT_TRUE(pub->wait_idle(2s));
  r = sub.next(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->naming["final"], true);
  EXPECT_EQ(r->naming["update"], 2);
  EXPECT_EQ(c.updates(), 3u);
  const ConsumerStats s = c.stats();
  EXPECT_EQ(s.name, "live view");
  EXPECT_EQ(s.frames, 5u);
  EXPECT_EQ(s.dropped, 0u);
  EXPECT_EQ(s.failed, 0u);
}

TEST(PreviewConsumer, AtMostRateHzUpdatesASecondPlusTheFinalOne) {
  auto pub = std::make_shared<PreviewPublisher>("tcp://127.0.0.1:*", 2);
  Subscriber sub(pub->endpoint());
  {
    PreviewUpdate probe;
    probe.run_index = 999;
    publish_until_received(*pub, sub, probe);
    ASSERT_TRUE(pub->wait_idle(2s));
    while (sub.next(100ms)) {
    }
  }
  PreviewConsumer c(pub, [] {
    return std::vector<PreviewImage>{make_image("hitmap", "counts", 4, 4,
                                                std::vector<double>(16, 1))};
  });
  RunSetup run;
  run.cfg.preview.rate_hz = 10;
  c.on_start(run.context());
  Batch b(1);
  const auto t0 = std::chrono::steady_clock::now();
  const auto window = 1500ms;
  uint64_t batches = 0;
  while (std::chrono::steady_clock::now() - t0 < window) {
    c.on_batch(b.found());
    ++batches;
    std::this_thread::sleep_for(1ms);
  }
  const uint64_t during = c.updates();
  c.on_end(RunEnd{});
  ASSERT_TRUE(pub->wait_idle(2s));
  // 1.5 s at 10 Hz: the first batch's update and one each >= 100 ms later: at most 16; the
  // batches come every ~1 ms, so no interval is missed by more than a few ms: at least 13.
  EXPECT_LE(during, 16u) << batches << " batches";
  EXPECT_GE(during, 13u) << batches << " batches";
  EXPECT_EQ(c.updates(), during + 1);
  uint64_t received = 0;
  bool final_seen = false;
  while (auto r = sub.next(300ms)) {
    EXPECT_EQ(r->naming["update"], received);
    ++received;
    final_seen = r->naming["final"].get<bool>();
  }
  EXPECT_EQ(received + c.stats().dropped, c.updates());
  EXPECT_TRUE(final_seen);
  EXPECT_EQ(c.stats().frames, batches);
}

TEST(PreviewConsumer, AStuckSubscriberNeverHoldsUpTheRun) {
  auto pub = std::make_shared<PreviewPublisher>("tcp://127.0.0.1:*", 2);
  // A subscriber that joins and then never reads: its queue and the socket buffers fill up.
  Subscriber stuck(pub->endpoint(), 1);
  {
    PreviewUpdate probe;
    probe.run_index = 999;
    publish_until_received(*pub, stuck, probe);
    ASSERT_TRUE(pub->wait_idle(2s));
  }
  const PreviewPublisherStats before = pub->stats();
  // 600 x 600 floats: 1.4 MB of pixels an image, two an update, at 100 updates a second.
  const PreviewImage big =
      make_image("energy", "ADU", 600, 600, std::vector<double>(360000, 1234.5));
  PreviewConsumer c(pub, [&] { return std::vector<PreviewImage>{big, big}; });
  RunSetup run;
  run.cfg.preview.rate_hz = 100;
  c.on_start(run.context());
  Batch b(1);
  using clock = std::chrono::steady_clock;
  clock::duration longest{};
  const auto t0 = clock::now();
  while (clock::now() - t0 < 2s) {
    const auto t = clock::now();
    c.on_batch(b.found());
    longest = std::max(longest, clock::now() - t);
    std::this_thread::sleep_for(1ms);
  }
  c.on_end(RunEnd{});
  // The longest on_batch made the provider's two images and swapped them into the
  // mailbox; it never waited for the subscriber (a blocked send would take seconds).
  EXPECT_LT(longest, 100ms) << std::chrono::duration<double>(longest).count() << " s";
  EXPECT_GE(c.updates(), 100u);
  ASSERT_TRUE(pub->wait_idle(10s));
  // Every update handed over was sent to the socket whole, replaced by a newer one before it
  // was sent, or refused; the consumer counts the last two as dropped.
  const PreviewPublisherStats s = pub->stats();
  const uint64_t sent = s.updates_sent - before.updates_sent;
  const uint64_t replaced = s.updates_replaced - before.updates_replaced;
  const uint64_t refused = s.updates_refused - before.updates_refused;
  EXPECT_EQ(sent + replaced + refused, c.updates()) << sent << " " << replaced << " " << refused;
  EXPECT_EQ(c.stats().dropped, replaced + refused);
  EXPECT_GT(sent, 0u);
}
