#include "glint/products/run_products.hpp"
#include "glint/products/table_eta.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <bit>
#include <cmath>
#include <stdexcept>

#include "glint/products/cluster_products.hpp"
#include "glint/products/cluster_quantities.hpp"

namespace glint::products {

std::string_view energy_kind_name(EnergyKind kind) {
  return kind == EnergyKind::sum ? "sum" : "2x2";
}

int64_t Binning::bin(double v) const {
  if (!(v >= lo)) return -1;
  if (v > hi || (v == hi && !closed)) return bins;
  if (v == hi) return bins - 1;
  // A first guess from the ratio, corrected against the edges themselves so that a value on an
  // edge lands where edge() says, whatever the rounding of the division.
  auto i = static_cast<int64_t>((v - lo) / (hi - lo) * bins);
  if (i < 0) i = 0;
  if (i >= bins) i = bins - 1;
  while (i > 0 && v < edge(static_cast<uint32_t>(i))) --i;
  while (i + 1 < bins && v >= edge(static_cast<uint32_t>(i + 1))) ++i;
  return i;
}

std::vector<double> Binning::edges() const {
  std::vector<double> e(bins + 1);
  for (uint32_t i = 0; i <= bins; ++i) e[i] = edge(i);
  return e;
}

std::vector<double> Binning::centres() const {
  std::vector<double> c(bins);
  for (uint32_t i = 0; i < bins; ++i) c[i] = (edge(i) + edge(i + 1)) / 2;
  return c;
}

BinTable::BinTable(const Binning& b)
    : lo_(b.lo),
      hi_(b.hi),
      scale_(b.bins / (b.hi - b.lo)),
      bins_(b.bins),
      closed_(b.closed),
      edges_(b.edges()) {}

CountTable::CountTable(std::size_t n) : size_(n) {
  if (n == 0) return;
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t bytes = (n * sizeof(uint32_t) + kHuge - 1) / kHuge * kHuge;
  data_ = static_cast<uint32_t*>(std::aligned_alloc(kHuge, bytes));
  if (data_ == nullptr) throw std::bad_alloc();
  (void)::madvise(data_, bytes, MADV_HUGEPAGE);  // advice only: 4 KiB pages where refused
  std::memset(data_, 0, n * sizeof(uint32_t));
}

CountTable::~CountTable() { std::free(data_); }

bool ProductSettings::has_window() const {
  return std::isfinite(emin) || std::isfinite(emax);
}

ProductSums::ProductSums(const ProductSettings& settings, bool own_pixel_spectra)
    : s_(settings),
      spectrum_bins_(settings.spectrum),
      eta2_bins_(settings.eta2_binning()),
      eta3_bins_(settings.eta3_binning()) {
  if (s_.rows == 0 || s_.cols == 0 || s_.spectrum.bins == 0 || s_.eta_bins == 0)
    throw std::invalid_argument("ProductSums: empty frame shape or no bins");
  if (s_.hitmap) {
    hitmap.assign(s_.pixels(), 0);
    energy.assign(s_.pixels(), 0);
  }
  spectrum.assign(s_.spectrum.bins, 0);
  if (s_.pixel_spectra && own_pixel_spectra)
    pixel_spectra.assign(s_.pixels() * s_.spectrum.bins, 0);
  if (s_.eta) {
    eta2.assign(std::size_t{s_.eta_bins} * s_.eta_bins, 0);
    eta3.assign(std::size_t{s_.eta_bins} * s_.eta_bins, 0);
  }
  if (s_.subpixel) subpixel.emplace(s_.rows, s_.cols, s_.subpixel_factor);
}

namespace {

/// Where a cluster's counts go on the CPU: this accumulator's tables (the per-pixel spectra
/// shared with other accumulators incremented atomically).
struct SumsSink {
  ProductSums& s;
  uint64_t* hitmap = nullptr;  ///< null without the hit map
  int64_t* energy = nullptr;
  uint32_t* slice = nullptr;   ///< the current frame's slice, if any
  uint64_t* spectrum = nullptr;
  uint32_t* pixel_spectra = nullptr;
  bool atomic_pixels = false;
  std::size_t bins = 0;
  uint64_t* eta2 = nullptr;
  uint64_t* eta3 = nullptr;
  SubpixelImage* image = nullptr;

