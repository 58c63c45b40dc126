// The single-threaded reference: one frame at a time, pixels in raster order, pedestal updates
// taking effect immediately. Deliberately plain; the fast backends are checked against it.
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/cluster_math.hpp"
#include "glint/cluster_window.hpp"
#include "glint/detail/calibrated_dark.hpp"

namespace glint {

std::string_view to_string(PixelMode mode) {
  switch (mode) {
    case PixelMode::raw: return "raw";
    case PixelMode::jungfrau_g0: return "jungfrau (G0 only)";
    case PixelMode::jungfrau_calibrated: return "jungfrau (calibrated)";
  }
  return "raw";
}

ClusterTable make_result_table(const FinderParams& p) {
  return ClusterTable(p.cluster_size,
                      p.pixels == PixelMode::jungfrau_calibrated ? ClusterValues::float32
                                                                 : ClusterValues::int32,
                      p.pixels != PixelMode::raw);
}

void validate(const FinderParams& p) {
  if (p.cluster_size != 3 && p.cluster_size != 5 && p.cluster_size != 7 && p.cluster_size != 9)
    throw std::invalid_argument("cluster size " + std::to_string(p.cluster_size) +
                                " is not supported (allowed: 3, 5, 7, 9)");
  if (p.shape.rows == 0 || p.shape.cols == 0)
    throw std::invalid_argument("frame shape must not be empty");
  if (p.shape.rows > 65536 || p.shape.cols > 65536)
    throw std::invalid_argument("frame shape exceeds 65536 pixels in x or y (cluster coordinates "
                                "are uint16)");
  if (!(p.n_sigma > 0.0)) throw std::invalid_argument("n_sigma must be positive");
  if (p.pedestal_window == 0) throw std::invalid_argument("pedestal window must be positive");
  if (p.pixels == PixelMode::jungfrau_calibrated) {
    if (!p.calibration)
      throw std::invalid_argument("calibrated JUNGFRAU finding needs calibration tables");
    if (p.calibration->shape != p.shape)
      throw std::invalid_argument("calibration tables are " +
                                  std::to_string(p.calibration->shape.rows) + " x " +
                                  std::to_string(p.calibration->shape.cols) + ", frames " +
                                  std::to_string(p.shape.rows) + " x " +
                                  std::to_string(p.shape.cols));
    p.calibration->validate();
  }
}

std::size_t check_dark_frames(const FinderParams& p, std::span<const uint16_t> frames) {
  const std::size_t np = p.shape.pixels();
  if (frames.size() % np != 0)
    throw std::invalid_argument("push_dark: " + std::to_string(frames.size()) +
                                " values are not a whole number of " + std::to_string(np) +
                                "-pixel frames");
  return frames.size() / np;
}

void check_find_arguments(const FinderParams& p, std::span<const uint16_t> frames,
                          std::span<const uint64_t> frame_numbers, const ClusterTable& out) {
  const std::size_t np = p.shape.pixels();
  if (frames.size() != np * frame_numbers.size())
    throw std::invalid_argument("find: " + std::to_string(frames.size()) +
                                " values do not hold " + std::to_string(frame_numbers.size()) +
                                " frames of " + std::to_string(np) + " pixels");
  if (out.cluster_size() != p.cluster_size)
    throw std::invalid_argument("find: output table has cluster size " +
                                std::to_string(out.cluster_size()) + ", the finder " +
                                std::to_string(p.cluster_size));
  const ClusterTable want = make_result_table(p);
  if (out.value_type() != want.value_type() || out.has_gain_counts() != want.has_gain_counts())
    throw std::invalid_argument("find: output table is not one for " +
                                std::string(to_string(p.pixels)) +
                                " pixels (use make_result_table)");
}

namespace {

namespace cm = cluster_math;

class ReferenceFinder final : public SynchronousFinder {
 public:
  ReferenceFinder(const FinderParams& params, int batch_frames)
      : SynchronousFinder(batch_frames), params_((validate(params), params)),
        state_(params.shape, params.pedestal_window),
        mean_(params.shape.pixels(), 0.0),
        thresholds_(cm::make_thresholds(params.n_sigma, params.cluster_size)),
        calibrated_(params) {
    validate(params_);
  }

  const FinderParams& params() const override { return params_; }

  void push_dark(std::span<const uint16_t> frames) override {
    check_dark_frames(params_, frames);
    if (calibrated_.open()) {
      calibrated_.keep(frames);
      return;
    }
    push_dark_values(frames);
  }

  void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
            ClusterTable& out) override {
    const std::size_t np = params_.shape.pixels();
    check_find_arguments(params_, frames, frame_numbers, out);
    if (!frame_numbers.empty()) settle();
    for (std::size_t k = 0; k < frame_numbers.size(); ++k)
      find_one(frames.subspan(k * np, np), frame_numbers[k], out);
  }

  PedestalState pedestal() const override {
    const_cast<ReferenceFinder*>(this)->settle();  // fixes the calibration's pedestal (once)
    return state_;
  }

  std::vector<double> calibration_pedestal() const override {
    if (!calibrated_.active()) return {};
    const_cast<ReferenceFinder*>(this)->settle();
    const auto t = calibrated_.pedestal_table();
    return {t.begin(), t.end()};
  }

