#pragma once
// ZeroMQ ingest: one SUB socket and one thread per configured endpoint. Each thread validates
// the slsReceiver headers against the configured detector, counts and skips bad input (logged
// once per kind, then rate-limited), and hands each payload, still in its message (no copy),
// to the frame assembler of the run it is attached to.
//
// The ingest may outlive runs (glintd keeps one while its ingest configuration stays the same),
// so that the sockets stay subscribed between runs: what arrives while no run is attached, or
// belongs to the next acquisition (after an end message or a frameIndex restart), is held for
// the next run when one will start (set_hold), up to a bound, and otherwise counted
// (frames_outside_run) and logged.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "glint/config/config.hpp"
#include "glint/pipeline/frame_assembler.hpp"
#include "glint/pipeline/sls_stream.hpp"

namespace zmq {
class context_t;
class message_t;
class socket_t;
}

namespace glint::pipeline {

struct IngestCounters {
  uint64_t messages = 0;
  uint64_t bytes = 0;
  uint64_t end_messages = 0;  ///< counted once handled: what each end did is visible with it
  /// End headers from an endpoint that had sent no data to the run yet while no other had ended:
  /// the receiver's dummy header before an acquisition (a stop while idle, a restream), not an end.
  uint64_t stray_ends = 0;
  uint64_t restarts = 0;            ///< ports whose frameIndex restarted during a run
  uint64_t frames_outside_run = 0;  ///< not held for a run (per port, the most of any port)
  uint64_t held_parts = 0;          ///< waiting for the next run now
  std::array<uint64_t, kBadInputKinds> bad{};
  uint64_t bad_total() const {
    uint64_t s = 0;
    for (auto v : bad) s += v;
    return s;
  }
};

/// Counts bad input by kind and logs it: the first of each kind at once, then at most one
/// summary line per kind every `interval`.
class BadInputLog {
 public:
  explicit BadInputLog(std::chrono::seconds interval = std::chrono::seconds(10)) : interval_(interval) {}
  void record(BadInput kind, const std::string& endpoint, const std::string& detail);
  std::array<uint64_t, kBadInputKinds> counts() const;

 private:
  std::chrono::seconds interval_;
  mutable std::mutex mu_;
  std::array<uint64_t, kBadInputKinds> count_{};
  std::array<uint64_t, kBadInputKinds> logged_at_count_{};
  std::array<std::chrono::steady_clock::time_point, kBadInputKinds> last_log_{};
};

/// Keeps freed receive buffers in the process. ZeroMQ allocates every received message part
/// larger than a few bytes with malloc in its I/O thread, and the ingest keeps each payload until
/// it has been copied into the finder's input on another thread. With glibc's default dynamic
/// thresholds such 0.1-10 MB buffers keep going back to the system when freed, so that the I/O
/// thread faults in fresh zeroed pages for new messages (measured: ~15 faults per 0.32 MB
/// message, about a third of its time). This sets malloc's mmap threshold to its maximum (32 MiB)
/// and its trim threshold to 512 MiB, so that freed buffers are reused. Process-wide (mallopt),
/// once; glintd and `glint bench pipeline` call it at start. Returns false if glibc refused.
bool keep_receive_buffers();

/// ZMQ_MAXMSGSIZE of the ingest's SUB sockets: the largest legal part (a header up to
/// kMaxSlsHeaderBytes, or one port's image at 32 bits a pixel) plus 64 KiB. ZeroMQ closes a
/// connection that sends a larger part before allocating it (the sender reconnects).
std::size_t ingest_max_message_bytes(const config::DetectorConfig& detector);

/// Rejected frame numbers in a row on one port, each following the previous within
/// ingest.max_frame_jump, after which the port's counter is taken as moved for good (a detector
/// restart without a frameIndex reset): the next one starts a new acquisition.
inline constexpr uint64_t kRebaseAfterRejects = 8;

/// TCP keepalive of the ingest's SUB connections, as slsReceiver's ZeroMQ sockets set it: probes
/// after 60 s without traffic, every second, 10 unanswered ones close the connection (which the
/// ingest then connects again). A connection whose peer vanished (a power cut, a dropped route)
/// is noticed instead of waiting forever.
struct TcpKeepalive {
  int idle_s = 60;
  int interval_s = 1;
  int count = 10;
};
inline constexpr TcpKeepalive kIngestKeepalive{};
/// Sets ZMQ_TCP_KEEPALIVE (on) and kIngestKeepalive's values on a socket, before it connects.
void set_tcp_keepalive(zmq::socket_t& sock);

class Ingest {
 public:
  /// Connects the SUB sockets and starts the threads; nothing is attached (parts are held or
  /// counted as outside a run).
  explicit Ingest(const config::Config& cfg);
  /// The same, attached to `assembler` from the first message (one run's own ingest).
  Ingest(const config::Config& cfg, FrameAssembler& assembler);
  ~Ingest();  ///< stops the threads and closes the sockets
  Ingest(const Ingest&) = delete;
  Ingest& operator=(const Ingest&) = delete;

