#pragma once
// One acquisition run: a chain of stages, each in its own file (docs/architecture.md):
//   source (FrameSource: ingest threads -> frame assembler)
//   -> FrameSequencer (frame-number order: gaps, incomplete images, dark or data)
//   -> pre-processing (FramePreprocessing, on the copy threads)
//   -> finder (FinderStage: batches in the finder's input slots, any backend)
//   -> result consumers (ConsumerChain: the run file, the .clust file, the reconstruction, the
//      products).
// The Acquisition wires the chain, runs it on its thread and owns the run's state
// (RunStateMachine). Everything is created at run start and released at its end; the file is
// always closed, also after an error or an abort.
#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/config/config.hpp"
#include "glint/pedestal.hpp"
#include "glint/pipeline/consumer_chain.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/frame_copier.hpp"
#include "glint/pipeline/frame_preprocessing.hpp"
#include "glint/pipeline/frame_source.hpp"
#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/run_counters.hpp"
#include "glint/pipeline/run_state.hpp"
#include "glint/pipeline/run_tuning.hpp"
#include "glint/pipeline/sls_stream.hpp"
#include "glint/pipeline/storage_guard.hpp"

namespace glint::pipeline {

class FinderStage;
class FrameSequencer;
class PreviewPublisher;
class RunFileConsumer;
class ReconstructionConsumer;
class ProductsConsumer;

/// A consistent-enough snapshot of a run's counters (each counter is exact, the set is not
/// taken atomically).
struct RunStats {
  RunState state = RunState::idle;
  uint64_t run_index = 0;
  std::string file;
  std::string backend;
  std::string error;
  /// The failure leaves this process unable to go on (a sticky CUDA error: the device context is
  /// lost): the daemon reports it and exits non-zero so that its service manager restarts it.
  bool fatal = false;
  double elapsed_s = 0;
  uint64_t messages = 0, bytes = 0, end_messages = 0;
  uint64_t stray_ends = 0;         ///< end headers taken for the receiver's dummy (not ends)
  uint64_t parts = 0;
  uint64_t frames_received = 0;    ///< images assembled (complete + incomplete)
  uint64_t frames_processed = 0;   ///< rows written for received images (dark + data + incomplete)
  uint64_t dark_frames = 0;
  uint64_t data_frames = 0;        ///< frames searched for clusters
  uint64_t incomplete = 0;
  uint64_t missing = 0;
  uint64_t dropped = 0;
  uint64_t late_parts = 0;
  uint64_t missing_unwritten = 0;  ///< missing rows not written: past run.max_missing_rows
  uint64_t stream_stride = 1;      ///< frame-number step of a decimated stream (1: every frame)
  uint64_t restarts = 0;           ///< ports whose frameIndex restarted (a new acquisition)
  uint64_t clusters = 0;
  uint64_t masked_clusters = 0;    ///< clusters removed: centred on a masked pixel (mask.*)
  /// A detector of modules: clusters per module (index k of detector.modules' grid, id
  /// first_module + k); empty for one module.
  std::vector<uint64_t> module_clusters;
  uint64_t masked_pixels = 0;      ///< pixels the run's mask masks, once it is final
  uint64_t rows_written = 0;
  std::array<uint64_t, kBadInputKinds> bad{};
  uint64_t bad_total = 0;
  std::size_t pending_images = 0, queued_images = 0, staging_used = 0, staging_total = 0;
  /// end of acquisition, stop, frame limit, time limit, abort, disk_low (free space fell below
  /// the reserve kept for a clean close), idle (no data for run.idle_end_seconds), missing_rows
  /// (run.max_missing_rows reached), detector restart (the ports' frameIndex started again)
  std::string end_reason;
  uint64_t disk_free_bytes = 0;    ///< free space on the run file's file system, at the last
                                   ///< flush (besides the reserve the file has claimed)
  uint64_t disk_reserve_bytes = 0; ///< claimed beyond the file's end; the run ends (disk_low)
                                   ///< once it cannot be claimed
  // The reconstruction stage (config reconstruction.enabled).
  bool recon_enabled = false;
  uint64_t recon_frames = 0;            ///< data frames accumulated into hit images
  uint64_t recon_volumes_done = 0;      ///< reconstructed (written to the file at its close)
  uint64_t recon_volumes_dropped = 0;   ///< dropped: the reconstruction worker was busy
  uint64_t recon_volumes_failed = 0;    ///< the solver or the hand-over failed (logged)
  std::vector<ConsumerStats> consumers;  ///< each result consumer's own counters, in order
};

class Acquisition {
 public:
  /// Starts a run: opens `<output.directory>/<run_name>_<run_index>.h5`, builds the finder
  /// (with `make_finder`, default pipeline::make_finder), connects the ingest. Never throws for
  /// run-time failures: they put the run in the error state (see stats().error).
  /// `previous_pedestal` is used when pedestal.keep_previous is set. The engines take `tuning`
  /// (the run reads no environment). With `ingest`, the run takes its input from that ingest,
  /// which outlives it (glintd's: subscribed between runs); otherwise it opens its own. With
  /// `preview` (glintd's live view socket, bound across runs) the run publishes its images
  /// there (PreviewConsumer, preview.* of `cfg`).
  Acquisition(const config::Config& cfg, uint64_t run_index,
              std::optional<PedestalState> previous_pedestal, FinderFactory make_finder = {},
              RunTuning tuning = {}, std::shared_ptr<Ingest> ingest = {},
              std::shared_ptr<PreviewPublisher> preview = {});
  ~Acquisition();  ///< aborts if still running; the file is closed
  Acquisition(const Acquisition&) = delete;
  Acquisition& operator=(const Acquisition&) = delete;

