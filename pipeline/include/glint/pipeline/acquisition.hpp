#pragma once
// One acquisition run: ingest threads -> frame assembler -> finder (dark frames, then data
// frames in frame-number order) -> the run's HDF5 file. Everything is created at run start and
// released at its end; the file is always closed, also after an error or an abort.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "glint/cluster_finder.hpp"
#include "glint/config/config.hpp"
#include "glint/pedestal.hpp"
#include "glint/pipeline/sls_stream.hpp"
#include "glint/pipeline/storage_guard.hpp"

namespace glint::pipeline {

enum class RunState { idle, pedestal, acquiring, finishing, error };
std::string_view to_string(RunState s);

/// A consistent-enough snapshot of a run's counters (each counter is exact, the set is not
/// taken atomically).
struct RunStats {
  RunState state = RunState::idle;
  uint64_t run_index = 0;
  std::string file;
  std::string backend;
  std::string error;
  double elapsed_s = 0;
  uint64_t messages = 0, bytes = 0, end_messages = 0;
  uint64_t parts = 0;
  uint64_t frames_received = 0;    ///< images assembled (complete + incomplete)
  uint64_t frames_processed = 0;   ///< rows written for received images (dark + data + incomplete)
  uint64_t dark_frames = 0;
  uint64_t data_frames = 0;        ///< frames searched for clusters
  uint64_t incomplete = 0;
  uint64_t missing = 0;
  uint64_t dropped = 0;
  uint64_t late_parts = 0;
  uint64_t clusters = 0;
  uint64_t rows_written = 0;
  std::array<uint64_t, kBadInputKinds> bad{};
  uint64_t bad_total = 0;
  std::size_t pending_images = 0, queued_images = 0, staging_used = 0, staging_total = 0;
  /// end of acquisition, stop, frame limit, time limit, abort, disk_low (free space fell below
  /// the reserve kept for a clean close)
  std::string end_reason;
  uint64_t disk_free_bytes = 0;    ///< free space on the run file's file system, at the last flush
  uint64_t disk_reserve_bytes = 0; ///< the run ends (disk_low) once the free space is below this
  // The reconstruction stage (config reconstruction.enabled).
  bool recon_enabled = false;
  uint64_t recon_frames = 0;            ///< data frames accumulated into hit images
  uint64_t recon_volumes_done = 0;      ///< reconstructed (written to the file at its close)
  uint64_t recon_volumes_dropped = 0;   ///< dropped: the reconstruction worker was busy
  uint64_t recon_volumes_failed = 0;    ///< the solver or the hand-over failed (logged)
};

class Acquisition {
 public:
  /// Starts a run: opens `<output.directory>/<run_name>_<run_index>.h5`, builds the finder,
  /// connects the ingest. Never throws for run-time failures: they put the run in the error
  /// state (see stats().error). `previous_pedestal` is used when pedestal.keep_previous is set.
  Acquisition(const config::Config& cfg, uint64_t run_index,
              std::optional<PedestalState> previous_pedestal);
  ~Acquisition();  ///< aborts if still running; the file is closed
  Acquisition(const Acquisition&) = delete;
  Acquisition& operator=(const Acquisition&) = delete;

  /// Ends the run gracefully: stop receiving, drain what is queued, write, close.
  void stop(std::string reason = "stop");
  /// Ends the run now (queued frames are not processed); the file is still closed.
  void abort();
  /// True once the file is closed (or the run failed).
  bool done() const { return done_.load(); }
  /// Waits until done() or the timeout; returns done().
  bool wait(std::chrono::milliseconds timeout) const;

  RunStats stats() const;
  RunState state() const { return state_.load(); }
  std::filesystem::path file() const { return file_; }
  const config::Config& config() const { return cfg_; }
  /// The pedestal at the start of data taking / at the end of the run, once known.
  std::optional<PedestalState> start_pedestal() const;
  std::optional<PedestalState> end_pedestal() const;

 private:
  struct Worker;
  void run(std::stop_token st);
  void fail(const std::string& why);
  void storage_checked(const StorageCheck& check);
  void start_reconstruction();
  void finish_reconstruction();

  const config::Config cfg_;
  const uint64_t run_index_;
  std::filesystem::path file_;
  std::optional<PedestalState> previous_pedestal_;
  std::chrono::steady_clock::time_point started_;

  std::atomic<RunState> state_{RunState::pedestal};
  std::atomic<bool> done_{false};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> abort_requested_{false};
  mutable std::mutex mu_;  ///< guards the strings and pedestals below
  std::string error_, end_reason_, backend_;
  std::optional<PedestalState> start_pedestal_, end_pedestal_;

  std::atomic<uint64_t> recon_failed_at_start_{0};  ///< the stage could not be set up (logged)
  std::atomic<uint64_t> frames_processed_{0}, dark_frames_{0}, data_frames_{0}, incomplete_{0},
      missing_{0}, dropped_rows_{0}, clusters_{0}, rows_written_{0};
  std::atomic<uint64_t> disk_free_{0}, disk_reserve_{0};
  std::unique_ptr<Worker> w_;
  std::jthread thread_;
};

}  // namespace glint::pipeline
