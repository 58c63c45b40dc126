#pragma once
// Assembles port parts into whole images by frame number and (row, column), in frame-number
// order, into a fixed pool of image buffers allocated at run start. When the pool is exhausted
// (the finder cannot keep up) new frames are dropped here, counted and remembered so that the
// run file gets a flagged row for each; the sockets are never blocked.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "glint/config/config.hpp"
#include "glint/pipeline/sls_stream.hpp"

namespace glint::pipeline {

/// One assembled image, owned by the assembler's pool; hand it back with FrameAssembler::release.
struct AssembledFrame {
  uint64_t frame_number = 0;
  uint64_t timestamp = 0;
  bool incomplete = false;                 ///< a part never arrived or completeImage was 0
  uint32_t parts = 0;                      ///< parts received
  std::vector<uint16_t> pixels;            ///< rows x cols, row-major
  std::vector<bool> have_part;
  std::chrono::steady_clock::time_point first_part_at{};
};
using FramePtr = std::unique_ptr<AssembledFrame>;

struct AssemblerCounters {
  uint64_t parts = 0;            ///< parts accepted
  uint64_t frames_complete = 0;  ///< images emitted complete
  uint64_t frames_incomplete = 0;
  uint64_t frames_dropped = 0;   ///< no free buffer: dropped at the ingest
  uint64_t late_parts = 0;       ///< parts of an image already emitted or dropped
  std::size_t pending = 0;       ///< images waiting for parts
  std::size_t ready = 0;         ///< images waiting for the finder
  std::size_t pool = 0;          ///< buffers in total
  std::size_t free = 0;          ///< buffers free
};

class FrameAssembler {
 public:
  FrameAssembler(const config::DetectorConfig& detector, const config::IngestConfig& ingest);

  /// Adds one validated data part (header checked against the detector by the caller).
  void add_part(const SlsHeader& h, std::span<const std::byte> payload);

  /// Waits up to `timeout` for the next image in frame-number order; flags and emits images
  /// whose parts are overdue. Returns nullptr on timeout.
  FramePtr pop(std::chrono::milliseconds timeout);
  /// Returns an image's buffer to the pool.
  void release(FramePtr frame);
  /// Emits every pending image (as incomplete) now: the end of the data.
  void flush_pending();
  /// Wakes a waiting pop().
  void wake();

  /// Frame numbers dropped for lack of buffers that are below `limit` (all if nullopt), removed.
  std::vector<uint64_t> take_dropped(std::optional<uint64_t> limit);

  AssemblerCounters counters() const;

 private:
  void emit_ready_locked(std::chrono::steady_clock::time_point now, bool flush_all);
  void remember_dropped_locked(uint64_t fn);

  config::DetectorConfig det_;
  uint32_t reorder_frames_;
  std::chrono::milliseconds part_timeout_;
  uint32_t n_parts_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<FramePtr> free_;
  std::map<uint64_t, FramePtr> pending_;
  std::deque<FramePtr> ready_;
  std::set<uint64_t> dropped_;         ///< not yet taken by the consumer
  std::set<uint64_t> dropped_recent_;  ///< recent drops: later parts of them are discarded
  std::optional<uint64_t> last_emitted_;
  AssemblerCounters c_;
};

}  // namespace glint::pipeline
