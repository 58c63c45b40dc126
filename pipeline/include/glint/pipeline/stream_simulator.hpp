#pragma once
// An slsReceiver stand-in: publishes detector images the way slsReceiver's ZeroMQ streamers do
// (JSON header version 5 or 4 + raw pixels, one or several ports per image, the end message),
// dark frames first, then frames with charge-shared photons, at a target rate, deterministic
// for a seed, with optional faults for testing. Used by `glint sim`, the tests and the benchmark.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace glint::pipeline {

/// The images the simulator sends (glint::synth frames); image i is the same for the same
/// parameters everywhere.
struct SimImageParams {
  uint32_t rows = 400, cols = 400;
  uint64_t seed = 1;
  double pedestal = 1000.0;     ///< mean pedestal level (ADU); per-pixel levels spread around it
  double pedestal_spread = 50;  ///< per-pixel pedestal in [pedestal - spread, pedestal + spread)
  double noise = 10.0;          ///< rms noise (ADU)
  double photons = 100;         ///< mean photons per data frame
  double photon_adu = 300.0;    ///< charge of one photon (ADU), charge-shared over up to 2x2 pixels
  bool defects = true;          ///< hot, noisy and stuck pixels, undershoots, drift, crowded frames
  /// JUNGFRAU images: gain bits 15:14 over a 14-bit ADC, pixels switching to G1/G2 at these rates
  /// per pixel and frame (glint::synth::Config).
  bool jungfrau = false;
  double gain_switch_rate = 1e-3;
  double dark_switch_rate = 0.0;
  double invalid_gain_rate = 0.0;
};

/// Generates the simulator's images: a glint::synth::Generator for these parameters, whose
/// first `dark_frames` images are dark.
class SimImageSource {
 public:
  SimImageSource(const SimImageParams& params, uint64_t dark_frames);
  ~SimImageSource();
  SimImageSource(SimImageSource&&) noexcept;
  /// Writes image `index` (rows x cols).
  void fill(uint64_t index, std::span<uint16_t> out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

enum class SimFault : uint8_t {
  malformed,            ///< a header that is not valid JSON (instead of the image's header)
  drop_part,            ///< one port part of the image is not sent
  gap,                  ///< the image is not sent at all (a frame-number gap)
  incomplete,           ///< completeImage = 0 in one part's header
  data_without_header,  ///< the pixels are sent without a header
  wrong_shape,          ///< an extra message with a wrong shape
  unknown_bitmode,      ///< an extra message with bitmode 12
  size_mismatch,        ///< an extra message with a truncated payload
  missing_field,        ///< an extra header without frameNumber
  unknown_port,         ///< an extra part for a port outside the detector
  backwards,            ///< an extra part repeating an earlier frame number
};
/// "malformed", "drop-part", ...; throws std::invalid_argument listing the allowed names.
SimFault parse_sim_fault(std::string_view name);
std::string_view to_string(SimFault f);

struct SimOptions {
  std::vector<std::string> endpoints{"tcp://127.0.0.1:30001"};  ///< bound; parts go round-robin
  SimImageParams image;
  uint32_t ports_x = 1, ports_y = 1;   ///< detshape: parts per image
  uint32_t bitmode = 16;               ///< 4, 8, 16 or 32
  uint32_t jsonversion = 5;
  uint64_t dark_frames = 0;
  uint64_t frames = 100;               ///< photon frames after the dark frames
  uint64_t first_frame_number = 1;
  double rate_hz = 0;                  ///< 0: as fast as possible
  bool send_end = true;
  uint32_t end_repeat = 1;
  int send_hwm = 0;                    ///< ZMQ_SNDHWM, 0 = unlimited (nothing dropped here)
  bool block_at_hwm = false;           ///< wait at the high-water mark instead of dropping, as
                                       ///< slsReceiver's PUB does (ZMQ_XPUB_NODROP)
  int wait_subscribers_ms = 5000;      ///< wait for a subscriber on every endpoint first; 0: don't
  std::vector<std::pair<SimFault, uint64_t>> faults;  ///< (fault, every Nth image)
  uint64_t skip_images = 0;            ///< start at this image index (a sender restarted mid-run)
  /// 0: every image is generated as it is sent. N > 0: N dark and N photon images are generated
  /// up front and image i is pool image i % N (for benchmarks: the sender is not the bottleneck).
  uint32_t image_pool = 0;
  /// Called once every endpoint is bound, with the bound addresses (a "tcp://127.0.0.1:*"
  /// endpoint gets a free port), before waiting for subscribers.
  std::function<void(const std::vector<std::string>&)> on_bound;
};

struct SimReport {
  uint64_t images = 0;        ///< images generated (sent whole or in part)
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t gaps = 0;          ///< images left out for the gap fault
  double seconds = 0;
  bool subscribers_seen = true;
};

/// Binds, waits for subscribers, sends everything, sends the end message. `stop` ends early
/// (without the end message). Throws std::runtime_error when an endpoint cannot be bound.
SimReport run_stream_simulator(const SimOptions& options, const std::atomic<bool>* stop = nullptr,
                               const std::function<void(uint64_t)>& progress = {});

}  // namespace glint::pipeline
