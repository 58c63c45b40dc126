#include "glint/pipeline/acquisition.hpp"

#include <pthread.h>

#include <new>

#include <fmt/format.h>

#include "glint/gpu/error.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/clust_file_consumer.hpp"
#include "glint/pipeline/detector_pixels.hpp"
#include "glint/pipeline/pedestal_source.hpp"
#include "glint/pipeline/preview_publisher.hpp"
#include "glint/pipeline/finder_stage.hpp"
#include "glint/pipeline/frame_sequencer.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/pipeline/reconstruction_consumer.hpp"
#include "glint/pipeline/run_file_consumer.hpp"

namespace glint::pipeline {

namespace {

FinderParams finder_params(const config::Config& c) {
  FinderParams p;
  p.shape = FrameShape{c.detector.rows, c.detector.cols};
  p.cluster_size = c.finder.cluster_size;
  p.n_sigma = c.finder.n_sigma;
  p.pedestal_window = c.pedestal.window;
  return with_detector_pixels(c, p);
}

FinderOptions finder_options(const config::Config& c, const gpu::FindTuning& tuning) {
  FinderOptions o;
  o.backend = parse_backend(c.finder.backend);
  o.threads = c.finder.threads;
  o.batch_frames = c.finder.batch_frames;
  o.streams = c.finder.streams;
  o.gpu_ids = c.finder.gpu_ids;
  o.tuning = tuning;
  return o;
}

}  // namespace

Acquisition::Acquisition(const config::Config& cfg, uint64_t run_index,
                         std::optional<PedestalState> previous_pedestal,
                         FinderFactory make_finder, RunTuning tuning,
                         std::shared_ptr<Ingest> ingest,
                         std::shared_ptr<PreviewPublisher> preview)
    : cfg_(cfg),
      run_index_(run_index),
      file_(run_file_path(cfg.output.directory, cfg.output.run_name, run_index)),
      previous_pedestal_(std::move(previous_pedestal)),
      make_finder_(make_finder ? std::move(make_finder) : FinderFactory(pipeline::make_finder)),
      tuning_(std::move(tuning)),
      started_(std::chrono::steady_clock::now()),
      source_(cfg_, std::move(ingest)),
      preprocessing_(cfg_),
      copier_(copy_threads(cfg_.ingest.copy_threads), cfg_.detector, source_.assembler(),
              preprocessing_) {
  counters_.count_modules(cfg_.detector.n_modules());
  // The run's consumers, in the order each batch reaches them (and the reverse at the end).
  run_file_ = &consumers_.add(std::make_unique<RunFileConsumer>());
  if (cfg_.output.clust) consumers_.add(std::make_unique<ClustFileConsumer>());
  if (cfg_.reconstruction.enabled)
    recon_ = &consumers_.add(std::make_unique<ReconstructionConsumer>(*run_file_, tuning_.tv));
  // The live view before the products: each batch reaches it first, and it ends after them, so
  // that its final update shows the products' final sums.
  if (preview && cfg_.preview.enabled)
    consumers_.add(std::make_unique<PreviewConsumer>(
        std::move(preview), [this] { return products_->preview_images(); }));
  // Products go into the run file: registered after it, so they end (and hand over) first.
  products_ = &consumers_.add(std::make_unique<ProductsConsumer>(
      [rf = run_file_] { return rf->writer(); }));
  thread_ = std::jthread([this] { run(); });
}

Acquisition::~Acquisition() {
  abort();
  if (thread_.joinable()) thread_.join();
}

void Acquisition::stop(std::string reason) {
  states_.request_stop(std::move(reason));
  source_.wake();
}

void Acquisition::abort() {
  states_.request_abort();
  source_.wake();
}

std::optional<PedestalState> Acquisition::start_pedestal() const {
  std::lock_guard lock(mu_);
  return start_pedestal_;
}
std::optional<PedestalState> Acquisition::end_pedestal() const {
  std::lock_guard lock(mu_);
  return end_pedestal_;
}

RunStats Acquisition::stats() const {
  RunStats s;
  s.state = states_.state();
  s.run_index = run_index_;
  s.file = file_.string();
  s.error = states_.error();
  s.fatal = states_.fatal();
  s.end_reason = states_.end_reason();
  s.disk_free_bytes = disk_free_.load();
  s.disk_reserve_bytes = disk_reserve_.load();
  {
    std::lock_guard lock(mu_);
    s.backend = backend_;
  }
  s.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  const SourceStats src = source_.stats();
  const IngestCounters& ic = src.ingest;
  s.messages = ic.messages;
  s.bytes = ic.bytes;
  s.end_messages = ic.end_messages;
  s.stray_ends = ic.stray_ends;
  s.bad = ic.bad;
  s.bad_total = ic.bad_total();
  const AssemblerCounters& ac = src.assembler;
  s.parts = ac.parts;
  s.frames_received = ac.frames_complete + ac.frames_incomplete;
  s.late_parts = ac.late_parts;
  s.restarts = ic.restarts;
  s.missing_unwritten = counters_.missing_unwritten.load();
  s.stream_stride = counters_.stream_stride.load();
  s.dropped = ac.frames_dropped;
  s.pending_images = ac.pending;
  s.queued_images = ac.ready;
  s.staging_total = ac.pool;
  s.staging_used = ac.pool - ac.free;
  s.frames_processed = counters_.frames_processed.load();
  s.dark_frames = counters_.dark_frames.load();
  s.data_frames = counters_.data_frames.load();
  s.incomplete = counters_.incomplete.load();
  s.missing = counters_.missing.load();
  s.clusters = counters_.clusters.load();
  s.masked_clusters = counters_.masked_clusters.load();
  for (std::size_t k = 0; k < counters_.modules; ++k)
    s.module_clusters.push_back(counters_.module_clusters[k].load());
  s.masked_pixels = masked_pixels_.load();
  s.rows_written = counters_.rows_written.load();
  s.recon_enabled = cfg_.reconstruction.enabled;
  if (recon_) {
    const recon::StageStats rs = recon_->stage_stats();
    s.recon_frames = rs.frames;
    s.recon_volumes_done = rs.volumes_done;
    s.recon_volumes_dropped = rs.volumes_dropped;
    s.recon_volumes_failed = rs.volumes_failed;
  }
  s.consumers = consumers_.stats();
  return s;
}

void Acquisition::run() {
  pthread_setname_np(pthread_self(), "glint-run");
  try {
    start();
    acquire();
    finish();
  } catch (const gpu::CudaError& e) {
    fail(e.what(), e.sticky());
  } catch (const std::bad_alloc&) {
    fail(fmt::format("out of memory setting up or running the run ({} x {} images; the run "
                     "needs about {}): lower detector.rows/cols, ingest.queue_frames, "
                     "ingest.reorder_frames or finder.batch_frames, or free memory",
                     cfg_.detector.rows, cfg_.detector.cols,
                     config::run_memory(cfg_).describe()),
         false);
  } catch (const std::exception& e) {
    fail(e.what(), false);
  }
  states_.set_done();
}

void Acquisition::start() {
  prepare_output_directory(cfg_);
  const FrameShape shape{cfg_.detector.rows, cfg_.detector.cols};
  if (!cfg_.mask.file.empty()) {
    try {
      mask_bits_ = read_mask_file(cfg_.mask.file, shape);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("mask.file: ") + e.what());
    }
  } else if (cfg_.mask.from_dark) {
    mask_bits_.assign(shape.pixels(), 0);
  }
  std::unique_ptr<ClusterFinder> finder = make_module_finders(
      finder_params(cfg_), detector_modules(cfg_.detector),
      finder_options(cfg_, tuning_.find), make_finder_);
  const std::string backend = finder->description();
  {
    std::lock_guard lock(mu_);
    backend_ = backend;
  }
  const FinderParams params = finder->params();
  finder_ = std::make_unique<FinderStage>(std::move(finder), copier_, consumers_, counters_);
  if (cfg_.mask.from_dark && cfg_.detector.type == "jungfrau") {
    dark_gains_ = std::make_unique<DarkGainSwitches>(shape);
    finder_->count_dark_gains(dark_gains_.get());
  }
  consumers_.on_start(RunContext{cfg_, run_index_, file_, params, backend});

