#include "glint/pipeline/products_consumer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <stdexcept>

#include <fmt/format.h>

#include "glint/gpu/device.hpp"
#include "glint/gpu/products_accumulator.hpp"
#include "glint/log.hpp"
#include "glint/products/eta_calibration_file.hpp"

namespace glint::pipeline {

namespace {
/// Below this many clusters per part a batch is copied by fewer threads (one part each).
constexpr std::size_t kClustersPerPart = 2048;
}  // namespace

Backend products_backend(const config::ProductsConfig& c) {
  try {
    return parse_backend(c.device);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(fmt::format("products.device: '{}' (allowed: auto, cpu, gpu)",
                                            log::one_line(c.device)));
  }
}

products::ProductSettings product_settings(const config::ProductsConfig& c,
                                           const FinderParams& finder) {
  products::ProductSettings s;
  s.rows = finder.shape.rows;
  s.cols = finder.shape.cols;
  s.cluster_size = finder.cluster_size;
  s.calibrated = finder.pixels == PixelMode::jungfrau_calibrated;
  s.energy = c.energy == "2x2" ? products::EnergyKind::quadrant : products::EnergyKind::sum;
  if (c.energy_window.size() == 2) {
    s.emin = c.energy_window[0];
    s.emax = c.energy_window[1];
  }
  s.hitmap = c.hitmap;
  s.slice_frames = c.slice_frames;
  s.spectrum = {c.spectrum_min, c.spectrum_upper(s.calibrated), c.spectrum_bins, false};
  s.pixel_spectra = c.pixel_spectra;
  s.eta = c.eta;
  s.eta_bins = c.eta_bins;
  s.subpixel_calibration = c.subpixel_calibration;
  s.subpixel_factor = c.subpixel_factor;
  return s;
}

std::shared_ptr<const products::EtaCalibration> load_subpixel_calibration(
    const config::ProductsConfig& c, int cluster_size) {
  if (c.subpixel_calibration.empty()) return nullptr;
  const std::string key = "products.subpixel.calibration";
  products::EtaCalibrationFile f = [&] {
    try {
      return products::read_eta_calibration(c.subpixel_calibration);
    } catch (const std::exception& e) {
      throw std::invalid_argument(fmt::format(
          "{}: {} (allowed: an eta calibration file made by glint eta-calibrate, or \"\")", key,
          log::one_line(e.what())));
    }
  }();
  if (f.cluster_size != cluster_size)
    throw std::invalid_argument(fmt::format(
        "{}: '{}': made from {} x {} clusters, this run finds {} x {} clusters (allowed: a "
        "calibration of the run's finder.cluster_size)",
        key, log::one_line(c.subpixel_calibration), f.cluster_size, f.cluster_size,
        cluster_size, cluster_size));
  return std::make_shared<const products::EtaCalibration>(std::move(f.calibration));
}

unsigned products_threads(const config::ProductsConfig& c) {
  if (c.threads > 0) return static_cast<unsigned>(c.threads);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp(cores / 4, 1u, 4u);
}

ProductsConsumer::ProductsConsumer(FileSource file, unsigned threads, std::size_t queue_batches)
    : file_source_(std::move(file)),
      requested_threads_(threads),
      requested_capacity_(queue_batches) {}

ProductsConsumer::~ProductsConsumer() { stop_workers(); }

void ProductsConsumer::stop_workers() {
  for (auto& w : workers_) w->thread.request_stop();
  cv_.notify_all();
  for (auto& w : workers_)
    if (w->thread.joinable()) w->thread.join();
}

void ProductsConsumer::on_start(const RunContext& run) {
  settings_ = product_settings(run.cfg.products, run.finder);
  settings_.subpixel = load_subpixel_calibration(run.cfg.products, run.finder.cluster_size);
  file_ = file_source_ ? file_source_() : nullptr;
  on_gpu_ = false;
  const auto& ids = run.cfg.finder.gpu_ids;
  const int device = ids.empty() ? 0 : ids.front();
  auto accumulator = make_on_backend<gpu::ProductsAccumulator>(
      products_backend(run.cfg.products), "products.device",
      [] { return gpu::unavailable_reason(); },
      [&] {
        // The workers' threads, idle on the GPU, copy parts of large batches.
        const unsigned copiers =
            requested_threads_ > 0 ? requested_threads_ : products_threads(run.cfg.products);
        return std::make_unique<gpu::ProductsAccumulator>(settings_, device, copiers);
      },
      [] { return std::unique_ptr<gpu::ProductsAccumulator>(); });
  if (accumulator) {
    {
      std::lock_guard lock(result_mu_);
      gpu_ = std::move(accumulator);
    }
    on_gpu_ = true;
    threads_ = 0;
    started_ = true;
    log::debug("products: accumulated on GPU {}", device);
    return;
  }
  threads_ = requested_threads_ > 0 ? requested_threads_ : products_threads(run.cfg.products);
  capacity_ = requested_capacity_ > 0 ? requested_capacity_ : 2 * std::size_t{threads_};
  if (settings_.pixel_spectra)
    shared_pixel_spectra_ =
        std::make_unique<products::CountTable>(settings_.pixels() * settings_.spectrum.bins);
  for (unsigned i = 0; i < threads_; ++i) {
    auto w = std::make_unique<Worker>();
    w->sums = std::make_unique<products::ProductSums>(settings_, false);
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) {
    Worker* wp = w.get();
    wp->thread = std::jthread([this, wp](std::stop_token st) { work(*wp, st); });
  }
  started_ = true;
  log::debug("products: {} worker threads, queue of {} batches", threads_, capacity_);
}

void ProductsConsumer::work(Worker& w, std::stop_token st) {
  while (true) {
    std::unique_ptr<Item> item;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, st, [&] { return !queue_.empty() || has_part(); });
      // The run's thread waits for the copy of its batch: that comes first.
      if (copy_part(lock)) continue;
      if (queue_.empty()) return;  // stop requested and nothing left
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    cv_.notify_all();  // room in the queue
    try {
      std::lock_guard sums(w.mu);
      w.sums->add(item->clusters, origin_,
                  shared_pixel_spectra_ ? shared_pixel_spectra_->span() : std::span<uint32_t>());
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      if (failure_.empty()) failure_ = e.what();
      ++failed_;
    }
    {
      std::lock_guard lock(mu_);
      const uint64_t seq = item->seq;
      if (seq == done_below_) {
        ++done_below_;
        while (!done_ahead_.empty() && *done_ahead_.begin() == done_below_) {
          done_ahead_.erase(done_ahead_.begin());
          ++done_below_;
        }
      } else {
        done_ahead_.insert(seq);
      }
      free_.push_back(std::move(item));
    }
    cv_.notify_all();
  }
}