  void load_pedestal(const PedestalState& s) override {
    if (s.shape != params_.shape || s.window != params_.pedestal_window)
      throw std::invalid_argument("load_pedestal: shape or window differs from the finder's");
    settle();
    state_ = s;
    for (std::size_t i = 0; i < mean_.size(); ++i) mean_[i] = state_.mean(i);
  }

  std::string description() const override { return "cpu reference (1 thread)"; }

 private:
  /// Calibrated mode: fixes the ADC pedestal and pushes the kept dark frames (calibrated).
  void settle() {
    if (calibrated_.open()) push_dark_values(calibrated_.close());
  }

  /// The value the finder works on: the pixel (raw, G0-only) or its calibrated value.
  double value(std::span<const uint16_t> f, std::size_t i) const {
    if (params_.pixels == PixelMode::jungfrau_calibrated) return calibrated_.calibrate(f[i], i);
    return static_cast<double>(f[i]);
  }
  /// G0-only mode: a pixel out of G0 takes no part (see docs/cluster-finding.md).
  bool excluded(std::span<const uint16_t> f, std::size_t i) const {
    return params_.pixels == PixelMode::jungfrau_g0 && !jungfrau::in_g0(f[i]);
  }

  void push_dark_values(std::span<const uint16_t> frames) {
    const std::size_t np = params_.shape.pixels();
    for (std::size_t off = 0; off < frames.size(); off += np) {
      const std::span<const uint16_t> f = frames.subspan(off, np);
      for (std::size_t i = 0; i < np; ++i) {
        if (excluded(f, i)) continue;
        mean_[i] = cm::dark_push(state_.sum[i], state_.sum2[i], state_.count[i], value(f, i),
                                 state_.window);
      }
    }
  }

  /// d = value - mean as the centre's visit sees it; 0 for an excluded pixel.
  double deviation(std::span<const uint16_t> f, std::size_t j) const {
    if (excluded(f, j)) return 0.0;
    return cm::sub(value(f, j), mean_[j]);
  }

  void find_one(std::span<const uint16_t> f, uint64_t frame_number, ClusterTable& out) {
    const int rows = static_cast<int>(params_.shape.rows);
    const int cols = static_cast<int>(params_.shape.cols);
    const int S = params_.cluster_size;
    const int h = S / 2;
    const bool calibrated = params_.pixels == PixelMode::jungfrau_calibrated;
    // aare starts the window max at numeric_limits<frame type>::min(): 0 for uint16 frames, the
    // smallest normal double for calibrated (double) frames.
    const double max0 = calibrated ? std::numeric_limits<double>::min() : 0.0;
    std::vector<int32_t> values(static_cast<std::size_t>(S) * S);
    std::vector<float> fvalues(static_cast<std::size_t>(S) * S);
    out.begin_frame(frame_number);
    if (params_.pixels != PixelMode::raw) out.set_gain_counts(jungfrau::count_gains(f));
    for (int y = 0; y < rows; ++y) {
      for (int x = 0; x < cols; ++x) {
        const std::size_t i = static_cast<std::size_t>(y) * cols + x;
        if (excluded(f, i)) continue;
        const double rms = cm::noise_of(state_.sum2[i], state_.count[i], mean_[i]);
        const double v = cm::sub(value(f, i), mean_[i]);
        if (cm::is_negative_outlier(v, rms, thresholds_)) continue;
        double total = 0.0, max = max0;
        cm::for_each_in_window(x, y, h, rows, cols, [&](int dy, int dx) {
          const double d = deviation(f, static_cast<std::size_t>(y + dy) * cols + (x + dx));
          total = cm::add(total, d);
          if (max < d) max = d;
        });
        const cm::PixelAction action = cm::classify(v, rms, total, max, thresholds_);
        if (action == cm::PixelAction::update) {
          mean_[i] = cm::fast_push(state_.sum[i], state_.sum2[i], value(f, i), state_.window);
          continue;
        }
        if (action != cm::PixelAction::candidate || !(v == max)) continue;
        std::size_t k = 0;
        for (int dy = -h; dy <= h; ++dy) {
          const int yy = y + dy;
          for (int dx = -h; dx <= h; ++dx, ++k) {
            const int xx = x + dx;
            const bool inside = yy >= 0 && yy < rows && xx >= 0 && xx < cols;
            const double d =
                inside ? deviation(f, static_cast<std::size_t>(yy) * cols + xx) : 0.0;
            if (calibrated) fvalues[k] = inside ? static_cast<float>(d) : 0.0f;
            else values[k] = inside ? cm::cluster_value(d) : 0;
          }
        }
        const auto cx = static_cast<uint16_t>(x), cy = static_cast<uint16_t>(y);
        if (calibrated) out.add_cluster(cx, cy, std::span<const float>(fvalues));
        else out.add_cluster(cx, cy, std::span<const int32_t>(values));
      }
    }
  }

  FinderParams params_;
  PedestalState state_;
  std::vector<double> mean_;  // cached mean, as the reference keeps it
  cm::Thresholds thresholds_;
  detail::CalibratedDark calibrated_;
};

}  // namespace

std::unique_ptr<ClusterFinder> make_reference_finder(const FinderParams& params,
                                                     int batch_frames) {
  return std::make_unique<ReferenceFinder>(params, batch_frames);
}

}  // namespace glint
