#include "glint/gpu/products_accumulator.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <thread>

#include <fmt/format.h>

#include "cuda_owners.hpp"
#include "glint/gpu/device.hpp"
#include "products_kernels.hpp"

namespace glint::gpu {

namespace {

/// Clusters a staging buffer holds at first (a 256-frame batch at ~500 photons a frame); a
/// larger batch grows it by half again.
constexpr std::size_t kInitialClusters = std::size_t{1} << 17;
constexpr int kSlots = 2;
/// Device memory left free beside the tables and staging (the finder's and CUDA's own).
constexpr std::size_t kHeadroom = std::size_t{256} << 20;

/// Host-to-device copy of a table (stream-ordered from pageable memory).
template <class T>
void upload(detail::DeviceBuffer<T>& d, std::span<const T> h, detail::StreamView s) {
  if (!h.empty())
    GLINT_CUDA_CHECK(cudaMemcpyAsync(d.get(), h.data(), h.size_bytes(), cudaMemcpyHostToDevice,
                                     s.get()));
}

template <class T, class U>
void download(std::vector<U>& h, const detail::DeviceBuffer<T>& d, detail::StreamView s) {
  static_assert(sizeof(T) == sizeof(U));
  h.resize(d.size());
  if (d.size())
    GLINT_CUDA_CHECK(cudaMemcpyAsync(h.data(), d.get(), d.bytes(), cudaMemcpyDeviceToHost,
                                     s.get()));
}

std::size_t mib(std::size_t bytes) { return (bytes + (std::size_t{1} << 20) - 1) >> 20; }

/// Below this many clusters per part a batch is copied by fewer threads (one part each).
constexpr std::size_t kClustersPerPart = 2048;

/// Threads that copy parts of a batch into the staging buffer beside the run's thread.
class CopyPool {
 public:
  explicit CopyPool(unsigned threads) {
    for (unsigned i = 0; i < threads; ++i)
      threads_.emplace_back([this](std::stop_token st) { work(st); });
  }
  ~CopyPool() {
    for (auto& t : threads_) t.request_stop();
    cv_.notify_all();
  }
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;
  std::size_t threads() const { return threads_.size(); }

  /// fn(0) ... fn(parts - 1), taken by the calling thread and the pool's; returns when all are
  /// done.
  void run(std::size_t parts, const std::function<void(std::size_t)>& fn) {
    if (parts <= 1 || threads_.empty()) {
      for (std::size_t i = 0; i < parts; ++i) fn(i);
      return;
    }
    std::unique_lock lock(mu_);
    fn_ = &fn;
    parts_ = parts;
    next_ = 0;
    remaining_ = parts;
    cv_.notify_all();
    while (next_ < parts_) {
      const std::size_t i = next_++;
      lock.unlock();
      fn(i);
      lock.lock();
      --remaining_;
    }
    done_.wait(lock, [&] { return remaining_ == 0; });
    fn_ = nullptr;
  }

 private:
  void work(std::stop_token st) {
    std::unique_lock lock(mu_);
    while (true) {
      cv_.wait(lock, st, [&] { return fn_ != nullptr && next_ < parts_; });
      if (st.stop_requested()) return;
      const std::size_t i = next_++;
      const auto* fn = fn_;
      lock.unlock();
      (*fn)(i);
      lock.lock();
      if (--remaining_ == 0) done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable_any cv_;
  std::condition_variable done_;
  const std::function<void(std::size_t)>* fn_ = nullptr;
  std::size_t parts_ = 0, next_ = 0, remaining_ = 0;
  std::vector<std::jthread> threads_;  // last: stopped and joined first
};

}  // namespace

struct ProductsAccumulator::Impl {
  /// One staging buffer: a batch's values, x, y (and the flags the kernel hands back), pinned
  /// and on the device, with the event that says the batch is done.
  struct Slot {
    std::size_t capacity = 0;  ///< clusters
    detail::PinnedBuffer<std::byte> host;
    detail::DeviceBuffer<std::byte> dev;
    detail::Event done;
    bool busy = false;
    std::size_t n = 0;
    uint64_t origin = 0;
    std::vector<FrameRecord> frames;  ///< first_cluster: the row in this buffer
  };

