// The GPU cluster-finding engine: pinned staging slots, one H2D copy per batch and GPU into a
// ring of device frame buffers (one more than the slots, so that the next batch's copy may start
// before the batch that last used its slot has been delivered), one captured graph (snapshot +
// persistent find kernel) replayed per batch on the GPU's compute stream, one pack kernel per
// batch after it into device memory, and a device-to-host copy of what was found on the copy
// engine, one completion event per batch. Several GPUs share one pedestal chain: each owns a
// band of rows and the bands at a GPU boundary wait for each other's progress counters through
// peer memory, exactly as neighbouring bands on one GPU do.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "check.cuh"
#include "cuda_owners.hpp"
#include "find_kernels.hpp"
#include "glint/gpu/device.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/detail/env.hpp"
#include "glint/detail/median.hpp"
#include "glint/log.hpp"

namespace glint::gpu {
namespace {

using namespace detail;
namespace cm = cluster_math;

/// Regions (find segments) one 256-thread pack block packs when the results go to device
/// memory: 8, one per warp, or GLINT_PACK_REGIONS (1 to 1024; a tuning knob).
uint32_t pack_regions() {
  static const uint32_t r =
      static_cast<uint32_t>(glint::detail::env_int("GLINT_PACK_REGIONS", 8, 1, 1024));
  return r;
}

/// A full set of per-pixel state arrays on one GPU (whole-frame size, indexed by pixel).
struct StateBuffers {
  DeviceBuffer<double> sum[2], sum2[2], mean[2], noise;
  DeviceBuffer<uint32_t> count;
  DeviceBuffer<unsigned long long> progress, frames_done;
  DeviceBuffer<unsigned int> blocks_done;

  StateBuffers() = default;
  StateBuffers(std::size_t np, uint32_t blocks, cudaStream_t s) {
    for (int i = 0; i < 2; ++i) {
      sum[i] = DeviceBuffer<double>(np);
      sum2[i] = DeviceBuffer<double>(np);
      mean[i] = DeviceBuffer<double>(np);
      sum[i].zero(s);
      sum2[i].zero(s);
      mean[i].zero(s);
    }
    noise = DeviceBuffer<double>(np);
    noise.zero(s);
    count = DeviceBuffer<uint32_t>(np);
    count.zero(s);
    progress = DeviceBuffer<unsigned long long>(blocks);
    progress.zero(s);
    frames_done = DeviceBuffer<unsigned long long>(1);
    frames_done.zero(s);
    blocks_done = DeviceBuffer<unsigned int>(1);
    blocks_done.zero(s);
  }
  PedestalArrays arrays(uint32_t* count_override = nullptr) const {
    PedestalArrays a;
    for (int i = 0; i < 2; ++i) {
      a.sum[i] = sum[i].get();
      a.sum2[i] = sum2[i].get();
      a.mean[i] = mean[i].get();
    }
    a.noise = noise.get();
    a.count = count_override ? count_override : count.get();
    return a;
  }
};

/// What one batch slot holds on one GPU.
struct LaneSlot {
  Stream copy{StreamPriority::high};  // host-to-device copies
  Stream out_stream;                  // device-to-host copies of the results
  Event in_done, found, done;
  Event t0{true}, t1{true};
  // GLINT_FIND_TIMELINE: pack and result-copy times.
  Event pk0{true}, pk1{true}, d0{true}, d1{true};
  int fb = 0, fb_next = 0;  // frame buffer of the batch in flight, of the one being uploaded
  DeviceBuffer<uint32_t> region_counts, region_xy, totals;
  DeviceBuffer<int32_t> region_data;
  uint32_t region_capacity = 0;
  DeviceBuffer<double> snap_sum, snap_sum2, snap_mean, snap_noise;
  PinnedBuffer<unsigned char> out;     // the results on the host
  DeviceBuffer<unsigned char> dout;    // the results on the device (copied into `out`)
  uint64_t out_capacity = 0;
  uint64_t copied = 0;                 // clusters per array that the enqueued copy brings back
  std::vector<GraphExec> graphs;       // per frame buffer
  int n_frames = 0;

  uint32_t* overflow() const { return reinterpret_cast<uint32_t*>(out.get()); }
};

struct OutLayout {
  std::size_t counts, x, y, data, bytes;
};
OutLayout out_layout(int batch, uint64_t capacity, int values) {
  OutLayout l{};
  auto align = [](std::size_t v) { return (v + 255) / 256 * 256; };
  l.counts = 256;
  l.x = align(l.counts + sizeof(uint32_t) * batch);
  l.y = align(l.x + sizeof(uint16_t) * capacity);
  l.data = align(l.y + sizeof(uint16_t) * capacity);
  l.bytes = align(l.data + sizeof(int32_t) * capacity * values);
  return l;
}

struct Lane {
  int device = 0;
  uint32_t r0 = 0, r1 = 0;    // band computed here
  uint32_t fr0 = 0, fr1 = 0;  // frame rows uploaded here (band plus halo)
  uint32_t segment_max = 1, blocks = 0;  // pixels per find block (most), find blocks
  bool resident = true;                  // find blocks keep their pixels' state in shared memory
  Stream compute{StreamPriority::high};
  StateBuffers live;
  StateBuffers rescue;        // re-runs after an overflow (allocated on first need)
  bool has_rescue = false;
  DeviceBuffer<uint16_t> dark_frames;
  DeviceBuffer<unsigned long long> profile;  // GLINT_FIND_PROFILE: cycles per band and phase
  DeviceBuffer<unsigned long long> release_ns;  // GLINT_FIND_PROFILE: release timestamps
  DeviceBuffer<unsigned long long> launch_ts;   // GLINT_FIND_PROFILE: block entry/exit times
  std::vector<DeviceBuffer<uint16_t>> frame_bufs;  // streams + 1
  std::vector<Event> up0, up1;  // GLINT_FIND_TIMELINE: copy into each frame buffer
  std::vector<Event> fb_free;   // each frame buffer's last find has run
  uint64_t copy_clusters = 0;  // clusters per batch the result copies bring back (0: all)
  Event origin{true};          // GLINT_FIND_TIMELINE: time zero
  std::vector<LaneSlot> slots;
};

/// GLINT_FIND_TIMELINE: one batch on GPU 0 (microseconds since the engine was built).
struct TimelineRow {
  uint64_t seq = 0;
  int slot = 0, fb = 0, n = 0;
  uint64_t clusters = 0;
  float up0 = 0, up1 = 0, f0 = 0, f1 = 0, pk0 = 0, pk1 = 0, d0 = 0, d1 = 0;
  double h_submit = 0, h_wait0 = 0, h_wait1 = 0;
};

class GpuEngine final : public GpuClusterFinder {
 public:
  GpuEngine(const FinderParams& params, const GpuFinderOptions& options)
      : params_(params), options_(options),
        thresholds_(cm::make_thresholds(params.n_sigma, params.cluster_size)) {
    validate(params_);
    if (options_.batch_frames < 1)
      throw std::invalid_argument("GPU finder: batch_frames must be at least 1 (got " +
                                  std::to_string(options_.batch_frames) + ")");
    if (options_.streams < 1)
      throw std::invalid_argument("GPU finder: streams must be at least 1 (got " +
                                  std::to_string(options_.streams) + ")");
    if (options_.devices.empty())
      throw std::invalid_argument("GPU finder: the device list is empty");
    if (options_.cluster_capacity < 0)
      throw std::invalid_argument("GPU finder: cluster_capacity must not be negative");
    const int n_dev = device_count();
    for (int d : options_.devices)
      if (d < 0 || d >= n_dev)
        throw std::invalid_argument("GPU finder: device " + std::to_string(d) +
                                    " does not exist (" + std::to_string(n_dev) + " found)");
    if (options_.devices.size() > params_.shape.rows / 8)
      throw std::invalid_argument("GPU finder: too many GPUs for " +
                                  std::to_string(params_.shape.rows) + " rows");
    np_ = params_.shape.pixels();
    values_ = params_.cluster_size * params_.cluster_size;
    capacity_per_frame_ = options_.cluster_capacity > 0
                              ? static_cast<uint64_t>(options_.cluster_capacity)
                              : std::max<uint64_t>(64, np_ / 16);
    // Tuning and diagnosis aids: GLINT_FIND_OUTPUT=mapped packs into mapped host memory on the
    // copy stream (the earlier design); GLINT_FIND_EARLY=0 copies a batch in only after the batch
    // that last used its slot has been delivered; GLINT_FIND_TIMELINE=file writes per-batch
    // device and host times of GPU 0 as CSV.
    device_out_ = !glint::detail::env_is("GLINT_FIND_OUTPUT", "mapped");
    early_upload_ = !glint::detail::env_is("GLINT_FIND_EARLY", "0");
    timeline_path_ = glint::detail::env_text("GLINT_FIND_TIMELINE");
    host_origin_ = std::chrono::steady_clock::now();
    build_lanes();
    slots_.resize(options_.streams);
    for (auto& s : slots_) {
      s.staging = PinnedBuffer<uint16_t>(np_ * options_.batch_frames);
      s.numbers.reserve(options_.batch_frames);
    }
    prepare_batches();
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      lane.compute.synchronize();
      lane.origin.record(lane.compute.get());
    }
    std::string names;
    for (int d : options_.devices) names += (names.empty() ? "" : ", ") + device_info(d).name;
    description_ = "gpu (" + names + ")";
    log::debug("GPU finder ready in {:.0f} ms: {}, batch {}, {} slot(s), {} result clusters per "
               "slot",
               host_us() / 1000.0, description_, options_.batch_frames, options_.streams,
               capacity_per_frame_ * static_cast<uint64_t>(options_.batch_frames));
  }

