#pragma once
// The consumer that writes the run's HDF5 file: every row of the run, in frame order, and its
// clusters. It never drops: a failed write fails the run (the file stays readable up to the last
// flush, SWMR).
#include <atomic>
#include <filesystem>
#include <optional>

#include "glint/pipeline/result_consumer.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::pipeline {

/// The run file's module layout from detector.modules and detector.placement.
ModuleLayout module_layout(const config::DetectorConfig& detector);

/// Creates output.directory when missing. Throws OutputError naming the directory.
void prepare_output_directory(const config::Config& cfg);

class RunFileConsumer final : public ResultConsumer {
 public:
  std::string_view name() const override { return "run file"; }
  /// Creates the file with the run's metadata (and its reconstruction datasets when the run
  /// reconstructs). Throws OutputError.
  void on_start(const RunContext& run) override;
  void on_pixel_mask(std::span<const uint32_t> mask) override;
  void on_pedestal(const PedestalState& pedestal) override;
  void on_batch(const FoundBatch& batch) override;
  void on_rows(std::span<const FrameRow> rows) override;
  /// Flushes the file and checks its storage (last_storage_check()).
  void flush() override;
  /// Writes the end reason and the end pedestal when given, and closes the file.
  void on_end(const RunEnd& end) override;
  ConsumerStats stats() const override;

  /// The open file, for the consumers that add to it (reconstructed volumes); null before
  /// on_start.
  RunFileWriter* writer() { return writer_ ? &*writer_ : nullptr; }

  /// What the check at the last flush found (free space, reserve, disk_low, a lost file).
  const StorageCheck& last_storage_check() const { return last_check_; }
  /// Checks the storage between flushes (free space and the file's identity).
  const StorageCheck& check_storage();

 private:
  std::optional<RunFileWriter> writer_;
  StorageCheck last_check_;
  std::atomic<uint64_t> rows_{0};
};

}  // namespace glint::pipeline
