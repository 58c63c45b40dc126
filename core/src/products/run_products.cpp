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

template <typename T, int S>
void ProductSums::add_clusters(const ClusterTable& table, uint64_t slice_origin,
                               std::span<uint32_t> shared) {
  // S: the cluster size known at compile time (the common 3 x 3: unrolled sums), 0 otherwise.
  const int size = S != 0 ? S : table.cluster_size();
  const int n = size * size;
  const std::size_t cols = s_.cols, rows = s_.rows;
  const auto xs = table.x(), ys = table.y();
  const int32_t* data = table.data().data();
  const bool quad = s_.energy == EnergyKind::quadrant;
  const BinTable& sb = spectrum_bins_;
  const uint32_t bins = s_.spectrum.bins;
  const BinTable &e2 = eta2_bins_, &e3 = eta3_bins_;
  const int64_t eta_bins = s_.eta_bins;
  uint32_t* pixel_spectra_out = nullptr;
  const bool atomic_pixels = !shared.empty();
  if (s_.pixel_spectra) pixel_spectra_out = atomic_pixels ? shared.data() : pixel_spectra.data();
  T buf[81];
  for (const FrameRecord& r : table.frames()) {
    std::vector<uint32_t>* slice = nullptr;
    if (s_.slice_frames > 0 && r.n_clusters > 0 && r.frame_number >= slice_origin) {
      const uint64_t k = (r.frame_number - slice_origin) / s_.slice_frames;
      auto& counts = slices_[k];
      if (counts.empty()) counts.assign(s_.pixels(), 0);
      slice = &counts;
    }
    const uint64_t end = r.first_cluster + r.n_clusters;
    for (uint64_t i = r.first_cluster; i < end; ++i) {
      const std::size_t x = xs[i], y = ys[i];
      if (x >= cols || y >= rows) continue;  // not a pixel of these frames: never counted
      const T* v = cluster_values<T>(data + i * n, buf, n);
      T e;
      Eta<T> eta2v{};
      const bool need_eta2 = s_.eta || s_.subpixel;
      if (need_eta2) eta2v = products::eta2(v, size);
      if (quad) e = need_eta2 ? eta2v.sum : max_quadrant(v, size).sum;
      else e = cluster_sum(v, size);
      const double ed = static_cast<double>(e);
      if (!(ed >= s_.emin && ed <= s_.emax)) continue;
      ++clusters;
      const std::size_t pixel = y * cols + x;
      if (s_.hitmap) {
        ++hitmap[pixel];
        energy[pixel] += detail::fixed_energy(e);
      }
      if (slice) ++(*slice)[pixel];
      const int64_t b = sb.bin(ed);
      if (b < 0) {
        ++underflow;
      } else if (b >= bins) {
        ++overflow;
      } else {
        ++spectrum[static_cast<std::size_t>(b)];
        if (pixel_spectra_out) {
          uint32_t& c = pixel_spectra_out[pixel * bins + static_cast<std::size_t>(b)];
          if (atomic_pixels) std::atomic_ref<uint32_t>(c).fetch_add(1, std::memory_order_relaxed);
          else ++c;
        }
      }
      if (s_.eta) {
        const int64_t bx = e2.bin(eta2v.x), by = e2.bin(eta2v.y);
        if (bx < 0 || by < 0 || bx >= eta_bins || by >= eta_bins) ++eta2_outside;
        else ++eta2[static_cast<std::size_t>(by * eta_bins + bx)];
        const Eta<T> eta3v = products::eta3(v, size);
        const int64_t cx = e3.bin(eta3v.x), cy = e3.bin(eta3v.y);
        if (cx < 0 || cy < 0 || cx >= eta_bins || cy >= eta_bins) ++eta3_outside;
        else ++eta3[static_cast<std::size_t>(cy * eta_bins + cx)];
      }
      if (s_.subpixel) {
        const auto p = s_.subpixel->position(xs[i], ys[i], eta2v);
        if (p) subpixel->add(p->x, p->y);
        else ++subpixel_outside;
      }
    }
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
