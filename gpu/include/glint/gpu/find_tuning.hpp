#pragma once
// Tuning and diagnosis settings of the GPU cluster finder (docs/tuning.md). The defaults are the
// settings measured fastest on the target GPU; none of them changes a result. The engine takes
// them at construction and reads nothing else; the glint tool and glintd fill them from the
// environment (glint/daemon/tuning_env.hpp). Header free of CUDA.
#include <string>

namespace glint::gpu {

/// Threads of a find block where two share a multiprocessor, by default, when the block's
/// segment keeps its whole state in shared memory: 448 was 3-4 % faster than 512 at 400 x 400 on
/// an H100 (and 2 % on an H200 with an earlier kernel).
inline constexpr int kFindThreadsResident = 448;
/// The same for a segment with state in global memory: 512 was 4 % faster than 448 in the kernel
/// at 512 x 1024 (H100).
inline constexpr int kFindThreadsShared = 512;
/// Threads of a find block alone on a multiprocessor, by default: 2048 x 2048 took 206 us per
/// frame in the kernel with 1024 threads, 214 with 896 (H100).
inline constexpr int kFindThreadsAlone = 1024;

struct FindTuning {
  /// Threads per find block where two blocks share a multiprocessor: a multiple of 32 from 128
  /// to 1024; a block alone on a multiprocessor (large frames) then gets twice as many, at most
  /// 1024. 0 (the default): the sizes measured fastest where two blocks share a
  /// multiprocessor (kFindThreadsResident, kFindThreadsShared) and for a block alone
  /// (kFindThreadsAlone; docs/performance.md).
  int find_threads = 0;
  /// Clusters a find block takes at least at a time for its part of a batch's output (1 to
  /// 65536): the find writes each (frame, segment) piece of clusters in place into runs of the
  /// output it takes with one atomic, asked for a frame ahead; larger runs mean fewer atomics and
  /// more room left unused at the end of a batch (copied back with the rest).
  int out_chunk = 32;
  /// Cluster values come back from the GPU as int16 while they fit (a 3x3 cluster in 22 bytes
  /// instead of 40: a smaller output and result copy); a batch with a value beyond int16 is found
  /// again with int32 values, as are all batches after it. Calibrated values are always int32.
  /// false: int32 throughout.
  bool narrow = true;
  /// Find blocks may keep their segment's pedestal state in shared memory where it fits; false
  /// keeps it in global memory (the path taken anyway where it does not fit).
  bool resident = true;
  /// Most segments a GPU's band is cut into (longer segments), where the shape allows; 0: as
  /// many as fit at once.
  long long max_segments = 0;
  /// Count cycles per phase of the find kernel, hand-off times and block entry/exit times on the
  /// first GPU; logged (info) when the finder is destroyed.
  bool profile = false;
  /// A file path: per-batch device times and host waits of the first GPU, written as CSV when
  /// the finder is destroyed; empty: none.
  std::string timeline;
  /// A file path: globaltimer stamps of every step of the find kernel's frames, per segment, for
  /// the first 256 frames of each launch on the first GPU (a later launch overwrites the frames
  /// it has), written as CSV when the finder is destroyed (for scripts/find_trace.py); empty:
  /// none.
  std::string trace;
};

/// Throws std::invalid_argument naming the field and the allowed values when `t` is unusable.
void validate(const FindTuning& t);

}  // namespace glint::gpu