bool ProductsConsumer::copy_part(std::unique_lock<std::mutex>& lock) {
  if (!has_part()) return false;
  const std::size_t k = job_.next++;
  const auto [a, b] = job_.parts[k];
  const ClusterTable& src = *job_.src;
  const uint64_t seq = job_.first_seq + k;
  std::unique_ptr<Item> item;
  if (!free_.empty()) {
    item = std::move(free_.back());
    free_.pop_back();
  }
  lock.unlock();
  if (!item) item = std::make_unique<Item>();
  item->seq = seq;
  ClusterTable& out = item->clusters;
  if (out.cluster_size() != src.cluster_size() || out.value_type() != src.value_type())
    out = ClusterTable(src.cluster_size(), src.value_type());
  out.clear();  // keeps the capacity of earlier batches
  const auto frames = src.frames();
  const uint64_t first = frames[a].first_cluster;
  const uint64_t last = frames[b - 1].first_cluster + frames[b - 1].n_clusters;
  auto& records = out.frames_mut();
  records.assign(frames.begin() + static_cast<std::ptrdiff_t>(a),
                 frames.begin() + static_cast<std::ptrdiff_t>(b));
  for (FrameRecord& r : records) r.first_cluster -= first;
  const auto xs = src.x(), ys = src.y();
  out.x_mut().assign(xs.begin() + static_cast<std::ptrdiff_t>(first),
                     xs.begin() + static_cast<std::ptrdiff_t>(last));
  out.y_mut().assign(ys.begin() + static_cast<std::ptrdiff_t>(first),
                     ys.begin() + static_cast<std::ptrdiff_t>(last));
  const auto data = src.data();
  const std::size_t per = src.values_per_cluster();
  out.data_mut().assign(data.begin() + static_cast<std::ptrdiff_t>(first * per),
                        data.begin() + static_cast<std::ptrdiff_t>(last * per));
  lock.lock();
  queue_.push_back(std::move(item));
  --job_.remaining;
  cv_.notify_all();
  return true;
}