  uint64_t dark_frames = cfg_.pedestal.dark_frames;
  if (auto p = initial_pedestal(cfg_, run_index_, previous_pedestal_)) {
    finder_->finder().load_pedestal(*p);
    dark_frames = 0;
  }
  sequencer_ = std::make_unique<FrameSequencer>(
      run_index_, dark_frames, source_, *finder_, counters_, [this] { begin_data(); },
      cfg_.run.max_missing_rows, [this] {
        states_.request_stop_overriding("missing_rows");
        source_.wake();
      });
  sequencer_->take_dark_by_marker(cfg_.pedestal.dark_marker == "frame_mode");
  if (dark_frames == 0) sequencer_->start_data();
  source_.connect();
  states_.set_started();
}

void Acquisition::begin_data() {
  // The dark phase is over: record the pedestal data taking starts from.
  PedestalState p = finder_->finder().pedestal();
  if (cfg_.mask.enabled()) set_mask(p);
  consumers_.on_pedestal(p);
  // Calibrated frames: the ADC pedestal per gain stage is fixed by now; the run file keeps it.
  if (const auto adc = finder_->finder().calibration_pedestal(); !adc.empty())
    if (RunFileWriter* w = run_file_->writer()) w->write_calibration_pedestal(adc);
  {
    std::lock_guard lock(mu_);
    start_pedestal_ = std::move(p);
  }
  states_.advance(RunState::pedestal, RunState::acquiring);
  log::info("run {}: pedestal ready, acquiring", run_index_);
}

