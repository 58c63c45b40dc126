#pragma once
// The science products of a run, accumulated from its clusters (docs/products.md): the hit map
// and energy image, hit maps per slice of frames, the energy spectrum (global and per pixel) and
// the eta2/eta3 distributions, all restricted to an energy window.
//
// Every sum is an integer (counts; energies as int64 ADU, or int64 micro-keV for calibrated
// frames: llround(e * 1e6)), and each cluster's bins depend on that cluster alone, so the result
// is the same whatever the batches were and however many accumulators shared the work
// (ProductSums::merge adds integers).
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glint/cluster_table.hpp"
#include "glint/products/accumulate.hpp"
#include "glint/products/cluster_products.hpp"
#include "glint/products/eta_calibration.hpp"
#include "glint/products/subpixel_image.hpp"

namespace glint::products {

/// Which cluster energy the window, the energy image and the spectra use.
enum class EnergyKind : uint8_t {
  sum,       ///< the S x S sum ("sum")
  quadrant,  ///< the largest 2 x 2 quadrant sum ("2x2")
};
std::string_view energy_kind_name(EnergyKind kind);  ///< "sum" | "2x2"

/// Regular bins over [lo, hi): edge i is lo + (hi - lo) * i / bins, and a value v with
/// edge(i) <= v < edge(i + 1) is in bin i. With `closed`, hi itself is in the last bin (the eta
/// ranges, whose upper end is a value eta takes).
struct Binning {
  double lo = 0.0;
  double hi = 1.0;
  uint32_t bins = 1;
  bool closed = false;

  double edge(uint32_t i) const {
    return i >= bins ? hi : lo + (hi - lo) * static_cast<double>(i) / bins;
  }
  /// The bin of `v`: -1 below lo (and NaN), `bins` at or above hi (above hi when closed).
  int64_t bin(double v) const;
  friend bool operator==(const Binning&, const Binning&) = default;
  std::vector<double> edges() const;    ///< bins + 1 edges
  std::vector<double> centres() const;  ///< (edge(i) + edge(i + 1)) / 2
};

/// A Binning with its edges computed once: bin() without a division (the accumulators' hot path;
/// the same bins as Binning::bin).
class BinTable {
 public:
  explicit BinTable(const Binning& b);
  int64_t bin(double v) const {
    return detail::table_bin(v, lo_, hi_, scale_, bins_, closed_, edges_.data());
  }
  /// What the GPU accumulator uploads: the edges (bins + 1) and the first guess's scale.
  std::span<const double> edges() const { return edges_; }
  double scale() const { return scale_; }
  /// The table as the per-cluster code reads it (this table's edges).
  BinsView view() const { return {edges_.data(), lo_, hi_, scale_, bins_, closed_}; }

 private:
  double lo_, hi_, scale_;
  int64_t bins_;
  bool closed_;
  std::vector<double> edges_;
};

/// A large table of counts (the per-pixel spectra: rows x cols x bins) in memory advised for
/// huge pages, zeroed: a cluster's count lands at a random place in it, and with 4 KiB pages
/// nearly every one would miss the TLB.
class CountTable {
 public:
  explicit CountTable(std::size_t n = 0);
  ~CountTable();
  CountTable(const CountTable&) = delete;
  CountTable& operator=(const CountTable&) = delete;
  std::span<uint32_t> span() { return {data_, size_}; }
  std::span<const uint32_t> span() const { return {data_, size_}; }
  std::size_t size() const { return size_; }

 private:
  uint32_t* data_ = nullptr;
  std::size_t size_ = 0;
};

/// What to accumulate (the run's products: configuration, frame shape and cluster values).
struct ProductSettings {
  uint32_t rows = 0, cols = 0;
  int cluster_size = 3;
  bool calibrated = false;  ///< float clusters in keV (else int32 ADU)
  EnergyKind energy = EnergyKind::sum;
  /// The window, inclusive; +-infinity when there is none.
  double emin = -std::numeric_limits<double>::infinity();
  double emax = std::numeric_limits<double>::infinity();
  bool hitmap = true;           ///< hit map and energy image
  uint32_t slice_frames = 0;    ///< > 0: hit maps per slice of this many frame numbers
  Binning spectrum{0.0, 2000.0, 500, false};
  bool pixel_spectra = false;
  bool eta = false;
  uint32_t eta_bins = 100;
  /// The eta calibration of the sub-pixel image (null: no sub-pixel image), its file (written
  /// as the image's `calibration` attribute) and the sub-pixels per pixel and axis.
  std::shared_ptr<const EtaCalibration> subpixel;
  std::string subpixel_calibration;
  uint32_t subpixel_factor = 5;

