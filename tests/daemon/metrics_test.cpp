// glintd's Prometheus endpoint: the exposition of a stats reply, and a real glintd scraped over
// a plain socket after a run fed by `glint sim`, its counters compared with the run file.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "../pipeline/stream_test_util.hpp"
#include "control_client.hpp"
#include "glint/daemon/metrics.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glintd_rig.hpp"
#include "process.hpp"

using namespace glint;
using namespace glint::testing::glintd_names;

namespace {

/// Samples of an exposition by "name{labels}"; fails the test on any line that is not valid
/// text format 0.0.4 (HELP and TYPE before a family's samples, one TYPE per name, counters
/// named *_total, label values quoted and escaped, values numbers).
std::map<std::string, double> parse_exposition(const std::string& text) {
  static const std::regex help(R"(# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*)");
  static const std::regex type(R"(# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge))");
  static const std::regex sample(
      R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")"
      R"((?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*")*\})? (\S+))");
  std::map<std::string, double> out;
  std::map<std::string, std::string> types;
  std::set<std::string> helped;
  EXPECT_TRUE(!text.empty() && text.back() == '\n') << "the exposition ends with a newline";
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      EXPECT_TRUE(helped.insert(m[1]).second) << "second HELP, line " << n << ": " << line;
    } else if (std::regex_match(line, m, type)) {
      EXPECT_TRUE(helped.contains(m[1])) << "TYPE before HELP, line " << n;
      EXPECT_TRUE(types.emplace(m[1], m[2]).second) << "second TYPE, line " << n << ": " << line;
      if (m[2] == "counter") {
        EXPECT_TRUE(std::string(m[1]).ends_with("_total")) << line;
      }
    } else if (std::regex_match(line, m, sample)) {
      EXPECT_TRUE(types.contains(m[1])) << "sample without TYPE, line " << n << ": " << line;
      std::size_t used = 0;
      const double v = std::stod(m[3], &used);
      EXPECT_EQ(used, m[3].length()) << "value not a number, line " << n << ": " << line;
      EXPECT_TRUE(out.emplace(std::string(m[1]) + std::string(m[2]), v).second)
          << "sample repeated, line " << n << ": " << line;
    } else {
      ADD_FAILURE() << "not exposition format, line " << n << ": '" << line << "'";
    }
  }
  return out;
}

/// One HTTP/1.0 request over a plain TCP socket; the whole response (status line, headers,
/// body).
std::string http(uint16_t port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buf[4096];
    ssize_t got;
    while ((got = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<std::size_t>(got));
  }
  close(fd);
  return out;
}

std::string body_of(const std::string& response) {
  const auto at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

json stats_reply() {
  return json::parse(R"j({
    "uptime_s": 12.5, "version": "0.1.0", "runs_completed": 3, "shutting_down": false,
    "state": "acquiring", "run": "current", "run_index": 7, "backend": "gpu (2 devices)",
    "gpu_ids": [0, 2], "elapsed_s": 4.25,
    "frames": {"received": 1100, "processed": 1090, "dark": 100, "data": 980, "incomplete": 10,
               "missing": 4, "dropped": 6, "rows_written": 1100},
    "malformed": {"malformed_json": 2, "missing_field": 0, "size_mismatch": 5, "wrong_shape": 0,
                  "unknown_bitmode": 1, "data_without_header": 0, "frame_backwards": 0,
                  "unknown_port": 3, "oversize": 4, "out_of_range": 6, "frame_jump": 7},
    "malformed_total": 28, "late_parts": 9, "clusters": 123456, "messages": 1200,
    "bytes": 384000000, "end_messages": 0, "masked_clusters": 37, "masked_pixels": 12,
    "stray_ends": 1, "restarts": 2, "missing_unwritten": 5, "stream_stride": 2,
    "ingest": {"frames_outside_run": 3, "held_parts": 4, "restarts": 2},
    "modules": [{"id": 4, "clusters": 60000}, {"id": 5, "clusters": 63456}],
    "consumers": [{"name": "run file", "frames": 1100, "dropped": 0, "failed": 0},
                  {"name": "live view", "frames": 1090, "dropped": 7, "failed": 1}],
    "rates": {"window_s": 5.0, "frames_per_s": 250.5, "bytes_per_s": 8.0e7,
              "clusters_per_s": 30000},
    "queues": {"pending_images": 2, "queued_images": 17, "staging_used": 64,
               "staging_total": 512},
    "reconstruction": {"enabled": true, "frames": 900, "volumes_done": 1, "volumes_dropped": 2,
                       "volumes_failed": 0}})j");
}

}  // namespace

