#include "glint/pipeline/stream_simulator.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <random>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <zmq.hpp>

#include "glint/pipeline/sls_stream.hpp"
#include "glint/synthetic.hpp"

namespace glint::pipeline {

struct SimImageSource::Impl {
  synth::Generator gen;
};

namespace {

synth::Config synth_config(const SimImageParams& p, uint64_t dark_frames) {
  synth::Config c;
  c.shape = FrameShape{p.rows, p.cols};
  c.seed = p.seed;
  c.dark_frames = dark_frames;
  c.pedestal_min = std::max(0.0, p.pedestal - p.pedestal_spread);
  c.pedestal_max = p.pedestal + p.pedestal_spread;
  c.noise_min = p.noise;
  c.noise_max = p.noise;
  c.photons = p.photons;
  c.photon_adu = p.photon_adu;
  c.jungfrau = p.jungfrau;
  c.gain_switch_rate = p.gain_switch_rate;
  c.dark_switch_rate = p.dark_switch_rate;
  c.invalid_gain_rate = p.invalid_gain_rate;
  c.stuck_pixels = p.stuck_pixels;
  c.noisy_pixels = p.noisy_pixels;
  c.dark_g1_pixels = p.dark_g1_pixels;
  if (!p.defects) {
    c.crowded_every = 0;
    c.hot_fraction = c.noisy_fraction = c.stuck_fraction = c.outlier_rate = 0.0;
    c.drift_per_frame = 0.0;
    c.twin_fraction = c.tie_photon_fraction = 0.0;
  }
  return c;
}

}  // namespace

SimImageSource::SimImageSource(const SimImageParams& params, uint64_t dark_frames)
    : impl_(std::make_unique<Impl>(Impl{synth::Generator(synth_config(params, dark_frames))})) {}
SimImageSource::~SimImageSource() = default;
SimImageSource::SimImageSource(SimImageSource&&) noexcept = default;

void SimImageSource::fill(uint64_t index, std::span<uint16_t> out) const { impl_->gen.fill(index, out); }

SimFault parse_sim_fault(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(SimFault::out_of_range); ++i)
    if (to_string(static_cast<SimFault>(i)) == name) return static_cast<SimFault>(i);
  throw std::invalid_argument(fmt::format(
      "unknown fault '{}' (allowed: malformed, drop-part, gap, incomplete, data-without-header, "
      "wrong-shape, unknown-bitmode, size-mismatch, missing-field, unknown-port, backwards, "
      "out-of-range)", name));
}

std::string_view to_string(SimFault f) {
  switch (f) {
    case SimFault::malformed: return "malformed";
    case SimFault::drop_part: return "drop-part";
    case SimFault::gap: return "gap";
    case SimFault::incomplete: return "incomplete";
    case SimFault::data_without_header: return "data-without-header";
    case SimFault::wrong_shape: return "wrong-shape";
    case SimFault::unknown_bitmode: return "unknown-bitmode";
    case SimFault::size_mismatch: return "size-mismatch";
    case SimFault::missing_field: return "missing-field";
    case SimFault::unknown_port: return "unknown-port";
    case SimFault::backwards: return "backwards";
    case SimFault::out_of_range: return "out-of-range";
  }
  return "unknown";
}