  bool has_window() const;
  Binning eta2_binning() const { return {0.0, 1.0, eta_bins, true}; }
  Binning eta3_binning() const { return {-1.0, 1.0, eta_bins, true}; }
  std::size_t pixels() const { return std::size_t{rows} * cols; }
  /// Energies as accumulated in the energy image: 1 (ADU) or 1e6 (micro-keV) per unit.
  double energy_scale() const { return calibrated ? 1e6 : 1.0; }
};

/// One accumulator of the products (one per worker; merged at the end).
class ProductSums {
 public:
  /// `own_pixel_spectra`: keep the per-pixel spectra here (else add() is given a shared table).
  explicit ProductSums(const ProductSettings& settings, bool own_pixel_spectra = true);

  const ProductSettings& settings() const { return s_; }

  /// Adds the clusters of `table` (its frames are data frames). `slice_origin`: the first data
  /// frame number of the run (slice k covers [origin + k N, origin + (k + 1) N)).
  /// `shared_pixel_spectra`: the per-pixel spectra shared between accumulators, incremented
  /// atomically (rows * cols * bins); empty: this accumulator's own.
  void add(const ClusterTable& table, uint64_t slice_origin = 0,
           std::span<uint32_t> shared_pixel_spectra = {});

  /// Adds `other`'s sums (same settings) to these, slices by index.
  void merge(const ProductSums& other);

  /// Removes slice k's counts from here: rows * cols, zeros when nothing was added to it.
  std::vector<uint32_t> take_slice(uint64_t k);
  /// Slices added to and not taken yet.
  const std::map<uint64_t, std::vector<uint32_t>>& slices() const { return slices_; }
  /// Slice k's counts (rows * cols), made (zeros) when nothing was added to it yet: for an
  /// accumulator that counts the slices itself (the GPU accumulator's host side).
  std::vector<uint32_t>& slice(uint64_t k);

  uint64_t clusters = 0;  ///< clusters within the window
  uint64_t frames = 0;    ///< data frames added
  std::vector<uint64_t> hitmap;        ///< rows * cols (with hitmap)
  std::vector<int64_t> energy;         ///< rows * cols: ADU, or micro-keV (energy_scale())
  std::vector<uint64_t> spectrum;      ///< spectrum.bins
  uint64_t underflow = 0, overflow = 0;
  std::vector<uint32_t> pixel_spectra; ///< rows * cols * bins (own_pixel_spectra only)
  std::vector<uint64_t> eta2, eta3;    ///< eta_bins * eta_bins, eta y rows, eta x columns
  uint64_t eta2_outside = 0, eta3_outside = 0;  ///< eta values outside the range
  /// The sub-pixel image (with settings().subpixel): each cluster in the window at its eta2
  /// position (EtaCalibration::position); photons whose position falls off the detector are
  /// its outside().
  std::optional<SubpixelImage> subpixel;
  uint64_t subpixel_outside = 0;  ///< clusters whose eta fell outside the calibration

  friend bool operator==(const ProductSums&, const ProductSums&);

  /// The settings and lookup tables add_cluster reads (pointers into these sums' bin tables and
  /// the settings' calibration, valid while both live): what the GPU accumulator uploads.
  ClusterProductsView view() const;

 private:
  template <typename T, int S>
  void add_clusters(const ClusterTable& table, uint64_t slice_origin,
                    std::span<uint32_t> pixel_spectra);

  ProductSettings s_;
  BinTable spectrum_bins_, eta2_bins_, eta3_bins_;
  std::map<uint64_t, std::vector<uint32_t>> slices_;
};

/// Each cluster's energies as the run file stores them: the S x S sum and the largest 2 x 2
/// quadrant sum, int32 (ADU) or, for a float table, the float's bits. Resized to n_clusters().
void cluster_energies(const ClusterTable& table, std::vector<int32_t>& sum,
                      std::vector<int32_t>& quadrant);

}  // namespace glint::products
