// The live view end to end with the real binaries: `glint sim` -> glintd -> a SUB socket here
// receives each update; the pedestal and noise maps equal the run file's, the final hit map and
// spectrum the run file's products; the socket stays bound across runs; an endpoint taken by
// another process stops glintd with a clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <zmq.hpp>

#include "glint/pipeline/sls_stream.hpp"
#include "glintd_rig.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;

namespace {

/// One update as received: its naming message and its images' values (offset + scale * pixel).
struct Update {
  json naming;
  std::map<std::string, std::vector<double>> values;
  std::map<std::string, pipeline::SlsHeader> headers;
};

/// Reads updates from `sub` until one of run `run` is final, or `timeout`.
std::vector<Update> updates_until_final(zmq::socket_t& sub, uint64_t run,
                                        std::chrono::milliseconds timeout) {
  std::vector<Update> out;
  const auto until = std::chrono::steady_clock::now() + timeout;
  sub.set(zmq::sockopt::rcvtimeo, 200);
  while (std::chrono::steady_clock::now() < until) {
    zmq::message_t m;
    if (!sub.recv(m)) continue;
    if (m.more()) {  // an image whose naming message came before we joined
      zmq::message_t rest;
      (void)sub.recv(rest);
      continue;
    }
    Update u;
    u.naming = json::parse(m.to_string_view());
    for (const auto& e : u.naming["images"]) {
      zmq::message_t h, p;
      EXPECT_TRUE(sub.recv(h) && h.more() && sub.recv(p) && !p.more());
      const auto parsed = pipeline::parse_sls_header(h.to_string_view());
      EXPECT_TRUE(parsed.header) << parsed.detail;
      if (!parsed.header) return out;
      const auto& hdr = *parsed.header;
      const double scale = std::stod(hdr.add_json_header.at("scale"));
      const double offset = std::stod(hdr.add_json_header.at("offset"));
      std::vector<double> v(p.size() / 4);
      for (std::size_t i = 0; i < v.size(); ++i) {
        uint32_t px = 0;
        std::memcpy(&px, static_cast<const char*>(p.data()) + 4 * i, 4);
        v[i] = offset + scale * px;
      }
      const std::string what = e["what"];
      u.values[what] = std::move(v);
      u.headers[what] = hdr;
    }
    const bool done = u.naming["run"] == run && u.naming["final"] == true;
    out.push_back(std::move(u));
    if (done) break;
  }
  return out;
}

}  // namespace

