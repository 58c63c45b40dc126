#pragma once
// The science products of a run accumulated on a GPU (products.device, docs/products.md): the
// same sums as products::ProductSums, byte for byte, from a kernel that runs the shared
// host-and-device arithmetic (products/cluster_quantities.hpp, accumulate.hpp, the eta
// calibration's lookup) over each batch's clusters and adds into device tables with integer
// atomics (so the order of the additions does not matter).
//
// The run's thread (with copy threads for large batches) copies each batch's centres and values
// into one of two pinned staging buffers and returns; the upload and the kernel run on the
// accumulator's own stream. It waits only when both buffers are still in flight (never drops).
// The hit maps per slice are counted on the host, from a flag per cluster (in the window) that
// the kernel hands back, when the batch's buffer is reused or the accumulator is flushed.
//
// No CUDA header here: host code and tests build without nvcc; without CUDA the constructor
// throws std::runtime_error saying so.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "glint/cluster_table.hpp"
#include "glint/products/run_products.hpp"

namespace glint::gpu {

/// Device memory the products' tables take (hit map, energy image, spectrum, per-pixel spectra,
/// eta2/eta3, sub-pixel image and the calibration's tables), without the staging buffers.
std::size_t products_table_bytes(const products::ProductSettings& s);

class ProductsAccumulator {
 public:
  /// Allocates and zeroes the tables on `device` and uploads the eta calibration; starts
  /// `copy_threads` threads that copy parts of large batches into the staging buffers beside the
  /// caller of add(). Throws std::runtime_error naming the sizes when the tables do not fit in
  /// the device's free memory (with room for the staging buffers), CudaError when a CUDA call
  /// fails, std::runtime_error without CUDA.
  explicit ProductsAccumulator(const products::ProductSettings& settings, int device = 0,
                               unsigned copy_threads = 0);
  ~ProductsAccumulator();
  ProductsAccumulator(const ProductsAccumulator&) = delete;
  ProductsAccumulator& operator=(const ProductsAccumulator&) = delete;

  const products::ProductSettings& settings() const;

  /// Enqueues the clusters of `table` (its frames are data frames; cluster size and value type
  /// as the settings', else std::invalid_argument). `slice_origin` as ProductSums::add. Returns
  /// once they are copied into a staging buffer; waits while both buffers are in flight.
  void add(const ClusterTable& table, uint64_t slice_origin = 0);

  /// Waits for every batch added; their slices are counted afterwards.
  void flush();

  /// Batches (calls of add) whose work is done and whose slices are counted: those added before
  /// are in the order they were added.
  uint64_t batches_done() const;

  /// The sums so far (flushes first): equal to a ProductSums that add()ed the same tables, slices
  /// included (those not taken). `pixel_spectra`: download the per-pixel spectra too (else left
  /// empty, for the live view). Safe from any thread.
  products::ProductSums sums(bool pixel_spectra = true) const;

  /// Removes slice k's counts: rows * cols, zeros when nothing was added to it (as
  /// ProductSums::take_slice); only slices of batches done are complete.
  std::vector<uint32_t> take_slice(uint64_t k);

  /// Seconds add() waited for a free staging buffer, and spent copying into it.
  double wait_seconds() const;
  double copy_seconds() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace glint::gpu
