#pragma once
// The glintd service: the control socket (ZeroMQ REP, JSON commands), the run state machine
// (idle -> pedestal -> acquiring -> finishing -> idle, plus error), automatic runs, statistics.
// One service thread owns the control socket and the runs; other threads (signal handling,
// systemd watchdog) talk to it through the thread-safe request_* functions.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "glint/config/config.hpp"
#include "glint/pedestal.hpp"
#include "glint/pipeline/acquisition.hpp"

namespace glint::daemon {

class MetricsServer;

class Daemon {
 public:
  /// Binds the control socket (a "*" port picks a free one, see control_endpoint()) and starts
  /// the service thread. Throws std::runtime_error when the endpoint cannot be bound.
  explicit Daemon(config::Config cfg);
  ~Daemon();  ///< aborts a run in progress (its file is closed) and stops
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// The bound control endpoint, e.g. tcp://127.0.0.1:5555.
  std::string control_endpoint() const { return endpoint_; }

  /// Finishes the current run (drain, write, close) and ends the service; with `abort`, the
  /// run is aborted instead (its file is still closed). Thread-safe, returns at once.
  void request_shutdown(bool abort);
  /// Uses `cfg` for the next run (SIGHUP). Thread-safe.
  void request_reload(config::Config cfg);
  /// True once the service thread has ended (after a shutdown).
  bool finished() const { return finished_.load(); }
  /// Waits for finished() up to `timeout`.
  bool wait(std::chrono::milliseconds timeout) const;

  /// Last time the service thread went round its loop (for the systemd watchdog).
  std::chrono::steady_clock::time_point heartbeat() const;
  /// One line for systemd's STATUS=.
  std::string status_line() const;

  /// Handles one control request (JSON text) and returns the reply (JSON text). Used by the
  /// control socket; public for tests. Must be called from the service thread only.
  std::string handle_request(const std::string& request);

 private:
  void serve(std::stop_token st);
  void housekeeping();
  void start_run(const config::Config& cfg);
  void end_finished_run();
  nlohmann::json status_json() const;
  nlohmann::json stats_json() const;
  nlohmann::json pedestal_json() const;

  config::Config cfg_;                  ///< service thread only
  std::string endpoint_;
  std::chrono::steady_clock::time_point started_;

  std::unique_ptr<pipeline::Acquisition> run_;
  std::optional<pipeline::RunStats> last_run_;  ///< stats of the last finished run
  std::optional<PedestalState> last_pedestal_;
  uint64_t runs_completed_ = 0;
  std::chrono::steady_clock::time_point last_run_end_{};
  bool last_run_failed_ = false;

  struct Sample {
    std::chrono::steady_clock::time_point t;
    uint64_t frames, bytes, clusters;
  };
  std::deque<Sample> samples_;          ///< one per second, the last few seconds of the run

  mutable std::mutex mu_;               ///< guards the fields below
  std::optional<config::Config> pending_reload_;
  std::string status_line_ = "starting";
  std::atomic<bool> shutdown_{false}, abort_{false}, finished_{false};
  std::atomic<int64_t> heartbeat_ns_{0};

  struct Control;
  std::unique_ptr<Control> control_;
  std::unique_ptr<MetricsServer> metrics_;  ///< config metrics.enabled; fed by housekeeping()
  std::jthread thread_;
};

/// The next free run index in `dir` for `run_name` (1 + the largest existing, 1 when none).
uint64_t next_run_index(const std::filesystem::path& dir, const std::string& run_name);

}  // namespace glint::daemon
