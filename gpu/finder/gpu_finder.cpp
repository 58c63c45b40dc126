// The GPU cluster-finding engine: pinned staging slots, one H2D copy per batch and GPU into a
// ring of device frame buffers (one more than the slots, so that the next batch's copy may start
// before the batch that last used its slot has been delivered), one captured graph (snapshot +
// persistent find kernel, which writes the clusters in place into the slot's output block in
// device memory: no pack) replayed per batch on the GPU's compute stream, and a device-to-host
// copy of what was found on the copy engine, one completion event per batch. A batch's find is
// enqueued before the host waits for the batch that last used its slot, so the compute stream
// never waits for the host: what a batch needs until it is delivered (its frames, its
// start-of-batch snapshot, its timing events) belongs to its frame buffer, and the find waits,
// on the GPU, only for that older batch's result copy out of the slot's output block. Several
// GPUs share one pedestal chain: each owns a band of rows and the bands at a GPU boundary wait
// for each other's progress counters through peer memory, exactly as neighbouring bands on one
// GPU do.
//
// The pieces: lane_plan (bands and segments), slot_ring (staging slots, frame buffers),
// result_buffers (the output block and its copy), overflow_rerun, find_diagnostics; this file
// orders their work on the streams.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda_owners.hpp"
#include "find_diagnostics.hpp"
#include "find_kernels.hpp"
#include "glint/detail/calibrated_dark.hpp"
#include "glint/gpu/device.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/log.hpp"
#include "lane.hpp"
#include "lane_plan.hpp"
#include "overflow_rerun.hpp"
#include "slot_ring.hpp"

namespace glint::gpu {
namespace {

using namespace detail;
namespace cm = cluster_math;

void validate_options(const FinderParams& params, const GpuFinderOptions& options) {
  validate(params);
  if (params.pixels != PixelMode::raw && params.pixels != PixelMode::jungfrau_g0 &&
      params.pixels != PixelMode::jungfrau_calibrated)
    throw std::invalid_argument("GPU finder: pixel mode " + std::string(to_string(params.pixels)) +
                                " is not supported (allowed: raw, jungfrau G0 only, jungfrau "
                                "calibrated)");
  if (options.batch_frames < 1)
    throw std::invalid_argument("GPU finder: batch_frames must be at least 1 (got " +
                                std::to_string(options.batch_frames) + ")");
  if (options.streams < 1)
    throw std::invalid_argument("GPU finder: streams must be at least 1 (got " +
                                std::to_string(options.streams) + ")");
  if (options.devices.empty()) throw std::invalid_argument("GPU finder: the device list is empty");
  if (options.cluster_capacity < 0)
    throw std::invalid_argument("GPU finder: cluster_capacity must not be negative");
  validate(options.tuning);
  const int n_dev = device_count();
  for (int d : options.devices)
    if (d < 0 || d >= n_dev)
      throw std::invalid_argument("GPU finder: device " + std::to_string(d) +
                                  " does not exist (" + std::to_string(n_dev) + " found)");
  if (options.devices.size() > 1 && options.devices.size() > params.shape.rows / 8)
    throw std::invalid_argument("GPU finder: too many GPUs for " +
                                std::to_string(params.shape.rows) + " rows");
}

class GpuEngine final : public GpuClusterFinder {
 public:
  GpuEngine(const FinderParams& params, const GpuFinderOptions& options)
      : options_((validate_options(params, options), options)), diagnostics_(options.tuning),
        calibrated_(params) {
    setup_.params = params;
    setup_.thresholds = cm::make_thresholds(params.n_sigma, params.cluster_size);
    np_ = params.shape.pixels();
    values_ = params.cluster_size * params.cluster_size;
    narrow_ = options.tuning.narrow && params.pixels != PixelMode::jungfrau_calibrated;
    capacity_per_frame_ = options_.cluster_capacity > 0
                              ? static_cast<uint64_t>(options_.cluster_capacity)
                              : std::max<uint64_t>(64, np_ / 16);
    host_origin_ = std::chrono::steady_clock::now();
    build_lanes();
    if (calibrated_.active()) upload_calibration(/*pedestal=*/!calibrated_.open());
    ring_ = SlotRing(options_.streams, np_, options_.batch_frames);
    prepare_batches();
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      lane.compute.synchronize();
      lane.origin.record(lane.compute);
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
      for (auto& lane : lanes_) {
        DeviceGuard g(lane.plan.device);
        lane.compute.synchronize();
        for (auto& s : lane.slots) {
          s.copy.synchronize();
          s.out_stream.synchronize();
        }
      }
      {
        DeviceGuard g(lanes_[0].plan.device);
        diagnostics_.report(lanes_[0].plan, stats_.frames);
        diagnostics_.release();
      }
      // Each GPU's resources are released with that GPU current.
      rerun_.release(lanes_);
      for (auto& lane : lanes_) {
        DeviceGuard g(lane.plan.device);
        Lane released = std::move(lane);
      }
    } catch (const std::exception& e) {
      log::write(log::Level::error, std::string("GPU finder shutdown: ") + e.what());
    }
  }