  /// Ends the run gracefully: stop receiving, drain what is queued, write, close.
  void stop(std::string reason = "stop");
  /// Ends the run now (queued frames are not processed); the file is still closed.
  void abort();
  /// True once the file is closed (or the run failed).
  bool done() const { return states_.done(); }
  /// Waits until done() or the timeout; returns done().
  bool wait(std::chrono::milliseconds timeout) const { return states_.wait_done(timeout); }
  /// Waits until the run has created its file, built its finder and connected its inputs, or
  /// has failed doing so (then state() is error and stats().error says why), or the timeout.
  bool wait_started(std::chrono::milliseconds timeout) const {
    return states_.wait_started(timeout);
  }

  RunStats stats() const;
  RunState state() const { return states_.state(); }
  std::filesystem::path file() const { return file_; }
  const config::Config& config() const { return cfg_; }
  /// The pedestal at the start of data taking / at the end of the run, once known.
  std::optional<PedestalState> start_pedestal() const;
  std::optional<PedestalState> end_pedestal() const;
  /// The run's products (preview_images() for a live view); lives as long as the Acquisition.
  const ProductsConsumer& products() const { return *products_; }

 private:
  void run();
  void start();             ///< builds the finder, starts the consumers, connects the source
  void begin_data();        ///< the pedestal is ready: data taking starts
  void set_mask(const PedestalState& dark);  ///< the mask is final: filter and file get it
  void acquire();           ///< moves frames through the chain until the run ends
  void flush();             ///< makes what was written durable (output.flush_interval_ms)
  uint64_t rows_at_flush_ = 0;  ///< RunCounters::rows_written at the last flush
  void finish();            ///< drains the chain and ends the consumers
  void fail(const std::string& why, bool fatal);  ///< the error state, the file closed
  void storage_checked(const StorageCheck& check);  ///< disk_low or a lost file ends the run

  const config::Config cfg_;
  const uint64_t run_index_;
  const std::filesystem::path file_;
  const std::optional<PedestalState> previous_pedestal_;
  const FinderFactory make_finder_;
  const RunTuning tuning_;
  const std::chrono::steady_clock::time_point started_;

  RunStateMachine states_;
  RunCounters counters_;
  mutable std::mutex mu_;  ///< guards the string and pedestals below
  std::string backend_;
  std::optional<PedestalState> start_pedestal_, end_pedestal_;

  // The chain, in the order a frame passes through it (destroyed in reverse).
  FrameSource source_;
  FramePreprocessing preprocessing_;
  FrameCopier copier_;
  ConsumerChain consumers_;
  RunFileConsumer* run_file_ = nullptr;
  ReconstructionConsumer* recon_ = nullptr;
  ProductsConsumer* products_ = nullptr;
  std::vector<uint32_t> mask_bits_;  ///< mask.file's pixels (then OR-ed with the dark frames')
  std::unique_ptr<DarkGainSwitches> dark_gains_;  ///< JUNGFRAU with mask.from_dark
  std::atomic<uint64_t> masked_pixels_{0};
  std::unique_ptr<FinderStage> finder_;        ///< built on the run's thread
  std::unique_ptr<FrameSequencer> sequencer_;
  std::atomic<uint64_t> disk_free_{0}, disk_reserve_{0};  ///< at the last storage check
  std::jthread thread_;  // last: joined first
};

}  // namespace glint::pipeline
