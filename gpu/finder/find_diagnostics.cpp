#include "find_diagnostics.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "glint/detail/median.hpp"
#include "glint/log.hpp"

namespace glint::gpu::detail {
namespace {

using CsvFile = std::unique_ptr<FILE, int (*)(FILE*)>;

/// A report file opened for writing with its header line, or null after a warning naming `what`.
CsvFile open_csv(const std::string& path, const char* what, const char* header) {
  CsvFile f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) {
    log::write(log::Level::warn, std::string("GPU finder: cannot write the ") + what + " to " +
                                     path);
    return f;
  }
  std::fputs(header, f.get());
  return f;
}

}  // namespace

void FindDiagnostics::attach(uint32_t blocks, uint32_t segments, StreamView s) {
  if (!trace_path_.empty()) {
    trace_ = DeviceBuffer<unsigned long long>(static_cast<std::size_t>(blocks) * kTraceFrames *
                                              kTraceFields);
    trace_.zero(s);
  }
  if (!profile_on_) return;
  profile_ = DeviceBuffer<unsigned long long>(blocks * kFindProfileSlots);
  profile_.zero(s);
  release_ns_ = DeviceBuffer<unsigned long long>(2 * segments);
  release_ns_.zero(s);
  launch_ts_ = DeviceBuffer<unsigned long long>(kLaunchRecords * blocks * 4);
  launch_ts_.zero(s);
}

void FindDiagnostics::bind(FindLaunch& p) const {
  p.profile = profile_.get();
  p.release_ns = release_ns_.get();
  p.launch_ts = launch_ts_.get();
  p.trace = trace_.get();
}

void FindDiagnostics::report(const LanePlan& lane, uint64_t frames) const {
  report_profile(lane, frames);
  report_timeline();
  report_trace(lane);
}

/// Cycles per frame in each phase of the find kernel, averaged over the segments of the first
/// GPU, the hand-off times between segments and whole launches from the blocks' own clocks.
void FindDiagnostics::report_profile(const LanePlan& lane, uint64_t frames) const {
  if (!profile_.get() || frames == 0) return;
  std::vector<unsigned long long> c(profile_.size());
  GLINT_CUDA_CHECK(cudaMemcpy(c.data(), profile_.get(), c.size() * sizeof(c[0]),
                              cudaMemcpyDeviceToHost));
  static const char* names[kFindPhases] = {"wait",    "loop1",   "loop2",
                                           "resolve", "release", "emit"};
  const double nf = static_cast<double>(frames);
  std::string line = "find kernel cycles/frame (segment average):";
  for (int ph = 0; ph < kFindPhases; ++ph) {
    double sum = 0, mx = 0;
    for (uint32_t b = 0; b < lane.blocks; ++b) {
      sum += static_cast<double>(c[b * kFindProfileSlots + ph]);
      mx = std::max(mx, static_cast<double>(c[b * kFindProfileSlots + ph]));
    }
    line += ' ';
    line += names[ph];
    line += ' ' + std::to_string(static_cast<long long>(sum / lane.blocks / nf)) + " (max " +
            std::to_string(static_cast<long long>(mx / nf)) + ")";
  }
  double ns = 0, waited = 0;
  for (uint32_t b = 0; b < lane.blocks; ++b) {
    ns += static_cast<double>(c[b * kFindProfileSlots + kFindPhases]);
    waited += static_cast<double>(c[b * kFindProfileSlots + kFindPhases + 1]);
  }
  if (waited > 0)
    line += "; hand-off from the segment before: " +
            std::to_string(static_cast<long long>(ns / waited)) + " ns (over " +
            std::to_string(static_cast<long long>(100.0 * waited / lane.blocks / nf)) +
            " % of frames, where the segment waited)";
  // Whole launches from the blocks' own clocks: span from the first block's entry to the last
  // block's exit, spread of the entries and exits, SM clock (cycles per nanosecond).
  std::vector<unsigned long long> t(launch_ts_.size());
  GLINT_CUDA_CHECK(cudaMemcpy(t.data(), launch_ts_.get(), t.size() * sizeof(t[0]),
                              cudaMemcpyDeviceToHost));
  std::vector<double> span, in_spread, out_spread, mhz;
  for (int r = 0; r < kLaunchRecords; ++r) {
    const unsigned long long* q = t.data() + static_cast<std::size_t>(r) * lane.blocks * 4;
    unsigned long long e0 = ~0ull, e1 = 0, x0 = ~0ull, x1 = 0;
    double clk = 0, ns_total = 0;
    bool ok = true;
    for (uint32_t b = 0; b < lane.blocks; ++b) {
      const unsigned long long* v = q + b * 4;
      if (v[0] == 0 || v[2] < v[0]) ok = false;
      e0 = std::min(e0, v[0]);
      e1 = std::max(e1, v[0]);
      x0 = std::min(x0, v[2]);
      x1 = std::max(x1, v[2]);
      clk += static_cast<double>(v[3] - v[1]);
      ns_total += static_cast<double>(v[2] - v[0]);
    }
    if (!ok || ns_total <= 0) continue;
    span.push_back(static_cast<double>(x1 - e0) * 1e-3);
    in_spread.push_back(static_cast<double>(e1 - e0) * 1e-3);
    out_spread.push_back(static_cast<double>(x1 - x0) * 1e-3);
    mhz.push_back(clk / ns_total * 1e3);
  }
  using glint::detail::median;
  if (!span.empty())
    line += "; launches (" + std::to_string(span.size()) + " recorded, medians): span " +
            std::to_string(median(span)) + " us, block entries spread " +
            std::to_string(median(in_spread)) + " us, exits spread " +
            std::to_string(median(out_spread)) + " us, SM clock " +
            std::to_string(median(mhz)) + " MHz";
  log::write(log::Level::info, line);
}