  const FinderParams& params() const override { return setup_.params; }
  std::string description() const override { return description_; }
  int batch_frames() const override { return options_.batch_frames; }
  void set_view_sink(Sink sink) override { sink_ = std::move(sink); }
  GpuFinderStats stats() const override { return stats_; }

  std::span<uint16_t> staging() override {
    const int si = ring_.next();
    wait_dark_upload(si);
    if (ring_[si].in_flight) {
      // The staging is free once its copy to the GPU is done; the results follow in submit().
      for (auto& lane : lanes_) {
        DeviceGuard g(lane.plan.device);
        lane.slots[si].in_done.synchronize();
      }
    }
    return {ring_[si].staging.get(), np_ * options_.batch_frames};
  }

  void submit(std::span<const uint64_t> frame_numbers) override {
    const int n = static_cast<int>(frame_numbers.size());
    if (n == 0) return;
    if (n > options_.batch_frames)
      throw std::invalid_argument("GPU finder: submit of " + std::to_string(n) +
                                  " frames exceeds the batch of " +
                                  std::to_string(options_.batch_frames));
    settle();
    const int si = ring_.next();
    HostSlot& s = ring_[si];
    const double t_submit = host_us();
    const bool narrow = narrow_;  // the collect below may widen the batches after this one
    // The batch that last used this slot keeps its own frames (an overflow re-runs it from
    // them): this batch's copy goes to the next frame buffer, before that batch is delivered.
    const int fb = ring_.take_frame_buffer();
    for (std::size_t li = 0; li < lanes_.size(); ++li) enqueue_upload(li, si, n, fb);
    // The slot's result buffers grow (after an overflow) only once its batch is delivered.
    if (s.in_flight && !slot_buffers_fit(si)) collect(si);
    // This batch's find goes ahead of the wait for the slot's last batch.
    for (std::size_t li = 0; li < lanes_.size(); ++li)
      enqueue_find_work(li, si, n, fb, narrow);
    if (s.in_flight) collect(si);
    s.numbers.assign(frame_numbers.begin(), frame_numbers.end());
    s.n_frames = n;
    s.fb = fb;
    s.narrow = narrow;
    s.host_submit = t_submit;
    for (std::size_t li = 0; li < lanes_.size(); ++li) enqueue_result_copy(li, si);
    s.in_flight = true;
    s.sequence = submitted_++;
    frames_done_ += static_cast<uint64_t>(n);
    ring_.advance();
  }

  void flush() override {
    // Collect in submission order: the oldest in-flight slot first.
    for (int i = 0; i < ring_.size(); ++i) {
      const int si = ring_.oldest(i);
      if (ring_[si].in_flight) collect(si);
    }
  }

