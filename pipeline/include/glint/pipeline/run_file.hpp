#pragma once
// One HDF5 file per acquisition run (../shared/spec/hdf5-layout.md), NeXus-style, written in
// SWMR mode so that h5py and h5dump can read it while it grows and after a crash (everything
// flushed before the crash stays readable).
//
//   /entry                      NXentry: start_time, end_time, program_name, program_version,
//                               config (the run's effective configuration, YAML text)
//   /entry/instrument/detector  NXdetector: frame_shape, pixel_type, detector_type, source,
//                               n_sigma, cluster_size, backend, pedestal_window
//   /entry/frames               frame_number u64, timestamp u64, cluster_offset u64,
//                               n_clusters u32, flags u8 (one row per frame, in order)
//   /entry/clusters             NXevent_data-like: frame_number u64, x u16, y u16,
//                               data (n, S, S) int32
//   /entry/pedestal             start_mean, start_noise, end_mean, end_noise (H x W float64,
//                               NaN until written) and the end state (end_sum, end_sum2,
//                               end_count) from which a later run can resume exactly
//   /entry/reconstruction       NXprocess, when the reconstruction stage ran: weight,
//                               frames_per_slice, slices, frames, volumes_done/_dropped/_failed
//     volume_NNNNNN             one per reconstructed volume: input and output (Z, Y, X) float32,
//                               first_frame, last_frame, lambda, outer, tv_inner, iterations,
//                               warm_start, nonneg, forward, variant, backend, solve_seconds
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/cluster_table.hpp"
#include "glint/pedestal.hpp"

namespace glint::pipeline {

/// Bits of /entry/frames/flags.
enum FrameFlag : uint8_t {
  kFlagIncomplete = 1,       ///< a port part never arrived, or completeImage was 0
  kFlagDark = 2,             ///< a pedestal (dark) frame: no clusters searched
  kFlagClusterOverflow = 4,  ///< more clusters than the output could hold (re-run and counted)
  kFlagMissing = 8,          ///< the frame number never arrived
  kFlagDropped = 16,         ///< arrived but dropped at the ingest (pipeline could not keep up)
};

struct FrameRow {
  uint64_t frame_number = 0;
  uint64_t timestamp = 0;
  uint64_t cluster_offset = 0;  ///< first row of the frame's clusters in /entry/clusters
  uint32_t n_clusters = 0;
  uint8_t flags = 0;
  friend bool operator==(const FrameRow&, const FrameRow&) = default;
};

struct RunMetadata {
  std::string config_yaml;          ///< the run's effective configuration
  FinderParams finder;
  std::string detector_type = "unknown";
  std::string source;               ///< input file or stream endpoints
  std::string pixel_type = "uint16";
  std::string backend;              ///< e.g. "cpu (16 threads)", "gpu (NVIDIA H200)"
};

/// One reconstructed volume of the run (/entry/reconstruction/volume_NNNNNN).
struct ReconstructionVolume {
  uint64_t first_frame = 0, last_frame = 0;  ///< the data frames the volume was built from
  uint32_t nx = 0, ny = 0, nz = 0;           ///< extent; input and output are (nz, ny, nx)
  std::vector<float> input, output;          ///< x fastest
  double lambda = 0;
  uint32_t outer = 0, tv_inner = 0;
  bool warm_start = true, nonneg = true;
  std::string forward, variant, backend;
  double solve_seconds = 0;
};

/// What the reconstruction stage did over the whole run (attributes of /entry/reconstruction).
struct ReconstructionSummary {
  std::string weight;  ///< centres | signal
  uint32_t frames_per_slice = 0, slices = 0;
  uint64_t frames = 0, volumes_done = 0, volumes_dropped = 0, volumes_failed = 0;
};

/// A failure to create or write an output file: names the file and what failed.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RunFileWriter {
 public:
  /// Creates `path` with the metadata and all datasets, then switches to SWMR writing. Refuses
  /// an existing file unless `overwrite`. Throws OutputError.
  RunFileWriter(std::filesystem::path path, const RunMetadata& meta, bool overwrite = false);
  ~RunFileWriter();  // closes without the end pedestal if close() was not called; never throws
  RunFileWriter(RunFileWriter&&) noexcept;
  RunFileWriter& operator=(RunFileWriter&&) noexcept;
  RunFileWriter(const RunFileWriter&) = delete;
  RunFileWriter& operator=(const RunFileWriter&) = delete;

  /// The pedestal at the start of data taking.
  void write_start_pedestal(const PedestalState& pedestal);

  /// Appends one frame row per frame of `table` (in order) and all its clusters.
  /// `timestamps` and `flags` are per frame of the table, or empty for zeros.
  void append(const ClusterTable& table, std::span<const uint64_t> timestamps = {},
              std::span<const uint8_t> flags = {});

  /// Appends rows of frames that carry no clusters (missing, dropped or dark frames); the
  /// writer sets cluster_offset and n_clusters.
  void append_empty_frames(std::span<const FrameRow> rows);

  /// Hands over a reconstructed volume; it is written to /entry/reconstruction at close() (SWMR
  /// cannot create objects), meanwhile kept in `<path>.recon.tmp` beside the run file, not in
  /// memory. Safe to call from another thread than the rest; throws OutputError (e.g. disk full,
  /// or after close).
  void add_reconstruction(const ReconstructionVolume& volume);
  /// Records the stage's totals; with it (or any volume) close() writes /entry/reconstruction.
  void set_reconstruction_summary(const ReconstructionSummary& summary);

  /// Makes everything written so far visible to readers and durable against a crash.
  void flush();

  /// Writes the end pedestal (when given), end_time and the reconstruction, and closes.
  /// Idempotent.
  void close(const PedestalState* end_pedestal);

  bool is_open() const;
  uint64_t frames_written() const;
  uint64_t clusters_written() const;
  const std::filesystem::path& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `<dir>/<run_name>_<run_index:06>.h5`.
std::filesystem::path run_file_path(const std::filesystem::path& dir, std::string_view run_name,
                                    uint64_t run_index);

/// Everything a run file holds, read back (tests, tools, pedestal hand-over).
struct RunFileContents {
  std::vector<FrameRow> frames;
  ClusterTable clusters;            ///< one record per frame row, clusters in file order
  FrameShape shape{};
  int cluster_size = 0;
  double n_sigma = 0.0;
  uint32_t pedestal_window = 0;
  std::string start_time;
  std::string end_time;             ///< empty when the run never closed (crash)
  std::string config_yaml;
  std::string backend;
  std::vector<double> start_mean, start_noise, end_mean, end_noise;
  std::optional<PedestalState> end_state;  ///< present when the end pedestal was written
  std::optional<ReconstructionSummary> reconstruction_summary;  ///< when the stage ran
  std::vector<ReconstructionVolume> reconstruction;             ///< in the order reconstructed
};

/// Reads a run file (also one still being written, through SWMR). Throws OutputError.
RunFileContents read_run_file(const std::filesystem::path& path);

}  // namespace glint::pipeline
