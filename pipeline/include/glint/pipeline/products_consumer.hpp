#pragma once
// The science products of a run as a consumer of its clusters (config products:, docs/
// products.md): hit map, energy image, hit maps per slice, spectra, eta distributions.
//
// It never slows the run's thread beyond a copy. On the CPU (products.device: cpu, or auto
// without a usable GPU) each batch is copied into a bounded queue and accumulated on worker
// threads, each into its own sums (the per-pixel spectra, too large to keep per worker, are
// shared and incremented atomically). The sums are integers, merged at the end, so the products
// do not depend on which worker took which batch. On a GPU (gpu::ProductsAccumulator) each batch
// is copied into a pinned staging buffer and accumulated by a kernel on the accumulator's own
// stream, with the same bits. Products never drop: when the queue (the staging buffers) is full
// the run's thread waits for room (docs/architecture.md).
//
// Completed slices (products.slice_frames) are appended to the run file as they complete; every
// other product is handed to the run file at the end (RunFileWriter::set_products) and written
// when it closes.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "glint/backend.hpp"
#include "glint/pipeline/preview_image.hpp"
#include "glint/pipeline/result_consumer.hpp"
#include "glint/products/run_products.hpp"

namespace glint::gpu {
class ProductsAccumulator;
}

namespace glint::pipeline {

/// products.device as a backend: auto | cpu | gpu (the values the configuration allows; any other
/// throws std::invalid_argument naming the key and the allowed values).
Backend products_backend(const config::ProductsConfig& cfg);

/// The products' settings for a run with configuration `cfg` and finder `finder` (frame shape,
/// cluster size, calibrated values).
products::ProductSettings product_settings(const config::ProductsConfig& cfg,
                                           const FinderParams& finder);
/// Reads products.subpixel.calibration (read_eta_calibration) for a run with clusters of
/// `cluster_size`; null when none is configured. Throws std::invalid_argument naming the key and
/// the file when it cannot be read, is not an eta calibration or was made from clusters of
/// another size.
std::shared_ptr<const products::EtaCalibration> load_subpixel_calibration(
    const config::ProductsConfig& cfg, int cluster_size);
/// Worker threads for `cfg.threads` (-1: min(4, cores / 4), at least 1).
unsigned products_threads(const config::ProductsConfig& cfg);

class ProductsConsumer final : public ResultConsumer {
 public:
  /// Where the products go: the run file, once it is open (called at on_start); null or a
  /// function returning null: the products are computed and offered (preview_images, result)
  /// but written nowhere.
  using FileSource = std::function<RunFileWriter*()>;

  /// `threads`: workers (0: products_threads(cfg.products) at on_start). `queue_batches`:
  /// batches waiting beside those being accumulated (0: two per worker).
  explicit ProductsConsumer(FileSource file = {}, unsigned threads = 0,
                            std::size_t queue_batches = 0);
  ~ProductsConsumer() override;  ///< stops the workers (what is queued is abandoned)

  std::string_view name() const override { return "products"; }
  /// Reads the settings, chooses where to accumulate (products.device: the GPU the finder's
  /// first gpu_id names, or the CPU), starts the workers or the GPU accumulator. Throws
  /// std::invalid_argument for settings that do not fit the run, std::runtime_error for
  /// products.device: gpu without a usable GPU or with too little device memory.
  void on_start(const RunContext& run) override;
  /// Copies the batch into the queue (waits while the queue is full), then appends the slices
  /// that the workers have completed. Rethrows what a worker failed with.
  void on_batch(const FoundBatch& batch) override;
  /// Frames without clusters count for nothing but the slices' progress.
  void on_rows(std::span<const FrameRow> rows) override;
  /// Waits for the workers, merges their sums, appends the remaining slices (the last one
  /// partial) and hands the products to the run file (not after a failure or an abort).
  void on_end(const RunEnd& end) override;
  ConsumerStats stats() const override;

  /// Returns once every batch handed in is accumulated (the workers idle, or the GPU's queue
  /// done), without ending anything: what the products cost per frame, apart from on_end's
  /// merge or download of the tables, which happens once per run. Rethrows a worker's failure.
  void drain();

