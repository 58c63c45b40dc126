#include "glint/pipeline/ingest.hpp"

#include <malloc.h>
#include <pthread.h>

#include <algorithm>

#include <zmq.hpp>

#include "glint/log.hpp"

namespace glint::pipeline {

void BadInputLog::record(BadInput kind, const std::string& endpoint, const std::string& detail) {
  const auto k = static_cast<std::size_t>(kind);
  const auto now = std::chrono::steady_clock::now();
  uint64_t total = 0, since = 0;
  bool log_now = false;
  {
    std::lock_guard lock(mu_);
    total = ++count_[k];
    if (total == 1 || now - last_log_[k] >= interval_) {
      log_now = true;
      since = total - logged_at_count_[k];
      logged_at_count_[k] = total;
      last_log_[k] = now;
    }
  }
  if (!log_now) return;
  if (total == 1)
    log::warn("ingest {}: bad input ({}): {}; skipped (further ones are counted, logged at most "
              "every {} s)", endpoint, to_string(kind), detail, interval_.count());
  else
    log::warn("ingest {}: {} more bad input ({}), {} in total; latest: {}", endpoint, since,
              to_string(kind), total, detail);
}

void set_tcp_keepalive(zmq::socket_t& sock) {
  sock.set(zmq::sockopt::tcp_keepalive, 1);
  sock.set(zmq::sockopt::tcp_keepalive_idle, kIngestKeepalive.idle_s);
  sock.set(zmq::sockopt::tcp_keepalive_intvl, kIngestKeepalive.interval_s);
  sock.set(zmq::sockopt::tcp_keepalive_cnt, kIngestKeepalive.count);
}

bool keep_receive_buffers() {
  static const bool ok = [] {
#if defined(__GLIBC__)
    const bool mmap_ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
    const bool trim_ok = mallopt(M_TRIM_THRESHOLD, 512 << 20) == 1;
    if (!mmap_ok || !trim_ok) log::warn("malloc thresholds for receive buffers not set");
    return mmap_ok && trim_ok;
#else
    return false;
#endif
  }();
  return ok;
}

std::array<uint64_t, kBadInputKinds> BadInputLog::counts() const {
  std::lock_guard lock(mu_);
  return count_;
}

std::size_t ingest_max_message_bytes(const config::DetectorConfig& d) {
  const std::size_t image = payload_bytes(32, std::size_t{d.port_rows()} * d.port_cols());
  return std::max(image, kMaxSlsHeaderBytes) + 64 * 1024;
}

Ingest::Ingest(const config::Config& cfg) : Ingest(cfg, nullptr) {}

Ingest::Ingest(const config::Config& cfg, FrameAssembler& assembler) : Ingest(cfg, &assembler) {}

Ingest::Ingest(const config::Config& cfg, FrameAssembler* assembler)
    : cfg_(cfg),
      // One ZeroMQ I/O thread per endpoint: each port's TCP stream is read on its own core.
      ctx_(std::make_unique<zmq::context_t>(
          static_cast<int>(std::max<std::size_t>(cfg.ingest.endpoints.size(), 1)))),
      assembler_(assembler) {
  ports_.resize(cfg_.detector.n_ports());
  ended_.assign(cfg_.ingest.endpoints.size(), false);
  held_data_.assign(cfg_.ingest.endpoints.size(), false);
  data_seen_.assign(cfg_.ingest.endpoints.size(), false);
  stray_end_.assign(cfg_.ingest.endpoints.size(), false);
  hold_limit_ = std::size_t{cfg_.ingest.queue_frames} * cfg_.detector.n_ports();
  last_delivery_ = std::chrono::steady_clock::now();
  start_threads();
}

void Ingest::start_threads() {
  // Sockets are created and connected in the threads that use them (ZeroMQ sockets are not
  // thread-safe).
  for (std::size_t i = 0; i < cfg_.ingest.endpoints.size(); ++i)
    threads_.emplace_back([this, i](std::stop_token st) { run(st, i); });
}

Ingest::~Ingest() { stop(); }

void Ingest::stop() {
  for (auto& t : threads_) t.request_stop();
  // Receives waiting for a message return at once (ETERM) instead of at their timeout.
  if (!threads_.empty()) ctx_->shutdown();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  threads_.clear();
}

bool Ingest::all_ended() const {
  std::lock_guard lock(route_mu_);
  const bool any = any_ended_locked();
  bool all = true;
  for (std::size_t i = 0; i < ended_.size(); ++i)
    all = all && (ended_[i] || (any && stray_end_[i] && !data_seen_[i]));
  if (all) return true;
  return std::all_of(ports_.begin(), ports_.end(), [](const PortState& p) { return p.cut; });
}

bool Ingest::any_ended() const {
  std::lock_guard lock(route_mu_);
  return any_ended_locked();
}

bool Ingest::any_ended_locked() const {
  return std::any_of(ended_.begin(), ended_.end(), [](bool e) { return e; }) ||
         std::any_of(ports_.begin(), ports_.end(), [](const PortState& p) { return p.cut; });
}

bool Ingest::restarted() const {
  std::lock_guard lock(route_mu_);
  return std::any_of(ports_.begin(), ports_.end(), [](const PortState& p) { return p.cut; });
}

std::chrono::steady_clock::time_point Ingest::last_delivery() const {
  std::lock_guard lock(route_mu_);
  return last_delivery_;
}

IngestCounters Ingest::counters() const {
  IngestCounters c;
  c.messages = messages_.load();
  c.bytes = bytes_.load();
  c.end_messages = end_messages_.load();
  c.bad = bad_.counts();
  std::lock_guard lock(route_mu_);
  c.restarts = restarts_;
  for (const auto& p : ports_) c.frames_outside_run = std::max(c.frames_outside_run, p.outside);
  c.held_parts = held_parts_;
  c.stray_ends = stray_ends_;
  return c;
}

void Ingest::set_hold(bool hold) {
  std::lock_guard lock(route_mu_);
  hold_ = hold;
  if (hold || held_.empty()) return;
  // No run will take what is held: it is counted as received outside a run.
  uint64_t parts = 0;
  for (const auto& e : held_)
    if (!e.end) {
      ++ports_[e.header.row * cfg_.detector.ports_x + e.header.column].outside;
      ++parts;
    }
  held_.clear();
  held_parts_ = 0;
  std::fill(held_data_.begin(), held_data_.end(), false);
  if (parts > 0)
    log::warn("ingest: {} part(s) held for a run that will not start are not recorded", parts);
}

void Ingest::attach(FrameAssembler& assembler) {
  std::lock_guard lock(route_mu_);
  assembler_ = &assembler;
  last_delivery_ = std::chrono::steady_clock::now();
  std::fill(ended_.begin(), ended_.end(), false);
  std::fill(held_data_.begin(), held_data_.end(), false);
  std::fill(data_seen_.begin(), data_seen_.end(), false);
  std::fill(stray_end_.begin(), stray_end_.end(), false);
  for (auto& p : ports_) p.in_run = p.cut = false;
  // What was held goes first, in the order it arrived; what belongs to a later acquisition (past
  // an end message or a restart) is held again.
  std::deque<Held> held;
  held.swap(held_);
  if (held_parts_ > 0)
    log::info("ingest: {} part(s) received before the run start go to the run", held_parts_);
  held_parts_ = 0;
  for (auto& e : held) {
    if (e.end) end_locked(e.endpoint);
    else deliver_locked(e.endpoint, e.header, std::move(e.payload), e.boundary);
  }
}

void Ingest::detach() {
  std::lock_guard lock(route_mu_);
  assembler_ = nullptr;
}

void Ingest::hold_locked(Held held) {
  if (!held.end) {
    if (!hold_ || held_parts_ >= hold_limit_) {
      PortState& ps = ports_[held.header.row * cfg_.detector.ports_x + held.header.column];
      ++ps.outside;
      const auto now = std::chrono::steady_clock::now();
      if (now - outside_logged_ >= std::chrono::seconds(10)) {
        outside_logged_ = now;
        log::warn("ingest {}: frame {} arrived outside a run ({}); not recorded ({} from this "
                  "port so far, logged at most every 10 s)",
                  cfg_.ingest.endpoints[held.endpoint], held.header.frame_number,
                  hold_ ? fmt::format("{} parts already held for the next run", held_parts_)
                        : std::string("no run will start: run.auto_start is off"),
                  ps.outside);
      }
      return;
    }
    held_data_[held.endpoint] = true;
    ++held_parts_;
  }
  held_.push_back(std::move(held));
}

void Ingest::deliver_locked(std::size_t endpoint, const SlsHeader& h, PartPayload payload,
                            bool boundary) {
  PortState& ps = ports_[h.row * cfg_.detector.ports_x + h.column];
  if (assembler_ && !ps.cut && !ended_[endpoint]) {
    if (!boundary || !ps.in_run) {
      ps.in_run = true;
      data_seen_[endpoint] = true;
      last_delivery_ = std::chrono::steady_clock::now();
      assembler_->add_part(h, std::move(payload));
      return;
    }
    // The receiver started a new acquisition (a detector restart, or the end message was lost):
    // this port's parts from here on belong to the next run.
    ps.cut = true;
    ++restarts_;
    log::warn("ingest {}: port (row {}, column {}) restarted at frame {} (frameIndex {}): a new "
              "acquisition; its parts go to the next run",
              cfg_.ingest.endpoints[endpoint], h.row, h.column, h.frame_number, h.frame_index);
    assembler_->wake();
  }
  hold_locked(Held{endpoint, false, boundary, h, std::move(payload)});
}

void Ingest::end_locked(std::size_t endpoint) {
  if (assembler_ && !ended_[endpoint] && !held_data_[endpoint]) {
    // slsReceiver sends the same header (its "dummy") at the end of an acquisition and on a stop
    // or restream while idle, which can come before the next acquisition's first image: before
    // any data on this endpoint (and with no other endpoint ended) it is not the end.
    if (!data_seen_[endpoint] && !any_ended_locked()) {
      ++stray_ends_;
      if (!stray_end_[endpoint]) {
        stray_end_[endpoint] = true;
        log::info("ingest {}: end header before any data (the receiver's dummy header); not an "
                  "end of this run", cfg_.ingest.endpoints[endpoint]);
      }
      assembler_->wake();  // another endpoint's end may now make this one's count
      return;
    }
    ended_[endpoint] = true;
    log::info("ingest {}: end of acquisition", cfg_.ingest.endpoints[endpoint]);
    assembler_->wake();  // the run sees the end now, not at its next wait's timeout
  } else if (held_data_[endpoint]) {
    hold_locked(Held{endpoint, true, false, {}, {}});  // ends the held acquisition
  }
  // Otherwise a repeat, or the late end of an acquisition whose run has ended: nothing new.
}

void Ingest::run(std::stop_token st, std::size_t index) {
  const std::string& ep = cfg_.ingest.endpoints[index];
  pthread_setname_np(pthread_self(), fmt::format("glint-ingest{}", index).substr(0, 15).c_str());
  zmq::socket_t sock;
  try {
    sock = zmq::socket_t(*ctx_, zmq::socket_type::sub);
    sock.set(zmq::sockopt::rcvhwm, cfg_.ingest.receive_hwm);
    if (cfg_.ingest.receive_buffer_bytes > 0) sock.set(zmq::sockopt::rcvbuf, cfg_.ingest.receive_buffer_bytes);
    sock.set(zmq::sockopt::rcvtimeo, 100);
    sock.set(zmq::sockopt::linger, 0);
    set_tcp_keepalive(sock);
    sock.set(zmq::sockopt::maxmsgsize,
             static_cast<int64_t>(ingest_max_message_bytes(cfg_.detector)));
    sock.set(zmq::sockopt::subscribe, "");
    sock.connect(ep);
  } catch (const zmq::error_t& e) {
    if (e.num() != ETERM) log::error("ingest {}: cannot connect: {}", ep, e.what());
    return;  // ETERM: stopped before the socket was up
  }
  // ZeroMQ closes a connection that sends a part over ZMQ_MAXMSGSIZE and, unlike after a network
  // error, does not reconnect it: the monitor reports the disconnection, and the thread connects
  // afresh (also after a sender restart, where it does no harm).
  zmq::socket_t monitor;
  try {
    const std::string monitor_ep =
        fmt::format("inproc://glint-ingest-monitor-{}-{}", static_cast<const void*>(this), index);
    if (zmq_socket_monitor(sock.handle(), monitor_ep.c_str(), ZMQ_EVENT_DISCONNECTED) == 0) {
      monitor = zmq::socket_t(*ctx_, zmq::socket_type::pair);
      monitor.set(zmq::sockopt::linger, 0);
      monitor.connect(monitor_ep);
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == ETERM) return;
    log::warn("ingest {}: no connection monitor: {}", ep, e.what());
  }
  auto reconnect_if_dropped = [&] {
    if (!monitor) return;
    bool dropped = false;
    zmq::message_t event, address;
    while (monitor.recv(event, zmq::recv_flags::dontwait)) {
      if (event.more()) (void)monitor.recv(address, zmq::recv_flags::dontwait);
      dropped = true;
    }
    if (!dropped) return;
    log::warn(
        "ingest {}: connection lost (the sender went away, or sent a part over {} bytes); "
        "connecting again",
        ep, ingest_max_message_bytes(cfg_.detector));
    try {
      sock.disconnect(ep);
    } catch (const zmq::error_t&) {
      // already gone with its session
    }
    sock.connect(ep);
  };
  log::info("ingest: subscribed to {}", ep);
  std::vector<zmq::message_t> msgs;
  while (!st.stop_requested()) {
    msgs.clear();
    try {
      zmq::message_t m;
      if (!sock.recv(m)) {  // timeout: check the stop token and the connection
        reconnect_if_dropped();
        continue;
      }
      bool more = m.more();
      msgs.push_back(std::move(m));
      while (more) {
        zmq::message_t p;
        if (!sock.recv(p)) break;  // parts of one message arrive together; cannot time out
        more = p.more();
        msgs.push_back(std::move(p));
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) break;
      log::error("ingest {}: receive failed: {}", ep, e.what());
      continue;
    }
    uint64_t bytes = 0;
    for (auto& m : msgs) bytes += m.size();
    messages_.fetch_add(1, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    handle(index, msgs);
  }
}

void Ingest::handle(std::size_t index, std::vector<zmq::message_t>& parts) {
  const std::string& ep = cfg_.ingest.endpoints[index];
  const auto& det = cfg_.detector;
  const auto* first = static_cast<const char*>(parts[0].data());
  const std::size_t first_size = parts[0].size();
  // A header is JSON text; a part that does not start like one is pixels without a header.
  std::size_t skip = 0;
  while (skip < first_size && (first[skip] == ' ' || first[skip] == '\n' || first[skip] == '\r' || first[skip] == '\t')) ++skip;
  if (skip == first_size || first[skip] != '{') {
    if (parts.size() == 1 && first_size > 0)
      bad_.record(BadInput::data_without_header, ep,
                  fmt::format("a single {}-byte part that is not a JSON header", first_size));
    else
      bad_.record(BadInput::malformed_json, ep, "the first part is not a JSON object");
    return;
  }
  ParsedHeader ph = parse_sls_header(std::string_view(first, first_size));
  if (!ph.header) {
    bad_.record(ph.reason, ep, ph.detail);
    return;
  }
  SlsHeader h = *ph.header;
  if (h.is_end()) {
    std::lock_guard lock(route_mu_);
    end_locked(index);
    end_messages_.fetch_add(1);  // once handled: who sees the count sees what the end did
    return;
  }
  if (!is_valid_bitmode(h.bitmode)) {
    bad_.record(BadInput::unknown_bitmode, ep, fmt::format("bitmode {} (allowed: 4, 8, 12, 16, 32)", h.bitmode));
    return;
  }
  // A detector read by several glintd (detector.placement): each receiver's header places its
  // port in the whole detector; this glintd's block of ports starts at its origin.
  if (const auto whole = det.whole_ports();
      whole && h.detshape[0] == whole->x && h.detshape[1] == whole->y &&
      h.shape[0] == det.port_cols() && h.shape[1] == det.port_rows()) {
    if (h.row < whole->row0 || h.row - whole->row0 >= det.ports_y || h.column < whole->col0 ||
        h.column - whole->col0 >= det.ports_x) {
      bad_.record(BadInput::unknown_port, ep,
                  fmt::format("frame {}: port (row {}, column {}) of the {}x{} detector is not "
                              "one of this image's (rows {}..{}, columns {}..{}; "
                              "detector.placement)",
                              h.frame_number, h.row, h.column, whole->x, whole->y, whole->row0,
                              whole->row0 + det.ports_y - 1, whole->col0,
                              whole->col0 + det.ports_x - 1));
      return;
    }
    h.row -= whole->row0;
    h.column -= whole->col0;
    h.detshape = {det.ports_x, det.ports_y};
  }
  if (h.detshape[0] != det.ports_x || h.detshape[1] != det.ports_y ||
      h.shape[0] != det.port_cols() || h.shape[1] != det.port_rows()) {
    bad_.record(BadInput::wrong_shape, ep,
                fmt::format("frame {}: detshape [{}, {}] shape [{}, {}], configured detshape [{}, {}] "
                            "shape [{}, {}]", h.frame_number, h.detshape[0], h.detshape[1], h.shape[0],
                            h.shape[1], det.ports_x, det.ports_y, det.port_cols(), det.port_rows()));
    return;
  }
  if (h.row >= det.ports_y || h.column >= det.ports_x) {
    bad_.record(BadInput::unknown_port, ep,
                fmt::format("frame {}: port (row {}, column {}) not in the {}x{} detector",
                            h.frame_number, h.row, h.column, det.ports_x, det.ports_y));
    return;
  }
  const std::size_t expected = payload_bytes(h.bitmode, std::size_t{h.shape[0]} * h.shape[1]);
  const std::size_t got = parts.size() >= 2 ? parts[1].size() : 0;
  if (parts.size() != 2 || h.size != expected || got != expected) {
    bad_.record(BadInput::size_mismatch, ep,
                fmt::format("frame {}: {} part(s), header size {}, payload {} bytes, expected {} "
                            "({}x{} at {} bits)", h.frame_number, parts.size(), h.size, got, expected,
                            h.shape[0], h.shape[1], h.bitmode));
    return;
  }
  // The pixels stay in their message until the finder's staging takes them: no copy here.
  auto message = std::make_shared<zmq::message_t>(std::move(parts[1]));
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(message->data()), message->size());
  PartPayload payload{std::move(message), bytes, h.bitmode, h.rows_flipped()};
  std::optional<BadInput> reject;
  std::string detail;
  {
    std::lock_guard lock(route_mu_);
    PortState& ps = ports_[h.row * det.ports_x + h.column];
    bool boundary = false;
    if (ps.last_frame) {
      const uint64_t prev = *ps.last_frame;
      if (h.frame_index < ps.last_frame_index) {
        boundary = true;  // the receiver's per-acquisition index started again: a new acquisition
      } else if (h.frame_number <= prev) {
        reject = BadInput::frame_backwards;
        detail = fmt::format("frame {} after frame {} on port (row {}, column {})", h.frame_number,
                             prev, h.row, h.column);
      } else if (h.frame_number - prev > cfg_.ingest.max_frame_jump) {
        reject = BadInput::frame_jump;
        detail = fmt::format("frame {} after frame {} on port (row {}, column {}): a jump of more "
                             "than ingest.max_frame_jump ({})", h.frame_number, prev, h.row,
                             h.column, cfg_.ingest.max_frame_jump);
      }
    }
    if (reject) {
      // A counter that moved for good (restarted without a frameIndex reset) gives rejects that
      // follow each other: after kRebaseAfterRejects of them it is a new acquisition.
      const bool follows = ps.rejects > 0 && h.frame_number > ps.last_reject &&
                           h.frame_number - ps.last_reject <= cfg_.ingest.max_frame_jump;
      ps.rejects = follows ? ps.rejects + 1 : 1;
      ps.last_reject = h.frame_number;
      if (ps.rejects >= kRebaseAfterRejects) {
        log::warn("ingest {}: port (row {}, column {}) continues from frame {} ({} frames in a "
                  "row out of sequence): taken as a new acquisition", ep, h.row, h.column,
                  h.frame_number, ps.rejects);
        reject.reset();
        boundary = true;
      }
    }
    if (!reject) {
      ps.rejects = 0;
      ps.last_frame = h.frame_number;
      ps.last_frame_index = h.frame_index;
      deliver_locked(index, h, std::move(payload), boundary);
    }
  }
  if (reject) bad_.record(*reject, ep, detail);
}

}  // namespace glint::pipeline
