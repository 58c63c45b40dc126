// The single-threaded reference: one frame at a time, pixels in raster order, pedestal updates
// taking effect immediately. Deliberately plain; the fast backends are checked against it.
#include <stdexcept>
#include <string>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/cluster_math.hpp"
#include "glint/cluster_window.hpp"

namespace glint {

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
}

namespace {

namespace cm = cluster_math;

class ReferenceFinder final : public SynchronousFinder {
 public:
  ReferenceFinder(const FinderParams& params, int batch_frames)
      : SynchronousFinder(batch_frames), params_(params),
        state_(params.shape, params.pedestal_window),
        mean_(params.shape.pixels(), 0.0),
        thresholds_(cm::make_thresholds(params.n_sigma, params.cluster_size)) {
    validate(params_);
  }

  const FinderParams& params() const override { return params_; }

  void push_dark(std::span<const uint16_t> frames) override {
    const std::size_t np = params_.shape.pixels();
    check_dark_frames(params_, frames);
    for (std::size_t off = 0; off < frames.size(); off += np)
      for (std::size_t i = 0; i < np; ++i)
        mean_[i] = cm::dark_push(state_.sum[i], state_.sum2[i], state_.count[i],
                                 static_cast<double>(frames[off + i]), state_.window);
  }

  void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
            ClusterTable& out) override {
    const std::size_t np = params_.shape.pixels();
    check_find_arguments(params_, frames, frame_numbers, out);
    for (std::size_t k = 0; k < frame_numbers.size(); ++k)
      find_one(frames.subspan(k * np, np), frame_numbers[k], out);
  }

  PedestalState pedestal() const override { return state_; }

  void load_pedestal(const PedestalState& s) override {
    if (s.shape != params_.shape || s.window != params_.pedestal_window)
      throw std::invalid_argument("load_pedestal: shape or window differs from the finder's");
    state_ = s;
    for (std::size_t i = 0; i < mean_.size(); ++i) mean_[i] = state_.mean(i);
  }

  std::string description() const override { return "cpu reference (1 thread)"; }

 private:
  void find_one(std::span<const uint16_t> f, uint64_t frame_number, ClusterTable& out) {
    const int rows = static_cast<int>(params_.shape.rows);
    const int cols = static_cast<int>(params_.shape.cols);
    const int S = params_.cluster_size;
    const int h = S / 2;
    std::vector<int32_t> values(static_cast<std::size_t>(S) * S);
    out.begin_frame(frame_number);
    for (int y = 0; y < rows; ++y) {
      for (int x = 0; x < cols; ++x) {
        const std::size_t i = static_cast<std::size_t>(y) * cols + x;
        const double rms = cm::noise_of(state_.sum2[i], state_.count[i], mean_[i]);
        const double v = cm::sub(static_cast<double>(f[i]), mean_[i]);
        if (cm::is_negative_outlier(v, rms, thresholds_)) continue;
        const auto [total, max] = cm::window_sum(x, y, h, rows, cols, [&](int dy, int dx) {
          const std::size_t j = static_cast<std::size_t>(y + dy) * cols + (x + dx);
          return cm::sub(static_cast<double>(f[j]), mean_[j]);
        });
        const cm::PixelAction action = cm::classify(v, rms, total, max, thresholds_);
        if (action == cm::PixelAction::update) {
          mean_[i] = cm::fast_push(state_.sum[i], state_.sum2[i], static_cast<double>(f[i]),
                                   state_.window);
          continue;
        }
        if (action != cm::PixelAction::candidate || !(v == max)) continue;
        std::size_t k = 0;
        for (int dy = -h; dy <= h; ++dy) {
          const int yy = y + dy;
          for (int dx = -h; dx <= h; ++dx, ++k) {
            const int xx = x + dx;
            if (yy < 0 || yy >= rows || xx < 0 || xx >= cols) {
              values[k] = 0;
              continue;
            }
            const std::size_t j = static_cast<std::size_t>(yy) * cols + xx;
            values[k] = cm::cluster_value(cm::sub(static_cast<double>(f[j]), mean_[j]));
          }
        }
        out.add_cluster(static_cast<uint16_t>(x), static_cast<uint16_t>(y), values);
      }
    }
  }

  FinderParams params_;
  PedestalState state_;
  std::vector<double> mean_;  // cached mean, as the reference keeps it
  cm::Thresholds thresholds_;
};

}  // namespace

std::unique_ptr<ClusterFinder> make_reference_finder(const FinderParams& params,
                                                     int batch_frames) {
  return std::make_unique<ReferenceFinder>(params, batch_frames);
}

}  // namespace glint
