#include "glint/pipeline/clust_file_consumer.hpp"

#include "glint/log.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::pipeline {

std::filesystem::path clust_file_path(const std::filesystem::path& run_file) {
  std::filesystem::path p = run_file;
  p.replace_extension(".clust");
  return p;
}

void ClustFileConsumer::on_start(const RunContext& run) {
  const std::filesystem::path path = clust_file_path(run.file);
  if (!run.cfg.output.overwrite && std::filesystem::exists(path))
    throw OutputError(path.string() + ": exists (set output.overwrite to replace it)");
  writer_.emplace(path, run.finder.cluster_size);  // throws naming the file
  log::info("run {}: writing {}", run.run_index, path.string());
}

void ClustFileConsumer::on_batch(const FoundBatch& batch) {
  writer_->write(batch.clusters);  // throws naming the file (e.g. disk full)
  frames_.fetch_add(batch.clusters.n_frames());
}

void ClustFileConsumer::on_end(const RunEnd&) {
  if (writer_) writer_->close();
}

ConsumerStats ClustFileConsumer::stats() const {
  ConsumerStats s;
  s.name = std::string(name());
  s.frames = frames_.load();
  return s;
}

}  // namespace glint::pipeline
