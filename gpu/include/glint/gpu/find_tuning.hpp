#pragma once
// Tuning and diagnosis settings of the GPU cluster finder (docs/tuning.md). The defaults are the
// settings measured fastest on the target GPU; none of them changes a result. The engine takes
// them at construction and reads nothing else; the glint tool and glintd fill them from the
// environment (glint/daemon/tuning_env.hpp). Header free of CUDA.
#include <string>

namespace glint::gpu {

struct FindTuning {
  /// Threads per find block where two blocks share a multiprocessor: a multiple of 32 from 128
  /// to 1024 (two 512-thread blocks fill an H200 SM). A block alone on a multiprocessor (large
  /// frames) gets twice as many, at most 1024.
  int find_threads = 512;
  /// Segments' regions packed by one 256-thread pack block (1 to 1024; 8: one per warp).
  int pack_regions = 8;
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