  Impl(const products::ProductSettings& s, int dev, unsigned copy_threads)
      : settings(s), device(dev), pool(copy_threads) {}

  std::size_t values_bytes(std::size_t clusters) const {
    return clusters * per_cluster * sizeof(int32_t);
  }
  /// Bytes of a staging buffer of `clusters`: values, x, y, flags.
  std::size_t slot_bytes(std::size_t clusters) const {
    return values_bytes(clusters) + clusters * (2 * sizeof(uint16_t) + 1);
  }
  void reserve(Slot& slot, std::size_t clusters) {
    if (clusters <= slot.capacity) return;
    const std::size_t c = std::max(clusters, slot.capacity + slot.capacity / 2);
    slot.host = {};
    slot.dev = {};
    slot.host = detail::PinnedBuffer<std::byte>(slot_bytes(c));
    slot.dev = detail::DeviceBuffer<std::byte>(slot_bytes(c));
    slot.capacity = c;
  }

  /// Waits for the batch in `slot` and counts its slices.
  void retire(Slot& slot) {
    slot.done.synchronize();
    if (settings.slice_frames > 0) {
      const std::byte* base = slot.host.get();
      const auto* xs = reinterpret_cast<const uint16_t*>(base + values_bytes(slot.capacity));
      const uint16_t* ys = xs + slot.capacity;
      const auto* flags = reinterpret_cast<const uint8_t*>(ys + slot.capacity);
      const std::size_t cols = settings.cols;
      for (const FrameRecord& r : slot.frames) {
        if (r.n_clusters == 0 || r.frame_number < slot.origin) continue;
        auto& counts = slices[(r.frame_number - slot.origin) / settings.slice_frames];
        if (counts.empty()) counts.assign(settings.pixels(), 0);
        const uint64_t end = r.first_cluster + r.n_clusters;
        for (uint64_t i = r.first_cluster; i < end; ++i)
          if (flags[i]) ++counts[std::size_t{ys[i]} * cols + xs[i]];
      }
    }
    slot.busy = false;
    ++done;
  }

  /// Retires the batches in flight, oldest first: all of them, or (`wait` false) those done.
  void retire_ready(bool wait) {
    while (!in_flight.empty()) {
      Slot& slot = slots[in_flight.front()];
      if (!wait) {
        const cudaError_t e = cudaEventQuery(slot.done.get());
        if (e == cudaErrorNotReady) return;
        if (e != cudaSuccess) detail::throw_cuda(e, "cudaEventQuery", __FILE__, __LINE__);
      }
      retire(slot);
      in_flight.pop_front();
    }
  }

  products::ProductSettings settings;
  int device = 0;
  int sm_count = 1;
  std::size_t per_cluster = 9;
  /// Low priority: where the finder's blocks wait too, they are scheduled first.
  detail::Stream stream{detail::StreamPriority::low};
  mutable std::mutex mu;
  std::array<Slot, kSlots> slots;
  int next = 0;
  std::deque<int> in_flight;  ///< slots with a batch, oldest first
  CopyPool pool;

  // Device tables.
  detail::DeviceBuffer<uint64_t> hitmap, spectrum, eta2, eta3, subpixel, counters;
  detail::DeviceBuffer<int64_t> energy;
  detail::DeviceBuffer<uint32_t> pixel_spectra;
  detail::DeviceBuffer<double> spectrum_edges, eta2_edges, eta3_edges;
  detail::DeviceBuffer<double> cal_x, cal_y, cal_e, ietax, ietay;
  detail::ProductsKernelParams params;

