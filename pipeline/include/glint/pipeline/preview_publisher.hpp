#pragma once
// The live view of a run (docs/live-view.md). PreviewPublisher owns glintd's ZeroMQ PUB socket,
// bound once and kept across runs, and a sending thread behind a latest-wins mailbox.
// PreviewConsumer, one of each run's result consumers, hands it the run's images (from a
// provider set at wiring, plus the pedestal and noise maps) at most preview.rate_hz times a
// second and once more at the end of the run. Nothing here ever waits for a subscriber: the run
// thread only swaps an update into the mailbox; the socket is non-blocking with a small
// high-water mark; what is not sent is counted.
//
// Each update is one JSON message naming its images, then every image as a two-part message in
// slsReceiver's stream format (header version 5, bitmode 32: uint32 pixels, a float image scaled;
// the scale, offset, units and name in addJsonHeader), so that tools that show that stream can
// show these images.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "glint/config/config.hpp"
#include "glint/pedestal.hpp"
#include "glint/pipeline/preview_image.hpp"
#include "glint/pipeline/result_consumer.hpp"

namespace glint::pipeline {

/// The images a run offers for its live view, made when asked (on the run's thread).
using PreviewProvider = std::function<std::vector<PreviewImage>()>;

/// The version of the naming message's layout ("glint_preview" key).
inline constexpr int kPreviewFormatVersion = 1;
/// ZeroMQ messages allowed per update in the socket's high-water mark: an update is its naming
/// message and one (two-part) message per image, and ZeroMQ drops whole messages, so that a
/// high-water mark of `hwm` updates is hwm x this many messages.
inline constexpr int kPreviewMessagesPerUpdate = 16;

/// One update: a run's images at one moment.
struct PreviewUpdate {
  uint64_t run_index = 0;
  std::string file;          ///< the run file
  uint64_t sequence = 0;     ///< this run's updates before this one
  bool final = false;        ///< the run's last update (sent at its end)
  uint64_t frames = 0;       ///< data frames of the run so far
  std::vector<std::shared_ptr<const PreviewImage>> images;
};

/// An image as the uint32 pixels of bitmode 32: value = offset + scale * pixel. Integer images
/// with values in [0, 2^32) keep scale 1 and offset 0 (exact). Others: offset is the smallest
/// value when it is negative (else 0), scale the smallest power of ten, at least 1e-6, that fits
/// the range into 32 bits; pixels are rounded to nearest. Values that are not finite (a noise
/// NaN) become pixel 0 and are counted.
struct ScaledPixels {
  double scale = 1.0;
  double offset = 0.0;
  std::vector<uint32_t> pixels;
  uint64_t non_finite = 0;
};
ScaledPixels scale_to_uint32(const PreviewImage& image);

/// The messages of one update, as sent: [0] the naming message (JSON), then for each image its
/// header ([1 + 2k], slsReceiver's JSON) and its pixels ([2 + 2k], uint32 little-endian).
std::vector<std::string> encode_preview_update(const PreviewUpdate& update);

/// The pedestal (mean) and noise maps of `pedestal` as images ("pedestal", "noise") in `units`.
std::vector<PreviewImage> pedestal_images(const PedestalState& pedestal,
                                          const std::string& units);

/// Counters of a publisher (exact; any thread).
struct PreviewPublisherStats {
  uint64_t updates_sent = 0;      ///< handed to the socket whole
  uint64_t updates_replaced = 0;  ///< replaced in the mailbox by a newer one before sending
  uint64_t updates_refused = 0;   ///< the socket refused a message at once (not sent)
};

class PreviewPublisher {
 public:
  /// Binds a ZeroMQ PUB socket at `endpoint` (a high-water mark of `hwm` updates per
  /// subscriber: ZMQ_SNDHWM hwm x kPreviewMessagesPerUpdate; linger 0; tcp://HOST:* picks a
  /// free port) and starts the sending thread. Throws std::runtime_error naming the endpoint
  /// when it cannot be bound.
  PreviewPublisher(const std::string& endpoint, int hwm);
  ~PreviewPublisher();  ///< what is still in the mailbox is not sent
  PreviewPublisher(const PreviewPublisher&) = delete;
  PreviewPublisher& operator=(const PreviewPublisher&) = delete;

  /// The bound endpoint (with the port a * picked), e.g. tcp://127.0.0.1:5556.
  const std::string& endpoint() const { return endpoint_; }
  int hwm() const { return hwm_; }

  /// Hands `update` to the sending thread and returns at once; never waits for the socket.
  /// Returns false when it replaced an update that was still waiting (that one is dropped).
  bool publish(PreviewUpdate update);
  /// Waits until the mailbox is empty and nothing is being sent, up to `timeout`.
  bool wait_idle(std::chrono::milliseconds timeout) const;

  PreviewPublisherStats stats() const;

 private:
  void send_loop(std::stop_token st);

  struct Socket;
  std::unique_ptr<Socket> socket_;
  std::string endpoint_;
  const int hwm_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::optional<PreviewUpdate> mailbox_;
  bool sending_ = false;
  std::atomic<uint64_t> sent_{0}, replaced_{0}, refused_{0};
  std::jthread thread_;  // last: stopped and joined first
};

/// A run's live view: a result consumer that publishes the run's images through a publisher
/// that outlives the run. Updates go out at most preview.rate_hz times a second (from on_batch
/// and on_pedestal), one more at the end of a run that did not fail; each holds the provider's
/// images and the pedestal and noise maps, filtered by preview.images. Never throws from the
/// data path: a provider that throws is logged and counted as failed.
class PreviewConsumer final : public ResultConsumer {
 public:
  PreviewConsumer(std::shared_ptr<PreviewPublisher> publisher, PreviewProvider provider = {});

  std::string_view name() const override { return "live view"; }
  void on_start(const RunContext& run) override;
  void on_pedestal(const PedestalState& pedestal) override;
  void on_batch(const FoundBatch& batch) override;
  void on_rows(std::span<const FrameRow> rows) override;
  void on_end(const RunEnd& end) override;
  /// frames: rows seen; dropped: updates not sent (replaced in the mailbox or refused by the
  /// socket while this run published); failed: updates the provider failed to make.
  ConsumerStats stats() const override;
  /// Updates handed to the publisher (the final one included).
  uint64_t updates() const { return updates_.load(); }

 private:
  void maybe_publish(bool force, bool final);

  std::shared_ptr<PreviewPublisher> publisher_;
  PreviewProvider provider_;
  config::PreviewConfig cfg_;
  uint64_t run_index_ = 0;
  std::string file_;
  std::string pedestal_units_ = "ADU";
  std::vector<std::shared_ptr<const PreviewImage>> pedestal_;
  std::chrono::steady_clock::duration interval_{};
  std::optional<std::chrono::steady_clock::time_point> last_;
  std::atomic<uint64_t> refused_at_start_{0};  ///< the publisher's count when this run started
  std::atomic<uint64_t> frames_{0}, data_frames_{0}, updates_{0}, dropped_{0}, failed_{0};
};

}  // namespace glint::pipeline
