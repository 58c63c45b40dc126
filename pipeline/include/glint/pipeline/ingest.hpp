#pragma once
// ZeroMQ ingest: one SUB socket and one thread per configured endpoint. Each thread validates
// the slsReceiver headers against the configured detector, counts and skips bad input (logged
// once per kind, then rate-limited), and hands each payload, still in its message (no copy),
// to the frame assembler.
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
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
  uint64_t end_messages = 0;
  /// End headers from an endpoint that had sent no data yet while no other had ended: the
  /// receiver's dummy header before an acquisition (a stop while idle, a restream), not an end.
  uint64_t stray_ends = 0;
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
  /// Connects the SUB sockets and starts the threads.
  Ingest(const config::Config& cfg, FrameAssembler& assembler);
  ~Ingest();  ///< stops the threads and closes the sockets
  Ingest(const Ingest&) = delete;
  Ingest& operator=(const Ingest&) = delete;

  /// True when every endpoint has sent the end-of-acquisition message. An end header from an
  /// endpoint that has sent no data yet is taken as the end only once another endpoint has ended
  /// (a port without data); before that it is a stray (dummy) header and counted as such.
  bool all_ended() const;
  /// True when at least one endpoint has sent it (strays not counted).
  bool any_ended() const;
  IngestCounters counters() const;
  void stop();

 private:
  void run(std::stop_token st, std::size_t index);
  void handle(std::size_t index, std::vector<zmq::message_t>& msgs);

  const config::Config cfg_;
  FrameAssembler& assembler_;
  std::unique_ptr<zmq::context_t> ctx_;
  std::atomic<uint64_t> messages_{0}, bytes_{0}, end_messages_{0};
  std::vector<std::unique_ptr<std::atomic<bool>>> ended_;
  std::atomic<uint64_t> stray_ends_{0};
  /// By endpoint: a data header has arrived; a stray end header has arrived.
  std::vector<std::unique_ptr<std::atomic<bool>>> data_seen_, stray_end_;
  BadInputLog bad_;
  std::mutex ports_mu_;
  std::vector<std::optional<uint64_t>> last_frame_of_port_;  ///< by row * ports_x + column
  std::vector<std::jthread> threads_;
};

}  // namespace glint::pipeline
