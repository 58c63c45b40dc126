#include "glint/pipeline/frame_sequencer.hpp"

#include <algorithm>
#include <vector>

#include "glint/log.hpp"

namespace glint::pipeline {

namespace {

/// A frame number jump larger than this is recorded as this many missing rows plus a warning
/// (a restarted detector counter must not fill the disk with empty rows).
constexpr uint64_t kMaxGapRows = 1'000'000;

}  // namespace

FrameSequencer::FrameSequencer(uint64_t run_index, uint64_t dark_frames, FrameSource& source,
                               FinderStage& finder, RunCounters& counters,
                               std::function<void()> pedestal_ready, uint64_t max_missing_rows,
                               std::function<void()> missing_limit)
    : run_index_(run_index), dark_remaining_(dark_frames), source_(source), finder_(finder),
      counters_(counters), pedestal_ready_(std::move(pedestal_ready)),
      max_missing_rows_(max_missing_rows), missing_limit_(std::move(missing_limit)) {}

void FrameSequencer::start_data() {
  dark_remaining_ = 0;
  pedestal_ready_();
}

void FrameSequencer::route(FramePtr f) {
  const uint64_t fn = f->frame_number;
  if (!last_) {
    (void)source_.take_dropped(fn);
  } else if (fn > *last_) {  // images leave the assembler in frame-number order
    const uint64_t step = fn - *last_;
    const std::vector<uint64_t> dropped = source_.take_dropped(fn);
    if (first_step_ && step > 1 && step <= kMaxStreamStride && dropped.empty()) {
      stride_ = step;
      counters_.stream_stride.store(step);
      log::info("run {}: frame numbers step by {} (a decimated stream, e.g. slsReceiver "
                "rx_zmqfreq {}): recorded as the stream's stride, not as missing frames",
                run_index_, step, step);
    } else if (stride_ > 1 && step % stride_ != 0) {
      log::warn("run {}: frame {} after {} is off the stream's stride {}; every frame number is "
                "expected from here on", run_index_, fn, *last_, stride_);
      stride_ = 1;
      counters_.stream_stride.store(1);
    }
    if (step > stride_ || !dropped.empty()) write_gap(*last_ + stride_, fn, stride_, dropped);
    first_step_ = false;
  }
  last_ = fn;

  if (f->incomplete) {
    const FrameRow row{fn, f->timestamp, 0, 0, kFlagIncomplete};
    source_.release(std::move(f));
    finder_.write_rows(std::span<const FrameRow>(&row, 1));
    counters_.incomplete.fetch_add(1);
    counters_.frames_processed.fetch_add(1);
    return;
  }
  FrameKind kind = dark_remaining_ > 0 ? FrameKind::dark : FrameKind::data;
  if (dark_by_marker_) {  // the sender's frameMode marker decides
    kind = f->dark_marked ? FrameKind::dark : FrameKind::data;
    if (kind == FrameKind::data && marked_seen_ && dark_remaining_ > 0) {
      dark_remaining_ = 0;  // data follows the marked dark frames: the pedestal is ready
      finder_.submit();
      pedestal_ready_();
    }
    marked_seen_ = marked_seen_ || f->dark_marked;
  }
  finder_.add(std::move(f), kind);
  if (kind == FrameKind::dark && dark_remaining_ > 0 && --dark_remaining_ == 0) {
    finder_.submit();
    pedestal_ready_();
  }
}

void FrameSequencer::finish() {
  // Frames dropped after the last received one still get their rows.
  auto tail = source_.take_dropped(std::nullopt);
  if (!tail.empty() && last_) {
    std::vector<FrameRow> rows;
    for (uint64_t fn : tail)
      if (fn > *last_) rows.push_back(FrameRow{fn, 0, 0, 0, kFlagDropped});
    if (!rows.empty()) {
      finder_.write_rows(rows);
      counters_.dropped_rows.fetch_add(rows.size());
    }
  }
}

void FrameSequencer::write_gap(uint64_t from, uint64_t to, uint64_t stride,
                               const std::vector<uint64_t>& dropped) {
  if (from >= to) return;
  uint64_t n = (to - from + stride - 1) / stride;
  if (n > kMaxGapRows) {
    log::warn("run {}: frame number jumps from {} to {}; recording the first {} as missing",
              run_index_, from - stride, to, kMaxGapRows);
    n = kMaxGapRows;
  }
  const uint64_t room = max_missing_rows_ - std::min(gap_rows_, max_missing_rows_);
  if (n > room) {
    if (counters_.missing_unwritten.load() == 0) {
      log::warn("run {}: run.max_missing_rows ({}) rows for missing frames written; frames {} to "
                "{} and later gaps are counted only, and the run ends (missing_rows)",
                run_index_, max_missing_rows_, from + room * stride, to - 1);
      if (missing_limit_) missing_limit_();
    }
    counters_.missing_unwritten.fetch_add(n - room);
    n = room;
  }
  if (n == 0) return;
  gap_rows_ += n;
  std::vector<FrameRow> rows;
  rows.reserve(std::min<uint64_t>(n, 65536));
  std::size_t di = 0;
  uint64_t n_missing = 0, n_dropped = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t fn = from + k * stride;
    while (di < dropped.size() && dropped[di] < fn) ++di;
    const bool was_dropped = di < dropped.size() && dropped[di] == fn;
    rows.push_back(FrameRow{fn, 0, 0, 0, was_dropped ? kFlagDropped : kFlagMissing});
    (was_dropped ? n_dropped : n_missing)++;
    if (rows.size() == 65536) {
      finder_.write_rows(rows);
      rows.clear();
    }
  }
  if (!rows.empty()) finder_.write_rows(rows);
  counters_.missing.fetch_add(n_missing);
  counters_.dropped_rows.fetch_add(n_dropped);
}

}  // namespace glint::pipeline