void ProductsConsumer::rethrow_failure() {
  std::lock_guard lock(mu_);
  if (!failure_.empty()) throw std::runtime_error("products: " + failure_);
}

void ProductsConsumer::record_failure(const std::exception& e) {
  std::lock_guard lock(mu_);
  if (failure_.empty()) failure_ = e.what();
  ++failed_;
}

void ProductsConsumer::on_batch_gpu(const FoundBatch& batch) {
  const auto frames = batch.clusters.frames();
  if (!have_origin_) {
    origin_ = frames.front().frame_number;
    have_origin_ = true;
  }
  last_frame_ = std::max(last_frame_, frames.back().frame_number);
  try {
    gpu_->add(batch.clusters, origin_);
  } catch (const std::exception& e) {
    record_failure(e);
    throw;
  }
  const uint64_t seq = next_seq_++;
  {
    std::lock_guard lock(mu_);
    frames_ += frames.size();
    wait_seconds_ = gpu_->wait_seconds();
    copy_seconds_ = gpu_->copy_seconds();
  }
  note_slices(seq);
}

void ProductsConsumer::on_batch(const FoundBatch& batch) {
  if (!started_) return;
  const auto frames = batch.clusters.frames();
  if (frames.empty()) return;
  if (gpu_) {
    on_batch_gpu(batch);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (!have_origin_) {
    // Set before the first item is queued; the workers read it only after taking one.
    origin_ = frames.front().frame_number;
    have_origin_ = true;
  }
  // Parts of about equal clusters, one for the run's thread and one per worker that is free
  // (small batches in one part).
  const ClusterTable& src = batch.clusters;
  std::vector<std::pair<std::size_t, std::size_t>> parts =
      split_by_clusters(frames, threads_ + 1, kClustersPerPart);
  const uint64_t first_seq = next_seq_;
  next_seq_ += parts.size();
  last_frame_ = std::max(last_frame_, frames.back().frame_number);
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      return queue_.size() + parts.size() <= std::max(capacity_, parts.size()) ||
             !failure_.empty();
    });
    const auto t1 = Clock::now();
    job_ = CopyJob{&src, std::move(parts), first_seq, 0, 0};
    job_.remaining = job_.parts.size();
    cv_.notify_all();
    while (copy_part(lock)) {
    }
    cv_.wait(lock, [&] { return job_.remaining == 0; });
    job_ = CopyJob{};
    frames_ += frames.size();
    wait_seconds_ += std::chrono::duration<double>(t1 - t0).count();
    copy_seconds_ += std::chrono::duration<double>(Clock::now() - t1).count();
  }
  const uint64_t seq = next_seq_ - 1;
  cv_.notify_all();
  note_slices(seq);
  rethrow_failure();
}

void ProductsConsumer::on_rows(std::span<const FrameRow> rows) {
  std::lock_guard lock(mu_);
  frames_ += rows.size();
}

