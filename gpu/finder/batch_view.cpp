// Reading a GPU batch's results, and the GPU finder's ClusterFinder sink (built with and
// without CUDA).
#include <stdexcept>
#include <string>

#include "glint/gpu/gpu_finder.hpp"

namespace glint::gpu {

uint64_t GpuBatchView::n_clusters() const {
  uint64_t n = 0;
  for (const GpuBandView& b : bands) n += b.x.size();
  return n;
}

void append_clusters(ClusterTable& out, const GpuBatchView& v) {
  const std::size_t per = out.values_per_cluster();
  auto& frames = out.frames_mut();
  auto& xs = out.x_mut();
  auto& ys = out.y_mut();
  auto& data = out.data_mut();
  const uint64_t total = v.n_clusters();
  xs.reserve(xs.size() + total);
  ys.reserve(ys.size() + total);
  data.reserve(data.size() + total * per);
  for (const GpuBandView& b : v.bands) {
    const bool wide = b.data.size() == b.x.size() * per && b.data16.empty();
    const bool narrow = b.data16.size() == b.x.size() * per && b.data.empty();
    if (!wide && !narrow)
      throw std::invalid_argument("append_clusters: the batch's clusters do not have the " +
                                  std::to_string(per) + " values per cluster of the table, "
                                  "in one width");
  }
  const bool gains = out.has_gain_counts();
  for (const GpuBandView& b : v.bands)
    if (gains && b.gain_counts.size() != 3 * v.frame_numbers.size())
      throw std::invalid_argument("append_clusters: the table keeps gain counts, the batch has "
                                  "none (a finder for JUNGFRAU pixels gives them)");
  auto& gain_counts = out.gain_counts_mut();
  std::vector<uint64_t> cursor(v.bands.size(), 0);
  uint64_t first = out.n_clusters();
  for (std::size_t i = 0; i < v.frame_numbers.size(); ++i) {
    uint32_t count = 0;
    for (std::size_t k = 0; k < v.bands.size(); ++k) {
      const GpuBandView& b = v.bands[k];
      const uint64_t c0 = cursor[k], c = b.counts[i];
      xs.insert(xs.end(), b.x.begin() + c0, b.x.begin() + c0 + c);
      ys.insert(ys.end(), b.y.begin() + c0, b.y.begin() + c0 + c);
      if (b.data16.empty())
        data.insert(data.end(), b.data.begin() + c0 * per, b.data.begin() + (c0 + c) * per);
      else
        data.insert(data.end(), b.data16.begin() + c0 * per, b.data16.begin() + (c0 + c) * per);
      cursor[k] += c;
      count += static_cast<uint32_t>(c);
    }
    frames.push_back(FrameRecord{v.frame_numbers[i], first, count});
    if (gains) {
      jungfrau::GainCounts g;
      for (const GpuBandView& b : v.bands) {
        g.g1 += b.gain_counts[3 * i];
        g.g2 += b.gain_counts[3 * i + 1];
        g.invalid += b.gain_counts[3 * i + 2];
      }
      gain_counts.push_back(g);
    }
    first += count;
  }
}

void GpuClusterFinder::set_sink(ResultSink sink) {
  if (!sink) {
    set_view_sink({});
    return;
  }
  results_ = make_result_table(params());
  set_view_sink([this, sink = std::move(sink)](const GpuBatchView& v) {
    results_.clear();
    append_clusters(results_, v);
    sink(results_);
  });
}

}  // namespace glint::gpu
