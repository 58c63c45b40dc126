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
                               std::function<void()> pedestal_ready)
    : run_index_(run_index), dark_remaining_(dark_frames), source_(source), finder_(finder),
      counters_(counters), pedestal_ready_(std::move(pedestal_ready)) {}

void FrameSequencer::start_data() {
  dark_remaining_ = 0;
  pedestal_ready_();
}

void FrameSequencer::route(FramePtr f) {
  const uint64_t fn = f->frame_number;
  if (next_expected_ && fn > *next_expected_) write_gap(*next_expected_, fn);
  else if (!next_expected_) (void)source_.take_dropped(fn);
  next_expected_ = fn + 1;

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
  const uint64_t next = next_expected_.value_or(0);
  write_gap(next, next);  // releases the dropped list
  // Frames dropped after the last received one still get their rows.
  auto tail = source_.take_dropped(std::nullopt);
  if (!tail.empty() && next_expected_) {
    std::vector<FrameRow> rows;
    for (uint64_t fn : tail)
      if (fn >= *next_expected_) rows.push_back(FrameRow{fn, 0, 0, 0, kFlagDropped});
    if (!rows.empty()) {
      finder_.write_rows(rows);
      counters_.dropped_rows.fetch_add(rows.size());
    }
  }
}

void FrameSequencer::write_gap(uint64_t from, uint64_t to) {
  auto dropped = source_.take_dropped(to);
  if (from >= to) return;
  uint64_t n = to - from;
  if (n > kMaxGapRows) {
    log::warn("run {}: frame number jumps from {} to {}; recording the first {} as missing",
              run_index_, from - 1, to, kMaxGapRows);
    n = kMaxGapRows;
  }
  std::vector<FrameRow> rows;
  rows.reserve(std::min<uint64_t>(n, 65536));
  std::size_t di = 0;
  uint64_t n_missing = 0, n_dropped = 0;
  for (uint64_t fn = from; fn < from + n; ++fn) {
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