void ProductsConsumer::write_completed_slices(bool all) {
  uint64_t upto = slices_written_;
  if (all) {
    // Every item is accumulated: every slice up to the last frame's (the last one partial).
    if (have_origin_ && last_frame_ >= origin_)
      upto = (last_frame_ - origin_) / settings_.slice_frames + 1;
    complete_after_.clear();
  } else {
    // Batches accumulated: on the GPU, those whose work is done, in order.
    const uint64_t gpu_done = gpu_ ? gpu_->batches_done() : 0;
    std::lock_guard lock(mu_);
    const uint64_t done = gpu_ ? gpu_done : done_below_;
    while (!complete_after_.empty() && complete_after_.front().first <= done) {
      upto = std::max(upto, complete_after_.front().second);
      complete_after_.pop_front();
    }
  }
  for (uint64_t k = slices_written_; k < upto; ++k) {
    std::vector<uint32_t> counts(settings_.pixels(), 0);
    if (gpu_) counts = gpu_->take_slice(k);
    for (auto& w : workers_) {
      std::vector<uint32_t> part;
      {
        std::lock_guard sums(w->mu);
        if (!w->sums->slices().contains(k)) continue;
        part = w->sums->take_slice(k);
      }
      for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += part[i];
    }
    if (file_) file_->append_hitmap_slice(origin_ + k * settings_.slice_frames, counts);
  }
  slices_written_ = upto;
}

void ProductsConsumer::on_end_gpu(const RunEnd& end) {
  std::shared_ptr<products::ProductSums> merged;
  std::exception_ptr error;  // rethrown as it came (a CudaError says whether it is sticky)
  try {
    gpu_->flush();
    if (settings_.slice_frames > 0 && !end.failed) write_completed_slices(true);
    merged = std::make_shared<products::ProductSums>(gpu_->sums());
    std::lock_guard lock(mu_);
    wait_seconds_ = gpu_->wait_seconds();
    copy_seconds_ = gpu_->copy_seconds();
  } catch (const std::exception& e) {
    record_failure(e);
    error = std::current_exception();
  }
  if (merged && file_ && !end.failed && !file_->failed()) file_->set_products(merged);
  {
    std::lock_guard lock(result_mu_);
    result_ = std::move(merged);
    gpu_.reset();  // the device tables go with the run
  }
  if (error) std::rethrow_exception(error);
  rethrow_failure();
}

void ProductsConsumer::note_slices(uint64_t seq) {
  if (settings_.slice_frames == 0 || last_frame_ < origin_) return;
  const uint64_t complete = (last_frame_ - origin_ + 1) / settings_.slice_frames;
  if (complete > slices_written_ &&
      (complete_after_.empty() || complete_after_.back().second < complete))
    complete_after_.emplace_back(seq + 1, complete);
  write_completed_slices(false);
}

void ProductsConsumer::drain() {
  if (!started_) return;
  if (gpu_) {
    gpu_->flush();
  } else {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_below_ == next_seq_ || !failure_.empty(); });
  }
  rethrow_failure();
}

void ProductsConsumer::on_end(const RunEnd& end) {
  if (!started_) return;
  if (gpu_) {
    on_end_gpu(end);
    return;
  }
  if (!end.failed) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return done_below_ == next_seq_; });
  }
  stop_workers();
  auto merged = std::make_shared<products::ProductSums>(settings_, false);
  if (settings_.slice_frames > 0 && !end.failed) write_completed_slices(true);
  for (auto& w : workers_) {
    std::lock_guard sums(w->mu);
    merged->merge(*w->sums);
  }
  if (shared_pixel_spectra_) {
    const auto counts = shared_pixel_spectra_->span();
    merged->pixel_spectra.assign(counts.begin(), counts.end());
    shared_pixel_spectra_.reset();
  }
  if (file_ && !end.failed && !file_->failed()) file_->set_products(merged);
  {
    std::lock_guard lock(result_mu_);
    result_ = std::move(merged);
  }
  rethrow_failure();
}