void Acquisition::set_mask(const PedestalState& dark) {
  const FrameShape shape = dark.shape;
  if (cfg_.mask.from_dark) {
    finder_->count_dark_gains(nullptr);
    const DarkMaskCounts n =
        flag_from_dark(mask_bits_, dark, cfg_.mask.noisy_factor, dark_gains_.get());
    log::info("run {}: mask from the dark pedestal: {} dead, {} noisy (noise > {} x the median "
              "{:.3f}){}",
              run_index_, n.dead, n.noisy, cfg_.mask.noisy_factor, n.median_noise,
              dark_gains_ ? fmt::format(", {} out of G0 in {} dark frames", n.gain_switching,
                                        dark_gains_->frames())
                          : "");
  }
  MaskFilter filter(mask_bits_, shape);
  masked_pixels_.store(filter.masked_pixels());
  log::info("run {}: pixel mask: {} of {} pixels masked; clusters centred on them are removed",
            run_index_, filter.masked_pixels(), shape.pixels());
  consumers_.on_pixel_mask(mask_bits_);
  finder_->set_mask(std::move(filter));
}

void Acquisition::flush() {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  // While results come back, the file is flushed with what they hold. A drain would hand the
  // finder a partial batch and wait for every batch in flight and its consumers: with large
  // images (a JUNGFRAU 4M's batches hold seconds of frames) the run stood still for up to half a
  // second, and the images piled up meanwhile. When nothing came back since the last flush (a
  // slow stream, a pause), the finder is drained, so that what was received reaches the file.
  if (counters_.rows_written.load() == rows_at_flush_) finder_->drain();
  rows_at_flush_ = counters_.rows_written.load();
  const auto t1 = clock::now();
  consumers_.flush();  // the run file's writer flushes: readers see everything up to here
  const auto t2 = clock::now();
  storage_checked(run_file_->last_storage_check());
  const auto ms = [](auto a, auto b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  log::debug("run {}: flush: drain {:.1f} ms, consumers {:.1f} ms, {} images waiting",
             run_index_, ms(t0, t1), ms(t1, t2), source_.assembler().counters().ready);
}

void Acquisition::storage_checked(const StorageCheck& check) {
  disk_free_.store(check.free_bytes);
  disk_reserve_.store(check.reserve_bytes);
  if (check.result == StorageCheck::Result::lost) throw OutputError(check.message);
  if (check.result != StorageCheck::Result::disk_low || states_.abort_requested()) return;
  // Ends now, cleanly: what is still queued is not written, the space is kept for the close.
  log::warn("run {}: {}: ending the run (disk_low)", run_index_, check.message);
  states_.request_stop("disk_low");
  states_.request_abort();
  source_.wake();
}

void Acquisition::acquire() {
  using clock = std::chrono::steady_clock;
  uint64_t frames_seen = 0;  // rows for received images, towards run.max_frames
  auto last_flush = clock::now(), last_check = last_flush;
  uint64_t parts_seen = 0;  // data parts accepted by the assembler, and when that last changed
  auto last_data = last_flush;
  while (!states_.abort_requested()) {
    const auto now = clock::now();
    if (const uint64_t parts = source_.assembler().counters().parts; parts != parts_seen) {
      parts_seen = parts;
      last_data = now;
    }
    // End conditions other than the frame limit.
    if (!states_.stop_requested()) {
      if (cfg_.run.max_seconds > 0 &&
          std::chrono::duration<double>(now - started_).count() >= cfg_.run.max_seconds)
        stop("time limit");
      else if (std::optional<std::string> why = source_.ended(now))
        stop(*why);
      else if (cfg_.run.idle_end_seconds > 0 && parts_seen > 0 &&
               std::chrono::duration<double>(now - last_data).count() >=
                   cfg_.run.idle_end_seconds) {
        log::warn("run {}: no data for {} s (run.idle_end_seconds): ending the run (the end "
                  "message was lost, or the acquisition stalled)",
                  run_index_, cfg_.run.idle_end_seconds);
        stop("idle");
      }
    }
    if (states_.stop_requested() && states_.state() != RunState::finishing) {
      states_.to(RunState::finishing);
      source_.stop_input();  // no new input; what is queued gets written
    }
    if (now - last_flush >= std::chrono::milliseconds(cfg_.output.flush_interval_ms)) {
      flush();
      last_flush = last_check = now;
    } else if (now - last_check >= StorageGuard::kCheckInterval) {
      storage_checked(run_file_->check_storage());
      last_check = now;
    }

    FramePtr f = source_.pop(std::chrono::milliseconds(20));
    if (!f) {
      finder_->submit();  // nothing queued: hand what we have to the finder now (low latency)
      if (states_.state() != RunState::finishing) continue;
      source_.flush_pending();
      f = source_.pop(std::chrono::milliseconds(0));
      if (!f) break;
    }
    sequencer_->route(std::move(f));
    ++frames_seen;
    if (cfg_.run.max_frames > 0 && frames_seen >= cfg_.run.max_frames &&
        !states_.stop_requested())
      stop("frame limit");
  }
}

void Acquisition::finish() {
  source_.stop();
  const bool aborted = states_.abort_requested();
  if (!aborted) {
    finder_->drain();
    sequencer_->finish();
  } else {
    finder_->discard();
  }
  finder_->detach();
  PedestalState end = finder_->finder().pedestal();
  consumers_.on_end(RunEnd{&end, aborted, false, states_.end_reason(),
                          counters_.stream_stride.load(), counters_.masked_clusters.load()});
  {
    std::lock_guard lock(mu_);
    end_pedestal_ = std::move(end);
  }
  states_.end();
  const auto s = stats();
  log::info("run {} ended ({}): {} frames ({} dark, {} data, {} incomplete, {} missing, {} "
            "dropped), {} clusters{}, {} bad messages{} -> {}",
            run_index_, s.end_reason, s.rows_written, s.dark_frames, s.data_frames, s.incomplete,
            s.missing, s.dropped, s.clusters,
            cfg_.mask.enabled() ? fmt::format(" ({} masked)", s.masked_clusters) : "",
            s.bad_total,
            s.stream_stride > 1 ? fmt::format(", stream stride {}", s.stream_stride) : "",
            file_.string());
}

void Acquisition::fail(const std::string& why, bool fatal) {
  const std::string error =
      fatal ? why + " (sticky: the device cannot be used again in this process)" : why;
  states_.fail(error, fatal);
  log::error("run {}: {}", run_index_, error);
  source_.stop();
  copier_.wait();
  // Results of batches still in flight are dropped with the run.
  if (finder_) finder_->detach();
  // Every consumer is ended (the files closed, without the end pedestal); what fails here is
  // logged by the chain.
  consumers_.on_end(RunEnd{nullptr, states_.abort_requested(), true, states_.end_reason(),
                          counters_.stream_stride.load(), counters_.masked_clusters.load()});
}

}  // namespace glint::pipeline
