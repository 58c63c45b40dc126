#pragma once
// The source stage: the ingest threads (one per endpoint) receive port parts and the frame
// assembler joins them into images, handed out in frame-number order. The source also knows when
// the stream has ended and which frame numbers were dropped for lack of buffers.
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "glint/config/config.hpp"
#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/ingest.hpp"

namespace glint::pipeline {

/// The source's counters (ingest and assembly), for RunStats.
struct SourceStats {
  IngestCounters ingest;
  AssemblerCounters assembler;
};

class FrameSource {
 public:
  /// Allocates the assembler's pool; nothing is received before connect(). With `shared`, the
  /// run takes its input from that ingest (which outlives the run: its sockets stay subscribed
  /// between runs); otherwise connect() opens the run's own.
  explicit FrameSource(const config::Config& cfg, std::shared_ptr<Ingest> shared = {});
  ~FrameSource();  ///< stops the ingest threads
  FrameSource(const FrameSource&) = delete;
  FrameSource& operator=(const FrameSource&) = delete;

  /// Connects the ingest sockets (publishers see a subscriber from now on, so only once the
  /// finder and the output are ready), or attaches the shared ingest: what it held for the next
  /// run comes first.
  void connect();
  /// The next image in frame-number order, or nullptr after `timeout` or wake().
  FramePtr pop(std::chrono::milliseconds timeout) { return assembler_.pop(timeout); }
  /// Returns an image's buffer to the pool.
  void release(FramePtr f) { assembler_.release(std::move(f)); }
  /// Makes a waiting pop() return now (thread-safe).
  void wake() { assembler_.wake(); }
  /// Emits every image still waiting for parts (as incomplete).
  void flush_pending() { assembler_.flush_pending(); }
  /// No new input from here on (what is queued stays); images waiting for parts are emitted.
  void stop_input();
  /// Stops the ingest threads, or detaches the shared ingest (idempotent; nothing before
  /// connect()). The run's ingest counters stay as they were here.
  void stop();
  /// Frame numbers below `limit` (all: nullopt) dropped for lack of buffers, removed.
  std::vector<uint64_t> take_dropped(std::optional<uint64_t> limit) {
    return assembler_.take_dropped(limit);
  }

  /// Why the stream has ended, if it has: every endpoint sent its end message ("end of
  /// acquisition"), or some did and nothing reached the run for ingest.part_timeout_ms since
  /// ("end of acquisition (not on every port)"), or the ports restarted their frameIndex (a new
  /// acquisition began: "detector restart"). Called by the run's thread.
  std::optional<std::string> ended(std::chrono::steady_clock::time_point now);

  FrameAssembler& assembler() { return assembler_; }
  SourceStats stats() const;

 private:
  const std::chrono::milliseconds part_timeout_;
  const config::Config cfg_;
  FrameAssembler assembler_;
  std::shared_ptr<Ingest> shared_;
  // Published through an atomic for stats() on other threads.
  std::unique_ptr<Ingest> ingest_owner_;
  std::atomic<Ingest*> ingest_{nullptr};
  IngestCounters base_;                 ///< the shared ingest's counters at connect()
  mutable std::mutex counters_mu_;
  std::optional<IngestCounters> final_; ///< the run's, frozen at stop()
  std::optional<std::chrono::steady_clock::time_point> first_end_at_;
};

}  // namespace glint::pipeline
