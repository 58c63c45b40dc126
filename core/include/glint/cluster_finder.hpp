#pragma once
// The cluster-finder interface. Every backend (the sequential reference, the multi-threaded CPU
// backend, the GPU engine) produces byte-identical clusters and pedestal state for the same
// frames (docs/cluster-finding.md).
//
// One streaming interface for every backend: the caller writes frames into the finder's input
// slot (staging()), submits them as a batch of data frames (submit) or dark frames
// (submit_dark), and receives each data batch's per-frame records and clusters, in submission
// order, through the one sink (set_sink). flush() returns once every submitted batch has reached
// the sink. A backend may complete a batch inside submit() (the CPU backends do) or later (the
// GPU engine delivers it when the slot is reused or at flush()); callers never need to know.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "glint/cluster_table.hpp"
#include "glint/frame.hpp"
#include "glint/jungfrau.hpp"
#include "glint/pedestal.hpp"

namespace glint {

/// What the finder reads in a frame's uint16 pixels (docs/cluster-finding.md).
enum class PixelMode : uint8_t {
  raw,                  ///< the value is the pixel (MOENCH, EIGER, ...)
  jungfrau_g0,          ///< JUNGFRAU without gain maps: clusters on G0 pixels only
  jungfrau_calibrated,  ///< JUNGFRAU calibrated to keV; float cluster values
};
std::string_view to_string(PixelMode mode);

struct FinderParams {
  FrameShape shape{};
  int cluster_size = 3;        ///< odd: 3, 5, 7 or 9
  double n_sigma = 5.0;
  uint32_t pedestal_window = 1000;
  PixelMode pixels = PixelMode::raw;
  /// The gain and pedestal tables of jungfrau_calibrated (shape as above); unused otherwise.
  std::shared_ptr<const jungfrau::Calibration> calibration = nullptr;
};

/// The table a finder with `params` fills: its cluster size, float values when calibrated, gain
/// counts for JUNGFRAU frames.
ClusterTable make_result_table(const FinderParams& params);

/// Frames per batch (the input slot's size) when the caller does not choose.
inline constexpr int kDefaultBatchFrames = 256;

/// Throws std::invalid_argument naming the bad parameter (unsupported cluster size, empty shape,
/// a frame larger than 65536 pixels in x or y, non-positive n_sigma or window, calibrated mode
/// without tables of the frame's shape).
void validate(const FinderParams& params);

/// Checks frames handed to ClusterFinder::push_dark: a whole number of frames of `params.shape`.
/// Returns the number of frames; throws std::invalid_argument saying what does not fit.
std::size_t check_dark_frames(const FinderParams& params, std::span<const uint16_t> frames);

/// Checks the arguments of ClusterFinder::find: `frames` holds frame_numbers.size() whole frames
/// and `out` has the finder's cluster size. Throws std::invalid_argument saying what does not fit.
void check_find_arguments(const FinderParams& params, std::span<const uint16_t> frames,
                          std::span<const uint64_t> frame_numbers, const ClusterTable& out);

class ClusterFinder {
 public:
  /// Receives one data batch's results: one record per submitted frame, in order, and their
  /// clusters. The table is valid during the call only (the finder reuses it).
  using ResultSink = std::function<void(const ClusterTable& batch)>;

  virtual ~ClusterFinder() = default;

  virtual const FinderParams& params() const = 0;

  // --- Streaming -------------------------------------------------------------------------------