  ~GpuEngine() override {
    try {
      report_profile();
      report_timeline();
      for (auto& lane : lanes_) {
        DeviceGuard g(lane.device);
        lane.compute.synchronize();
        for (auto& s : lane.slots) {
          s.copy.synchronize();
          s.out_stream.synchronize();
        }
      }
      // Each GPU's resources are released with that GPU current.
      for (auto& lane : lanes_) {
        DeviceGuard g(lane.device);
        Lane released = std::move(lane);
      }
    } catch (const std::exception& e) {
      log::write(log::Level::error, std::string("GPU finder shutdown: ") + e.what());
    }
  }

  const FinderParams& params() const override { return params_; }
  std::string description() const override { return description_; }
  int batch_frames() const override { return options_.batch_frames; }
  void set_view_sink(Sink sink) override { sink_ = std::move(sink); }
  GpuFinderStats stats() const override { return stats_; }

  std::span<uint16_t> staging() override {
    Slot& s = slots_[next_slot_];
    wait_dark_upload(next_slot_);
    if (s.in_flight) {
      if (early_upload_) {
        // The staging is free once its copy to the GPU is done; the results follow in submit().
        for (auto& lane : lanes_) {
          DeviceGuard g(lane.device);
          lane.slots[next_slot_].in_done.synchronize();
        }
      } else {
        collect(next_slot_);
      }
    }
    return {s.staging.get(), np_ * options_.batch_frames};
  }

  void submit(std::span<const uint64_t> frame_numbers) override {
    const int n = static_cast<int>(frame_numbers.size());
    if (n == 0) return;
    if (n > options_.batch_frames)
      throw std::invalid_argument("GPU finder: submit of " + std::to_string(n) +
                                  " frames exceeds the batch of " +
                                  std::to_string(options_.batch_frames));
    const int si = next_slot_;
    Slot& s = slots_[si];
    const double t_submit = host_us();
    // The frame buffer of this batch: the one used S+1 batches ago, delivered by now. The batch
    // that last used this slot keeps its own frames (an overflow re-runs it from them).
    const int fb = next_fb_;
    next_fb_ = (next_fb_ + 1) % (options_.streams + 1);
    if (early_upload_) {
      for (std::size_t li = 0; li < lanes_.size(); ++li) enqueue_upload(li, si, n, fb);
      if (s.in_flight) collect(si);
    } else {
      if (s.in_flight) collect(si);
      for (std::size_t li = 0; li < lanes_.size(); ++li) enqueue_upload(li, si, n, fb);
    }
    s.numbers.assign(frame_numbers.begin(), frame_numbers.end());
    s.n_frames = n;
    s.host_submit = t_submit;
    for (std::size_t li = 0; li < lanes_.size(); ++li) enqueue(li, si, n);
    s.in_flight = true;
    s.sequence = submitted_++;
    frames_done_ += static_cast<uint64_t>(n);
    next_slot_ = (next_slot_ + 1) % static_cast<int>(slots_.size());
  }

  void flush() override {
    // Collect in submission order: the oldest in-flight slot first.
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      const int si = (next_slot_ + i) % static_cast<int>(slots_.size());
      if (slots_[si].in_flight) collect(si);
    }
  }