TEST(Metrics, ExpositionOfAStatsReply) {
  std::filesystem::space_info space{1000000, 400000, 300000};
  const std::string text = daemon::metrics_text(stats_reply(), space);
  const auto m = parse_exposition(text);
  // Families without labels: name and value; labelled ones: name, the label, its values.
  std::map<std::string, double> want = {
      {"glint_uptime_seconds", 12.5}, {"glint_runs_completed_total", 3},
      {"glint_shutting_down", 0}, {"glint_run_index", 7},
      {"glint_run_elapsed_seconds", 4.25}, {"glint_frames_received_total", 1100},
      {"glint_frames_processed_total", 1090}, {"glint_frame_rows_written_total", 1100},
      {"glint_clusters_total", 123456}, {"glint_messages_total", 1200},
      {"glint_received_bytes_total", 384000000}, {"glint_end_messages_total", 0},
      {"glint_late_parts_total", 9}, {"glint_rate_window_seconds", 5},
      {"glint_frames_per_second", 250.5}, {"glint_received_bytes_per_second", 8e7},
      {"glint_clusters_per_second", 30000}, {"glint_staging_frames", 64},
      {"glint_staging_capacity_frames", 512}, {"glint_reconstruction_enabled", 1},
      {"glint_reconstruction_frames_total", 900}, {"glint_output_available_bytes", 300000},
      {"glint_output_free_bytes", 400000}, {"glint_output_size_bytes", 1000000},
      {R"x(glint_backend_info{backend="gpu (2 devices)",gpu_ids="0,2"})x", 1},
      {"glint_masked_clusters_total", 37}, {"glint_masked_pixels", 12},
      {"glint_stray_end_messages_total", 1}, {"glint_detector_restarts_total", 2},
      {"glint_missing_rows_unwritten_total", 5}, {"glint_stream_stride", 2},
      {"glint_frames_outside_run_total", 3}, {"glint_held_parts", 4},
  };
  const auto labelled = [&want](const std::string& name, const std::string& key,
                                const std::vector<std::pair<std::string, double>>& samples) {
    for (const auto& [value, v] : samples) want[name + "{" + key + "=\"" + value + "\"}"] = v;
  };
  labelled("glint_build_info", "version", {{"0.1.0", 1}});
  labelled("glint_run_state", "state",
           {{"idle", 0}, {"pedestal", 0}, {"acquiring", 1}, {"finishing", 0}, {"error", 0}});
  labelled("glint_frames_total", "outcome",
           {{"dark", 100}, {"data", 980}, {"incomplete", 10}, {"missing", 4}, {"dropped", 6}});
  labelled("glint_malformed_messages_total", "reason",
           {{"malformed_json", 2}, {"missing_field", 0}, {"size_mismatch", 5}, {"wrong_shape", 0},
            {"oversize", 4}, {"unknown_bitmode", 1}, {"data_without_header", 0},
            {"frame_backwards", 0}, {"unknown_port", 3}, {"out_of_range", 6}, {"frame_jump", 7}});
  labelled("glint_queue_images", "queue", {{"pending", 2}, {"queued", 17}});
  labelled("glint_reconstruction_volumes_total", "outcome",
           {{"done", 1}, {"dropped", 2}, {"failed", 0}});
  labelled("glint_consumer_frames_total", "consumer", {{"run file", 1100}, {"live view", 1090}});
  labelled("glint_consumer_dropped_total", "consumer", {{"run file", 0}, {"live view", 7}});
  labelled("glint_consumer_failed_total", "consumer", {{"run file", 0}, {"live view", 1}});
  labelled("glint_module_clusters_total", "module", {{"4", 60000}, {"5", 63456}});
  ASSERT_EQ(want.size(), 68u) << "every sample of the exposition is expected";
  EXPECT_EQ(m, want) << text;
  EXPECT_NE(text.find("glint_received_bytes_total 384000000\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# TYPE glint_frames_total counter\n"), std::string::npos) << text;
}

TEST(Metrics, LabelValuesAreEscapedAndMissingKeysReadZero) {
  json s = json::object();
  s["backend"] = "a \"b\"\\c\nd";
  const std::string text = daemon::metrics_text(s, std::nullopt);
  const auto m = parse_exposition(text);
  EXPECT_EQ(m.at(R"(glint_backend_info{backend="a \"b\"\\c\nd",gpu_ids=""})"), 1) << text;
  EXPECT_EQ(m.at(R"(glint_frames_total{outcome="data"})"), 0);
  EXPECT_EQ(m.at(R"(glint_run_state{state="idle"})"), 0);
  EXPECT_FALSE(m.contains("glint_output_free_bytes")) << "no disk figures when unknown";
  EXPECT_EQ(text.find("glint_module_clusters_total"), std::string::npos) << "one module: none";
}

