#include "glint/pipeline/reconstruction_consumer.hpp"

#include <exception>

#include "glint/log.hpp"

namespace glint::pipeline {

namespace {

recon::StageOptions stage_options(const config::Config& c, const gpu::TvTuning& tv_tuning) {
  const auto& r = c.reconstruction;
  recon::StageOptions o;
  o.width = static_cast<int>(c.detector.cols);
  o.height = static_cast<int>(c.detector.rows);
  o.frames_per_slice = r.frames_per_slice;
  o.slices = r.slices;
  o.weight = recon::parse_hit_weight(r.weight);
  o.forward = r.forward;
  o.solver.lambda = static_cast<float>(r.lambda);
  o.solver.outer = static_cast<int>(r.outer);
  o.solver.tv_inner = static_cast<int>(r.tv_inner);
  o.solver.warm_start = !r.cold_start;
  o.solver.nonneg = r.nonneg;
  o.solver.variant = tv::parse_variant(r.variant);
  o.backend.backend = recon::parse_backend(r.backend);
  o.backend.variant = o.solver.variant;
  o.backend.tv_tuning = tv_tuning;
  if (!c.finder.gpu_ids.empty()) o.backend.device = c.finder.gpu_ids.front();
  return o;
}

}  // namespace

void ReconstructionConsumer::on_start(const RunContext& run) {
  run_index_ = run.run_index;
  const auto& r = run.cfg.reconstruction;
  solve_partial_ = r.solve_partial;
  RunFileWriter* writer = run_file_.writer();
  auto sink = [writer](recon::StageResult&& res) {
    ReconstructionVolume v;
    v.first_frame = res.first_frame;
    v.last_frame = res.last_frame;
    v.nx = static_cast<uint32_t>(res.input.dims.nx);
    v.ny = static_cast<uint32_t>(res.input.dims.ny);
    v.nz = static_cast<uint32_t>(res.input.dims.nz);
    v.input = std::move(res.input.data);
    v.output = std::move(res.output.data);
    v.outer = static_cast<uint32_t>(res.report.outer);
    v.tv_inner = static_cast<uint32_t>(res.report.tv_inner);
    v.backend = res.backend;
    v.solve_seconds = res.report.seconds;
    // Appended to the run file in place; throws on failure: the stage counts it as failed.
    writer->add_reconstruction(v);
  };
  recon::StageOptions o;
  try {
    o = stage_options(run.cfg, tv_tuning_);
    owner_ = std::make_unique<recon::ReconstructionStage>(o, std::move(sink));
  } catch (const std::exception& e) {
    // Cluster finding goes on without it; stats and the file count it as failed.
    log::error("run {}: reconstruction disabled for this run: {}", run_index_, e.what());
    failed_at_start_.store(1);
    return;
  }
  stage_.store(owner_.get());
  log::info("run {}: reconstruction of {}x{}x{} volumes ({} frames per slice, {}, backend {})",
            run_index_, o.width, o.height, o.slices, o.frames_per_slice, r.forward, r.backend);
}

void ReconstructionConsumer::on_batch(const FoundBatch& batch) {
  if (!owner_) return;
  if (std::exception_ptr fatal = owner_->fatal_error()) std::rethrow_exception(fatal);
  // Accumulates only; a full volume goes to the stage's own thread (never waited for).
  owner_->add(batch.clusters);
}

void ReconstructionConsumer::on_end(const RunEnd& end) {
  // The worker's queue (full volumes, each appended to the file as it is solved) must reach the
  // file before it closes; the partial volume is solved only when configured (not after an
  // abort): otherwise its frames are counted in `frames` but in no volume.
  if (owner_ && solve_partial_ && !end.aborted && !end.failed) owner_->flush();
  if (owner_) owner_->wait_idle();
  const recon::StageStats st = stage_stats();
  ReconstructionSummary sum;
  sum.frames = st.frames;
  sum.volumes_done = st.volumes_done;
  sum.volumes_dropped = st.volumes_dropped;
  sum.volumes_failed = st.volumes_failed;
  if (RunFileWriter* w = run_file_.writer()) w->set_reconstruction_summary(sum);
  log::info("run {}: reconstruction: {} volumes done, {} dropped, {} failed", run_index_,
            st.volumes_done, st.volumes_dropped, st.volumes_failed);
  if (owner_ && !end.failed)
    if (std::exception_ptr fatal = owner_->fatal_error()) std::rethrow_exception(fatal);
}

recon::StageStats ReconstructionConsumer::stage_stats() const {
  recon::StageStats st;
  if (recon::ReconstructionStage* s = stage_.load()) st = s->stats();
  st.volumes_failed += failed_at_start_.load();
  return st;
}

ConsumerStats ReconstructionConsumer::stats() const {
  const recon::StageStats st = stage_stats();
  ConsumerStats s;
  s.name = std::string(name());
  s.frames = st.frames;
  s.dropped = st.volumes_dropped;
  s.failed = st.volumes_failed;
  return s;
}

}  // namespace glint::pipeline
