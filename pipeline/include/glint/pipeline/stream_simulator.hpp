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
  /// Defects at given pixels (row-major indices; glint::synth::Config): stuck (constant),
  /// noisy (8x the noise), and JUNGFRAU pixels in G1 in every odd-indexed dark frame.
  std::vector<uint32_t> stuck_pixels{}, noisy_pixels{}, dark_g1_pixels{};
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
  unknown_bitmode,      ///< an extra message with bitmode 24
  size_mismatch,        ///< an extra message with a truncated payload
  missing_field,        ///< an extra header without frameNumber
  unknown_port,         ///< an extra part for a port outside the detector
  backwards,            ///< an extra part repeating an earlier frame number
  out_of_range,         ///< an extra part with row 2^32 and an end header with data 0.5
};
/// "malformed", "drop-part", ...; throws std::invalid_argument listing the allowed names.
SimFault parse_sim_fault(std::string_view name);
std::string_view to_string(SimFault f);

struct SimOptions {
  std::vector<std::string> endpoints{"tcp://127.0.0.1:30001"};  ///< bound; parts go round-robin
  SimImageParams image;
  uint32_t ports_x = 1, ports_y = 1;   ///< detshape: parts per image
  /// One receiver host's share of a larger detector (detector.placement): the headers say the
  /// whole detector's detshape [x, y] (0: ports_x, ports_y) and place the ports from this
  /// port row and column on, as the receivers of a detector read by several hosts do.
  uint32_t whole_ports_x = 0, whole_ports_y = 0;
  uint32_t port_row0 = 0, port_col0 = 0;
  uint32_t bitmode = 16;               ///< 4, 8, 12, 16 or 32
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
  int drain_ms = 10000;                ///< after the last message, wait at most this long for the
                                       ///< messages still queued to leave (ZMQ_LINGER)
  std::vector<std::pair<SimFault, uint64_t>> faults;  ///< (fault, every Nth image)
  uint64_t skip_images = 0;            ///< start at this image index (a sender restarted mid-run)
  /// 0: every image is generated as it is sent. N > 0: N dark and N photon images are generated
  /// up front and image i is pool image i % N (for benchmarks: the sender is not the bottleneck).
  uint32_t image_pool = 0;
  /// Called once every endpoint is bound, with the bound addresses (a "tcp://127.0.0.1:*"
  /// endpoint gets a free port), before waiting for subscribers.
  std::function<void(const std::vector<std::string>&)> on_bound;
  /// EIGER bottom half-modules: the ports of odd rows send their rows last first with flipRows 1
  /// (detType EIGER), so that the image assembled as slsReceiver's consumer does is unchanged.
  bool flip_rows = false;
  /// EIGER quad: quad 1, ports [1, 2], the second port flipped (as slsReceiver sends a quad).
  bool quad = false;
  /// addJsonHeader frameMode "pedestal" on dark frames and "frame" on the others, as acquisition
  /// tools set it for MOENCH processors; off: no addJsonHeader.
  bool mark_dark = false;
  /// Before the first image, the header slsReceiver sends on a stop or restream while idle (its
  /// "dummy": the end-of-acquisition header) on every endpoint.
  bool dummy_start = false;
  /// One glitched frame number: image `glitch_image` (an index; none by default) is sent with
  /// `glitch_by` added to its frame number, the images after it as usual.
  uint64_t glitch_image = UINT64_MAX;
  uint64_t glitch_by = 0;
  /// Frame-number jumps: from every `jump_every`-th image on (0: none), frame numbers are
  /// `jump_by` further on (the images between are never sent).
  uint64_t jump_every = 0;
  uint64_t jump_by = 0;
  /// A detector restart without an end message: from image `restart_image` (none by default)
  /// frame numbers start again at first_frame_number and frameIndex at 0.
  uint64_t restart_image = UINT64_MAX;
  /// Back-to-back acquisitions: the whole sequence of images is sent this many times, each with
  /// its end message (send_end) and acqIndex, frameIndex from 0, frame numbers continuing, and
  /// `acquisition_pause_ms` between them.
  uint32_t acquisitions = 1;
  uint32_t acquisition_pause_ms = 0;
  /// Per-port delay (by row * ports_x + column; missing entries 0): the port's parts are sent
  /// this much later than the others of their image (ports of one detector out of step).
  std::vector<uint32_t> port_delay_ms;
  /// Decimation as slsReceiver's rx_zmqfreq N: only images whose index is a multiple of N are
  /// sent (1: all).
  uint64_t send_every = 1;
};

struct SimReport {
  uint64_t images = 0;        ///< images generated (sent whole or in part)
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t gaps = 0;          ///< images left out for the gap fault
  uint64_t decimated = 0;     ///< images left out by send_every
  /// Images of which a part went to a port without a subscriber at that moment: a PUB drops
  /// those (nobody received them).
  uint64_t images_to_nobody = 0;
  bool end_to_nobody = false;  ///< the end message went to a port without a subscriber
  double queued_seconds = 0;   ///< until the last message was handed to ZeroMQ
  /// Until the last message left this process (or drain_ms ran out): the sending time.
  double seconds = 0;
  /// Every queued message left within drain_ms; false: what was still queued then was lost
  /// (the end message among it).
  bool drained = true;
  double max_lag_s = 0;        ///< the most the sender fell behind its rate's schedule
  bool interrupted = false;    ///< `stop` ended it (no end message)
  bool subscribers_seen = true;  ///< every port had a subscriber within wait_subscribers_ms
};

/// Binds, waits for subscribers, sends everything, sends the end message, and waits (at most
/// drain_ms) until what is queued has left. `stop` ends early (without the end message). Throws
/// std::runtime_error when an endpoint cannot be bound.
SimReport run_stream_simulator(const SimOptions& options, const std::atomic<bool>* stop = nullptr,
                               const std::function<void(uint64_t)>& progress = {});

}  // namespace glint::pipeline