TEST(Metrics, GlintdServesTheRunsCountersOverHttp) {
  const std::string name = "metrics";
  glint::testing::GlintdConfig c;
  c.rows = c.cols = 40;
  c.dark = 20;
  c.finder = "backend: cpu, batch_frames: 32, threads: 2";
  c.run_name = name;
  const fs::path dir = glint::testing::fresh_dir(name);
  c.data_ep = glint::testing::loopback(glint::testing::free_tcp_port());
  c.control_ep = glint::testing::loopback(glint::testing::free_tcp_port());
  c.runs = dir / "runs";
  const auto port = static_cast<uint16_t>(glint::testing::free_tcp_port());
  c.extra = "metrics: {enabled: true, listen: \"127.0.0.1:" + std::to_string(port) + "\"}\n";
  glint::testing::write_glintd_config(dir / "glintd.yaml", c);

  Process d({glint::testing::bin("glintd").string(), "--config", (dir / "glintd.yaml").string()},
            dir / "glintd.log");
  ASSERT_TRUE(d.started());
  ASSERT_EQ(glint::testing::wait_status(c.control_ep, [](const json&) { return true; }, 10s)
                .value("state", ""), "idle") << d.log();
  {
    const auto before = parse_exposition(body_of(http(port, "GET /metrics HTTP/1.0\r\n\r\n")));
    EXPECT_EQ(before.at(R"(glint_run_state{state="idle"})"), 1);
    EXPECT_EQ(before.at("glint_run_index"), 0);
    EXPECT_FALSE(before.contains("glint_output_size_bytes")) << "the output directory is made "
                                                                "by the first run";
  }
  ASSERT_TRUE(glint::testing::control(c.control_ep, "start").value("ok", false)) << d.log();
  {
    Process s(glint::testing::sim_argv(c, 60, "0", "10", "7"), dir / "sim.log");
    ASSERT_EQ(s.wait_exit(30s), 0) << s.log();
  }
  const json st = glint::testing::wait_status(c.control_ep, [](const json& j) {
    return j.value("runs_completed", 0u) >= 1; }, 20s);
  ASSERT_GE(st.value("runs_completed", 0u), 1u) << st.dump() << d.log();
  const json stats = glint::testing::control(c.control_ep, "stats");
  const auto f = pipeline::read_run_file(pipeline::run_file_path(c.runs, name, 1));
  ASSERT_EQ(f.frames.size(), 80u);
  ASSERT_GT(f.clusters.n_clusters(), 0u);

  // The snapshot is published once a loop of the service thread: scrape until it shows the end.
  std::string response;
  std::map<std::string, double> m;
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    response = http(port, "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n");
    m = parse_exposition(body_of(response));
    if (m["glint_runs_completed_total"] == 1) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_EQ(response.rfind("HTTP/1.", 0), 0u) << response;
  EXPECT_NE(response.find(" 200 OK\r\n"), std::string::npos) << response;
  EXPECT_NE(response.find("text/plain; version=0.0.4"), std::string::npos) << response;
  EXPECT_EQ(m["glint_runs_completed_total"], 1) << response;
  EXPECT_EQ(m["glint_run_index"], 1);
  EXPECT_EQ(m[R"(glint_run_state{state="idle"})"], 1);
  EXPECT_EQ(m[R"(glint_run_state{state="acquiring"})"], 0);
  EXPECT_EQ(m[R"(glint_frames_total{outcome="dark"})"], 20);
  EXPECT_EQ(m[R"(glint_frames_total{outcome="data"})"], 60);
  EXPECT_EQ(m[R"(glint_frames_total{outcome="dropped"})"], 0);
  EXPECT_EQ(m[R"(glint_frames_total{outcome="incomplete"})"], 0);
  EXPECT_EQ(m["glint_frames_received_total"], 80);
  EXPECT_EQ(m["glint_frames_processed_total"], 80);
  EXPECT_EQ(m["glint_frame_rows_written_total"], static_cast<double>(f.frames.size()));
  EXPECT_EQ(m["glint_clusters_total"], static_cast<double>(f.clusters.n_clusters()));
  EXPECT_EQ(m["glint_messages_total"], stats["messages"].get<double>());
  EXPECT_EQ(m["glint_received_bytes_total"], stats["bytes"].get<double>());
  EXPECT_GE(m["glint_received_bytes_total"], 80.0 * 40 * 40 * 2);
  EXPECT_EQ(m["glint_end_messages_total"], stats["end_messages"].get<double>());
  for (const auto& [k, v] : stats["malformed"].items())
    EXPECT_EQ(m[R"(glint_malformed_messages_total{reason=")" + k + "\"}"], 0) << k;
  EXPECT_EQ(m[R"x(glint_backend_info{backend="cpu (2 threads)",gpu_ids=""})x"], 1) << response;
  EXPECT_GT(m["glint_output_available_bytes"], 0);
  EXPECT_GE(m["glint_output_size_bytes"], m["glint_output_free_bytes"]);
  EXPECT_GE(m["glint_output_free_bytes"], m["glint_output_available_bytes"]);

  EXPECT_NE(http(port, "GET /other HTTP/1.0\r\n\r\n").find(" 404 "), std::string::npos);
  EXPECT_NE(http(port, "POST /metrics HTTP/1.0\r\nContent-Length: 2\r\n\r\nab").find(" 405 "),
            std::string::npos);
  d.signal(SIGTERM);
  EXPECT_EQ(d.wait_exit(20s), 0) << d.log();
}

TEST(Metrics, ServerRefusesAPortInUse) {
  const auto port = static_cast<uint16_t>(glint::testing::free_tcp_port());
  daemon::MetricsServer first("127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(first.url(), "http://127.0.0.1:" + std::to_string(port) + "/metrics");
  try {
    daemon::MetricsServer second("127.0.0.1:" + std::to_string(port));
    ADD_FAILURE() << "a second server on the same port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("metrics.listen 127.0.0.1:"), std::string::npos)
        << e.what();
  }
}
