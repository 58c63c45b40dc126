#include "glint/pipeline/run_file_consumer.hpp"

#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "glint/log.hpp"
#include "glint/pipeline/detector_pixels.hpp"

namespace glint::pipeline {

namespace {

/// /entry/reconstruction's datasets and run-constant attributes, created with the run file.
ReconstructionLayout reconstruction_layout(const config::Config& c) {
  const auto& r = c.reconstruction;
  ReconstructionLayout l;
  l.nx = c.detector.cols;
  l.ny = c.detector.rows;
  l.slices = r.slices;
  l.frames_per_slice = r.frames_per_slice;
  l.weight = r.weight;
  l.lambda = r.lambda;
  l.outer = r.outer;
  l.tv_inner = r.tv_inner;
  l.warm_start = !r.cold_start;
  l.nonneg = r.nonneg;
  l.forward = r.forward;
  l.variant = r.variant;
  l.backend = r.backend;
  l.solve_partial = r.solve_partial;
  return l;
}

}  // namespace

ModuleLayout module_layout(const config::DetectorConfig& d) {
  ModuleLayout l;
  l.modules_x = d.modules_x;
  l.modules_y = d.modules_y;
  l.detector_rows = d.whole_rows();
  l.detector_cols = d.whole_cols();
  l.origin_row = d.origin_row;
  l.origin_col = d.origin_col;
  l.first_module = d.first_module;
  if (!d.module_orientation.empty()) l.orientations = module_orientations(d);
  return l;
}

void prepare_output_directory(const config::Config& cfg) {
  if (cfg.output.directory.empty()) throw OutputError("output.directory is empty");
  std::error_code ec;
  std::filesystem::create_directories(cfg.output.directory, ec);
  if (ec)
    throw OutputError(fmt::format("cannot create output directory {}: {}",
                                  cfg.output.directory.string(), ec.message()));
}

void RunFileConsumer::on_start(const RunContext& run) {
  const config::Config& cfg = run.cfg;
  RunMetadata meta;
  meta.config_yaml = config::to_yaml(cfg);
  meta.finder = run.finder;
  meta.detector_type = cfg.detector.type;
  meta.source = fmt::format("slsReceiver stream {}", fmt::join(cfg.ingest.endpoints, " "));
  meta.pixel_type = cfg.detector.pixel_type;
  meta.backend = run.backend;
  if (cfg.reconstruction.enabled) meta.reconstruction = reconstruction_layout(cfg);
  meta.pixel_mask = cfg.mask.enabled();
  meta.cluster_energy = cfg.products.cluster_energy;
  meta.slice_frames = cfg.products.slice_frames;
  meta.modules = module_layout(cfg.detector);
  writer_.emplace(run.file, meta, cfg.output.overwrite);
  log::info("run {}: writing {} ({} backend)", run.run_index, run.file.string(), meta.backend);
}

void RunFileConsumer::on_pedestal(const PedestalState& pedestal) {
  writer_->write_start_pedestal(pedestal);
}

void RunFileConsumer::on_pixel_mask(std::span<const uint32_t> mask) {
  writer_->write_pixel_mask(mask);
}

void RunFileConsumer::on_batch(const FoundBatch& batch) {
  writer_->append(batch.clusters, batch.timestamps, {}, batch.masked);  // data frames: flags 0
  rows_.fetch_add(batch.clusters.n_frames());
}

void RunFileConsumer::on_rows(std::span<const FrameRow> rows) {
  writer_->append_empty_frames(rows);
  rows_.fetch_add(rows.size());
}

void RunFileConsumer::flush() { last_check_ = writer_->flush(); }

const StorageCheck& RunFileConsumer::check_storage() {
  last_check_ = writer_->check_storage();
  return last_check_;
}

void RunFileConsumer::on_end(const RunEnd& end) {
  if (!writer_) return;
  if (!end.end_reason.empty()) writer_->set_end_reason(end.end_reason);
  writer_->set_stream_stride(end.stream_stride);
  writer_->set_masked_clusters(end.masked_clusters);
  writer_->close(end.end_pedestal);
}

ConsumerStats RunFileConsumer::stats() const {
  ConsumerStats s;
  s.name = std::string(name());
  s.frames = rows_.load();
  return s;
}

}  // namespace glint::pipeline
