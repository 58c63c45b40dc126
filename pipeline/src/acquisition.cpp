#include "glint/pipeline/acquisition.hpp"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "glint/gpu/gpu_finder.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/ingest.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/recon/reconstruction_stage.hpp"

namespace glint::pipeline {

std::string_view to_string(RunState s) {
  switch (s) {
    case RunState::idle: return "idle";
    case RunState::pedestal: return "pedestal";
    case RunState::acquiring: return "acquiring";
    case RunState::finishing: return "finishing";
    case RunState::error: return "error";
  }
  return "unknown";
}

namespace {

/// A frame number jump larger than this is recorded as this many missing rows plus a warning
/// (a restarted detector counter must not fill the disk with empty rows).
constexpr uint64_t kMaxGapRows = 1'000'000;

FinderParams finder_params(const config::Config& c) {
  FinderParams p;
  p.shape = FrameShape{c.detector.rows, c.detector.cols};
  p.cluster_size = c.finder.cluster_size;
  p.n_sigma = c.finder.n_sigma;
  p.pedestal_window = c.pedestal.window;
  return p;
}

FinderOptions finder_options(const config::Config& c) {
  FinderOptions o;
  o.backend = parse_backend(c.finder.backend);
  o.threads = c.finder.threads;
  o.batch_frames = c.finder.batch_frames;
  o.streams = c.finder.streams;
  o.gpu_ids = c.finder.gpu_ids;
  return o;
}

recon::StageOptions stage_options(const config::Config& c) {
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
  if (!c.finder.gpu_ids.empty()) o.backend.device = c.finder.gpu_ids.front();
  return o;
}

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

/// Copies assembled images into the finder's input (the GPU's pinned staging or the batch
/// buffer) on a few threads, so that the run's thread only orders frames and hands batches on;
/// each image goes back to the assembler's pool as soon as it is copied. With no threads the
/// copies happen on the caller's thread.
class FrameCopier {
 public:
  FrameCopier(unsigned threads, const config::DetectorConfig& det, FrameAssembler& assembler)
      : det_(det), assembler_(assembler) {
    for (unsigned i = 0; i < threads; ++i)
      threads_.emplace_back([this, i](std::stop_token st) {
        pthread_setname_np(pthread_self(), fmt::format("glint-copy{}", i).substr(0, 15).c_str());
        loop(st);
      });
  }
  ~FrameCopier() {
    for (auto& t : threads_) t.request_stop();
    cv_.notify_all();
  }

  void copy(FramePtr f, std::span<uint16_t> dst) {
    if (threads_.empty()) {
      f->write_to(det_, dst);
      assembler_.release(std::move(f));
      return;
    }
    {
      std::lock_guard lock(mu_);
      tasks_.push_back(Task{std::move(f), dst});
      ++outstanding_;
    }
    cv_.notify_one();
  }

  /// Returns once every copy handed in so far is done.
  void wait() {
    if (threads_.empty()) return;
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return outstanding_ == 0; });
  }

 private:
  struct Task {
    FramePtr frame;
    std::span<uint16_t> dst;
  };
  void loop(std::stop_token st) {
    while (true) {
      Task t;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return st.stop_requested() || !tasks_.empty(); });
        if (tasks_.empty()) return;
        t = std::move(tasks_.front());
        tasks_.pop_front();
      }
      t.frame->write_to(det_, t.dst);
      assembler_.release(std::move(t.frame));
      std::lock_guard lock(mu_);
      if (--outstanding_ == 0) done_cv_.notify_all();
    }
  }

  const config::DetectorConfig det_;
  FrameAssembler& assembler_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<Task> tasks_;
  std::size_t outstanding_ = 0;
  std::vector<std::jthread> threads_;  // last: stopped and joined first
};

/// Copy threads: as configured; "auto": none on small machines (the copy stays on the run's
/// thread), up to 4.
unsigned copy_threads(int configured) {
  if (configured >= 0) return static_cast<unsigned>(configured);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw >= 8 ? 4 : hw >= 4 ? 2 : 0;
}

}  // namespace