  void submit_dark(std::size_t n) override {
    if (n == 0) return;
    if (n > static_cast<std::size_t>(options_.batch_frames))
      throw std::invalid_argument("GPU finder: submit_dark of " + std::to_string(n) +
                                  " frames exceeds the batch of " +
                                  std::to_string(options_.batch_frames));
    const int si = ring_.next();
    HostSlot& s = ring_[si];
    if (calibrated_.open()) {
      // Kept until the ADC pedestal is fixed (settle); the slot is free again at once.
      calibrated_.keep(std::span<const uint16_t>(s.staging.get(), n * np_));
      return;
    }
    if (s.in_flight) collect(si);  // the oldest batch in flight: results stay in order
    for (std::size_t li = 0; li < lanes_.size(); ++li)
      enqueue_dark(li, s.staging.get(), n, &lanes_[li].slots[si].in_done);
    s.dark_upload = true;
    ring_.advance();
  }

  void push_dark(std::span<const uint16_t> frames) override {
    const std::size_t n_total = check_dark_frames(setup_.params, frames);
    const std::size_t chunk = static_cast<std::size_t>(options_.batch_frames);
    for (std::size_t f0 = 0; f0 < n_total; f0 += chunk) {
      const std::size_t n = std::min(chunk, n_total - f0);
      std::span<uint16_t> st = staging();
      std::memcpy(st.data(), frames.data() + f0 * np_, n * np_ * sizeof(uint16_t));
      submit_dark(n);
    }
    // Unlike submit_dark, the frames are accumulated when this returns.
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      lane.compute.synchronize();
    }
  }