products::ProductSums ProductsConsumer::snapshot() const {
  {
    std::lock_guard lock(result_mu_);
    if (result_) return *result_;
    if (gpu_) return gpu_->sums();
  }
  products::ProductSums out(settings_, false);
  for (const auto& w : workers_) {
    std::lock_guard sums(w->mu);
    out.merge(*w->sums);
  }
  if (shared_pixel_spectra_) {
    // Counts still being incremented by the workers: each read atomically.
    const auto counts = shared_pixel_spectra_->span();
    out.pixel_spectra.resize(counts.size());
    for (std::size_t i = 0; i < counts.size(); ++i)
      out.pixel_spectra[i] = std::atomic_ref<uint32_t>(counts[i]).load(std::memory_order_relaxed);
  }
  return out;
}

std::vector<PreviewImage> ProductsConsumer::preview_images() const {
  if (!started_) return {};
  // Sums of hit map, energy and spectrum only (no slices, no pixel spectra).
  products::ProductSums out(settings_, false);
  {
    std::lock_guard lock(result_mu_);
    if (result_) {
      out.hitmap = result_->hitmap;
      out.energy = result_->energy;
      out.spectrum = result_->spectrum;
      out.subpixel = result_->subpixel;
      out.frames = result_->frames;
    } else if (gpu_) {
      products::ProductSums g = gpu_->sums(false);
      out.hitmap = std::move(g.hitmap);
      out.energy = std::move(g.energy);
      out.spectrum = std::move(g.spectrum);
      out.subpixel = std::move(g.subpixel);
      out.frames = g.frames;
    }
  }
  if (out.frames == 0) {
    for (const auto& w : workers_) {
      std::lock_guard sums(w->mu);
      const products::ProductSums& s = *w->sums;
      for (std::size_t i = 0; i < out.hitmap.size(); ++i) {
        out.hitmap[i] += s.hitmap[i];
        out.energy[i] += s.energy[i];
      }
      for (std::size_t i = 0; i < out.spectrum.size(); ++i) out.spectrum[i] += s.spectrum[i];
      if (s.subpixel) out.subpixel->merge(*s.subpixel);
      out.frames += s.frames;
    }
  }
  const std::string units = settings_.calibrated ? "keV" : "ADU";
  std::vector<PreviewImage> images;
  if (settings_.hitmap) {
    PreviewImage h{"hitmap", "counts", settings_.rows, settings_.cols, {}, 0, 0, {}, out.frames};
    h.values.assign(out.hitmap.begin(), out.hitmap.end());
    images.push_back(std::move(h));
    PreviewImage e{"energy", units, settings_.rows, settings_.cols, {}, 0, 0, {}, out.frames};
    e.values.resize(out.energy.size());
    const double scale = settings_.energy_scale();
    for (std::size_t i = 0; i < e.values.size(); ++i)
      e.values[i] = static_cast<double>(out.energy[i]) / scale;
    images.push_back(std::move(e));
  }
  PreviewImage sp{"spectrum", "counts", 1, settings_.spectrum.bins, {},
                  settings_.spectrum.lo, settings_.spectrum.hi,
                  fmt::format("energy ({})", units), out.frames};
  sp.values.assign(out.spectrum.begin(), out.spectrum.end());
  images.push_back(std::move(sp));
  if (out.subpixel) {
    const products::SubpixelImage& img = *out.subpixel;
    PreviewImage sub{"subpixel", "counts", static_cast<uint32_t>(img.rows() * img.factor()),
                     static_cast<uint32_t>(img.cols() * img.factor()), {}, 0, 0, {},
                     out.frames};
    sub.values.assign(img.counts().begin(), img.counts().end());
    images.push_back(std::move(sub));
  }
  return images;
}

double ProductsConsumer::wait_seconds() const {
  std::lock_guard lock(mu_);
  return wait_seconds_;
}

double ProductsConsumer::copy_seconds() const {
  std::lock_guard lock(mu_);
  return copy_seconds_;
}

ConsumerStats ProductsConsumer::stats() const {
  ConsumerStats s;
  s.name = std::string(name());
  std::lock_guard lock(mu_);
  s.frames = frames_;
  s.failed = failed_;
  return s;
}

}  // namespace glint::pipeline
