#pragma once
// glintd's counters for Prometheus: the text exposition format (version 0.0.4) of what
// `glint ctl stats` reports, served over HTTP on a loopback address (libmicrohttpd). The
// service thread publishes a snapshot of its stats as it goes round its loop; a scrape renders
// the latest one, so a scrape never waits for or touches the run. Names, types, units and
// labels: docs/metrics.md.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace glint::daemon {

/// The exposition of one `stats` reply (the JSON object `glint ctl stats` prints) and, when
/// known, the space on the output directory's filesystem. Every metric has HELP and TYPE lines.
std::string metrics_text(const nlohmann::json& stats,
                         const std::optional<std::filesystem::space_info>& output_space);

/// The HTTP endpoint: GET /metrics answers the exposition of the latest snapshot; other paths
/// 404, other methods 405. Its own thread (libmicrohttpd's), a few connections at a time.
class MetricsServer {
 public:
  /// Listens on `listen` (a validated metrics.listen: 127.x.x.x:PORT, localhost:PORT or
  /// [::1]:PORT). Throws std::runtime_error naming metrics.listen when it cannot.
  explicit MetricsServer(const std::string& listen);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// Replaces the snapshot scrapes render: a stats reply and the run's output directory.
  void publish(nlohmann::json stats, std::filesystem::path output_directory);
  /// The exposition of the current snapshot (what a scrape gets).
  std::string render() const;
  /// http://HOST:PORT/metrics
  const std::string& url() const { return url_; }

 private:
  struct Http;
  mutable std::mutex mu_;
  nlohmann::json stats_;
  std::filesystem::path output_directory_;
  std::string url_;
  std::unique_ptr<Http> http_;
};

}  // namespace glint::daemon
