#include "glint/recon/reconstruction_stage.hpp"

#include <stdexcept>

#include "glint/gpu/error.hpp"
#include "glint/log.hpp"
#include "glint/recon/forward_model.hpp"

namespace glint::recon {

HitWeight parse_hit_weight(const std::string& s) {
  if (s == "centres") return HitWeight::centres;
  if (s == "signal") return HitWeight::signal;
  throw std::invalid_argument("unknown hit weight '" + s + "' (centres, signal)");
}

namespace {
constexpr std::size_t kMaxQueued = 2;  // volumes waiting beside the one being reconstructed
}

ReconstructionStage::ReconstructionStage(const StageOptions& options,
                                         std::function<void(StageResult&&)> sink)
    : o_(options), sink_(std::move(sink)) {
  if (o_.width < 2 || o_.height < 2)
    throw std::invalid_argument("reconstruction: image " + std::to_string(o_.width) + "x" +
                                std::to_string(o_.height) + " is too small");
  if (o_.slices < 2) throw std::invalid_argument("reconstruction: slices must be >= 2");
  if (o_.frames_per_slice < 1)
    throw std::invalid_argument("reconstruction: frames_per_slice must be >= 1");
  o_.backend.low_priority = true;
  full_dims_ = tv::Dims{o_.width, o_.height, int(o_.slices)};
  current_.dims = full_dims_;
  current_.data.assign(full_dims_.voxels(), 0.0f);
  // A bad forward model (e.g. a missing mask file) shows here, not at every volume later.
  full_model_ = make_forward_model(o_.forward, full_dims_);
  worker_ = std::jthread([this](std::stop_token st) { run(st); });
}

ReconstructionStage::~ReconstructionStage() {
  wait_idle();
  worker_.request_stop();
  cv_.notify_all();
}

void ReconstructionStage::add(const ClusterTable& t) {
  const auto frames = t.frames();
  const auto xs = t.x();
  const auto ys = t.y();
  const std::size_t plane = std::size_t(o_.width) * o_.height;
  for (const FrameRecord& f : frames) {
    if (!have_first_) {
      first_frame_ = f.frame_number;
      have_first_ = true;
    }
    last_frame_ = f.frame_number;
    float* img = current_.data.data() + std::size_t(slice_) * plane;
    for (std::uint64_t c = f.first_cluster; c < f.first_cluster + f.n_clusters; ++c) {
      if (xs[c] >= o_.width || ys[c] >= o_.height) continue;
      float v = 1.0f;
      if (o_.weight == HitWeight::signal && t.value_type() == ClusterValues::float32) {
        double sum = 0.0;  // calibrated clusters: float values (keV)
        for (std::size_t k = 0; k < t.values_per_cluster(); ++k) sum += t.float_value(c, k);
        v = static_cast<float>(sum);
      } else if (o_.weight == HitWeight::signal) {
        long long sum = 0;
        for (int32_t a : t.cluster_data(c)) sum += a;
        v = static_cast<float>(sum);
      }
      img[std::size_t(ys[c]) * o_.width + xs[c]] += v;
    }
    if (++frames_in_slice_ == o_.frames_per_slice) close_slice();
  }
  if (frames.empty()) return;
  std::lock_guard lock(m_);  // once per batch, not per frame
  stats_.frames += frames.size();
}

void ReconstructionStage::close_slice() {
  frames_in_slice_ = 0;
  if (++slice_ < o_.slices) return;
  StageResult r;
  r.first_frame = first_frame_;
  r.last_frame = last_frame_;
  r.input = std::move(current_);
  current_ = Volume{r.input.dims, std::vector<float>(r.input.dims.voxels(), 0.0f)};
  slice_ = 0;
  have_first_ = false;
  enqueue(std::move(r));
}

void ReconstructionStage::flush() {
  const std::uint32_t filled = slice_ + (frames_in_slice_ > 0 ? 1 : 0);
  if (filled < 2) return;
  StageResult r;
  r.first_frame = first_frame_;
  r.last_frame = last_frame_;
  r.input.dims = tv::Dims{o_.width, o_.height, int(filled)};
  const std::size_t plane = std::size_t(o_.width) * o_.height;
  r.input.data.assign(current_.data.begin(), current_.data.begin() + filled * plane);
  std::fill(current_.data.begin(), current_.data.end(), 0.0f);
  slice_ = 0;
  frames_in_slice_ = 0;
  have_first_ = false;
  enqueue(std::move(r));
}

void ReconstructionStage::enqueue(StageResult&& r) {
  {
    std::lock_guard lock(m_);
    if (queue_.size() >= kMaxQueued) {
      ++stats_.volumes_dropped;
      log::warn("reconstruction: worker busy, volume of frames {}..{} dropped", r.first_frame,
                r.last_frame);
      return;
    }
    queue_.push_back(std::move(r));
  }
  cv_.notify_all();
}

void ReconstructionStage::wait_idle() {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

StageStats ReconstructionStage::stats() const {
  std::lock_guard lock(m_);
  return stats_;
}

std::exception_ptr ReconstructionStage::fatal_error() const {
  std::lock_guard lock(m_);
  return fatal_;
}

void ReconstructionStage::run(std::stop_token st) {
  std::unique_ptr<tv::Reconstructor> solver;
  ForwardModel partial_model;  // for a partial last volume
  const ForwardModel* fm = &full_model_;
  while (true) {
    StageResult r;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, st, [&] { return !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested
      r = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    bool failed = false;
    try {
      const tv::Dims& d = r.input.dims;
      if (!solver || solver->dims() != d) {
        if (d == full_dims_) {
          fm = &full_model_;
        } else {
          partial_model = make_forward_model(o_.forward, d);
          fm = &partial_model;
        }
        BackendOptions bo = o_.backend;
        bo.with_fft = !fm->H.identity();
        bo.variant = o_.solver.variant;
        solver = make_reconstructor(d, bo);
      }
      r.output = Volume{d, std::vector<float>(d.voxels())};
      r.report = solver->solve(r.input.data, fm->H, o_.solver, r.output.data);
      r.backend = solver->name();
      log::info("reconstruction: frames {}..{} ({}x{}x{}) on {} in {:.3f} s", r.first_frame,
                r.last_frame, d.nx, d.ny, d.nz, r.backend, r.report.seconds);
      sink_(std::move(r));
      std::lock_guard lock(m_);
      ++stats_.volumes_done;
    } catch (const gpu::CudaError& e) {
      log::error("reconstruction: frames {}..{} failed: {}", r.first_frame, r.last_frame,
                 e.what());
      failed = true;
      if (e.sticky()) {
        std::lock_guard lock(m_);
        if (!fatal_) fatal_ = std::current_exception();
      }
    } catch (const std::exception& e) {
      log::error("reconstruction: frames {}..{} failed: {}", r.first_frame, r.last_frame,
                 e.what());
      failed = true;
    }
    if (failed) {
      solver.reset();
      std::lock_guard lock(m_);
      ++stats_.volumes_failed;
    }
    {
      std::lock_guard lock(m_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace glint::recon
