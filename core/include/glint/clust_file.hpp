#pragma once
// The .clust file: aare's ClusterFile format, so that glint's output feeds aare-based analysis.
//
// Little-endian, no header. Records repeat, one per data frame (also for frames without
// clusters): int32 frame_number, uint32 n_clusters, then n_clusters clusters of
// { uint16 x, uint16 y, int32 data[S*S] } (4 + 4*S*S bytes each, 40 bytes for 3x3). The file does
// not record S: the reader must be told. Frame numbers are stored as int32, as aare does: a frame
// number beyond 2^31-1 is written modulo 2^32 (a two's-complement wrap).
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "glint/cluster_table.hpp"

namespace glint {

/// Writes .clust records. Move-only; the file is closed by close() or the destructor.
class ClustWriter {
 public:
  /// Creates (truncates) `path`. Throws std::runtime_error naming the file when it cannot.
  ClustWriter(const std::filesystem::path& path, int cluster_size);
  ClustWriter(ClustWriter&& other) noexcept;
  ClustWriter& operator=(ClustWriter&& other) noexcept;
  ClustWriter(const ClustWriter&) = delete;
  ClustWriter& operator=(const ClustWriter&) = delete;
  ~ClustWriter();

  /// Appends one record per frame of `table` (same cluster size). Throws std::runtime_error
  /// naming the file on a write error (e.g. disk full).
  void write(const ClusterTable& table);
  /// Flushes and closes; throws on a failed flush. Idempotent.
  void close();

  uint64_t frames_written() const { return frames_; }
  uint64_t clusters_written() const { return clusters_; }

 private:
  std::filesystem::path path_;
  int cluster_size_;
  std::FILE* file_ = nullptr;
  uint64_t frames_ = 0;
  uint64_t clusters_ = 0;
};

/// Reads a whole .clust file written with clusters of size S (frame numbers come back as the
/// int32 stored, sign-extended). Throws std::runtime_error naming the file and the byte offset on
/// a truncated or inconsistent file.
ClusterTable read_clust(const std::filesystem::path& path, int cluster_size);

}  // namespace glint
