#pragma once
// The consumer that writes the run's clusters as a .clust file beside the run file (aare's
// ClusterFile format, see glint/clust_file.hpp): one record per data frame, in frame order.
// Written when output.clust is set; like the run file it never drops (a failed write fails the
// run).
#include <atomic>
#include <filesystem>
#include <optional>

#include "glint/clust_file.hpp"
#include "glint/pipeline/result_consumer.hpp"

namespace glint::pipeline {

/// The run file's path with the extension .clust.
std::filesystem::path clust_file_path(const std::filesystem::path& run_file);

class ClustFileConsumer final : public ResultConsumer {
 public:
  std::string_view name() const override { return "clust file"; }
  /// Creates `<run file>.clust`; an existing one is an error unless output.overwrite. Throws
  /// (OutputError or std::runtime_error) naming the file.
  void on_start(const RunContext& run) override;
  void on_batch(const FoundBatch& batch) override;
  /// Closes the file (also after a failure: what was written stays).
  void on_end(const RunEnd& end) override;
  ConsumerStats stats() const override;

 private:
  std::optional<ClustWriter> writer_;
  std::atomic<uint64_t> frames_{0};
};

}  // namespace glint::pipeline