struct Acquisition::Worker {
  FrameAssembler assembler;
  // Connected once the finder and the file are ready: the publisher's subscriber appears only
  // when glint can take data. Published through an atomic for stats() on other threads.
  std::unique_ptr<Ingest> ingest_owner;
  std::atomic<Ingest*> ingest{nullptr};
  FrameCopier copier;
  std::unique_ptr<ClusterFinder> finder;
  std::optional<RunFileWriter> writer;
  // After the writer: destroyed (waiting for its worker) before the writer its results go to.
  std::unique_ptr<recon::ReconstructionStage> stage_owner;
  std::atomic<recon::ReconstructionStage*> stage{nullptr};

  // The batch handed to the finder: either dark frames or data frames, consecutive.
  enum class Kind { none, dark, data } kind = Kind::none;
  std::size_t pixels;
  std::size_t capacity;
  std::vector<uint16_t> batch;  // frames for the CPU finder
  std::vector<uint64_t> numbers, timestamps;
  std::vector<FrameRow> rows;
  ClusterTable table;

  // GPU streaming: frames are copied straight into the engine's pinned staging, batches are
  // submitted without waiting, and results come back (in frame order) through the sink.
  gpu::GpuClusterFinder* gpu = nullptr;
  std::span<uint16_t> staging;
  std::deque<std::vector<uint64_t>> in_flight;  // timestamps of each submitted batch

  Worker(const config::Config& cfg)
      : assembler(cfg.detector, cfg.ingest),
        copier(copy_threads(cfg.ingest.copy_threads), cfg.detector, assembler),
        pixels(std::size_t{cfg.detector.rows} * cfg.detector.cols),
        capacity(static_cast<std::size_t>(cfg.finder.batch_frames)),
        table(cfg.finder.cluster_size) {
    numbers.reserve(capacity);
    timestamps.reserve(capacity);
  }
};

Acquisition::Acquisition(const config::Config& cfg, uint64_t run_index,
                         std::optional<PedestalState> previous_pedestal)
    : cfg_(cfg),
      run_index_(run_index),
      file_(run_file_path(cfg.output.directory, cfg.output.run_name, run_index)),
      previous_pedestal_(std::move(previous_pedestal)),
      started_(std::chrono::steady_clock::now()) {
  w_ = std::make_unique<Worker>(cfg_);
  thread_ = std::jthread([this](std::stop_token st) { run(st); });
}

Acquisition::~Acquisition() {
  abort();
  if (thread_.joinable()) thread_.join();
}

void Acquisition::stop(std::string reason) {
  {
    std::lock_guard lock(mu_);
    if (end_reason_.empty()) end_reason_ = std::move(reason);
  }
  stop_requested_.store(true);
  w_->assembler.wake();
}

void Acquisition::abort() {
  {
    std::lock_guard lock(mu_);
    if (end_reason_.empty()) end_reason_ = "abort";
  }
  abort_requested_.store(true);
  stop_requested_.store(true);
  w_->assembler.wake();
}

