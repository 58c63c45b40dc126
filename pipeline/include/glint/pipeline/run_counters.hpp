#pragma once
// The run's frame counters, shared by the stages that count (each counter has one writer, the
// run's thread; any thread may read them).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace glint::pipeline {

struct RunCounters {
  std::atomic<uint64_t> frames_processed{0};  ///< rows for received images (dark, data, incomplete)
  std::atomic<uint64_t> dark_frames{0};
  std::atomic<uint64_t> data_frames{0};       ///< frames searched for clusters
  std::atomic<uint64_t> incomplete{0};
  std::atomic<uint64_t> missing{0};           ///< rows for frame numbers that never arrived
  std::atomic<uint64_t> dropped_rows{0};      ///< rows for images dropped at the ingest
  std::atomic<uint64_t> clusters{0};          ///< clusters handed on (masked ones not included)
  std::atomic<uint64_t> masked_clusters{0};   ///< clusters removed: centred on a masked pixel
  std::atomic<uint64_t> rows_written{0};      ///< rows handed to the consumers
  std::atomic<uint64_t> missing_unwritten{0}; ///< missing rows past run.max_missing_rows
  std::atomic<uint64_t> stream_stride{1};     ///< frame-number step of the stream (decimated: N)
  /// Clusters handed on per module (a detector of modules; empty for one): set up once, before
  /// the run's thread counts.
  std::unique_ptr<std::atomic<uint64_t>[]> module_clusters;
  std::size_t modules = 0;
  void count_modules(std::size_t n) {
    module_clusters = n > 1 ? std::make_unique<std::atomic<uint64_t>[]>(n) : nullptr;
    modules = n > 1 ? n : 0;
  }
};

}  // namespace glint::pipeline