  /// The current hit map, energy image and spectrum as images for the live view (a merged copy
  /// of the workers' sums: safe from any thread, O(pixels x workers)). Empty before on_start.
  std::vector<PreviewImage> preview_images() const;

  /// The products so far (a merged copy, as preview_images), or after on_end the final ones.
  products::ProductSums snapshot() const;

  /// Seconds the run's thread spent waiting for room in the queue (0 when the workers keep up)
  /// and copying batches into it.
  double wait_seconds() const;
  double copy_seconds() const;
  /// CPU worker threads (0 on the GPU).
  unsigned threads() const { return threads_; }
  /// Whether this run's products are accumulated on a GPU (set at on_start).
  bool on_gpu() const { return on_gpu_; }

 private:
  struct Worker {
    mutable std::mutex mu;  ///< held while accumulating: snapshots and slices take it
    std::unique_ptr<products::ProductSums> sums;
    std::jthread thread;
  };
  struct Item {
    uint64_t seq = 0;
    ClusterTable clusters;
  };
  /// The batch being copied into the queue, in parts (frame ranges of about equal clusters) that
  /// the run's thread and idle workers copy at once; on_batch returns when all are copied.
  struct CopyJob {
    const ClusterTable* src = nullptr;  ///< null: no job
    std::vector<std::pair<std::size_t, std::size_t>> parts;
    uint64_t first_seq = 0;
    std::size_t next = 0;       ///< the next part to take
    std::size_t remaining = 0;  ///< parts not copied yet
  };
  /// Takes the job's next part and copies it into a queued item (mu_ held on entry and exit,
  /// released while copying); false when no part is left.
  bool copy_part(std::unique_lock<std::mutex>& lock);
  bool has_part() const { return job_.src != nullptr && job_.next < job_.parts.size(); }
  void work(Worker& w, std::stop_token st);
  void write_completed_slices(bool all);
  /// After the batch of sequence number `seq` (run thread): the slices that are complete once
  /// every batch up to it is accumulated are noted, and those already accumulated appended.
  void note_slices(uint64_t seq);
  void rethrow_failure();
  void stop_workers();
  void on_batch_gpu(const FoundBatch& batch);
  void on_end_gpu(const RunEnd& end);
  void record_failure(const std::exception& e);

  FileSource file_source_;
  RunFileWriter* file_ = nullptr;
  unsigned requested_threads_ = 0, threads_ = 0;
  std::size_t requested_capacity_ = 0, capacity_ = 0;
  products::ProductSettings settings_;
  std::atomic<bool> started_{false};  ///< set once the settings and workers are in place
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<products::CountTable> shared_pixel_spectra_;  ///< with products.pixel_spectra
  /// The GPU accumulator (products on a GPU) until on_end; read under result_mu_ by snapshots.
  std::unique_ptr<gpu::ProductsAccumulator> gpu_;
  bool on_gpu_ = false;

  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<std::unique_ptr<Item>> queue_;
  std::vector<std::unique_ptr<Item>> free_;  ///< items to reuse (their tables keep capacity)
  CopyJob job_;
  uint64_t next_seq_ = 0;
  uint64_t done_below_ = 0;          ///< every item with a smaller seq is accumulated
  std::set<uint64_t> done_ahead_;    ///< accumulated items at or above done_below_
  std::string failure_;              ///< the first worker failure
  uint64_t frames_ = 0, failed_ = 0;
  double wait_seconds_ = 0, copy_seconds_ = 0;

  // Slices (run thread only): origin, and slices complete once items below a seq are done.
  bool have_origin_ = false;
  uint64_t origin_ = 0;
  uint64_t slices_written_ = 0;
  uint64_t last_frame_ = 0;
  std::deque<std::pair<uint64_t, uint64_t>> complete_after_;  ///< (items below seq, slices)

  mutable std::mutex result_mu_;
  std::shared_ptr<const products::ProductSums> result_;  ///< after on_end (shared with the file)
};

}  // namespace glint::pipeline