  void submit_dark(std::size_t n) override {
    if (n == 0) return;
    if (n > static_cast<std::size_t>(options_.batch_frames))
      throw std::invalid_argument("GPU finder: submit_dark of " + std::to_string(n) +
                                  " frames exceeds the batch of " +
                                  std::to_string(options_.batch_frames));
    const int si = next_slot_;
    Slot& s = slots_[si];
    if (s.in_flight) collect(si);  // the oldest batch in flight: results stay in order
    // On each GPU's compute stream: in order with the finds around it, and the one dark-frame
    // buffer is not overwritten before the accumulation that reads it has run.
    const int par = static_cast<int>(frames_done_ & 1u);
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      cudaStream_t cs = lane.compute.get();
      upload(lane, lane.dark_frames.get(), s.staging.get(), n, cs);
      lane.slots[si].in_done.record(cs);
      launch_dark(lane.live.arrays(), par, lane.dark_frames.get(), static_cast<uint32_t>(n),
                  params_.shape.cols, lane.r0, lane.r1, lane.fr0,
                  static_cast<uint32_t>(lane.fr1 - lane.fr0), params_.pedestal_window, cs);
      ++stats_.direct_launches;
    }
    s.dark_upload = true;
    next_slot_ = (next_slot_ + 1) % static_cast<int>(slots_.size());
  }

  void push_dark(std::span<const uint16_t> frames) override {
    const std::size_t n_total = check_dark_frames(params_, frames);
    const std::size_t chunk = static_cast<std::size_t>(options_.batch_frames);
    for (std::size_t f0 = 0; f0 < n_total; f0 += chunk) {
      const std::size_t n = std::min(chunk, n_total - f0);
      std::span<uint16_t> st = staging();
      std::memcpy(st.data(), frames.data() + f0 * np_, n * np_ * sizeof(uint16_t));
      submit_dark(n);
    }
    // Unlike submit_dark, the frames are accumulated when this returns.
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      lane.compute.synchronize();
    }
  }

  void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
            ClusterTable& out) override {
    check_find_arguments(params_, frames, frame_numbers, out);
    flush();  // earlier streamed batches go to the streaming sink first
    Sink saved = std::exchange(sink_, [&out](const GpuBatchView& v) { append_clusters(out, v); });
    try {
      const std::size_t b = static_cast<std::size_t>(options_.batch_frames);
      for (std::size_t f0 = 0; f0 < frame_numbers.size(); f0 += b) {
        const std::size_t n = std::min(b, frame_numbers.size() - f0);
        std::span<uint16_t> st = staging();
        std::memcpy(st.data(), frames.data() + f0 * np_, n * np_ * sizeof(uint16_t));
        submit(frame_numbers.subspan(f0, n));
      }
      flush();
    } catch (...) {
      sink_ = std::move(saved);
      throw;
    }
    sink_ = std::move(saved);
  }

  PedestalState pedestal() const override {
    PedestalState st(params_.shape, params_.pedestal_window);
    const int par = static_cast<int>(frames_done_ & 1u);
    for (const auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      const std::size_t off = static_cast<std::size_t>(lane.r0) * params_.shape.cols;
      const std::size_t n = static_cast<std::size_t>(lane.r1 - lane.r0) * params_.shape.cols;
      // Ordered after every find already queued on this GPU; nothing is drained.
      GLINT_CUDA_CHECK(cudaMemcpyAsync(st.sum.data() + off, lane.live.sum[par].get() + off,
                                       n * sizeof(double), cudaMemcpyDeviceToHost,
                                       lane.compute.get()));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(st.sum2.data() + off, lane.live.sum2[par].get() + off,
                                       n * sizeof(double), cudaMemcpyDeviceToHost,
                                       lane.compute.get()));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(st.count.data() + off, lane.live.count.get() + off,
                                       n * sizeof(uint32_t), cudaMemcpyDeviceToHost,
                                       lane.compute.get()));
    }
    for (const auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      lane.compute.synchronize();
    }
    return st;
  }

  void load_pedestal(const PedestalState& state) override {
    if (state.shape != params_.shape || state.window != params_.pedestal_window)
      throw std::invalid_argument("load_pedestal: shape or window differs from the finder's");
    if (state.sum.size() != np_ || state.sum2.size() != np_ || state.count.size() != np_)
      throw std::invalid_argument("load_pedestal: state arrays do not match the frame shape");
    flush();
    const int par = static_cast<int>(frames_done_ & 1u);
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      // Every row this GPU may read (band and halo) gets the state.
      const std::size_t off = static_cast<std::size_t>(lane.fr0) * params_.shape.cols;
      const std::size_t n = static_cast<std::size_t>(lane.fr1 - lane.fr0) * params_.shape.cols;
      cudaStream_t s = lane.compute.get();
      GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.live.sum[par].get() + off, state.sum.data() + off,
                                       n * sizeof(double), cudaMemcpyHostToDevice, s));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.live.sum2[par].get() + off, state.sum2.data() + off,
                                       n * sizeof(double), cudaMemcpyHostToDevice, s));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.live.count.get() + off, state.count.data() + off,
                                       n * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
      launch_derive(lane.live.arrays(), par, params_.shape.cols, lane.fr0, lane.fr1, s);
      lane.compute.synchronize();
    }
  }

 private:
  struct Slot {
    PinnedBuffer<uint16_t> staging;
    std::vector<uint64_t> numbers;
    int n_frames = 0;
    bool in_flight = false;
    bool dark_upload = false;  // submit_dark's copy of the staging may still be running
    uint64_t sequence = 0;
    double host_submit = 0;  // GLINT_FIND_TIMELINE
  };

  /// The staging of slot si is free of submit_dark's copy.
  void wait_dark_upload(int si) {
    if (!slots_[si].dark_upload) return;
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      lane.slots[si].in_done.synchronize();
    }
    slots_[si].dark_upload = false;
  }

  double host_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                     host_origin_)
        .count();
  }

  /// With GLINT_FIND_PROFILE set: cycles per frame in each phase of the find kernel, averaged
  /// over the bands of GPU 0 (a tuning aid).
  void report_profile() {
    Lane& lane = lanes_[0];
    if (!lane.profile.get() || stats_.frames == 0) return;
    DeviceGuard g(lane.device);
    lane.compute.synchronize();
    std::vector<unsigned long long> c(lane.profile.size());
    GLINT_CUDA_CHECK(cudaMemcpy(c.data(), lane.profile.get(), c.size() * sizeof(c[0]),
                                cudaMemcpyDeviceToHost));
    static const char* names[kFindPhases] = {"wait",    "loop1", "loop2",
                                             "resolve", "release", "emit"};
    std::string line = "find kernel cycles/frame (segment average):";
    for (int ph = 0; ph < kFindPhases; ++ph) {
      double sum = 0, mx = 0;
      for (uint32_t b = 0; b < lane.blocks; ++b) {
        sum += static_cast<double>(c[b * kFindProfileSlots + ph]);
        mx = std::max(mx, static_cast<double>(c[b * kFindProfileSlots + ph]));
      }
      line += " " + std::string(names[ph]) + " " +
              std::to_string(static_cast<long long>(sum / lane.blocks / stats_.frames)) + " (max " +
              std::to_string(static_cast<long long>(mx / stats_.frames)) + ")";
    }
    double ns = 0, waited = 0;
    for (uint32_t b = 0; b < lane.blocks; ++b) {
      ns += static_cast<double>(c[b * kFindProfileSlots + kFindPhases]);
      waited += static_cast<double>(c[b * kFindProfileSlots + kFindPhases + 1]);
    }
    if (waited > 0)
      line += "; hand-off from the segment before: " +
              std::to_string(static_cast<long long>(ns / waited)) + " ns (over " +
              std::to_string(static_cast<long long>(100.0 * waited / lane.blocks /
                                                    static_cast<double>(stats_.frames))) +
              " % of frames, where the segment waited)";
    // Whole launches from the blocks' own clocks: span from the first block's entry to the last
    // block's exit, spread of the entries and exits, SM clock (cycles per nanosecond).
    if (lane.launch_ts.get()) {
      std::vector<unsigned long long> t(lane.launch_ts.size());
      GLINT_CUDA_CHECK(cudaMemcpy(t.data(), lane.launch_ts.get(), t.size() * sizeof(t[0]),
                                  cudaMemcpyDeviceToHost));
      std::vector<double> span, in_spread, out_spread, mhz;
      for (int r = 0; r < kLaunchRecords; ++r) {
        const unsigned long long* q = t.data() + static_cast<std::size_t>(r) * lane.blocks * 4;
        unsigned long long e0 = ~0ull, e1 = 0, x0 = ~0ull, x1 = 0;
        double clk = 0, ns = 0;
        bool ok = true;
        for (uint32_t b = 0; b < lane.blocks; ++b) {
          const unsigned long long* v = q + b * 4;
          if (v[0] == 0 || v[2] < v[0]) ok = false;
          e0 = std::min(e0, v[0]);
          e1 = std::max(e1, v[0]);
          x0 = std::min(x0, v[2]);
          x1 = std::max(x1, v[2]);
          clk += static_cast<double>(v[3] - v[1]);
          ns += static_cast<double>(v[2] - v[0]);
        }
        if (!ok || ns <= 0) continue;
        span.push_back(static_cast<double>(x1 - e0) * 1e-3);
        in_spread.push_back(static_cast<double>(e1 - e0) * 1e-3);
        out_spread.push_back(static_cast<double>(x1 - x0) * 1e-3);
        mhz.push_back(clk / ns * 1e3);
      }
      using glint::detail::median;
      if (!span.empty())
        line += "; launches (" + std::to_string(span.size()) + " recorded, medians): span " +
                std::to_string(median(span)) + " us, block entries spread " +
                std::to_string(median(in_spread)) + " us, exits spread " +
                std::to_string(median(out_spread)) + " us, SM clock " +
                std::to_string(median(mhz)) + " MHz";
    }
    log::write(log::Level::info, line);
  }

  /// With GLINT_FIND_TIMELINE: the per-batch times of GPU 0 as CSV (a tuning aid).
  void report_timeline() {
    if (timeline_path_.empty() || timeline_.empty()) return;
    FILE* f = std::fopen(timeline_path_.c_str(), "w");
    if (!f) {
      log::write(log::Level::warn, "GPU finder: cannot write the timeline to " + timeline_path_);
      return;
    }
    std::fprintf(f, "seq,slot,fb,frames,clusters,up0,up1,find0,find1,pack0,pack1,d2h0,d2h1,"
                    "host_submit,host_wait0,host_wait1\n");
    for (const TimelineRow& r : timeline_)
      std::fprintf(f, "%llu,%d,%d,%d,%llu,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n",
                   static_cast<unsigned long long>(r.seq), r.slot, r.fb, r.n,
                   static_cast<unsigned long long>(r.clusters), r.up0, r.up1, r.f0, r.f1, r.pk0,
                   r.pk1, r.d0, r.d1, r.h_submit, r.h_wait0, r.h_wait1);
    std::fclose(f);
  }

  void build_lanes() {
    const uint32_t rows = params_.shape.rows, cols = params_.shape.cols;
    const uint32_t h = static_cast<uint32_t>(params_.cluster_size / 2);
    const std::size_t n_lanes = options_.devices.size();
    lanes_.reserve(n_lanes);
    for (std::size_t li = 0; li < n_lanes; ++li) {
      // Streams and events belong to the device current when they are created.
      DeviceGuard on_device(options_.devices[li]);
      Lane& lane = lanes_.emplace_back();
      lane.device = options_.devices[li];
      lane.r0 = static_cast<uint32_t>(rows * li / n_lanes);
      lane.r1 = static_cast<uint32_t>(rows * (li + 1) / n_lanes);
      lane.fr0 = lane.r0 >= h ? lane.r0 - h : 0;
      lane.fr1 = std::min(rows, lane.r1 + h);
      DeviceGuard g(lane.device);
      choose_segments(lane);
      lane.live = StateBuffers(np_, lane.blocks, lane.compute.get());
      lane.dark_frames = DeviceBuffer<uint16_t>(static_cast<std::size_t>(lane.fr1 - lane.fr0) *
                                                cols * options_.batch_frames);
      lane.frame_bufs.resize(options_.streams + 1);
      for (int i = 0; i <= options_.streams; ++i) {
        lane.up0.emplace_back(true);
        lane.up1.emplace_back(true);
        lane.fb_free.emplace_back();
      }
      lane.slots.resize(options_.streams);
      for (auto& ls : lane.slots) ls.graphs.resize(options_.streams + 1);
      if (li == 0 && glint::detail::env_set("GLINT_FIND_PROFILE")) {
        lane.profile = DeviceBuffer<unsigned long long>(lane.blocks * kFindProfileSlots);
        lane.profile.zero(lane.compute.get());
        lane.release_ns = DeviceBuffer<unsigned long long>(2 * lane.blocks);
        lane.release_ns.zero(lane.compute.get());
        lane.launch_ts = DeviceBuffer<unsigned long long>(kLaunchRecords * lane.blocks * 4);
        lane.launch_ts.zero(lane.compute.get());
      }
    }
    if (n_lanes > 1) {
      for (std::size_t li = 0; li < n_lanes; ++li) {
        DeviceGuard g(lanes_[li].device);
        for (std::size_t lj : {li - 1, li + 1}) {
          if (lj >= n_lanes || lanes_[lj].device == lanes_[li].device) continue;
          int ok = 0;
          GLINT_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, lanes_[li].device, lanes_[lj].device));
          if (!ok)
            throw std::invalid_argument("GPU finder: GPU " + std::to_string(lanes_[li].device) +
                                        " cannot access GPU " +
                                        std::to_string(lanes_[lj].device) +
                                        "'s memory (peer access is needed across GPUs)");
          const cudaError_t e = cudaDeviceEnablePeerAccess(lanes_[lj].device, 0);
          if (e == cudaErrorPeerAccessAlreadyEnabled)
            (void)cudaGetLastError();
          else
            GLINT_CUDA_CHECK(e);
        }
      }
    }
  }

  /// Cuts the lane's band into one segment of consecutive pixels per resident find block: as
  /// many blocks as the GPU holds at once, each segment at least one window halo long. Blocks
  /// keep their pixels' state in shared memory where it fits (GLINT_FIND_RESIDENT=0 turns that
  /// off), at the same number of blocks per multiprocessor before fewer are tried.
  /// GLINT_FIND_SEGMENTS caps the number of segments where the longer segments still fit (a
  /// tuning and test aid).
  void choose_segments(Lane& lane) {
    const uint64_t cols = params_.shape.cols;
    const uint64_t band_px = static_cast<uint64_t>(lane.r1 - lane.r0) * cols;
    const uint64_t h = static_cast<uint64_t>(params_.cluster_size / 2);
    const uint64_t halo = std::max<uint64_t>(1, h * cols + h);
    const bool allow_resident = !glint::detail::env_is("GLINT_FIND_RESIDENT", "0");
    const long long cap = glint::detail::env_int("GLINT_FIND_SEGMENTS", 0, 1, 1LL << 40);
    int sms = 0;
    GLINT_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, lane.device));
    const uint64_t by_halo = band_px / halo;
    for (const uint64_t limit : {cap > 0 ? static_cast<uint64_t>(cap) : by_halo, by_halo}) {
      for (int per_sm = 4; per_sm >= 1 && lane.blocks == 0; --per_sm) {
        const uint64_t blocks =
            std::min({static_cast<uint64_t>(per_sm) * sms, by_halo, limit});
        if (blocks == 0) break;
        const uint64_t seg = (band_px + blocks - 1) / blocks;
        for (const bool resident : {true, false}) {
          if (resident && !allow_resident) continue;
          const int fit = find_blocks_per_sm(params_.shape.cols, static_cast<uint32_t>(seg),
                                             params_.cluster_size, resident);
          if (fit >= per_sm || (fit >= 1 && blocks <= static_cast<uint64_t>(fit) * sms)) {
            lane.blocks = static_cast<uint32_t>(blocks);
            lane.segment_max = static_cast<uint32_t>(seg);
            lane.resident = resident;
            break;
          }
        }
      }
      if (lane.blocks != 0) break;
    }
    if (lane.blocks == 0)
      throw std::invalid_argument(
          "GPU finder: frames of " + std::to_string(params_.shape.cols) + " columns with " +
          std::to_string(params_.cluster_size) + "x" + std::to_string(params_.cluster_size) +
          " clusters do not fit the GPU's shared memory, or GPU band too small (" +
          std::to_string(lane.r1 - lane.r0) + " rows)");
    log::write(log::Level::debug, "GPU finder: GPU " + std::to_string(lane.device) + " rows " +
                                      std::to_string(lane.r0) + ".." + std::to_string(lane.r1) +
                                      " in " + std::to_string(lane.blocks) + " segments of <= " +
                                      std::to_string(lane.segment_max) + " pixels, " +
                                      std::to_string(find_threads()) + " threads each, state " +
                                      (lane.resident ? "in shared memory" : "in global memory"));
  }

  uint32_t region_capacity_for(const Lane& lane) const {
    const uint64_t seg = lane.segment_max;
    const uint64_t cap = (2 * capacity_per_frame_ * seg + np_ - 1) / np_;
    return static_cast<uint32_t>(std::clamp<uint64_t>(cap, 1, seg));
  }

  void ensure_slot_buffers(Lane& lane, LaneSlot& ls) {
    const std::size_t b = static_cast<std::size_t>(options_.batch_frames);
    const uint32_t want_region = std::max(region_capacity_for(lane), min_region_capacity_);
    const uint64_t want_out = capacity_per_frame_ * b;
    if (!ls.totals.get()) {
      ls.totals = DeviceBuffer<uint32_t>(b);
      ls.region_counts = DeviceBuffer<uint32_t>(b * lane.blocks);
      const std::size_t band_px = static_cast<std::size_t>(lane.r1 - lane.r0) * params_.shape.cols;
      ls.snap_sum = DeviceBuffer<double>(np_);
      ls.snap_sum2 = DeviceBuffer<double>(np_);
      ls.snap_mean = DeviceBuffer<double>(np_);
      ls.snap_noise = DeviceBuffer<double>(np_);
      (void)band_px;
    }
    if (ls.region_capacity < want_region) {
      ls.region_capacity = want_region;
      ls.region_xy = DeviceBuffer<uint32_t>(b * lane.blocks * want_region);
      ls.region_data = DeviceBuffer<int32_t>(b * lane.blocks * want_region * values_);
      for (auto& g : ls.graphs) g = GraphExec();
    }
    if (ls.out_capacity < want_out) {
      ls.out_capacity = want_out;
      const std::size_t bytes = out_layout(options_.batch_frames, want_out, values_).bytes;
      ls.out = PinnedBuffer<unsigned char>(bytes);
      ls.dout = device_out_ ? DeviceBuffer<unsigned char>(bytes) : DeviceBuffer<unsigned char>();
      for (auto& g : ls.graphs) g = GraphExec();
    }
  }

  PedestalArrays snapshot_arrays(const Lane& lane, const LaneSlot& ls) const {
    PedestalArrays a;
    a.sum[0] = ls.snap_sum.get();
    a.sum2[0] = ls.snap_sum2.get();
    a.mean[0] = ls.snap_mean.get();
    a.noise = ls.snap_noise.get();
    a.count = lane.live.count.get();
    return a;
  }

  /// The find launch of lane `li` on `state` (the live state or the rescue state).
  FindLaunch make_launch(std::size_t li, bool rescue, const LaneSlot& ls, int n,
                         uint32_t* region_counts, uint32_t* region_xy, int32_t* region_data,
                         uint32_t region_capacity, uint32_t* totals) const {
    const Lane& lane = lanes_[li];
    const auto state_of = [&](const Lane& l) -> const StateBuffers& {
      return rescue ? l.rescue : l.live;
    };
    FindLaunch p;
    p.rows = params_.shape.rows;
    p.cols = params_.shape.cols;
    p.band_begin = lane.r0;
    p.band_end = lane.r1;
    p.frame_row0 = lane.fr0;
    p.frame_rows = lane.fr1 - lane.fr0;
    p.cluster_size = params_.cluster_size;
    p.segment_max = lane.segment_max;
    p.resident = lane.resident;
    p.blocks = lane.blocks;
    p.window = params_.pedestal_window;
    p.thresholds = thresholds_;
    p.own = state_of(lane).arrays(lane.live.count.get());
    p.above = p.own;
    p.below = p.own;
    if (li > 0) {
      const Lane& up = lanes_[li - 1];
      p.above = state_of(up).arrays(up.live.count.get());
      p.progress_above = state_of(up).progress.get() + (up.blocks - 1);
    }
    if (li + 1 < lanes_.size()) {
      const Lane& down = lanes_[li + 1];
      p.below = state_of(down).arrays(down.live.count.get());
      p.progress_below = state_of(down).progress.get();
    }
    p.progress = state_of(lane).progress.get();
    p.frames_done = state_of(lane).frames_done.get();
    p.blocks_done = state_of(lane).blocks_done.get();
    p.frames = lane.frame_bufs[ls.fb].get();
    p.n_frames = static_cast<uint32_t>(n);
    p.region_counts = region_counts;
    p.region_xy = region_xy;
    p.region_data = region_data;
    p.region_capacity = region_capacity;
    p.frame_totals = totals;
    p.profile = rescue ? nullptr : lane.profile.get();
    p.release_ns = lane.release_ns.get();
    p.launch_ts = rescue ? nullptr : lane.launch_ts.get();
    return p;
  }

  PackLaunch make_pack(const Lane& lane, const LaneSlot& ls, int n, const uint32_t* region_counts,
                       const uint32_t* region_xy, const int32_t* region_data,
                       uint32_t region_capacity, const uint32_t* totals, unsigned char* out,
                       uint64_t out_capacity) const {
    const OutLayout l = out_layout(options_.batch_frames, out_capacity, values_);
    PackLaunch p;
    p.n_frames = static_cast<uint32_t>(n);
    p.blocks = lane.blocks;
    p.region_capacity = region_capacity;
    p.values = values_;
    p.region_counts = region_counts;
    p.region_xy = region_xy;
    p.region_data = region_data;
    p.frame_totals = totals;
    p.out_counts = reinterpret_cast<uint32_t*>(out + l.counts);
    p.out_x = reinterpret_cast<uint16_t*>(out + l.x);
    p.out_y = reinterpret_cast<uint16_t*>(out + l.y);
    p.out_data = reinterpret_cast<int32_t*>(out + l.data);
    p.out_capacity = out_capacity;
    p.out_overflow = reinterpret_cast<uint32_t*>(out);
    (void)ls;
    return p;
  }

  /// Copies rows [fr0, fr1) of n frames from the pinned staging into `dst`.
  void upload(const Lane& lane, uint16_t* dst, const uint16_t* staging, std::size_t n,
              cudaStream_t s) const {
    const std::size_t cols = params_.shape.cols;
    const std::size_t rows_here = lane.fr1 - lane.fr0;
    if (rows_here == params_.shape.rows) {
      GLINT_CUDA_CHECK(cudaMemcpyAsync(dst, staging, n * np_ * sizeof(uint16_t),
                                       cudaMemcpyHostToDevice, s));
    } else {
      GLINT_CUDA_CHECK(cudaMemcpy2DAsync(dst, rows_here * cols * sizeof(uint16_t),
                                         staging + lane.fr0 * cols, np_ * sizeof(uint16_t),
                                         rows_here * cols * sizeof(uint16_t), n,
                                         cudaMemcpyHostToDevice, s));
    }
  }

  /// The find work of one batch on one GPU: snapshot of the batch-start state, then the find
  /// kernel. Captured once per slot for full batches.
  void enqueue_find(std::size_t li, LaneSlot& ls, int n, cudaStream_t s) {
    Lane& lane = lanes_[li];
    GLINT_CUDA_CHECK(cudaMemsetAsync(ls.totals.get(), 0, sizeof(uint32_t) * n, s));
    launch_snapshot(lane.live.arrays(), lane.live.frames_done.get(), snapshot_arrays(lane, ls),
                    params_.shape.cols, lane.fr0, lane.fr1, s);
    launch_find(make_launch(li, false, ls, n, ls.region_counts.get(), ls.region_xy.get(),
                            ls.region_data.get(), ls.region_capacity, ls.totals.get()),
                s);
  }

  /// The host-to-device copy of slot si's staging into frame buffer fb.
  void enqueue_upload(std::size_t li, int si, int n, int fb) {
    Lane& lane = lanes_[li];
    LaneSlot& ls = lane.slots[si];
    DeviceGuard g(lane.device);
    ls.fb_next = fb;
    // The find that last read this buffer has run (already so when batches alternate with slots
    // in order; submit_dark takes slot turns without a frame buffer).
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(ls.copy.get(), lane.fb_free[fb].get(), 0));
    if (!timeline_path_.empty()) lane.up0[fb].record(ls.copy.get());
    upload(lane, frame_buffer(lane, fb), slots_[si].staging.get(), static_cast<std::size_t>(n),
           ls.copy.get());
    if (!timeline_path_.empty()) lane.up1[fb].record(ls.copy.get());
    ls.in_done.record(ls.copy.get());
  }

  /// The captured find work of a full batch in slot `ls` on frame buffer ls.fb (captured on
  /// first use, and again after an overflow grew the slot's buffers).
  GraphExec& graph_for(std::size_t li, LaneSlot& ls) {
    GraphExec& graph = ls.graphs[ls.fb];
    if (graph) return graph;
    cudaStream_t cs = lanes_[li].compute.get();
    cudaGraph_t captured = nullptr;
    GLINT_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue_find(li, ls, options_.batch_frames, cs);
    } catch (...) {
      (void)cudaStreamEndCapture(cs, &captured);
      if (captured) (void)cudaGraphDestroy(captured);
      throw;
    }
    GLINT_CUDA_CHECK(cudaStreamEndCapture(cs, &captured));
    graph = GraphExec(captured);
    return graph;
  }

  /// Everything a batch needs, set up before the first frame arrives: the frame buffers, each
  /// slot's output buffers (pinned host memory of ~100 MB per slot at 400x400: allocating it
  /// while frames stream in stalls the run for tens of milliseconds, and pinning holds the
  /// process's memory map, which the receiving threads need for their page faults) and the
  /// captured find work of every slot and frame buffer.
  void prepare_batches() {
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      Lane& lane = lanes_[li];
      DeviceGuard g(lane.device);
      for (int fb = 0; fb <= options_.streams; ++fb) frame_buffer(lane, fb);
      for (auto& ls : lane.slots) {
        ensure_slot_buffers(lane, ls);
        for (int fb = 0; fb <= options_.streams; ++fb) {
          ls.fb = fb;
          (void)graph_for(li, ls);
        }
        ls.fb = 0;
      }
      lane.compute.synchronize();
    }
  }

  /// Frame buffer fb of a lane (batch_frames frames of the rows uploaded to it).
  uint16_t* frame_buffer(Lane& lane, int fb) {
    if (!lane.frame_bufs[fb].get())
      lane.frame_bufs[fb] = DeviceBuffer<uint16_t>(static_cast<std::size_t>(lane.fr1 - lane.fr0) *
                                                   params_.shape.cols *
                                                   static_cast<std::size_t>(options_.batch_frames));
    return lane.frame_bufs[fb].get();
  }

  /// The find, pack and result copy of slot si's batch (its frames already being copied).
  void enqueue(std::size_t li, int si, int n) {
    Lane& lane = lanes_[li];
    LaneSlot& ls = lane.slots[si];
    DeviceGuard g(lane.device);
    ensure_slot_buffers(lane, ls);
    ls.fb = ls.fb_next;
    ls.n_frames = n;
    const bool tl = !timeline_path_.empty();
    cudaStream_t cs = lane.compute.get();
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(cs, ls.in_done.get(), 0));
    ls.t0.record(cs);
    if (n == options_.batch_frames) {
      graph_for(li, ls).launch(cs);
      ++stats_.graph_launches;
    } else {
      enqueue_find(li, ls, n, cs);
      stats_.direct_launches += 2;
    }
    ls.t1.record(cs);
    lane.fb_free[ls.fb].record(cs);
    if (device_out_) {
      // Pack into device memory right after the find (a few tens of microseconds on the SMs,
      // which the next find needs whole), then copy what was found with the copy engine while
      // the next batch is searched.
      GLINT_CUDA_CHECK(cudaMemsetAsync(ls.dout.get(), 0, sizeof(uint32_t), cs));
      if (tl) ls.pk0.record(cs);
      PackLaunch pk = make_pack(lane, ls, n, ls.region_counts.get(), ls.region_xy.get(),
                                ls.region_data.get(), ls.region_capacity, ls.totals.get(),
                                ls.dout.get(), ls.out_capacity);
      pk.chunks = (lane.blocks + pack_regions() - 1) / pack_regions();
      launch_pack(pk, cs, 256);
      ++stats_.direct_launches;
      if (tl) ls.pk1.record(cs);
      ls.found.record(cs);
      cudaStream_t os = ls.out_stream.get();
      GLINT_CUDA_CHECK(cudaStreamWaitEvent(os, ls.found.get(), 0));
      if (tl) ls.d0.record(os);
      const uint64_t want = lane.copy_clusters == 0 ? ls.out_capacity : lane.copy_clusters;
      ls.copied = std::min<uint64_t>(want, ls.out_capacity);
      copy_results(ls, 0, ls.copied, os);
      if (tl) ls.d1.record(os);
      ls.done.record(os);
    } else {
      *ls.overflow() = 0;
      ls.found.record(cs);
      GLINT_CUDA_CHECK(cudaStreamWaitEvent(ls.copy.get(), ls.found.get(), 0));
      if (tl) ls.pk0.record(ls.copy.get());
      launch_pack(make_pack(lane, ls, n, ls.region_counts.get(), ls.region_xy.get(),
                            ls.region_data.get(), ls.region_capacity, ls.totals.get(),
                            ls.out.get(), ls.out_capacity),
                  ls.copy.get());
      ++stats_.direct_launches;
      if (tl) {
        ls.pk1.record(ls.copy.get());
        ls.d0.record(ls.copy.get());
        ls.d1.record(ls.copy.get());
      }
      ls.copied = ls.out_capacity;
      ls.done.record(ls.copy.get());
    }
  }

  /// Copies clusters [c0, c1) of slot ls's device results into its host buffer (with c0 == 0
  /// also the overflow flag and the per-frame counts).
  void copy_results(const LaneSlot& ls, uint64_t c0, uint64_t c1, cudaStream_t s) const {
    const OutLayout l = out_layout(options_.batch_frames, ls.out_capacity, values_);
    const auto copy = [&](std::size_t from, std::size_t to) {
      if (to > from)
        GLINT_CUDA_CHECK(cudaMemcpyAsync(ls.out.get() + from, ls.dout.get() + from, to - from,
                                         cudaMemcpyDeviceToHost, s));
    };
    if (c0 == 0) {
      copy(0, l.x + sizeof(uint16_t) * c1);  // flag, counts, x
    } else {
      copy(l.x + sizeof(uint16_t) * c0, l.x + sizeof(uint16_t) * c1);
    }
    copy(l.y + sizeof(uint16_t) * c0, l.y + sizeof(uint16_t) * c1);
    copy(l.data + sizeof(int32_t) * values_ * c0, l.data + sizeof(int32_t) * values_ * c1);
  }

  /// Waits for slot si's batch, re-runs it exactly if its clusters did not fit, hands the
  /// results to the sink.
  void collect(int si) {
    Slot& s = slots_[si];
    const int n = s.n_frames;
    bool overflow = false;
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      Lane& lane = lanes_[li];
      DeviceGuard g(lane.device);
      LaneSlot& ls = lane.slots[si];
      const double w0 = host_us();
      ls.done.synchronize();
      const double w1 = host_us();
      ++stats_.host_syncs;
      float ms = 0;
      GLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, ls.t0.get(), ls.t1.get()));
      stats_.kernel_ms += ms;
      const bool lane_overflow = *ls.overflow() != 0;
      overflow = overflow || lane_overflow;
      uint64_t total = 0;
      if (!lane_overflow) {
        const OutLayout l = out_layout(options_.batch_frames, ls.out_capacity, values_);
        const auto* counts = reinterpret_cast<const uint32_t*>(ls.out.get() + l.counts);
        for (int i = 0; i < n; ++i) total += counts[i];
      }
      if (device_out_ && !lane_overflow) {
        // More than the copy brought back (the load rose): the rest now, then a larger copy.
        if (total > ls.copied) {
          ++stats_.result_recopies;
          copy_results(ls, ls.copied, total, ls.out_stream.get());
          ls.out_stream.synchronize();
        }
        lane.copy_clusters = total + total / 4 + 16 * static_cast<uint64_t>(options_.batch_frames);
      }
      if (li == 0 && !timeline_path_.empty()) {
        TimelineRow r;
        r.seq = s.sequence;
        r.slot = si;
        r.fb = ls.fb;
        r.n = n;
        r.clusters = total;
        const auto at = [&](const Event& e) {
          float t = 0;
          GLINT_CUDA_CHECK(cudaEventElapsedTime(&t, lane.origin.get(), e.get()));
          return t * 1000.0f;
        };
        r.up0 = at(lane.up0[ls.fb]);
        r.up1 = at(lane.up1[ls.fb]);
        r.f0 = at(ls.t0);
        r.f1 = at(ls.t1);
        r.pk0 = at(ls.pk0);
        r.pk1 = at(ls.pk1);
        r.d0 = at(ls.d0);
        r.d1 = at(ls.d1);
        r.h_submit = s.host_submit;
        r.h_wait0 = w0;
        r.h_wait1 = w1;
        timeline_.push_back(r);
      }
    }
    s.in_flight = false;
    std::vector<const unsigned char*> outs(lanes_.size());
    std::vector<uint64_t> caps(lanes_.size());
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      outs[li] = lanes_[li].slots[si].out.get();
      caps[li] = lanes_[li].slots[si].out_capacity;
    }
    if (overflow) {
      rescue(si, n);
      for (std::size_t li = 0; li < lanes_.size(); ++li) {
        outs[li] = rescue_out_[li].get();
        caps[li] = rescue_capacity_[li];
      }
    }
    deliver(s, n, outs, caps);
  }

  void deliver(const Slot& s, int n, const std::vector<const unsigned char*>& outs,
               const std::vector<uint64_t>& caps) {
    GpuBatchView v;
    v.frame_numbers = std::span<const uint64_t>(s.numbers.data(), n);
    uint64_t total = 0;
    bands_.resize(lanes_.size());
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      const OutLayout l = out_layout(options_.batch_frames, caps[li], values_);
      const auto* counts = reinterpret_cast<const uint32_t*>(outs[li] + l.counts);
      uint64_t here = 0;
      for (int i = 0; i < n; ++i) here += counts[i];
      GpuBandView& b = bands_[li];
      b.counts = std::span<const uint32_t>(counts, n);
      b.x = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(outs[li] + l.x), here);
      b.y = std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(outs[li] + l.y), here);
      b.data = std::span<const int32_t>(reinterpret_cast<const int32_t*>(outs[li] + l.data),
                                        here * values_);
      total += here;
    }
    v.bands = bands_;
    ++stats_.batches;
    stats_.frames += static_cast<uint64_t>(n);
    stats_.clusters += total;
    if (sink_) sink_(v);
  }

  /// Exact re-run of slot si's batch from its start-of-batch snapshot, on separate state, into
  /// exactly sized buffers. The live state is already right (capacity never changes decisions).
  void rescue(int si, int n) {
    ++stats_.overflow_reruns;
    log::write(log::Level::warn, "GPU finder: a batch found more clusters than the output "
                                 "holds; re-running it exactly and growing the capacity");
    rescue_out_.resize(lanes_.size());
    rescue_capacity_.assign(lanes_.size(), 0);
    std::vector<DeviceBuffer<uint32_t>> counts(lanes_.size()), xy(lanes_.size()),
        totals(lanes_.size());
    std::vector<DeviceBuffer<int32_t>> data(lanes_.size());
    std::vector<uint32_t> caps(lanes_.size());
    uint64_t max_frame_total = 0;
    // Sizes from the true counts of the overflowed run.
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      Lane& lane = lanes_[li];
      DeviceGuard g(lane.device);
      LaneSlot& ls = lane.slots[si];
      std::vector<uint32_t> rc(static_cast<std::size_t>(n) * lane.blocks);
      std::vector<uint32_t> ft(n);
      GLINT_CUDA_CHECK(cudaMemcpy(rc.data(), ls.region_counts.get(), rc.size() * 4,
                                  cudaMemcpyDeviceToHost));
      GLINT_CUDA_CHECK(cudaMemcpy(ft.data(), ls.totals.get(), ft.size() * 4,
                                  cudaMemcpyDeviceToHost));
      uint32_t mx = 1;
      for (uint32_t c : rc) mx = std::max(mx, c);
      uint64_t tot = 0;
      for (uint32_t c : ft) {
        tot += c;
        max_frame_total = std::max<uint64_t>(max_frame_total, c);
      }
      caps[li] = mx;
      min_region_capacity_ = std::max(min_region_capacity_, mx);
      counts[li] = DeviceBuffer<uint32_t>(static_cast<std::size_t>(n) * lane.blocks);
      xy[li] = DeviceBuffer<uint32_t>(static_cast<std::size_t>(n) * lane.blocks * mx);
      data[li] = DeviceBuffer<int32_t>(static_cast<std::size_t>(n) * lane.blocks * mx * values_);
      totals[li] = DeviceBuffer<uint32_t>(n);
      rescue_capacity_[li] = std::max<uint64_t>(tot, 1);
      rescue_out_[li] = PinnedBuffer<unsigned char>(
          out_layout(options_.batch_frames, rescue_capacity_[li], values_).bytes);
      if (!lane.has_rescue) {
        lane.rescue = StateBuffers(np_, lane.blocks, lane.compute.get());
        lane.has_rescue = true;
      }
      // Start state: the snapshot, as parity 0, frame counter 0.
      cudaStream_t s = lane.compute.get();
      const std::size_t off = static_cast<std::size_t>(lane.fr0) * params_.shape.cols;
      const std::size_t cnt = static_cast<std::size_t>(lane.fr1 - lane.fr0) * params_.shape.cols;
      auto copy = [&](double* dst, const double* src) {
        GLINT_CUDA_CHECK(cudaMemcpyAsync(dst + off, src + off, cnt * sizeof(double),
                                         cudaMemcpyDeviceToDevice, s));
      };
      copy(lane.rescue.sum[0].get(), ls.snap_sum.get());
      copy(lane.rescue.sum2[0].get(), ls.snap_sum2.get());
      copy(lane.rescue.mean[0].get(), ls.snap_mean.get());
      copy(lane.rescue.noise.get(), ls.snap_noise.get());
      lane.rescue.progress.zero(s);
      lane.rescue.frames_done.zero(s);
      lane.rescue.blocks_done.zero(s);
      totals[li].zero(s);
      GLINT_CUDA_CHECK(cudaStreamSynchronize(s));
    }
    // Every GPU's rescue state must be in place before any rescue kernel reads a neighbour's.
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      Lane& lane = lanes_[li];
      DeviceGuard g(lane.device);
      LaneSlot& ls = lane.slots[si];
      cudaStream_t s = lane.compute.get();
      launch_find(make_launch(li, true, ls, n, counts[li].get(), xy[li].get(), data[li].get(),
                              caps[li], totals[li].get()),
                  s);
      launch_pack(make_pack(lane, ls, n, counts[li].get(), xy[li].get(), data[li].get(),
                            caps[li], totals[li].get(), rescue_out_[li].get(),
                            rescue_capacity_[li]),
                  s);
      *reinterpret_cast<uint32_t*>(rescue_out_[li].get()) = 0;
      stats_.direct_launches += 2;
    }
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.device);
      lane.compute.synchronize();
      ++stats_.host_syncs;
    }
    // Grow for the batches to come (slots reallocate when next used).
    capacity_per_frame_ = std::max<uint64_t>(capacity_per_frame_ * 2, max_frame_total);
  }

  bool device_out_ = true;    // pack into device memory, copy with the copy engine
  bool early_upload_ = true;  // copy the next batch in before delivering the slot's last one
  std::string timeline_path_;
  std::vector<TimelineRow> timeline_;
  std::chrono::steady_clock::time_point host_origin_;
  int next_fb_ = 0;
  FinderParams params_;
  GpuFinderOptions options_;
  cm::Thresholds thresholds_;
  std::size_t np_ = 0;
  int values_ = 9;
  uint64_t capacity_per_frame_ = 0;
  uint32_t min_region_capacity_ = 0;
  std::vector<Lane> lanes_;
  std::vector<Slot> slots_;
  int next_slot_ = 0;
  uint64_t submitted_ = 0;
  uint64_t frames_done_ = 0;  // data frames submitted: the parity of the state buffers
  Sink sink_;
  GpuFinderStats stats_;
  std::string description_;
  std::vector<PinnedBuffer<unsigned char>> rescue_out_;
  std::vector<uint64_t> rescue_capacity_;
  std::vector<GpuBandView> bands_;  // the delivered batch's view of each GPU's results
};

}  // namespace

std::unique_ptr<GpuClusterFinder> make_gpu_finder(const FinderParams& params,
                                                  const GpuFinderOptions& options) {
  const std::string reason = unavailable_reason();
  if (!reason.empty()) throw std::runtime_error("GPU cluster finder unavailable: " + reason);
  return std::make_unique<GpuEngine>(params, options);
}

}  // namespace glint::gpu