bool Acquisition::wait(std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!done_.load()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::optional<PedestalState> Acquisition::start_pedestal() const {
  std::lock_guard lock(mu_);
  return start_pedestal_;
}
std::optional<PedestalState> Acquisition::end_pedestal() const {
  std::lock_guard lock(mu_);
  return end_pedestal_;
}

void Acquisition::fail(const std::string& why) {
  {
    std::lock_guard lock(mu_);
    if (error_.empty()) error_ = why;
  }
  log::error("run {}: {}", run_index_, why);
  state_.store(RunState::error);
}

/// After each flush: a lost file is an error; low space ends the run now, cleanly (what is
/// queued is not written: the space is kept for closing the file).
void Acquisition::storage_checked(const StorageCheck& check) {
  disk_free_.store(check.free_bytes);
  disk_reserve_.store(check.reserve_bytes);
  if (check.result == StorageCheck::Result::lost) throw OutputError(check.message);
  if (check.result != StorageCheck::Result::disk_low || abort_requested_.load()) return;
  log::warn("run {}: {}: ending the run (disk_low)", run_index_, check.message);
  {
    std::lock_guard lock(mu_);
    end_reason_ = "disk_low";
  }
  abort_requested_.store(true);
  stop_requested_.store(true);
}

RunStats Acquisition::stats() const {
  RunStats s;
  s.state = state_.load();
  s.run_index = run_index_;
  s.file = file_.string();
  {
    std::lock_guard lock(mu_);
    s.error = error_;
    s.backend = backend_;
    s.end_reason = end_reason_;
  }
  s.disk_free_bytes = disk_free_.load();
  s.disk_reserve_bytes = disk_reserve_.load();
  s.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  IngestCounters ic;
  if (Ingest* in = w_->ingest.load()) ic = in->counters();
  s.messages = ic.messages;
  s.bytes = ic.bytes;
  s.end_messages = ic.end_messages;
  s.bad = ic.bad;
  s.bad_total = ic.bad_total();
  const auto ac = w_->assembler.counters();
  s.parts = ac.parts;
  s.frames_received = ac.frames_complete + ac.frames_incomplete;
  s.late_parts = ac.late_parts;
  s.dropped = ac.frames_dropped;
  s.pending_images = ac.pending;
  s.queued_images = ac.ready;
  s.staging_total = ac.pool;
  s.staging_used = ac.pool - ac.free;
  s.frames_processed = frames_processed_.load();
  s.dark_frames = dark_frames_.load();
  s.data_frames = data_frames_.load();
  s.incomplete = incomplete_.load();
  s.missing = missing_.load();
  s.clusters = clusters_.load();
  s.rows_written = rows_written_.load();
  s.recon_enabled = cfg_.reconstruction.enabled;
  if (recon::ReconstructionStage* st = w_->stage.load()) {
    const auto rs = st->stats();
    s.recon_frames = rs.frames;
    s.recon_volumes_done = rs.volumes_done;
    s.recon_volumes_dropped = rs.volumes_dropped;
    s.recon_volumes_failed = rs.volumes_failed;
  }
  s.recon_volumes_failed += recon_failed_at_start_.load();
  return s;
}

void Acquisition::start_reconstruction() {
  Worker& w = *w_;
  const auto& r = cfg_.reconstruction;
  RunFileWriter* writer = &*w.writer;
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
    o = stage_options(cfg_);
    w.stage_owner = std::make_unique<recon::ReconstructionStage>(o, std::move(sink));
  } catch (const std::exception& e) {
    // Cluster finding goes on without it; stats and the file count it as failed.
    log::error("run {}: reconstruction disabled for this run: {}", run_index_, e.what());
    recon_failed_at_start_.store(1);
    return;
  }
  w.stage.store(w.stage_owner.get());
  log::info("run {}: reconstruction of {}x{}x{} volumes ({} frames per slice, {}, backend {})",
            run_index_, o.width, o.height, o.slices, o.frames_per_slice, r.forward, r.backend);
}

void Acquisition::finish_reconstruction() {
  Worker& w = *w_;
  recon::StageStats st;
  if (w.stage_owner) {
    w.stage_owner->wait_idle();
    st = w.stage_owner->stats();
  }
  st.volumes_failed += recon_failed_at_start_.load();
  ReconstructionSummary sum;
  sum.frames = st.frames;
  sum.volumes_done = st.volumes_done;
  sum.volumes_dropped = st.volumes_dropped;
  sum.volumes_failed = st.volumes_failed;
  w.writer->set_reconstruction_summary(sum);
  log::info("run {}: reconstruction: {} volumes done, {} dropped, {} failed", run_index_,
            st.volumes_done, st.volumes_dropped, st.volumes_failed);
}