  /// A run starts: parts go to `assembler`, held parts first (in order, up to the end of the
  /// acquisition they belong to). Resets the end and restart state.
  void attach(FrameAssembler& assembler);
  /// The run stops taking input: no part reaches its assembler after this returns.
  void detach();
  /// Whether parts that arrive outside a run are held for the next one (run.auto_start).
  void set_hold(bool hold);

  /// True when every endpoint has sent the end-of-acquisition message since attach(), or every
  /// port has restarted its frameIndex (a new acquisition began). An end header from an endpoint
  /// that has sent the run no data yet is taken as the end only once another endpoint has ended
  /// (a port without data); before that it is a stray (dummy) header and counted as such.
  bool all_ended() const;
  /// True when at least one endpoint has sent it (strays not counted), or one port has restarted.
  bool any_ended() const;
  /// True when a port restarted its frameIndex during the attached run.
  bool restarted() const;
  /// When a part last reached the attached run's assembler (attach() if none has).
  std::chrono::steady_clock::time_point last_delivery() const;
  IngestCounters counters() const;
  const config::Config& config() const { return cfg_; }
  void stop();

 private:
  struct PortState {
    std::optional<uint64_t> last_frame;  ///< the last frame number accepted
    uint64_t last_frame_index = 0;
    bool in_run = false;   ///< has delivered a part to the attached run
    bool cut = false;      ///< restarted during the attached run: its parts are the next run's
    uint64_t rejects = 0;  ///< rejected in a row (frame_backwards, frame_jump)
    uint64_t last_reject = 0;
    uint64_t outside = 0;  ///< parts neither delivered nor held
  };
  struct Held {
    std::size_t endpoint = 0;
    bool end = false;       ///< an end message of a held acquisition
    bool boundary = false;  ///< the first part of a new acquisition on its port
    SlsHeader header;
    PartPayload payload;
  };

  /// Both public constructors: `assembler` attached from the start, or none.
  Ingest(const config::Config& cfg, FrameAssembler* assembler);
  void run(std::stop_token st, std::size_t index);
  void handle(std::size_t index, std::vector<zmq::message_t>& msgs);
  void start_threads();
  /// Under route_mu_: to the attached run, or held, or counted.
  void deliver_locked(std::size_t endpoint, const SlsHeader& h, PartPayload payload,
                      bool boundary);
  void end_locked(std::size_t endpoint);
  bool any_ended_locked() const;
  void hold_locked(Held held);

  const config::Config cfg_;
  std::unique_ptr<zmq::context_t> ctx_;
  std::atomic<uint64_t> messages_{0}, bytes_{0}, end_messages_{0};
  BadInputLog bad_;
  mutable std::mutex route_mu_;  ///< guards everything below
  FrameAssembler* assembler_ = nullptr;
  bool hold_ = false;
  std::size_t hold_limit_ = 0;  ///< parts
  std::deque<Held> held_;
  std::size_t held_parts_ = 0;   ///< data parts in held_
  std::vector<bool> ended_;      ///< by endpoint, since attach()
  std::vector<bool> held_data_;  ///< by endpoint: held_ has its data parts
  std::vector<bool> data_seen_;  ///< by endpoint: has delivered a data part since attach()
  std::vector<bool> stray_end_;  ///< by endpoint: a stray end header since attach()
  uint64_t stray_ends_ = 0;
  std::vector<PortState> ports_;  ///< by row * ports_x + column
  uint64_t restarts_ = 0;
  std::chrono::steady_clock::time_point last_delivery_{};
  std::chrono::steady_clock::time_point outside_logged_{};
  std::vector<std::jthread> threads_;
};

}  // namespace glint::pipeline