  /// Frames one batch holds: the size of the input slot, in whole frames.
  virtual int batch_frames() const = 0;
  /// The input slot of the next batch: room for batch_frames() whole frames, back to back. May
  /// first wait for the batch that last used this slot (its results go to the sink). The span
  /// stays valid until the next submit() or submit_dark().
  virtual std::span<uint16_t> staging() = 0;
  /// Submits the first frame_numbers.size() frames written into staging() (at most
  /// batch_frames()) as data frames. The results reach the sink in submission order, inside this
  /// call or a later one (at the latest in flush()).
  virtual void submit(std::span<const uint64_t> frame_numbers) = 0;
  /// Submits the first n frames written into staging() (at most batch_frames()) as dark frames:
  /// they go into the pedestal, in order with the batches submitted before and after. Produces no
  /// results.
  virtual void submit_dark(std::size_t n) = 0;
  /// Returns once every submitted batch's results have gone to the sink.
  virtual void flush() = 0;
  /// Whether staging() is read by a device (pinned memory that a copy engine reads) rather than
  /// by this CPU: a writer of the slot may then bypass the caches (non-temporal stores).
  virtual bool staging_read_by_device() const { return false; }
  /// Where submitted batches' results go; an empty sink discards them. Throws what the sink
  /// throws, from the call that delivered the batch (submit, staging or flush).
  virtual void set_sink(ResultSink sink) = 0;

  // --- Whole arrays (tools, benchmarks, tests) -------------------------------------------------

  /// Accumulates dark (pedestal) frames: `frames` holds whole frames back to back, in order after
  /// every batch submitted before. Returns once they are accumulated.
  virtual void push_dark(std::span<const uint16_t> frames) = 0;

  /// Finds clusters in data frames, in order, updating the pedestal as the reference does.
  /// `frames` holds frame_numbers.size() whole frames back to back; one record per frame is
  /// appended to `out`, in order. Streamed batches submitted before reach the sink first.
  virtual void find(std::span<const uint16_t> frames, std::span<const uint64_t> frame_numbers,
                    ClusterTable& out) = 0;

  /// Snapshot of the current pedestal (waits for work in flight).
  virtual PedestalState pedestal() const = 0;
  /// Replaces the pedestal (e.g. the one kept from the previous run). Shape and window must match.
  virtual void load_pedestal(const PedestalState& state) = 0;
  /// Calibrated JUNGFRAU frames: the ADC pedestal the calibration subtracts, per gain stage
  /// (jungfrau::kStages * pixels, stage-major as jungfrau::Calibration::pedestal). Fixes it,
  /// as pedestal() does (from the dark frames seen so far). Empty in the other pixel modes.
  virtual std::vector<double> calibration_pedestal() const { return {}; }

  /// "cpu reference", "cpu (16 threads)", "gpu (NVIDIA H200)", ...
  virtual std::string description() const = 0;
};

/// The streaming side of a backend that completes every batch on the caller's thread: the input
/// slot is a buffer of its own (allocated at the first staging() call), submit() runs find() on
/// it and hands the results to the sink before it returns, submit_dark() runs push_dark().
class SynchronousFinder : public ClusterFinder {
 public:
  int batch_frames() const override { return batch_frames_; }
  std::span<uint16_t> staging() override;
  void submit(std::span<const uint64_t> frame_numbers) override;
  void submit_dark(std::size_t n) override;
  void flush() override {}
  void set_sink(ResultSink sink) override { sink_ = std::move(sink); }

 protected:
  /// Throws std::invalid_argument when batch_frames < 1.
  explicit SynchronousFinder(int batch_frames);

 private:
  /// The first n frames of the input slot; throws std::invalid_argument when n > batch_frames().
  std::span<const uint16_t> input(std::size_t n, const char* what);

  int batch_frames_;
  std::vector<uint16_t> input_;
  ClusterTable results_;
  ResultSink sink_;
};

/// The single-threaded reference semantics, written for clarity; the oracle for every backend.
std::unique_ptr<ClusterFinder> make_reference_finder(const FinderParams& params,
                                                     int batch_frames = kDefaultBatchFrames);

/// The fast exact CPU backend: each frame is split into row bands over `threads` persistent
/// threads (0: all hardware threads; capped at the number of rows); frames stay in order. Output
/// and pedestal are bit-identical to the reference finder's at any thread count. Streamed
/// batches hold up to `batch_frames` frames.
std::unique_ptr<ClusterFinder> make_cpu_finder(const FinderParams& params, unsigned threads,
                                               int batch_frames = kDefaultBatchFrames);

}  // namespace glint