void Acquisition::run(std::stop_token) {
  pthread_setname_np(pthread_self(), "glint-run");
  Worker& w = *w_;
  const auto& cfg = cfg_;
  using clock = std::chrono::steady_clock;
  uint64_t dark_remaining = cfg.pedestal.dark_frames;
  std::optional<uint64_t> next_expected;
  uint64_t frames_seen = 0;  // rows for received images, towards run.max_frames
  auto last_flush = clock::now(), last_check = last_flush;
  std::optional<clock::time_point> first_end_at;

  auto count_written = [&](const ClusterTable& t) {
    // Accumulates only; a full volume goes to the stage's own thread (never waited for).
    if (w.stage_owner) w.stage_owner->add(t);
    clusters_.fetch_add(t.n_clusters());
    data_frames_.fetch_add(t.n_frames());
    frames_processed_.fetch_add(t.n_frames());
    rows_written_.fetch_add(t.n_frames());
  };

  // Hands the current batch to the finder (the GPU's results may arrive later, see drain).
  auto flush_batch = [&] {
    w.copier.wait();  // the batch's pixels are all in place
    const std::size_t n = w.numbers.size();
    if (n == 0) return;
    if (w.kind == Worker::Kind::dark) {
      if (w.gpu) {
        w.staging = {};
        w.gpu->submit_dark(n);  // queued on the GPU; the run goes on at once
      } else {
        w.finder->push_dark(std::span<const uint16_t>(w.batch.data(), n * w.pixels));
      }
      w.rows.clear();
      for (std::size_t i = 0; i < n; ++i)
        w.rows.push_back(FrameRow{w.numbers[i], w.timestamps[i], 0, 0, kFlagDark});
      w.writer->append_empty_frames(w.rows);
      dark_frames_.fetch_add(n);
      frames_processed_.fetch_add(n);
      rows_written_.fetch_add(n);
    } else if (w.gpu) {
      w.in_flight.push_back(w.timestamps);
      w.staging = {};
      w.gpu->submit(w.numbers);
    } else {
      w.table.clear();
      w.finder->find(std::span<const uint16_t>(w.batch.data(), n * w.pixels), w.numbers, w.table);
      w.writer->append(w.table, w.timestamps);  // data frames: flags 0
      count_written(w.table);
    }
    w.numbers.clear();
    w.timestamps.clear();
    w.kind = Worker::Kind::none;
  };

  // Everything handed to the finder is written (before rows that must follow it).
  auto drain = [&] {
    flush_batch();
    if (w.gpu) w.gpu->flush();
  };

  // Where the next frame goes: the GPU's pinned staging, or the batch buffer.
  auto frame_slot = [&](std::size_t i) -> uint16_t* {
    if (!w.gpu) return w.batch.data() + i * w.pixels;
    if (w.staging.empty()) w.staging = w.gpu->staging();  // may wait for that slot's old batch
    return w.staging.data() + i * w.pixels;
  };

  auto begin_data = [&] {
    // The dark phase is over: record the pedestal data taking starts from.
    PedestalState p = w.finder->pedestal();
    w.writer->write_start_pedestal(p);
    {
      std::lock_guard lock(mu_);
      start_pedestal_ = std::move(p);
    }
    if (state_.load() == RunState::pedestal) state_.store(RunState::acquiring);
    log::info("run {}: pedestal ready, acquiring", run_index_);
  };

  auto write_empty = [&](std::span<const FrameRow> rows) {
    drain();
    w.writer->append_empty_frames(rows);
    rows_written_.fetch_add(rows.size());
  };

  // Rows for the frame numbers in [from, to) that never reached the finder.
  auto write_gap = [&](uint64_t from, uint64_t to) {
    auto dropped = w.assembler.take_dropped(to);
    if (from >= to) return;
    uint64_t n = to - from;
    if (n > kMaxGapRows) {
      log::warn("run {}: frame number jumps from {} to {}; recording the first {} as missing", run_index_,
                from - 1, to, kMaxGapRows);
      n = kMaxGapRows;
    }
    std::vector<FrameRow> rows;
    rows.reserve(std::min<uint64_t>(n, 65536));
    std::size_t di = 0;
    uint64_t n_missing = 0, n_dropped = 0;
    for (uint64_t fn = from; fn < from + n; ++fn) {
      while (di < dropped.size() && dropped[di] < fn) ++di;
      const bool was_dropped = di < dropped.size() && dropped[di] == fn;
      rows.push_back(FrameRow{fn, 0, 0, 0, was_dropped ? kFlagDropped : kFlagMissing});
      (was_dropped ? n_dropped : n_missing)++;
      if (rows.size() == 65536) {
        write_empty(rows);
        rows.clear();
      }
    }
    if (!rows.empty()) write_empty(rows);
    missing_.fetch_add(n_missing);
    dropped_rows_.fetch_add(n_dropped);
  };

  try {
    if (cfg.output.directory.empty()) throw OutputError("output.directory is empty");
    std::error_code ec;
    std::filesystem::create_directories(cfg.output.directory, ec);
    if (ec)
      throw OutputError(fmt::format("cannot create output directory {}: {}",
                                    cfg.output.directory.string(), ec.message()));
    w.finder = make_finder(finder_params(cfg), finder_options(cfg));
    w.gpu = dynamic_cast<gpu::GpuClusterFinder*>(w.finder.get());
    std::size_t capacity = w.capacity;
    if (!w.gpu) w.batch.resize(capacity * w.pixels);  // the GPU engine has its own staging
    if (w.gpu) {
      capacity = static_cast<std::size_t>(w.gpu->batch_frames());
      w.gpu->set_sink([&](const gpu::GpuBatchView& v) {
        // Batches come back in submission order.
        const std::vector<uint64_t> timestamps = std::move(w.in_flight.front());
        w.in_flight.pop_front();
        w.table.clear();
        gpu::append_clusters(w.table, v);
        w.writer->append(w.table, timestamps);
        count_written(w.table);
      });
    }
    {
      std::lock_guard lock(mu_);
      backend_ = w.finder->description();
    }
    RunMetadata meta;
    meta.config_yaml = config::to_yaml(cfg);
    meta.finder = w.finder->params();
    meta.detector_type = cfg.detector.type;
    meta.source = fmt::format("slsReceiver stream {}", fmt::join(cfg.ingest.endpoints, " "));
    meta.pixel_type = cfg.detector.pixel_type;
    meta.backend = w.finder->description();
    if (cfg.reconstruction.enabled) meta.reconstruction = reconstruction_layout(cfg);
    w.writer.emplace(file_, meta, cfg.output.overwrite);
    log::info("run {}: writing {} ({} backend)", run_index_, file_.string(), meta.backend);
    if (cfg.reconstruction.enabled) start_reconstruction();

    if (cfg.pedestal.keep_previous && previous_pedestal_ &&
        previous_pedestal_->shape == FrameShape{cfg.detector.rows, cfg.detector.cols} &&
        previous_pedestal_->window == cfg.pedestal.window) {
      w.finder->load_pedestal(*previous_pedestal_);
      dark_remaining = 0;
      log::info("run {}: keeping the previous run's pedestal", run_index_);
    } else if (cfg.pedestal.keep_previous) {
      log::info("run {}: no usable previous pedestal; taking {} dark frames", run_index_, dark_remaining);
    }
    if (dark_remaining == 0) begin_data();
    else state_.store(RunState::pedestal);
    w.ingest_owner = std::make_unique<Ingest>(cfg, w.assembler);
    w.ingest.store(w.ingest_owner.get());

    while (true) {
      if (abort_requested_.load()) break;
      const auto now = clock::now();
      // End conditions other than the end message.
      if (!stop_requested_.load()) {
        if (cfg.run.max_seconds > 0 &&
            std::chrono::duration<double>(now - started_).count() >= cfg.run.max_seconds)
          stop("time limit");
        else if (w.ingest.load()->all_ended())
          stop("end of acquisition");
        else if (w.ingest.load()->any_ended()) {
          if (!first_end_at) first_end_at = now;
          else if (now - *first_end_at >= std::chrono::milliseconds(cfg.ingest.part_timeout_ms))
            stop("end of acquisition (not on every port)");
        }
      }
      if (stop_requested_.load() && state_.load() != RunState::finishing) {
        state_.store(RunState::finishing);
        w.ingest.load()->stop();  // no new input; what is queued gets written
        w.assembler.flush_pending();
      }
      if (now - last_flush >= std::chrono::milliseconds(cfg.output.flush_interval_ms)) {
        drain();
        storage_checked(w.writer->flush());
        last_flush = last_check = now;
      } else if (now - last_check >= StorageGuard::kCheckInterval) {
        storage_checked(w.writer->check_storage());
        last_check = now;
      }

      FramePtr f = w.assembler.pop(std::chrono::milliseconds(20));
      if (!f) {
        flush_batch();  // nothing queued: hand what we have to the finder now (low latency)
        if (state_.load() == RunState::finishing) {
          w.assembler.flush_pending();
          f = w.assembler.pop(std::chrono::milliseconds(0));
          if (!f) break;
        } else {
          continue;
        }
      }
      const uint64_t fn = f->frame_number;
      if (next_expected && fn > *next_expected) write_gap(*next_expected, fn);
      else if (!next_expected) (void)w.assembler.take_dropped(fn);
      next_expected = fn + 1;

      if (f->incomplete) {
        const FrameRow row{fn, f->timestamp, 0, 0, kFlagIncomplete};
        write_empty(std::span<const FrameRow>(&row, 1));
        incomplete_.fetch_add(1);
        frames_processed_.fetch_add(1);
      } else {
        const auto kind = dark_remaining > 0 ? Worker::Kind::dark : Worker::Kind::data;
        if (w.kind != kind) flush_batch();
        w.kind = kind;
        uint16_t* dst = frame_slot(w.numbers.size());
        w.numbers.push_back(fn);
        w.timestamps.push_back(f->timestamp);
        w.copier.copy(std::move(f), std::span<uint16_t>(dst, w.pixels));  // and releases it
        if (kind == Worker::Kind::dark && --dark_remaining == 0) {
          flush_batch();
          begin_data();
        }
        if (w.numbers.size() == capacity) flush_batch();
      }
      if (f) w.assembler.release(std::move(f));
      ++frames_seen;
      if (cfg.run.max_frames > 0 && frames_seen >= cfg.run.max_frames && !stop_requested_.load())
        stop("frame limit");
    }
    w.ingest.load()->stop();
    if (!abort_requested_.load()) {
      drain();
      write_gap(next_expected.value_or(0), next_expected.value_or(0));  // releases dropped list
      // Frames dropped after the last received one still get their rows.
      auto tail = w.assembler.take_dropped(std::nullopt);
      if (!tail.empty() && next_expected) {
        std::vector<FrameRow> rows;
        for (uint64_t fn : tail)
          if (fn >= *next_expected) rows.push_back(FrameRow{fn, 0, 0, 0, kFlagDropped});
        if (!rows.empty()) {
          write_empty(rows);
          dropped_rows_.fetch_add(rows.size());
        }
      }
    } else {
      w.copier.wait();
      w.numbers.clear();
      if (w.gpu) w.gpu->flush();  // batches already submitted are written
    }
    if (w.gpu) w.gpu->set_sink({});
    if (cfg.reconstruction.enabled) {
      // The worker's queue (full volumes, each appended to the file as it is solved) must reach
      // the writer before it closes; the partial volume is solved only when configured (not
      // after an abort): otherwise its frames are counted in `frames` but in no volume.
      if (w.stage_owner && cfg.reconstruction.solve_partial && !abort_requested_.load())
        w.stage_owner->flush();
      finish_reconstruction();
    }
    PedestalState end = w.finder->pedestal();
    w.writer->set_end_reason(stats().end_reason);
    w.writer->close(&end);
    {
      std::lock_guard lock(mu_);
      end_pedestal_ = std::move(end);
    }
    if (state_.load() != RunState::error) state_.store(RunState::idle);
    const auto s = stats();
    log::info("run {} ended ({}): {} frames ({} dark, {} data, {} incomplete, {} missing, {} dropped), "
              "{} clusters, {} bad messages -> {}",
              run_index_, s.end_reason, s.rows_written, s.dark_frames, s.data_frames, s.incomplete,
              s.missing, s.dropped, s.clusters, s.bad_total, file_.string());
  } catch (const std::exception& e) {
    fail(e.what());
    if (Ingest* in = w.ingest.load()) in->stop();
    w.copier.wait();
    if (w.gpu) {
      try {
        w.gpu->set_sink({});  // results of batches still in flight are dropped with the run
      } catch (...) {
      }
    }
    if (cfg_.reconstruction.enabled && w.writer) {
      try {
        finish_reconstruction();
      } catch (const std::exception& e2) {
        log::error("run {}: reconstruction: {}", run_index_, e2.what());
      }
    }
    if (w.writer) {
      try {
        w.writer->close(nullptr);
      } catch (const std::exception& e2) {
        log::error("run {}: closing {} failed too: {}", run_index_, file_.string(), e2.what());
      }
    }
  }
  done_.store(true);
}

}  // namespace glint::pipeline
