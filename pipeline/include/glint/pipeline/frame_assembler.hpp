#pragma once
// Assembles port parts into whole images by frame number and (row, column), in frame-number
// order, in a fixed pool of image slots allocated at run start (the pixels themselves stay in
// the received messages until the consumer copies them into the finder's staging). When the pool is exhausted
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
#include "glint/modular_finder.hpp"
#include "glint/pipeline/sls_stream.hpp"

namespace glint::pipeline {

/// One port's pixels as received: they stay in the message that carried them (no copy at the
/// ingest); `owner` keeps that message alive.
struct PartPayload {
  std::shared_ptr<const void> owner;
  std::span<const std::byte> bytes;
  uint32_t bitmode = 16;
  bool rows_flipped = false;  ///< the part's rows come last row first (SlsHeader::rows_flipped)
};

/// One assembled image: a slot of the assembler's pool, holding its parts until the consumer
/// has copied them out (write_to); hand it back with FrameAssembler::release.
struct AssembledFrame {
  uint64_t frame_number = 0;
  uint64_t timestamp = 0;
  bool incomplete = false;                 ///< a part never arrived or completeImage was 0
  bool dark_marked = false;                ///< a part's addJsonHeader marks it dark (frameMode)
  uint32_t parts = 0;                      ///< parts received
  std::vector<PartPayload> part;           ///< by row * ports_x + column; empty = not arrived
  std::chrono::steady_clock::time_point first_part_at{};

  /// Writes the whole image (rows x cols, row-major uint16) into `out`: every part decoded from
  /// its bitmode into its (row, column) block (a part with rows_flipped from its last row up),
  /// parts that never arrived as zeros. This is the one copy of the pixels between the socket and
  /// the finder's staging.
  /// `streaming`: `out` is read next by a device, not by this CPU (decode_row).
  void write_to(const config::DetectorConfig& det, std::span<uint16_t> out,
                bool streaming = false) const;
  /// Writes the block `region` of the image (whole ports: a module) into `out` (region.shape,
  /// row-major), as write_to does for the whole image: the module's native pixels as its ports
  /// send them (region.orientation is not applied; docs/modules.md, "Orientation").
  void write_region(const config::DetectorConfig& det, const ModuleRegion& region,
                    std::span<uint16_t> out, bool streaming = false) const;
};
using FramePtr = std::unique_ptr<AssembledFrame>;

struct AssemblerCounters {
  uint64_t parts = 0;            ///< parts accepted
  uint64_t frames_complete = 0;  ///< images emitted complete
  uint64_t frames_incomplete = 0;
  uint64_t frames_dropped = 0;   ///< no free buffer: dropped at the ingest
  uint64_t late_parts = 0;       ///< parts of an image already emitted or dropped (logged,
                                 ///< at most every 10 s)
  std::size_t pending = 0;       ///< images waiting for parts
  std::size_t ready = 0;         ///< images waiting for the finder
  std::size_t pool = 0;          ///< buffers in total
  std::size_t free = 0;          ///< buffers free
};

/// A port that has sent nothing yet in the run is waited for this many ingest.part_timeout_ms
/// (within ingest.reorder_frames) before its parts are taken as lost: ports of one detector can
/// start seconds apart.
inline constexpr int kAbsentPortTimeouts = 10;

/// When an image waits for parts: it is emitted complete when all arrive. It is emitted
/// incomplete when every missing port has already sent a later frame (its part will not come),
/// or when every missing port is stalled (nothing from it for ingest.part_timeout_ms, and the
/// image is that old; a port that has sent nothing in the run: kAbsentPortTimeouts times that),
/// or when more than ingest.reorder_frames images wait, or at the end of the run. A missing port
/// that is behind but moving is waited for.
class FrameAssembler {
 public:
  FrameAssembler(const config::DetectorConfig& detector, const config::IngestConfig& ingest);

  /// Adds one validated data part (header checked against the detector by the caller, payload
  /// size included). Keeps the payload, copies nothing.
  void add_part(const SlsHeader& h, PartPayload payload);

  /// Waits up to `timeout` for the next image in frame-number order; flags and emits images
  /// whose parts are overdue. Returns nullptr on timeout or when woken with nothing ready.
  FramePtr pop(std::chrono::milliseconds timeout);
  /// Returns an image's buffer to the pool.
  void release(FramePtr frame);
  /// Emits every pending image (as incomplete) now: the end of the data.
  void flush_pending();
  /// Makes a waiting pop() (or the next one) return now, with nullptr if no image is ready: the
  /// consumer then looks at its end conditions (end of acquisition, stop).
  void wake();

  /// Frame numbers dropped for lack of buffers that are below `limit` (all if nullopt), removed.
  std::vector<uint64_t> take_dropped(std::optional<uint64_t> limit);

  AssemblerCounters counters() const;

 private:
  void emit_ready_locked(std::chrono::steady_clock::time_point now, bool flush_all);
  void remember_dropped_locked(uint64_t fn);
  /// When `f`, still missing parts, is given up (time_point::min(): now).
  std::chrono::steady_clock::time_point give_up_at_locked(const AssembledFrame& f) const;

  const config::DetectorConfig det_;
  uint32_t reorder_frames_;
  std::chrono::milliseconds part_timeout_;
  uint32_t n_parts_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;  ///< wake() was called since pop() last returned nullptr
  std::vector<FramePtr> free_;
  std::map<uint64_t, FramePtr> pending_;
  std::deque<FramePtr> ready_;
  std::set<uint64_t> dropped_;         ///< not yet taken by the consumer
  std::set<uint64_t> dropped_recent_;  ///< recent drops: later parts of them are discarded
  std::optional<uint64_t> last_emitted_;
  std::vector<std::optional<uint64_t>> port_last_frame_;  ///< by port: the last part's frame
  std::vector<std::chrono::steady_clock::time_point> port_last_at_;  ///< ... and its arrival
  std::chrono::steady_clock::time_point late_logged_{};
  uint64_t late_logged_count_ = 0;
  AssemblerCounters c_;
};

}  // namespace glint::pipeline