  void counted(std::size_t pixel, int64_t e) {
    ++s.clusters;
    if (hitmap) {
      ++hitmap[pixel];
      energy[pixel] += e;
    }
    if (slice) ++slice[pixel];
  }
  void underflow() { ++s.underflow; }
  void overflow() { ++s.overflow; }
  void spectrum_bin(std::size_t b, std::size_t pixel) {
    ++spectrum[b];
    if (!pixel_spectra) return;
    uint32_t& c = pixel_spectra[pixel * bins + b];
    if (atomic_pixels) std::atomic_ref<uint32_t>(c).fetch_add(1, std::memory_order_relaxed);
    else ++c;
  }
  void eta2_bin(std::size_t i) { ++eta2[i]; }
  void eta2_outside() { ++s.eta2_outside; }
  void eta3_bin(std::size_t i) { ++eta3[i]; }
  void eta3_outside() { ++s.eta3_outside; }
  void photon(double x, double y) { image->add(x, y); }
  void subpixel_outside() { ++s.subpixel_outside; }
};

}  // namespace

ClusterProductsView ProductSums::view() const {
  ClusterProductsView p;
  p.rows = s_.rows;
  p.cols = s_.cols;
  p.quadrant = s_.energy == EnergyKind::quadrant;
  p.emin = s_.emin;
  p.emax = s_.emax;
  p.spectrum = spectrum_bins_.view();
  p.eta = s_.eta;
  p.eta2 = eta2_bins_.view();
  p.eta3 = eta3_bins_.view();
  p.eta_bins = s_.eta_bins;
  if (s_.subpixel) {
    const EtaCalibration& c = *s_.subpixel;
    p.subpixel = true;
    p.cal_x = c.eta_x().view();
    p.cal_y = c.eta_y().view();
    p.cal_e = c.energy().view();
    p.ietax = c.ietax().data();
    p.ietay = c.ietay().data();
  }
  return p;
}

template <typename T, int S>
void ProductSums::add_clusters(const ClusterTable& table, uint64_t slice_origin,
                               std::span<uint32_t> shared) {
  // S: the cluster size known at compile time (the common 3 x 3: unrolled sums), 0 otherwise.
  const int size = S != 0 ? S : table.cluster_size();
  const int n = size * size;
  const auto xs = table.x(), ys = table.y();
  const int32_t* data = table.data().data();
  const ClusterProductsView p = view();
  SumsSink sink{*this};
  if (s_.hitmap) {
    sink.hitmap = hitmap.data();
    sink.energy = energy.data();
  }
  sink.spectrum = spectrum.data();
  sink.bins = s_.spectrum.bins;
  sink.atomic_pixels = !shared.empty();
  if (s_.pixel_spectra)
    sink.pixel_spectra = sink.atomic_pixels ? shared.data() : pixel_spectra.data();
  sink.eta2 = eta2.data();
  sink.eta3 = eta3.data();
  if (subpixel) sink.image = &*subpixel;
  T buf[81];
  for (const FrameRecord& r : table.frames()) {
    sink.slice = nullptr;
    if (s_.slice_frames > 0 && r.n_clusters > 0 && r.frame_number >= slice_origin)
      sink.slice = slice((r.frame_number - slice_origin) / s_.slice_frames).data();
    const uint64_t end = r.first_cluster + r.n_clusters;
    for (uint64_t i = r.first_cluster; i < end; ++i)
      add_cluster(p, cluster_values<T>(data + i * n, buf, n), size, xs[i], ys[i], sink);
  }
}

void ProductSums::add(const ClusterTable& table, uint64_t slice_origin,
                      std::span<uint32_t> shared_pixel_spectra) {
  if (table.cluster_size() != s_.cluster_size)
    throw std::invalid_argument("ProductSums::add: cluster size differs from the settings'");
  if ((table.value_type() == ClusterValues::float32) != s_.calibrated)
    throw std::invalid_argument("ProductSums::add: cluster values differ from the settings'");
  if (!shared_pixel_spectra.empty() &&
      shared_pixel_spectra.size() != s_.pixels() * s_.spectrum.bins)
    throw std::invalid_argument("ProductSums::add: shared pixel spectra of the wrong size");
  const bool three = table.cluster_size() == 3;
  if (s_.calibrated && three) add_clusters<float, 3>(table, slice_origin, shared_pixel_spectra);
  else if (s_.calibrated) add_clusters<float, 0>(table, slice_origin, shared_pixel_spectra);
  else if (three) add_clusters<int32_t, 3>(table, slice_origin, shared_pixel_spectra);
  else add_clusters<int32_t, 0>(table, slice_origin, shared_pixel_spectra);
  frames += table.n_frames();
}

namespace {
template <typename T>
void add_into(std::vector<T>& to, const std::vector<T>& from) {
  if (from.empty()) return;
  if (to.size() != from.size()) throw std::invalid_argument("ProductSums::merge: sizes differ");
  for (std::size_t i = 0; i < to.size(); ++i) to[i] += from[i];
}
}  // namespace

void ProductSums::merge(const ProductSums& o) {
  clusters += o.clusters;
  frames += o.frames;
  add_into(hitmap, o.hitmap);
  add_into(energy, o.energy);
  add_into(spectrum, o.spectrum);
  underflow += o.underflow;
  overflow += o.overflow;
  if (!o.pixel_spectra.empty() && pixel_spectra.empty())
    pixel_spectra.assign(o.pixel_spectra.size(), 0);
  add_into(pixel_spectra, o.pixel_spectra);
  add_into(eta2, o.eta2);
  add_into(eta3, o.eta3);
  eta2_outside += o.eta2_outside;
  eta3_outside += o.eta3_outside;
  if (o.subpixel) {
    if (!subpixel) subpixel.emplace(s_.rows, s_.cols, s_.subpixel_factor);
    subpixel->merge(*o.subpixel);
  }
  subpixel_outside += o.subpixel_outside;
  for (const auto& [k, counts] : o.slices_) {
    auto& mine = slices_[k];
    if (mine.empty()) mine.assign(counts.size(), 0);
    add_into(mine, counts);
  }
}

std::vector<uint32_t>& ProductSums::slice(uint64_t k) {
  auto& counts = slices_[k];
  if (counts.empty()) counts.assign(s_.pixels(), 0);
  return counts;
}

std::vector<uint32_t> ProductSums::take_slice(uint64_t k) {
  const auto it = slices_.find(k);
  if (it == slices_.end()) return std::vector<uint32_t>(s_.pixels(), 0);
  std::vector<uint32_t> out = std::move(it->second);
  slices_.erase(it);
  return out;
}

bool operator==(const ProductSums& a, const ProductSums& b) {
  return a.clusters == b.clusters && a.frames == b.frames && a.hitmap == b.hitmap &&
         a.energy == b.energy && a.spectrum == b.spectrum && a.underflow == b.underflow &&
         a.overflow == b.overflow && a.pixel_spectra == b.pixel_spectra && a.eta2 == b.eta2 &&
         a.eta3 == b.eta3 && a.eta2_outside == b.eta2_outside &&
         a.eta3_outside == b.eta3_outside && a.slices_ == b.slices_ &&
         a.subpixel.has_value() == b.subpixel.has_value() &&
         (!a.subpixel || (std::ranges::equal(a.subpixel->counts(), b.subpixel->counts()) &&
                          a.subpixel->outside() == b.subpixel->outside())) &&
         a.subpixel_outside == b.subpixel_outside;
}

void cluster_energies(const ClusterTable& table, std::vector<int32_t>& sum,
                      std::vector<int32_t>& quadrant) {
  const std::size_t count = table.n_clusters();
  sum.resize(count);
  quadrant.resize(count);
  const int size = table.cluster_size();
  const int n = size * size;
  const int32_t* data = table.data().data();
  if (table.value_type() == ClusterValues::float32) {
    float buf[81];
    for (std::size_t i = 0; i < count; ++i) {
      const float* v = cluster_values<float>(data + i * n, buf, n);
      sum[i] = std::bit_cast<int32_t>(cluster_sum(v, size));
      quadrant[i] = std::bit_cast<int32_t>(max_quadrant(v, size).sum);
    }
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      const int32_t* v = data + i * n;
      sum[i] = cluster_sum(v, size);
      quadrant[i] = max_quadrant(v, size).sum;
    }
  }
}

}  // namespace glint::products