  void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
            ClusterTable& out) override {
    check_find_arguments(setup_.params, frames, frame_numbers, out);
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

  std::vector<double> calibration_pedestal() const override {
    if (!calibrated_.active()) return {};
    const_cast<GpuEngine*>(this)->settle();  // fixes the calibration's pedestal (once)
    const auto t = calibrated_.pedestal_table();
    return {t.begin(), t.end()};
  }

  PedestalState pedestal() const override {
    const_cast<GpuEngine*>(this)->settle();  // fixes the calibration's pedestal (once)
    const FinderParams& params = setup_.params;
    PedestalState st(params.shape, params.pedestal_window);
    const int par = static_cast<int>(frames_done_ & 1u);
    for (const auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      const std::size_t off = static_cast<std::size_t>(lane.plan.r0) * params.shape.cols;
      const std::size_t n = static_cast<std::size_t>(lane.plan.r1 - lane.plan.r0) *
                            params.shape.cols;
      const cudaStream_t s = lane.compute.get();
      // Ordered after every find already queued on this GPU; nothing is drained.
      GLINT_CUDA_CHECK(cudaMemcpyAsync(st.sum.data() + off, lane.live.sum[par].get() + off,
                                       n * sizeof(double), cudaMemcpyDeviceToHost, s));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(st.sum2.data() + off, lane.live.sum2[par].get() + off,
                                       n * sizeof(double), cudaMemcpyDeviceToHost, s));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(st.count.data() + off, lane.live.count.get() + off,
                                       n * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
    }
    for (const auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      lane.compute.synchronize();
    }
    return st;
  }

  void load_pedestal(const PedestalState& state) override {
    const FinderParams& params = setup_.params;
    if (state.shape != params.shape || state.window != params.pedestal_window)
      throw std::invalid_argument("load_pedestal: shape or window differs from the finder's");
    if (state.sum.size() != np_ || state.sum2.size() != np_ || state.count.size() != np_)
      throw std::invalid_argument("load_pedestal: state arrays do not match the frame shape");
    settle();
    flush();
    const int par = static_cast<int>(frames_done_ & 1u);
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      // Every row this GPU may read (band and halo) gets the state.
      const std::size_t off = static_cast<std::size_t>(lane.plan.fr0) * params.shape.cols;
      const std::size_t n = static_cast<std::size_t>(lane.plan.frame_rows()) * params.shape.cols;
      const cudaStream_t s = lane.compute.get();
      GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.live.sum[par].get() + off, state.sum.data() + off,
                                       n * sizeof(double), cudaMemcpyHostToDevice, s));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.live.sum2[par].get() + off, state.sum2.data() + off,
                                       n * sizeof(double), cudaMemcpyHostToDevice, s));
      GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.live.count.get() + off, state.count.data() + off,
                                       n * sizeof(uint32_t), cudaMemcpyHostToDevice, s));
      launch_derive(lane.live.arrays(), par, params.shape.cols, lane.plan.fr0, lane.plan.fr1, s);
      lane.compute.synchronize();
    }
  }

 private:
  /// On lane li's compute stream: copies n dark frames from host memory `frames` (then records
  /// `copied`, if given) and pushes them into the live state (in order with the finds around it;
  /// the one dark-frame buffer is not overwritten before the accumulation that reads it has run).
  void enqueue_dark(std::size_t li, const uint16_t* frames, std::size_t n,
                    Event* copied = nullptr) {
    Lane& lane = lanes_[li];
    const LanePlan& plan = lane.plan;
    DeviceGuard g(plan.device);
    StreamView cs = lane.compute;
    const int par = static_cast<int>(frames_done_ & 1u);
    upload_rows(setup_.params, plan, lane.dark_frames.get(), frames, n, cs);
    if (copied) copied->record(cs);
    DarkPixels px;
    px.mode = setup_.params.pixels;
    px.pedestal = lane.cal_pedestal.get();
    px.gain = lane.cal_gain.get();
    px.pixels = np_;
    launch_dark(lane.live.arrays(), par, lane.dark_frames.get(), static_cast<uint32_t>(n),
                setup_.params.shape.cols, plan.r0, plan.r1, plan.fr0, plan.frame_rows(),
                setup_.params.pedestal_window, px, cs);
    ++stats_.direct_launches;
  }

  /// Calibrated mode: the gain tables (and with `pedestal` the ADC pedestal) to every GPU.
  void upload_calibration(bool pedestal) {
    const std::size_t n = static_cast<std::size_t>(jungfrau::kStages) * np_;
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      const cudaStream_t s = lane.compute.get();
      // In order with the finds and dark pushes on the compute stream.
      if (!lane.cal_gain.get()) {
        lane.cal_gain = DeviceBuffer<double>(n);
        lane.cal_pedestal = DeviceBuffer<double>(n);
        GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.cal_gain.get(), calibrated_.gain(),
                                         n * sizeof(double), cudaMemcpyHostToDevice, s));
      }
      if (pedestal)
        GLINT_CUDA_CHECK(cudaMemcpyAsync(lane.cal_pedestal.get(), calibrated_.pedestal(),
                                         n * sizeof(double), cudaMemcpyHostToDevice, s));
      lane.compute.synchronize();
    }
  }

  /// Calibrated mode: once the first data frame comes (or the pedestal is read), fixes the ADC
  /// pedestal from the kept dark frames and pushes them, calibrated, in their order (as the CPU
  /// backends do, docs/cluster-finding.md "Calibrated frames").
  void settle() {
    if (!calibrated_.open()) return;
    const std::vector<uint16_t> kept = calibrated_.close();
    upload_calibration(/*pedestal=*/true);
    const std::size_t chunk = static_cast<std::size_t>(options_.batch_frames);
    const std::size_t n_total = kept.size() / np_;
    for (std::size_t f0 = 0; f0 < n_total; f0 += chunk)
      for (std::size_t li = 0; li < lanes_.size(); ++li)
        enqueue_dark(li, kept.data() + f0 * np_, std::min(chunk, n_total - f0));
    // The copies read `kept` (pageable memory) before it goes.
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      lane.compute.synchronize();
    }
  }

  /// The staging of slot si is free of submit_dark's copy.
  void wait_dark_upload(int si) {
    if (!ring_[si].dark_upload) return;
    for (auto& lane : lanes_) {
      DeviceGuard g(lane.plan.device);
      lane.slots[si].in_done.synchronize();
    }
    ring_[si].dark_upload = false;
  }

  double host_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                     host_origin_)
        .count();
  }

  void build_lanes() {
    const std::vector<LanePlan> plans =
        plan_lanes(setup_.params, options_.devices, options_.tuning);
    const std::size_t fb_count = static_cast<std::size_t>(options_.streams) + 1;
    lanes_.reserve(plans.size());
    for (std::size_t li = 0; li < plans.size(); ++li) {
      // Streams and events belong to the device current when they are created.
      DeviceGuard g(plans[li].device);
      Lane& lane = lanes_.emplace_back();
      lane.plan = plans[li];
      lane.live = PedestalBuffers(np_, lane.plan.segments(), lane.plan.scratch_bytes(),
                                  lane.compute);
      lane.dark_frames = DeviceBuffer<uint16_t>(static_cast<std::size_t>(lane.plan.frame_rows()) *
                                                setup_.params.shape.cols * options_.batch_frames);
      lane.fbs.resize(fb_count);
      for (FrameBufferBatch& b : lane.fbs) b.snapshot = PedestalSnapshot(np_);
      lane.slots.resize(options_.streams);
      for (auto& ls : lane.slots) ls.graphs.resize(fb_count);
      if (li == 0) diagnostics_.attach(lane.plan.blocks, lane.plan.segments(), lane.compute);
    }
    live_states_.clear();
    for (const Lane& lane : lanes_) live_states_.push_back(&lane.live);
    enable_peer_access(plans);
  }

  /// The clusters a slot's output holds now on a lane, per batch: the clusters and, unless the
  /// capacity was given (GpuFinderOptions::cluster_capacity, held to as given), the room the
  /// find blocks' runs may leave unused (each block's last run and the one it asked for ahead,
  /// at least out_chunk each; an eighth for the ends of runs too short for a piece).
  uint64_t wanted_capacity(const Lane& lane) const {
    const uint64_t clusters = capacity_per_frame_ * static_cast<uint64_t>(options_.batch_frames);
    if (options_.cluster_capacity > 0) return clusters;
    return clusters + clusters / 8 + 2 * static_cast<uint64_t>(lane.plan.blocks) * out_chunk();
  }

  /// Whether slot si's output blocks hold the current capacity on every GPU.
  bool slot_buffers_fit(int si) const {
    for (const Lane& lane : lanes_)
      if (lane.slots[si].results.capacity() < wanted_capacity(lane)) return false;
    return true;
  }

  /// Output blocks of the current capacity (the captured find work is dropped when they grow).
  void ensure_slot_buffers(const Lane& lane, LaneSlot& ls) {
    if (ls.results.reserve(options_.batch_frames, lane.plan.segments(), values_,
                           setup_.params.pixels != PixelMode::raw, wanted_capacity(lane)))
      for (auto& g : ls.graphs) g = GraphExec();
  }

  /// Everything a batch needs, set up before the first frame arrives: the frame buffers, each
  /// slot's output buffers (pinned host memory of ~100 MB per slot at 400x400: allocating it
  /// while frames stream in stalls the run for tens of milliseconds, and pinning holds the
  /// process's memory map, which the receiving threads need for their page faults) and the
  /// captured find work of every slot and frame buffer.
  void prepare_batches() {
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      Lane& lane = lanes_[li];
      DeviceGuard g(lane.plan.device);
      for (int fb = 0; fb <= options_.streams; ++fb) frame_buffer(lane, fb);
      for (auto& ls : lane.slots) {
        ensure_slot_buffers(lane, ls);
        for (int fb = 0; fb <= options_.streams; ++fb) {
          ls.fb = fb;
          (void)graph_for(li, ls, narrow_);
        }
        ls.fb = 0;
      }
      lane.compute.synchronize();
    }
  }

  /// Frame buffer fb of a lane (batch_frames frames of the rows uploaded to it).
  uint16_t* frame_buffer(Lane& lane, int fb) {
    DeviceBuffer<uint16_t>& frames = lane.fbs[fb].frames;
    if (!frames.get())
      frames = DeviceBuffer<uint16_t>(static_cast<std::size_t>(lane.plan.frame_rows()) *
                                      setup_.params.shape.cols *
                                      static_cast<std::size_t>(options_.batch_frames));
    return frames.get();
  }

  /// The host-to-device copy of slot si's staging into frame buffer fb.
  void enqueue_upload(std::size_t li, int si, int n, int fb) {
    Lane& lane = lanes_[li];
    LaneSlot& ls = lane.slots[si];
    DeviceGuard g(lane.plan.device);
    FrameBufferBatch& b = lane.fbs[fb];
    StreamView copy = ls.copy;
    // The find that last read this buffer has run (already so when batches alternate with slots
    // in order; submit_dark takes slot turns without a frame buffer).
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(copy.get(), b.free.get(), 0));
    if (diagnostics_.timeline()) b.up0.record(copy);
    upload_rows(setup_.params, lane.plan, frame_buffer(lane, fb), ring_[si].staging.get(),
                static_cast<std::size_t>(n), copy);
    if (diagnostics_.timeline()) b.up1.record(copy);
    ls.in_done.record(copy);
  }

  /// The find work of one batch on one GPU: the output block's header and counts cleared, the
  /// snapshot of the batch-start state, then the find kernel (values as int16 when `narrow`).
  /// Captured once per slot and frame buffer for full batches.
  void enqueue_find(std::size_t li, LaneSlot& ls, int n, bool narrow, StreamView s) {
    Lane& lane = lanes_[li];
    ls.results.zero(s);
    const FrameBufferBatch& b = lane.fbs[ls.fb];
    launch_snapshot(lane.live.arrays(), lane.live.frames_done.get(),
                    b.snapshot.arrays(lane.live.count.get()), setup_.params.shape.cols,
                    lane.plan.fr0, lane.plan.fr1, s);
    FindLaunch p = make_find_launch(setup_, lanes_, li, live_states_, b.frames.get(), n);
    ls.results.bind(p, narrow, out_chunk());
    if (li == 0) diagnostics_.bind(p);
    launch_find(p, s);
  }

  uint32_t out_chunk() const { return static_cast<uint32_t>(options_.tuning.out_chunk); }

  /// The captured find work of a full batch in slot `ls` on frame buffer ls.fb (captured on
  /// first use, and again after an overflow grew the slot's buffers or the values widened).
  GraphExec& graph_for(std::size_t li, LaneSlot& ls, bool narrow) {
    if (ls.graphs_narrow != narrow) {
      for (auto& g : ls.graphs) g = GraphExec();
      ls.graphs_narrow = narrow;
    }
    GraphExec& graph = ls.graphs[ls.fb];
    if (graph) return graph;
    const cudaStream_t cs = lanes_[li].compute.get();
    cudaGraph_t captured = nullptr;
    GLINT_CUDA_CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    try {
      enqueue_find(li, ls, options_.batch_frames, narrow, cs);
    } catch (...) {
      (void)cudaStreamEndCapture(cs, &captured);
      if (captured) (void)cudaGraphDestroy(captured);
      throw;
    }
    GLINT_CUDA_CHECK(cudaStreamEndCapture(cs, &captured));
    graph = GraphExec(captured);
    return graph;
  }

  /// The find work of slot si's batch on frame buffer fb (its frames already being copied). It
  /// waits, on the GPU, for the result copy of the batch that last used the slot (still to be
  /// collected), as it writes into the same output block.
  void enqueue_find_work(std::size_t li, int si, int n, int fb, bool narrow) {
    Lane& lane = lanes_[li];
    LaneSlot& ls = lane.slots[si];
    DeviceGuard g(lane.plan.device);
    ensure_slot_buffers(lane, ls);
    ls.fb = fb;
    FrameBufferBatch& b = lane.fbs[fb];
    StreamView cs = lane.compute;
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(cs.get(), ls.in_done.get(), 0));
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(cs.get(), ls.done.get(), 0));
    b.t0.record(cs);
    if (n == options_.batch_frames) {
      graph_for(li, ls, narrow).launch(cs);
      ++stats_.graph_launches;
    } else {
      enqueue_find(li, ls, n, narrow, cs);
      stats_.direct_launches += 2;
    }
    b.t1.record(cs);
    b.free.record(cs);
    ls.found.record(cs);
  }

  /// The copy of slot si's results to the host, once the slot's last batch is collected.
  void enqueue_result_copy(std::size_t li, int si) {
    Lane& lane = lanes_[li];
    LaneSlot& ls = lane.slots[si];
    DeviceGuard g(lane.plan.device);
    const bool tl = diagnostics_.timeline();
    // The copy engine brings back what was found while the next batch is searched.
    StreamView os = ls.out_stream;
    GLINT_CUDA_CHECK(cudaStreamWaitEvent(os.get(), ls.found.get(), 0));
    if (tl) ls.d0.record(os);
    const uint64_t cap = ls.results.capacity();
    ls.results.enqueue_copy(
        std::min<uint64_t>(lane.copy_clusters == 0 ? cap : lane.copy_clusters, cap),
        ring_[si].narrow, os);
    if (tl) ls.d1.record(os);
    ls.done.record(os);
  }

  /// Waits for slot si's batch, re-runs it exactly if its clusters did not fit, hands the
  /// results to the sink.
  void collect(int si) {
    HostSlot& s = ring_[si];
    const int n = s.n_frames;
    bool overflow = false, outgrown = false, too_wide = false;
    for (std::size_t li = 0; li < lanes_.size(); ++li) {
      Lane& lane = lanes_[li];
      DeviceGuard g(lane.plan.device);
      LaneSlot& ls = lane.slots[si];
      const double w0 = host_us();
      ls.done.synchronize();
      const double w1 = host_us();
      ++stats_.host_syncs;
      const FrameBufferBatch& b = lane.fbs[s.fb];
      float ms = 0;
      GLINT_CUDA_CHECK(cudaEventElapsedTime(&ms, b.t0.get(), b.t1.get()));
      stats_.kernel_ms += ms;
      const bool lane_overflow = ls.results.overflowed();
      overflow = overflow || lane_overflow;
      too_wide = too_wide || ls.results.too_wide();
      uint64_t total = 0;
      if (!lane_overflow) {
        total = ls.results.total(n);
        const uint64_t took = ls.results.handed_out();
        // More than the copy brought back (the load rose): the next batch's find may already
        // be writing the slot's output block, so the batch is found again from its snapshot.
        if (took > ls.results.copied) outgrown = true;
        // Sized from this batch, falling slowly, so that a load that comes and goes batch by
        // batch does not outgrow the copy every time it comes.
        lane.copy_clusters =
            std::max(took + took / 4 + 16 * static_cast<uint64_t>(options_.batch_frames),
                     lane.copy_clusters - lane.copy_clusters / 8);
      }
      if (li == 0 && diagnostics_.timeline()) add_timeline_row(lane, si, s, total, w0, w1);
    }
    s.in_flight = false;
    bands_.resize(lanes_.size());
    if (overflow || outgrown || too_wide) {
      if (overflow) {
        ++stats_.overflow_reruns;
        log::write(log::Level::warn, "GPU finder: a batch found more clusters than the output "
                                     "holds; re-running it exactly and growing the capacity");
      } else if (too_wide) {
        ++stats_.wide_reruns;
      } else {
        ++stats_.outgrown_reruns;
      }
      if (too_wide && narrow_) {
        log::write(log::Level::info, "GPU finder: a cluster value beyond 16 bits; its batch is "
                                     "found again with 32-bit values, and every later batch is "
                                     "found with them");
        narrow_ = false;
      }
      rerun_.run(setup_, lanes_, si, s.fb, n, options_.batch_frames, out_chunk(), bands_);
      stats_.direct_launches += lanes_.size();
      // Grow for the batches to come (slots reallocate when next used).
      if (overflow) {
        const uint64_t batch = static_cast<uint64_t>(options_.batch_frames);
        capacity_per_frame_ = std::max<uint64_t>(
            capacity_per_frame_ * 2, (rerun_.max_handed_out() + batch - 1) / batch);
      }
    } else {
      for (std::size_t li = 0; li < lanes_.size(); ++li)
        bands_[li] = lanes_[li].slots[si].results.view(n);
    }
    deliver(s, n);
  }

  void add_timeline_row(const Lane& lane, int si, const HostSlot& s, uint64_t clusters,
                        double w0, double w1) {
    const LaneSlot& ls = lane.slots[si];
    const FrameBufferBatch& b = lane.fbs[s.fb];
    const auto at = [&](const Event& e) {
      float t = 0;
      GLINT_CUDA_CHECK(cudaEventElapsedTime(&t, lane.origin.get(), e.get()));
      return t * 1000.0f;
    };
    TimelineRow r;
    r.seq = s.sequence;
    r.slot = si;
    r.fb = s.fb;
    r.n = s.n_frames;
    r.clusters = clusters;
    r.up0 = at(b.up0);
    r.up1 = at(b.up1);
    r.f0 = at(b.t0);
    r.f1 = at(b.t1);
    r.d0 = at(ls.d0);
    r.d1 = at(ls.d1);
    r.h_submit = s.host_submit;
    r.h_wait0 = w0;
    r.h_wait1 = w1;
    diagnostics_.add(r);
  }

  void deliver(const HostSlot& s, int n) {
    GpuBatchView v;
    v.frame_numbers = std::span<const uint64_t>(s.numbers.data(), n);
    v.bands = bands_;
    const uint64_t total = v.n_clusters();
    ++stats_.batches;
    stats_.frames += static_cast<uint64_t>(n);
    stats_.clusters += total;
    if (sink_) sink_(v);
  }

  GpuFinderOptions options_;
  FindSetup setup_;
  FindDiagnostics diagnostics_;
  std::chrono::steady_clock::time_point host_origin_;
  std::size_t np_ = 0;
  int values_ = 9;
  /// Batches are found with int16 values (FindTuning::narrow, never for calibrated values),
  /// until one does not fit.
  bool narrow_ = false;
  uint64_t capacity_per_frame_ = 0;
  std::vector<Lane> lanes_;
  std::vector<const PedestalBuffers*> live_states_;  // each lane's live state, for the launches
  SlotRing ring_;
  OverflowRerun rerun_;
  uint64_t submitted_ = 0;
  uint64_t frames_done_ = 0;  // data frames submitted: the parity of the state buffers
  Sink sink_;
  GpuFinderStats stats_;
  std::string description_;
  std::vector<GpuBandView> bands_;  // the delivered batch's view of each GPU's results
  glint::detail::CalibratedDark calibrated_;  // calibrated JUNGFRAU: the dark frames
};

}  // namespace

std::unique_ptr<GpuClusterFinder> make_gpu_finder(const FinderParams& params,
                                                  const GpuFinderOptions& options) {
  const std::string reason = unavailable_reason();
  if (!reason.empty()) throw std::runtime_error("GPU cluster finder unavailable: " + reason);
  return std::make_unique<GpuEngine>(params, options);
}

}  // namespace glint::gpu