void FindDiagnostics::report_timeline() const {
  if (timeline_path_.empty() || rows_.empty()) return;
  const CsvFile file = open_csv(timeline_path_, "timeline",
                                "seq,slot,fb,frames,clusters,up0,up1,find0,find1,"
                                "d2h0,d2h1,host_submit,host_wait0,host_wait1\n");
  if (!file) return;
  FILE* f = file.get();
  for (const TimelineRow& r : rows_)
    std::fprintf(f, "%llu,%d,%d,%d,%llu,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n",
                 static_cast<unsigned long long>(r.seq), r.slot, r.fb, r.n,
                 static_cast<unsigned long long>(r.clusters), r.up0, r.up1, r.f0, r.f1, r.d0,
                 r.d1, r.h_submit, r.h_wait0, r.h_wait1);
}

void FindDiagnostics::report_trace(const LanePlan& lane) const {
  if (trace_path_.empty() || !trace_.get()) return;
  std::vector<unsigned long long> t(trace_.size());
  GLINT_CUDA_CHECK(cudaMemcpy(t.data(), trace_.get(), t.size() * sizeof(t[0]),
                              cudaMemcpyDeviceToHost));
  const CsvFile file =
      open_csv(trace_path_, "trace",
               "segment,k,g,ready,above,below,go,loop1,loop2,resolve,release0,release1,end,"
               "undecided,rounds,waited_above,stored,above_wait\n");
  if (!file) return;
  FILE* f = file.get();
  for (uint32_t b = 0; b < lane.blocks; ++b)
    for (int k = 0; k < kTraceFrames; ++k) {
      const unsigned long long* r =
          t.data() + (static_cast<std::size_t>(b) * kTraceFrames + k) * kTraceFields;
      if (r[kTraceReady] == 0) continue;
      std::fprintf(f, "%u,%d", b, k);
      for (int i = 0; i < kTraceCounts; ++i) std::fprintf(f, ",%llu", r[i]);
      const unsigned long long c = r[kTraceCounts];
      std::fprintf(f, ",%llu,%llu,%llu,%llu,%llu\n", c & 0xffffull, (c >> 16) & 0xffull,
                   (c >> 24) & 0xffull, c >> 32, r[kTraceAboveWait]);
    }
}

}  // namespace glint::gpu::detail
