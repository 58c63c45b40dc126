#pragma once
// The glintd service: the control socket (ZeroMQ REP, JSON commands), the run state machine
// (idle -> pedestal -> acquiring -> finishing -> idle, plus error), automatic runs, statistics.
// One service thread owns the control socket and the runs; other threads (signal handling,
// systemd watchdog) talk to it through the thread-safe request_* functions.
//
// A run that fails with a fatal error (RunStats::fatal: a sticky CUDA error, the device context
// is lost for the rest of the process) ends the service: no new run is started, the control
// socket reports the error (state "error", "fatal": true) for kFatalLinger, then the service
// stops and glintd exits non-zero, so that its service manager starts it afresh.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "glint/config/config.hpp"
#include "glint/pedestal.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/preview_publisher.hpp"

namespace glint::daemon {

/// How long the control socket keeps answering after a fatal error before the service stops.
inline constexpr std::chrono::milliseconds kFatalLinger{2000};
/// How long `start` waits for the run to open its file and inputs before it replies.
inline constexpr std::chrono::milliseconds kStartWait{10000};
/// Run indices in file names above this are not counted by next_run_index().
inline constexpr uint64_t kMaxRunIndex = 999'999'999'999'999ULL;

class MetricsServer;

class Daemon {
 public:
  /// Binds the control socket (a "*" port picks a free one, see control_endpoint()) and, with
  /// preview.enabled, the live view's socket, and starts the service thread. Throws
  /// std::runtime_error naming the endpoint when one cannot be bound. Runs build
  /// their finder with `make_finder` (default pipeline::make_finder).
  explicit Daemon(config::Config cfg, pipeline::FinderFactory make_finder = {},
                  pipeline::RunTuning tuning = {});
  ~Daemon();  ///< aborts a run in progress (its file is closed) and stops
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// The bound control endpoint, e.g. tcp://127.0.0.1:5555.
  std::string control_endpoint() const { return endpoint_; }
  /// The bound live view endpoint (preview.endpoint with the port a * picked); empty when
  /// preview.enabled was false at start.
  std::string preview_endpoint() const { return preview_ ? preview_->endpoint() : ""; }

  /// Finishes the current run (drain, write, close) and ends the service; with `abort`, the
  /// run is aborted instead (its file is still closed). Thread-safe, returns at once.
  void request_shutdown(bool abort);
  /// Uses `cfg` for the next run (SIGHUP). Thread-safe.
  void request_reload(config::Config cfg);
  /// True once the service thread has ended (after a shutdown).
  bool finished() const { return finished_.load(); }
  /// Waits for finished() up to `timeout`.
  bool wait(std::chrono::milliseconds timeout) const;
  /// The fatal error that ended the service, if one did (thread-safe).
  std::optional<std::string> fatal_error() const;

  /// Last time the service thread went round its loop (for the systemd watchdog).
  std::chrono::steady_clock::time_point heartbeat() const;
  /// One line for systemd's STATUS=.
  std::string status_line() const;

  /// Handles one control request (JSON text) and returns the reply (JSON text). Used by the
  /// control socket; public for tests. Must be called from the service thread only.
  std::string handle_request(const std::string& request);
  /// The same for a client known by its CURVE public key (Z85; empty without CURVE), which
  /// control.curve_admins may keep from `shutdown` and `abort`.
  std::string handle_request(const std::string& request, const std::string& client_key);

 private:
  void serve(std::stop_token st);
  void housekeeping();
  /// Starts a run and waits (up to kStartWait) until it has opened its file and inputs; the
  /// error (one line) when it cannot start or fails at once, which is then the last run's.
  std::optional<std::string> start_run(const config::Config& cfg,
                                       std::vector<std::string>& warnings);
  /// What keeps `cfg` from starting now (preflight(), keep_previous without a pedestal).
  std::optional<std::string> start_problem(const config::Config& cfg,
                                           std::vector<std::string>& warnings) const;
  /// Records a run that could not be set up as the last run, failed (status, back-off).
  void start_failed(const std::string& why);
  void end_finished_run();
  nlohmann::json status_json() const;
  nlohmann::json stats_json() const;
  nlohmann::json pedestal_json() const;

  config::Config cfg_;                  ///< service thread only
  pipeline::FinderFactory make_finder_;
  const pipeline::RunTuning tuning_;  ///< every run's, kept across reloads
  std::string endpoint_;
  std::chrono::steady_clock::time_point started_;

  /// The runs' ingest, kept between runs (its sockets stay subscribed; what arrives between runs
  /// is held for an automatic run or counted); created at the first run, rebuilt when a run's
  /// detector or ingest configuration differs from the one it was made for.
  std::shared_ptr<pipeline::Ingest> ingest_;
  /// The live view's PUB socket (preview.*), bound once at start and handed to every run.
  std::shared_ptr<pipeline::PreviewPublisher> preview_;
  std::unique_ptr<pipeline::Acquisition> run_;
  std::optional<pipeline::RunStats> last_run_;  ///< stats of the last finished run
  std::optional<PedestalState> last_pedestal_;
  uint64_t runs_completed_ = 0;
  std::chrono::steady_clock::time_point last_run_end_{};
  bool last_run_failed_ = false;
  bool last_run_file_written_ = false;  ///< the last run's file exists
  std::optional<std::chrono::steady_clock::time_point> fatal_at_;  ///< a run failed fatally
  // Automatic runs back off after a failed run or one ended by disk_low (2 s, doubling to 60 s;
  // reset by a run that ends otherwise): a full disk or a missing directory is not retried in a
  // tight loop. After disk_low they resume only once the free space is twice the reserve that
  // run ended at (no string of tiny runs on a disk that stays full).
  static constexpr std::chrono::seconds kFirstRetry{2}, kLongestRetry{60};
  uint64_t failed_runs_in_a_row_ = 0;
  std::chrono::steady_clock::duration retry_delay_{};
  std::chrono::steady_clock::time_point next_auto_start_{};
  uint64_t resume_free_bytes_ = 0;
  std::string auto_start_waiting_;      ///< why the next automatic run waits (status)
  void back_off();

  struct Sample {
    std::chrono::steady_clock::time_point t;
    uint64_t frames, bytes, clusters;
  };
  std::deque<Sample> samples_;          ///< one per second, the last few seconds of the run

  mutable std::mutex mu_;               ///< guards the fields below
  std::optional<config::Config> pending_reload_;
  std::string status_line_ = "starting";
  std::optional<std::string> fatal_error_;
  mutable std::condition_variable finished_cv_;
  std::atomic<bool> shutdown_{false}, abort_{false}, finished_{false};
  std::atomic<int64_t> heartbeat_ns_{0};

  struct Control;
  std::unique_ptr<Control> control_;
  std::unique_ptr<MetricsServer> metrics_;  ///< config metrics.enabled; fed by housekeeping()
  std::jthread thread_;
};

/// ZMQ_MAXMSGSIZE of the control socket: 16 x control.max_request_bytes, at least 1 MiB.
/// Requests up to it are answered (refused past max_request_bytes); ZeroMQ drops a connection
/// that sends a larger one without allocating it.
std::size_t control_max_message_bytes(const config::ControlConfig& c);

/// The next free run index in `dir` for `run_name`: 1 + the largest index up to kMaxRunIndex
/// among the run files there (1 when none), stepping over names that exist (at most 1000).
uint64_t next_run_index(const std::filesystem::path& dir, const std::string& run_name);

}  // namespace glint::daemon
