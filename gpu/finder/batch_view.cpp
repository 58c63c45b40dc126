// Reading a GPU batch's results, and the GPU finder's ClusterFinder sink (built with and
// without CUDA).
#include <stdexcept>
#include <string>
#include <vector>

#include "glint/gpu/gpu_finder.hpp"

namespace glint::gpu {

uint64_t GpuBandView::n_clusters() const {
  uint64_t n = 0;
  for (const uint32_t c : counts) n += c;
  return n;
}

uint64_t GpuBatchView::n_clusters() const {
  uint64_t n = 0;
  for (const GpuBandView& b : bands) n += b.n_clusters();
  return n;
}

namespace {

/// Checks band b's layout against the table's values per cluster and the batch's n frames.
void check_band(const GpuBandView& b, std::size_t per, std::size_t n) {
  const std::size_t held = b.x.size();
  const bool wide = b.data.size() == held * per && b.data16.empty();
  const bool narrow = b.data16.size() == held * per && b.data.empty();
  if ((!wide && !narrow) || b.y.size() != held || b.counts.size() != n)
    throw std::invalid_argument("append_clusters: the batch's clusters do not have the " +
                                std::to_string(per) + " values per cluster of the table, "
                                "in one width, for every frame");
  if (b.pieces_per_frame == 0) {
    if (b.n_clusters() != held)
      throw std::invalid_argument("append_clusters: a band's counts do not add up to its "
                                  "clusters");
    return;
  }
  const std::size_t pieces = n * b.pieces_per_frame;
  if (b.piece_counts.size() != pieces || b.piece_first.size() != pieces)
    throw std::invalid_argument("append_clusters: a band's piece directory does not cover its "
                                "frames");
  for (std::size_t i = 0; i < n; ++i) {
    uint64_t sum = 0;
    for (std::size_t q = i * b.pieces_per_frame; q < (i + 1) * b.pieces_per_frame; ++q) {
      const uint64_t c = b.piece_counts[q];
      if (c > 0 && (b.piece_first[q] > held || c > held - b.piece_first[q]))
        throw std::invalid_argument("append_clusters: a piece lies beyond the band's clusters");
      sum += c;
    }
    if (sum != b.counts[i])
      throw std::invalid_argument("append_clusters: a frame's pieces do not add up to its "
                                  "count");
  }
}

/// Appends clusters [c0, c0 + c) of band b.
void append_run(ClusterTable& out, const GpuBandView& b, uint64_t c0, uint64_t c) {
  if (c == 0) return;
  const std::size_t per = out.values_per_cluster();
  auto& xs = out.x_mut();
  auto& ys = out.y_mut();
  auto& data = out.data_mut();
  xs.insert(xs.end(), b.x.begin() + c0, b.x.begin() + c0 + c);
  ys.insert(ys.end(), b.y.begin() + c0, b.y.begin() + c0 + c);
  if (b.data16.empty())
    data.insert(data.end(), b.data.begin() + c0 * per, b.data.begin() + (c0 + c) * per);
  else
    data.insert(data.end(), b.data16.begin() + c0 * per, b.data16.begin() + (c0 + c) * per);
}

}  // namespace

void append_clusters(ClusterTable& out, const GpuBatchView& v) {
  const std::size_t per = out.values_per_cluster();
  const std::size_t n = v.frame_numbers.size();
  for (const GpuBandView& b : v.bands) check_band(b, per, n);
  const bool gains = out.has_gain_counts();
  for (const GpuBandView& b : v.bands)
    if (gains && b.gain_counts.size() != 3 * n)
      throw std::invalid_argument("append_clusters: the table keeps gain counts, the batch has "
                                  "none (a finder for JUNGFRAU pixels gives them)");
  const uint64_t total = v.n_clusters();
  out.x_mut().reserve(out.x_mut().size() + total);
  out.y_mut().reserve(out.y_mut().size() + total);
  out.data_mut().reserve(out.data_mut().size() + total * per);
  auto& frames = out.frames_mut();
  auto& gain_counts = out.gain_counts_mut();
  std::vector<uint64_t> cursor(v.bands.size(), 0);
  uint64_t first = out.n_clusters();
  for (std::size_t i = 0; i < n; ++i) {
    uint32_t count = 0;
    for (std::size_t k = 0; k < v.bands.size(); ++k) {
      const GpuBandView& b = v.bands[k];
      if (b.pieces_per_frame == 0) {
        append_run(out, b, cursor[k], b.counts[i]);
        cursor[k] += b.counts[i];
      } else {
        // Consecutive pieces that lie one after the other in the band go as one run.
        const std::size_t q1 = (i + 1) * b.pieces_per_frame;
        uint64_t run0 = 0, run = 0;
        for (std::size_t q = i * b.pieces_per_frame; q < q1; ++q) {
          const uint64_t c = b.piece_counts[q];
          if (c == 0) continue;
          if (run > 0 && b.piece_first[q] == run0 + run) {
            run += c;
            continue;
          }
          append_run(out, b, run0, run);
          run0 = b.piece_first[q];
          run = c;
        }
        append_run(out, b, run0, run);
      }
      count += b.counts[i];
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