TEST(GlintdPreview, ASubscriberGetsEachRunsMapsAndItsFinalProducts) {
  glint::testing::GlintdRig rig("preview");
  rig.auto_start = true;
  rig.write();
  Process d(rig.glintd(), rig.dir / "glintd.log");
  ASSERT_TRUE(d.started());
  const json st = wait_status(rig.control_ep, [](const json& j) { return j.contains("preview"); },
                              10s);
  ASSERT_TRUE(st.contains("preview")) << st.dump() << d.log();
  const std::string ep = st["preview"]["endpoint"];
  ASSERT_TRUE(ep.starts_with("tcp://127.0.0.1:")) << ep;
  EXPECT_NE(d.log().find("live view at " + ep), std::string::npos) << d.log();

  zmq::context_t ctx{1};
  zmq::socket_t sub{ctx, zmq::socket_type::sub};
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  {
    // Connected (the ZeroMQ handshake done, the subscription sent right after it) before the
    // first run's data: a subscriber that joins late misses the updates sent before.
    struct Joined : zmq::monitor_t {
      bool done = false;
      void on_event_handshake_succeeded(const zmq_event_t&, const char*) override { done = true; }
    } joined;
    joined.init(sub, "inproc://preview-test-monitor", ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
    sub.connect(ep);
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!joined.done && std::chrono::steady_clock::now() < until) joined.check_event(100);
    ASSERT_TRUE(joined.done) << "no connection to " << ep;
  }
  std::this_thread::sleep_for(200ms);  // glintd's I/O thread takes in the subscription

  uint64_t missing = 0;  // update numbers that did not come
  for (uint64_t run = 1; run <= 2; ++run) {
    ASSERT_TRUE(wait_status(rig.control_ep,
                            [&](const json& j) { return j.value("run_index", 0u) == run; }, 10s)
                    .contains("run_index"))
        << d.log();
    // 20 dark and 300 data frames at 300 a second: about a second of data, 2 updates a second.
    Process s(glint::testing::sim_argv(rig, 300, "300", "10", std::to_string(6 + run)),
              rig.dir / ("sim" + std::to_string(run) + ".log"));
    const std::vector<Update> got = updates_until_final(sub, run, 30s);
    ASSERT_EQ(s.wait_exit(30s), 0) << s.log();
    std::string seen;  // what came, for a failure's message
    for (const auto& u : got) seen += u.naming.dump().substr(0, 160) + "\n";
    ASSERT_FALSE(got.empty()) << control(rig.control_ep, "status").dump() << "\n" << d.log();
    const Update& last = got.back();
    ASSERT_EQ(last.naming["final"], true)
        << seen << control(rig.control_ep, "status").dump() << "\n" << d.log() << s.log();
    EXPECT_EQ(last.naming["run"], run);
    EXPECT_EQ(last.naming["file"], rig.file(run).string());
    EXPECT_EQ(last.naming["frames"], 300);
    EXPECT_GE(got.size(), 2u) << "the pedestal's update and the final one at least";
    // Each run numbers its updates from 0. An update still unsent when the next comes is replaced
    // by it (a busy machine): the numbers rise, and every one missing is counted as dropped.
    uint64_t expected = 0;
    for (const Update& u : got) {
      if (u.naming["run"] != run) continue;
      const uint64_t n = u.naming["update"].get<uint64_t>();
      ASSERT_GE(n, expected) << seen;
      missing += n - expected;
      expected = n + 1;
    }

    ASSERT_TRUE(wait_status(rig.control_ep,
                            [&](const json& j) { return j.value("runs_completed", 0u) >= run; },
                            20s)
                    .contains("runs_completed"));
    const auto f = pipeline::read_run_file(rig.file(run));
    ASSERT_EQ(f.start_mean.size(), std::size_t{rig.rows} * rig.cols);
    for (const std::string what : {"pedestal", "noise"}) {
      ASSERT_TRUE(last.values.contains(what)) << last.naming.dump();
      const auto& h = last.headers.at(what);
      EXPECT_EQ(h.bitmode, 32u);
      EXPECT_EQ(h.shape, (std::array<uint32_t, 2>{rig.cols, rig.rows}));
      EXPECT_EQ(h.add_json_header.at("units"), "ADU");
      EXPECT_EQ(h.add_json_header.at("frames"), std::to_string(rig.dark));
      const double scale = std::stod(h.add_json_header.at("scale"));
      const auto& want = what == "pedestal" ? f.start_mean : f.start_noise;
      const auto& v = last.values.at(what);
      ASSERT_EQ(v.size(), want.size());
      for (std::size_t i = 0; i < v.size(); ++i)
        ASSERT_NEAR(v[i], want[i], scale / 2 + 1e-9 * std::abs(want[i])) << what << " " << i;
    }
    // The products' images: the final hit map is the run file's /entry/hitmap.
    ASSERT_TRUE(f.products.present) << rig.file(run);
    ASSERT_TRUE(last.values.contains("hitmap")) << last.naming.dump();
    const auto& hitmap = last.values.at("hitmap");
    EXPECT_EQ(last.headers.at("hitmap").add_json_header.at("scale"), "1");
    EXPECT_EQ(last.headers.at("hitmap").add_json_header.at("frames"), "300");
    ASSERT_EQ(hitmap.size(), f.products.hitmap.size());
    uint64_t hits = 0;
    for (std::size_t i = 0; i < hitmap.size(); ++i) {
      ASSERT_EQ(hitmap[i], static_cast<double>(f.products.hitmap[i])) << i;
      hits += f.products.hitmap[i];
    }
    EXPECT_EQ(hits, f.clusters.n_clusters()) << "no energy window: every cluster is a hit";
    ASSERT_TRUE(last.values.contains("spectrum"));
    const auto& spectrum = last.values.at("spectrum");
    ASSERT_EQ(spectrum.size(), f.products.spectrum.size());
    for (std::size_t i = 0; i < spectrum.size(); ++i)
      ASSERT_EQ(spectrum[i], static_cast<double>(f.products.spectrum[i])) << i;
    EXPECT_TRUE(last.values.contains("energy"));
  }
  const json end = control(rig.control_ep, "status");
  EXPECT_GE(end["preview"]["updates_sent"].get<uint64_t>(), 4u) << end.dump();
  EXPECT_EQ(end["preview"]["updates_dropped"].get<uint64_t>(), missing) << end.dump();
  const json stats = control(rig.control_ep, "stats");
  bool listed = false;
  for (const auto& c : stats["consumers"]) listed = listed || c["name"] == "live view";
  EXPECT_TRUE(listed) << stats.dump();
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
}

TEST(GlintdPreview, AnEndpointInUseStopsGlintdNamingIt) {
  glint::testing::GlintdRig rig("preview_busy");
  zmq::context_t ctx{1};
  zmq::socket_t other{ctx, zmq::socket_type::pub};
  other.set(zmq::sockopt::linger, 0);
  other.bind("tcp://127.0.0.1:*");
  const std::string taken = other.get(zmq::sockopt::last_endpoint);
  rig.preview = "endpoint: \"" + taken + "\"";
  rig.write();
  Process d(rig.glintd(), rig.dir / "glintd.log");
  const auto code = d.wait_exit(10s);
  ASSERT_TRUE(code.has_value()) << d.log();
  EXPECT_NE(*code, 0) << d.log();
  EXPECT_NE(d.log().find("preview.endpoint " + taken + ": cannot bind"), std::string::npos)
      << d.log();
  // With the live view off, the same configuration starts.
  rig.preview = "enabled: false, endpoint: \"" + taken + "\"";
  rig.write();
  Process ok(rig.glintd(), rig.dir / "glintd_ok.log");
  const json st = wait_status(rig.control_ep, [](const json&) { return true; }, 10s);
  EXPECT_EQ(st.value("state", ""), "idle") << ok.log();
  EXPECT_FALSE(st.contains("preview")) << st.dump();
}