SimReport run_stream_simulator(const SimOptions& o, const std::atomic<bool>* stop,
                               const std::function<void(uint64_t)>& progress) {
  if (!is_valid_bitmode(o.bitmode))
    throw std::invalid_argument(
        fmt::format("bitmode {} (allowed: 4, 8, 12, 16, 32)", o.bitmode));
  if (o.quad && (o.ports_x != 1 || o.ports_y != 2))
    throw std::invalid_argument(
        fmt::format("quad needs ports [1, 2], not [{}, {}]", o.ports_x, o.ports_y));
  if (o.endpoints.empty()) throw std::invalid_argument("no endpoint to publish on");
  if (o.send_every == 0) throw std::invalid_argument("send_every must be at least 1");
  if (o.acquisitions == 0) throw std::invalid_argument("acquisitions must be at least 1");
  if ((o.whole_ports_x && o.port_col0 + o.ports_x > o.whole_ports_x) ||
      (o.whole_ports_y && o.port_row0 + o.ports_y > o.whole_ports_y))
    throw std::invalid_argument(fmt::format(
        "ports [{}, {}] from row {}, column {} do not fit the whole detector's [{}, {}]",
        o.ports_x, o.ports_y, o.port_row0, o.port_col0, o.whole_ports_x, o.whole_ports_y));
  if (o.image.cols % o.ports_x != 0 || o.image.rows % o.ports_y != 0)
    throw std::invalid_argument(fmt::format("ports [{}, {}] do not divide the {}x{} image", o.ports_x,
                                            o.ports_y, o.image.rows, o.image.cols));
  // Pool images are sent without a copy: they must outlive the context (declared before it).
  std::vector<std::vector<uint16_t>> pool_dark, pool_data;
  zmq::context_t ctx(1);
  std::vector<zmq::socket_t> socks;
  for (const auto& ep : o.endpoints) {
    zmq::socket_t s(ctx, zmq::socket_type::xpub);  // a PUB that also sees subscriptions
    s.set(zmq::sockopt::sndhwm, o.send_hwm);
    if (o.block_at_hwm) s.set(zmq::sockopt::xpub_nodrop, 1);
    s.set(zmq::sockopt::linger, std::max(o.drain_ms, 0));
    try {
      s.bind(ep);
    } catch (const zmq::error_t& e) {
      throw std::runtime_error(fmt::format("cannot bind {}: {}", ep, e.what()));
    }
    socks.push_back(std::move(s));
  }
  if (o.on_bound) {
    std::vector<std::string> bound;
    for (auto& s : socks) bound.push_back(s.get(zmq::sockopt::last_endpoint));
    o.on_bound(bound);
  }
  SimReport rep;
  // Whether each port has a subscriber now: the XPUB hands over the first subscription and the
  // unsubscription of the last subscriber. A PUB drops what it sends to a port without one.
  std::vector<char> subscribed(socks.size(), 0);
  auto read_subscriptions = [&](std::size_t k) {
    zmq::message_t m;
    while (socks[k].recv(m, zmq::recv_flags::dontwait))
      if (m.size() > 0) subscribed[k] = m.data<uint8_t>()[0] == 1;
  };
  if (o.wait_subscribers_ms > 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.wait_subscribers_ms);
    for (std::size_t k = 0; k < socks.size(); ++k) {
      while (!subscribed[k] && std::chrono::steady_clock::now() < until &&
             !(stop && stop->load())) {
        zmq::pollitem_t item{socks[k].handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(50));
        if (item.revents & ZMQ_POLLIN) read_subscriptions(k);
      }
      rep.subscribers_seen = rep.subscribers_seen && subscribed[k];
    }
  }

  const uint32_t prow = o.image.rows / o.ports_y, pcol = o.image.cols / o.ports_x;
  const std::size_t part_bytes = payload_bytes(o.bitmode, std::size_t{prow} * pcol);
  std::vector<uint16_t> image(std::size_t{o.image.rows} * o.image.cols), part(std::size_t{prow} * pcol);
  std::vector<std::byte> payload(part_bytes);
  auto has_fault = [&](SimFault f, uint64_t i) {
    for (auto& [k, every] : o.faults)
      if (k == f && every > 0 && i % every == every - 1) return true;
    return false;
  };
  // Parts of delayed ports wait here until their time (port_delay_ms).
  struct Delayed {
    std::chrono::steady_clock::time_point due;
    std::size_t sock;
    std::string header;
    std::vector<std::byte> data;
    bool end = false;  ///< a one-part end message
  };
  std::deque<Delayed> delayed;
  auto send_now = [&](std::size_t sock, const std::string& header, const std::byte* data,
                      std::size_t size) {
    auto& s = socks[sock % socks.size()];
    if (data) {
      s.send(zmq::buffer(header), zmq::send_flags::sndmore);
      s.send(zmq::const_buffer(data, size), zmq::send_flags::none);
    } else {
      s.send(zmq::buffer(header), zmq::send_flags::none);
    }
    ++rep.messages;
    rep.bytes += header.size() + (data ? size : 0);
  };
  auto send_due = [&](bool all) {
    while (!delayed.empty() && (all || delayed.front().due <= std::chrono::steady_clock::now())) {
      std::this_thread::sleep_until(delayed.front().due);
      Delayed& d = delayed.front();
      send_now(d.sock, d.header, d.end ? nullptr : d.data.data(), d.data.size());
      delayed.pop_front();
    }
  };
  uint32_t part_port = 0;  // the port of the part being sent (for port_delay_ms)
  auto send = [&](std::size_t sock, const std::string& header, const std::byte* data,
                  std::size_t size) {
    const uint32_t delay = part_port < o.port_delay_ms.size() ? o.port_delay_ms[part_port] : 0;
    if (delay == 0 || !data) return send_now(sock, header, data, size);
    delayed.push_back(Delayed{std::chrono::steady_clock::now() + std::chrono::milliseconds(delay),
                              sock, header, std::vector<std::byte>(data, data + size)});
  };

  if (o.dummy_start)  // slsReceiver's dummy header from a stop or restream before the acquisition
    for (std::size_t s = 0; s < socks.size(); ++s)
      send(s, format_sls_end(o.jsonversion), nullptr, 0);
  const uint64_t total = o.dark_frames + o.frames;
  const SimImageSource source(o.image, o.dark_frames);
  for (uint32_t k = 0; k < o.image_pool; ++k) {
    pool_dark.emplace_back(image.size());
    pool_data.emplace_back(image.size());
    source.fill(std::min<uint64_t>(k, o.dark_frames > 0 ? o.dark_frames - 1 : 0), pool_dark.back());
    source.fill(o.dark_frames + k, pool_data.back());
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto acq_t0 = t0;
  const uint64_t per_acq = total > o.skip_images ? total - o.skip_images : 0;
  const std::string end = format_sls_end(o.jsonversion);
  // Each endpoint's end message follows its own last part: an endpoint whose ports are delayed
  // sends it that much later too.
  auto send_end = [&] {
    if (o.send_end) {
      for (std::size_t s = 0; s < socks.size(); ++s) {
        read_subscriptions(s);
        if (!subscribed[s]) rep.end_to_nobody = true;
        uint32_t delay = 0;
        for (std::size_t p = s; p < o.port_delay_ms.size(); p += socks.size())
          delay = std::max(delay, o.port_delay_ms[p]);
        for (uint32_t k = 0; k < std::max<uint32_t>(o.end_repeat, 1); ++k) {
          if (delay == 0) send_now(s, end, nullptr, 0);
          else
            delayed.push_back(Delayed{std::chrono::steady_clock::now() +
                                          std::chrono::milliseconds(delay),
                                      s, end, {}, true});
        }
      }
    }
    std::stable_sort(delayed.begin(), delayed.end(),
                     [](const Delayed& a, const Delayed& b) { return a.due < b.due; });
    send_due(true);
  };
  // Acquisition `acq` sends images skip_images .. total - 1 (steps acq * per_acq ...).
  for (uint64_t step = 0; step < per_acq * o.acquisitions; ++step) {
    const uint64_t acq = step / per_acq, i = o.skip_images + step % per_acq;
    if (acq > 0 && i == o.skip_images) {
      send_end();
      std::this_thread::sleep_for(std::chrono::milliseconds(o.acquisition_pause_ms));
      acq_t0 = std::chrono::steady_clock::now();
    }
    if (stop && stop->load()) {
      rep.interrupted = true;
      break;
    }
    send_due(false);
    if (i % o.send_every != 0) {
      ++rep.decimated;
      continue;
    }
    if (o.rate_hz > 0) {
      const auto due = acq_t0 + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>((i - o.skip_images) / o.rate_hz));
      const auto now = std::chrono::steady_clock::now();
      if (now > due)
        rep.max_lag_s = std::max(rep.max_lag_s, std::chrono::duration<double>(now - due).count());
      else
        std::this_thread::sleep_until(due);
      send_due(false);
    }
    // An image with a part for a port without a subscriber is lost (the PUB drops it).
    bool to_nobody = false;
    for (std::size_t k = 0; k < socks.size(); ++k) {
      read_subscriptions(k);
      to_nobody = to_nobody || (!subscribed[k] && k < std::size_t{o.ports_x} * o.ports_y);
    }
    const bool restarted = i >= o.restart_image;
    const uint64_t index_in_acq = restarted ? i - o.restart_image : i;
    uint64_t fn = o.first_frame_number + acq * total + index_in_acq;
    if (o.jump_every > 0) fn += (i / o.jump_every) * o.jump_by;
    if (i == o.glitch_image) fn += o.glitch_by;
    if (has_fault(SimFault::gap, i)) {
      ++rep.gaps;
      continue;
    }
    const std::vector<uint16_t>* img = &image;
    if (o.image_pool > 0) {
      img = &(i < o.dark_frames ? pool_dark : pool_data)[i % o.image_pool];
    } else {
      source.fill(i, image);
    }
    SlsHeader h;
    h.jsonversion = o.jsonversion;
    h.bitmode = o.bitmode;
    h.detshape = {o.whole_ports_x ? o.whole_ports_x : o.ports_x,
                  o.whole_ports_y ? o.whole_ports_y : o.ports_y};
    h.shape = {pcol, prow};
    h.size = part_bytes;
    h.acq_index = acq + 1;
    h.frame_index = index_in_acq;
    h.progress = 100.0 * static_cast<double>(i + 1) / static_cast<double>(total);
    h.fname = "glint_sim";
    h.frame_number = fn;
    h.packet_number = 0;
    h.timestamp = fn * 10000;  // 1 ms per frame in 10 MHz ticks
    h.det_type = 5;            // MOENCH
    h.version = 1;
    if (o.mark_dark) h.add_json_header["frameMode"] = i < o.dark_frames ? "pedestal" : "frame";
    if (o.flip_rows || o.quad || o.bitmode == 12) h.det_type = SlsHeader::kDetTypeEiger;
    h.quad = o.quad ? 1 : 0;
    const uint32_t n_parts = o.ports_x * o.ports_y;
    for (uint32_t pi = 0; pi < n_parts; ++pi) {
      part_port = pi;
      h.row = o.port_row0 + pi / o.ports_x;
      h.column = o.port_col0 + pi % o.ports_x;
      h.mod_id = pi;
      h.complete_image = (pi == 0 && has_fault(SimFault::incomplete, i)) ? 0 : 1;
      if (pi == n_parts - 1 && has_fault(SimFault::drop_part, i)) continue;
      const bool flip = (o.flip_rows || o.quad) && h.row % 2 == 1;  // a bottom half-module
      h.flip_rows = flip ? 1 : 0;
      // 16-bit parts of full-width ports are contiguous rows of a pool image: sent in place.
      if (o.image_pool > 0 && o.bitmode == 16 && o.ports_x == 1 && !flip &&
          !has_fault(SimFault::malformed, i) &&
          !has_fault(SimFault::data_without_header, i) && o.port_delay_ms.empty()) {
        const uint16_t* src = img->data() + std::size_t{pi / o.ports_x} * prow * o.image.cols;
        const std::string header = format_sls_header(h);
        auto& sk = socks[pi % socks.size()];
        sk.send(zmq::buffer(header), zmq::send_flags::sndmore);
        zmq::message_t body(const_cast<uint16_t*>(src), part_bytes, [](void*, void*) {}, nullptr);
        sk.send(body, zmq::send_flags::none);
        ++rep.messages;
        rep.bytes += header.size() + part_bytes;
        continue;
      }
      for (uint32_t r = 0; r < prow; ++r)
        std::copy_n(img->data() +
                        (std::size_t{pi / o.ports_x} * prow + (flip ? prow - 1 - r : r)) *
                            o.image.cols +
                        std::size_t{pi % o.ports_x} * pcol,
                    pcol, part.data() + std::size_t{r} * pcol);
      encode_pixels(o.bitmode, part, payload.data());
      if (pi == 0 && has_fault(SimFault::malformed, i)) {
        std::string bad = format_sls_header(h);
        bad.resize(bad.size() / 2);  // cut in the middle: not JSON
        send(pi, bad, payload.data(), payload.size());
        continue;
      }
      if (pi == 0 && has_fault(SimFault::data_without_header, i)) {
        socks[pi % socks.size()].send(zmq::const_buffer(payload.data(), payload.size()), zmq::send_flags::none);
        ++rep.messages;
        rep.bytes += payload.size();
        continue;
      }
      send(pi, format_sls_header(h), payload.data(), payload.size());
    }
    part_port = UINT32_MAX;  // not delayed
    // Extra bad messages that do not disturb the image itself.
    if (has_fault(SimFault::wrong_shape, i)) {
      SlsHeader b = h;
      b.shape = {pcol + 1, prow};
      send(0, format_sls_header(b), payload.data(), payload.size());
    }
    if (has_fault(SimFault::unknown_bitmode, i)) {
      SlsHeader b = h;
      b.bitmode = 24;
      send(0, format_sls_header(b), payload.data(), payload.size());
    }
    if (has_fault(SimFault::size_mismatch, i)) {
      SlsHeader b = h;
      send(0, format_sls_header(b), payload.data(), payload.size() / 2);
    }
    if (has_fault(SimFault::missing_field, i)) {
      std::string s = format_sls_header(h);
      const auto at = s.find("\"frameNumber\"");
      s.erase(at, s.find(',', at) - at + 1);
      send(0, s, payload.data(), payload.size());
    }
    if (has_fault(SimFault::unknown_port, i)) {
      SlsHeader b = h;
      b.row = o.ports_y;  // one past the last row of ports
      b.column = 0;
      send(0, format_sls_header(b), payload.data(), payload.size());
    }
    if (has_fault(SimFault::backwards, i) && fn > o.first_frame_number) {
      SlsHeader b = h;
      b.row = 0;
      b.column = 0;
      b.frame_number = fn - 1;
      send(0, format_sls_header(b), payload.data(), payload.size());
    }
    if (has_fault(SimFault::out_of_range, i)) {
      // Numbers that a 32-bit reading would truncate to a valid port and to an end.
      std::string s = format_sls_header(h);
      const auto at = s.find("\"row\":") + 6;
      s.replace(at, s.find(',', at) - at, "4294967296");
      send(0, s, payload.data(), payload.size());
      std::string e = format_sls_end(o.jsonversion);
      const auto d = e.find("\"data\":0") + 8;
      e.insert(d, ".5");
      send(0, e, nullptr, 0);
    }
    ++rep.images;
    if (to_nobody) ++rep.images_to_nobody;
    if (progress) progress(i + 1);
  }
  if (!rep.interrupted) send_end();
  rep.queued_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Sent means out of this process: ZeroMQ sends from its own thread, so the messages still
  // queued (a subscriber slower than the sender) leave while the sockets close, for at most
  // drain_ms; what is left then is lost, and the close took the whole drain_ms.
  const auto closing = std::chrono::steady_clock::now();
  for (auto& s : socks) s.close();
  ctx.close();
  const double close_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - closing).count();
  rep.drained = close_s * 1000.0 + 20.0 < o.drain_ms;  // drain_ms 0: not waited for
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace glint::pipeline