  // Host side.
  std::map<uint64_t, std::vector<uint32_t>> slices;
  uint64_t frames = 0;
  uint64_t added = 0, done = 0;
  double wait_s = 0.0, copy_s = 0.0;
};

ProductsAccumulator::ProductsAccumulator(const products::ProductSettings& s, int device,
                                         unsigned copy_threads) {
  if (s.rows == 0 || s.cols == 0 || s.spectrum.bins == 0 || s.eta_bins == 0)
    throw std::invalid_argument("GPU products: empty frame shape or no bins");
  detail::DeviceGuard guard(device);
  impl_ = std::make_unique<Impl>(s, device, copy_threads);
  Impl& m = *impl_;
  m.sm_count = device_info(device).sm_count;
  m.per_cluster = static_cast<std::size_t>(s.cluster_size) * s.cluster_size;

  // Everything must fit beside what the device already holds.
  const std::size_t tables = products_table_bytes(s);
  const std::size_t staging = kSlots * m.slot_bytes(kInitialClusters);
  std::size_t free = 0, total = 0;
  GLINT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  if (tables + staging + kHeadroom > free)
    throw std::runtime_error(fmt::format(
        "products.device: gpu: the products need {} MiB of device memory ({} MiB of tables, {} "
        "MiB of staging) and {} MiB kept free, GPU {} has {} MiB free of {} MiB (allowed: fewer "
        "products.spectrum.bins with pixel_spectra, fewer eta_bins, a smaller subpixel.factor, "
        "or products.device: cpu)",
        mib(tables + staging), mib(tables), mib(staging), mib(kHeadroom), device, mib(free),
        mib(total)));

  const detail::StreamView st = m.stream;
  auto& p = m.params;
  // The view ProductSums::view() gives, with the tables it points into copied to the device.
  products::ClusterProductsView& v = p.view;
  v.rows = s.rows;
  v.cols = s.cols;
  v.quadrant = s.energy == products::EnergyKind::quadrant;
  v.emin = s.emin;
  v.emax = s.emax;
  p.cluster_size = s.cluster_size;
  p.calibrated = s.calibrated;
  // The uploads read pageable host memory: cudaMemcpyAsync returns once it has staged the
  // source, so the host tables may go right after.
  auto bins_on_device = [&](const products::Binning& b, detail::DeviceBuffer<double>& edges) {
    const products::BinTable t(b);
    products::BinsView view = t.view();
    edges = detail::DeviceBuffer<double>(t.edges().size());
    upload(edges, t.edges(), st);
    view.edges = edges.get();
    return view;
  };
  v.spectrum = bins_on_device(s.spectrum, m.spectrum_edges);
  m.spectrum = detail::DeviceBuffer<uint64_t>(s.spectrum.bins);
  m.spectrum.zero(st);
  p.spectrum = m.spectrum.get();
  m.counters = detail::DeviceBuffer<uint64_t>(detail::kCounters);
  m.counters.zero(st);
  p.counters = m.counters.get();
  if (s.hitmap) {
    m.hitmap = detail::DeviceBuffer<uint64_t>(s.pixels());
    m.energy = detail::DeviceBuffer<int64_t>(s.pixels());
    m.hitmap.zero(st);
    m.energy.zero(st);
    p.hitmap = m.hitmap.get();
    p.energy = m.energy.get();
  }
  if (s.pixel_spectra) {
    m.pixel_spectra = detail::DeviceBuffer<uint32_t>(s.pixels() * s.spectrum.bins);
    m.pixel_spectra.zero(st);
    p.pixel_spectra = m.pixel_spectra.get();
  }
  v.eta = s.eta;
  v.eta_bins = s.eta_bins;
  if (s.eta) {
    v.eta2 = bins_on_device(s.eta2_binning(), m.eta2_edges);
    v.eta3 = bins_on_device(s.eta3_binning(), m.eta3_edges);
    const std::size_t e = std::size_t{s.eta_bins} * s.eta_bins;
    m.eta2 = detail::DeviceBuffer<uint64_t>(e);
    m.eta3 = detail::DeviceBuffer<uint64_t>(e);
    m.eta2.zero(st);
    m.eta3.zero(st);
    p.eta2 = m.eta2.get();
    p.eta3 = m.eta3.get();
  }
  if (s.subpixel) {
    const products::EtaCalibration& c = *s.subpixel;
    // The image's geometry exactly as SubpixelImage computes it (it also checks the sizes).
    const products::SubpixelImage image(s.rows, s.cols, s.subpixel_factor);
    v.subpixel = true;
    auto axis = [&](const products::BinEdges& b, detail::DeviceBuffer<double>& d) {
      products::detail::AxisView view = b.view();
      d = detail::DeviceBuffer<double>(b.edges().size());
      upload(d, b.edges(), st);
      view.edges = d.get();
      return view;
    };
    v.cal_x = axis(c.eta_x(), m.cal_x);
    v.cal_y = axis(c.eta_y(), m.cal_y);
    v.cal_e = axis(c.energy(), m.cal_e);
    m.ietax = detail::DeviceBuffer<double>(c.ietax().size());
    m.ietay = detail::DeviceBuffer<double>(c.ietay().size());
    upload(m.ietax, c.ietax(), st);
    upload(m.ietay, c.ietay(), st);
    v.ietax = m.ietax.get();
    v.ietay = m.ietay.get();
    p.factor = static_cast<double>(image.factor());
    p.width = image.cols() * image.factor();
    p.width_d = static_cast<double>(p.width);
    p.height_d = static_cast<double>(image.rows() * image.factor());
    m.subpixel = detail::DeviceBuffer<uint64_t>(image.counts().size());
    m.subpixel.zero(st);
    p.subpixel = m.subpixel.get();
  }
  for (auto& slot : m.slots) m.reserve(slot, kInitialClusters);
  m.stream.synchronize();
}

ProductsAccumulator::~ProductsAccumulator() {
  if (!impl_) return;
  // The buffers must outlive the work that reads them.
  GLINT_CUDA_LOG(cudaStreamSynchronize(impl_->stream.get()));
}

const products::ProductSettings& ProductsAccumulator::settings() const {
  return impl_->settings;
}

void ProductsAccumulator::add(const ClusterTable& table, uint64_t slice_origin) {
  Impl& m = *impl_;
  const products::ProductSettings& s = m.settings;
  if (table.cluster_size() != s.cluster_size)
    throw std::invalid_argument("GPU products: cluster size differs from the settings'");
  if ((table.value_type() == ClusterValues::float32) != s.calibrated)
    throw std::invalid_argument("GPU products: cluster values differ from the settings'");
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::lock_guard lock(m.mu);
  detail::DeviceGuard guard(m.device);
  m.retire_ready(false);
  Impl::Slot& slot = m.slots[m.next];
  if (slot.busy) {
    // Both buffers in flight: the oldest is this one.
    while (!m.in_flight.empty() && slot.busy) {
      m.retire(m.slots[m.in_flight.front()]);
      m.in_flight.pop_front();
    }
  }
  const auto t1 = Clock::now();
  // The clusters of the frames (ProductSums counts those alone), each frame's at its row in the
  // buffer; copied in parts of about equal clusters (frame ranges), runs of adjacent frames at
  // once.
  const auto frames = table.frames();
  slot.frames.assign(frames.begin(), frames.end());
  std::size_t n = 0;
  for (FrameRecord& r : slot.frames) {
    r.first_cluster = n;
    n += r.n_clusters;
  }
  if (n > std::numeric_limits<uint32_t>::max())
    throw std::invalid_argument("GPU products: more than 2^32 clusters in one batch");
  m.reserve(slot, n);
  const std::size_t per = m.per_cluster;
  std::byte* base = slot.host.get();
  auto* values = reinterpret_cast<int32_t*>(base);
  auto* xs = reinterpret_cast<uint16_t*>(base + m.values_bytes(slot.capacity));
  uint16_t* ys = xs + slot.capacity;
  const int32_t* src = table.data().data();
  const uint16_t* sx = table.x().data();
  const uint16_t* sy = table.y().data();
  const std::vector<std::pair<std::size_t, std::size_t>> parts =
      split_by_clusters(frames, m.pool.threads() + 1, kClustersPerPart);
  const std::vector<FrameRecord>& to = slot.frames;
  m.pool.run(parts.size(), [&](std::size_t part) {
    const auto [a, b] = parts[part];
    for (std::size_t k = a; k < b;) {
      const uint64_t first = frames[k].first_cluster;
      uint64_t last = first + frames[k].n_clusters;
      const std::size_t at = to[k].first_cluster;
      std::size_t j = k;
      while (j + 1 < b && frames[j + 1].first_cluster == last) last += frames[++j].n_clusters;
      const std::size_t c = last - first;
      if (c > 0) {
        std::memcpy(values + at * per, src + first * per, c * per * sizeof(int32_t));
        std::memcpy(xs + at, sx + first, c * sizeof(uint16_t));
        std::memcpy(ys + at, sy + first, c * sizeof(uint16_t));
      }
      k = j + 1;
    }
  });
  slot.n = n;
  slot.origin = slice_origin;
  const detail::StreamView st = m.stream;
  if (n > 0) {
    std::byte* dev = slot.dev.get();
    const std::size_t vb = m.values_bytes(slot.capacity);
    GLINT_CUDA_CHECK(cudaMemcpyAsync(dev, base, m.values_bytes(n), cudaMemcpyHostToDevice,
                                     st.get()));
    auto* dx = reinterpret_cast<uint16_t*>(dev + vb);
    GLINT_CUDA_CHECK(cudaMemcpyAsync(dx, xs, n * sizeof(uint16_t), cudaMemcpyHostToDevice,
                                     st.get()));
    GLINT_CUDA_CHECK(cudaMemcpyAsync(dx + slot.capacity, ys, n * sizeof(uint16_t),
                                     cudaMemcpyHostToDevice, st.get()));
    uint8_t* dflags = nullptr;
    if (s.slice_frames > 0) dflags = reinterpret_cast<uint8_t*>(dx + 2 * slot.capacity);
    detail::launch_products(m.params, reinterpret_cast<const int32_t*>(dev), dx,
                            dx + slot.capacity, static_cast<uint32_t>(n), dflags, m.sm_count,
                            st);
    if (dflags)
      GLINT_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<std::byte*>(ys + slot.capacity), dflags,
                                       n, cudaMemcpyDeviceToHost, st.get()));
  }
  slot.done.record(st);
  slot.busy = true;
  m.in_flight.push_back(m.next);
  m.next = (m.next + 1) % kSlots;
  m.frames += table.n_frames();
  ++m.added;
  m.wait_s += std::chrono::duration<double>(t1 - t0).count();
  m.copy_s += std::chrono::duration<double>(Clock::now() - t1).count();
}

void ProductsAccumulator::flush() {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  m.retire_ready(true);
}

uint64_t ProductsAccumulator::batches_done() const {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  m.retire_ready(false);
  return m.done;
}

products::ProductSums ProductsAccumulator::sums(bool pixel_spectra) const {
  Impl& m = *impl_;
  const products::ProductSettings& s = m.settings;
  std::lock_guard lock(m.mu);
  detail::DeviceGuard guard(m.device);
  m.retire_ready(true);
  products::ProductSums out(s, false);
  const detail::StreamView st = m.stream;
  std::vector<uint64_t> counters, subpixel;
  download(counters, m.counters, st);
  download(out.spectrum, m.spectrum, st);
  if (s.hitmap) {
    download(out.hitmap, m.hitmap, st);
    download(out.energy, m.energy, st);
  }
  if (s.pixel_spectra && pixel_spectra) download(out.pixel_spectra, m.pixel_spectra, st);
  if (s.eta) {
    download(out.eta2, m.eta2, st);
    download(out.eta3, m.eta3, st);
  }
  if (s.subpixel) download(subpixel, m.subpixel, st);
  m.stream.synchronize();
  out.clusters = counters[detail::kClusters];
  out.frames = m.frames;
  out.underflow = counters[detail::kUnderflow];
  out.overflow = counters[detail::kOverflow];
  out.eta2_outside = counters[detail::kEta2Outside];
  out.eta3_outside = counters[detail::kEta3Outside];
  out.subpixel_outside = counters[detail::kSubpixelOutside];
  if (s.subpixel) out.subpixel->assign(subpixel, counters[detail::kSubpixelOff]);
  for (const auto& [k, counts] : m.slices) out.slice(k) = counts;
  return out;
}

std::vector<uint32_t> ProductsAccumulator::take_slice(uint64_t k) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mu);
  const auto it = m.slices.find(k);
  if (it == m.slices.end()) return std::vector<uint32_t>(m.settings.pixels(), 0);
  std::vector<uint32_t> out = std::move(it->second);
  m.slices.erase(it);
  return out;
}

double ProductsAccumulator::wait_seconds() const {
  std::lock_guard lock(impl_->mu);
  return impl_->wait_s;
}

double ProductsAccumulator::copy_seconds() const {
  std::lock_guard lock(impl_->mu);
  return impl_->copy_s;
}

}  // namespace glint::gpu
