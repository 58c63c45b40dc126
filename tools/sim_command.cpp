// glint sim: publishes detector images as slsReceiver's ZeroMQ streamers do.
#include <atomic>
#include <charconv>
#include <iostream>
#include <tuple>

#include <fmt/format.h>

#include "commands.hpp"
#include "glint/config/config.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/stream_simulator.hpp"

namespace glint::tools {

void add_sim_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("sim", "emulate slsReceiver stream ports (JSON header v5 + pixels)");
  struct Args {
    pipeline::SimOptions o;
    std::string config;
    std::vector<std::string> endpoints;
    std::vector<uint32_t> ports;
    std::vector<std::string> faults;
    bool no_end = false;
    bool quiet = false;
    std::vector<std::string> glitch, jump, port_delay;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--config", a->config,
                  "take detector shape, ports, endpoints and dark frames from a glintd config");
  cmd->add_option("--endpoint", a->endpoints, "bind here (repeat for several ports; parts go round-robin) "
                  "[tcp://127.0.0.1:30001]");
  cmd->add_option("--rows", a->o.image.rows, "image rows")->capture_default_str();
  cmd->add_option("--cols", a->o.image.cols, "image columns")->capture_default_str();
  cmd->add_option("--ports", a->ports, "detshape X Y: ports side by side and stacked")->expected(2);
  cmd->add_option("--bitmode", a->o.bitmode, "4, 8, 12 (EIGER, packed), 16 or 32")
      ->capture_default_str();
  cmd->add_option("--json-version", a->o.jsonversion, "header version, 4 or 5")->capture_default_str();
  cmd->add_option("--dark", a->o.dark_frames, "dark frames first")->capture_default_str();
  cmd->add_option("--frames", a->o.frames, "photon frames after the dark frames")->capture_default_str();
  cmd->add_option("--first-frame", a->o.first_frame_number, "frame number of the first image")->capture_default_str();
  cmd->add_option("--skip", a->o.skip_images, "start at this image (continue a stream after a restart)");
  cmd->add_option("--rate", a->o.rate_hz, "images per second, 0 = as fast as possible")->capture_default_str();
  cmd->add_option("--seed", a->o.image.seed, "random seed")->capture_default_str();
  cmd->add_option("--photons", a->o.image.photons, "photons per data frame")->capture_default_str();
  cmd->add_option("--noise", a->o.image.noise, "rms noise, ADU")->capture_default_str();
  cmd->add_option("--pedestal", a->o.image.pedestal, "mean pedestal, ADU")->capture_default_str();
  cmd->add_option("--photon-adu", a->o.image.photon_adu, "charge of one photon, ADU")->capture_default_str();
  cmd->add_option("--fault", a->faults,
                  "inject KIND[:EVERY] (every EVERY-th image, default 10): malformed, drop-part, gap, "
                  "incomplete, data-without-header, wrong-shape, unknown-bitmode, size-mismatch, "
                  "missing-field, unknown-port, backwards, out-of-range");
  cmd->add_option("--pool", a->o.image_pool,
                  "generate N dark and N photon images up front and cycle through them (fast sender)");
  cmd->add_flag("--jungfrau", a->o.image.jungfrau,
                "JUNGFRAU images: gain bits 15:14 over a 14-bit ADC, with gain switching");
  cmd->add_option("--gain-switch-rate", a->o.image.gain_switch_rate,
                  "JUNGFRAU: per pixel and photon frame, a switch to G1/G2")
      ->capture_default_str();
  cmd->add_option("--dark-switch-rate", a->o.image.dark_switch_rate,
                  "JUNGFRAU: the same in dark frames")
      ->capture_default_str();
  cmd->add_option("--invalid-gain-rate", a->o.image.invalid_gain_rate,
                  "JUNGFRAU: per pixel and frame, the invalid gain code 10")
      ->capture_default_str();
  cmd->add_flag("--no-end", a->no_end, "do not send the end-of-acquisition message");
  cmd->add_option("--end-repeat", a->o.end_repeat, "send the end message this many times")->capture_default_str();
  cmd->add_option("--sndhwm", a->o.send_hwm, "ZMQ_SNDHWM, 0 = unlimited")->capture_default_str();
  cmd->add_flag("--no-drop", a->o.block_at_hwm, "wait at the high-water mark instead of dropping");
  cmd->add_option("--wait-ms", a->o.wait_subscribers_ms, "wait this long for a subscriber on every port")
      ->capture_default_str();
  cmd->add_option("--drain-ms", a->o.drain_ms,
                  "after the last message, wait at most this long for what is queued to leave")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", a->quiet, "no summary line");
  cmd->add_flag("--flip-rows", a->o.flip_rows,
                "EIGER: ports of odd rows send their rows last first, with flipRows 1");
  cmd->add_flag("--quad", a->o.quad, "EIGER quad: quad 1, ports [1, 2], the second port flipped");
  cmd->add_flag("--mark-dark", a->o.mark_dark,
                "addJsonHeader frameMode pedestal on dark frames (frame on the others)");
  cmd->add_flag("--dummy-start", a->o.dummy_start,
                "send slsReceiver's dummy (end) header on every port before the first image");
  cmd->add_option("--glitch", a->glitch,
                  "IMAGE:BY: image IMAGE (index) is sent with BY added to its frame number, once "
                  "(a glitched counter)")->expected(1);
  cmd->add_option("--jump", a->jump,
                  "EVERY:BY: from every EVERY-th image on, frame numbers are BY further on")
      ->expected(1);
  cmd->add_option("--restart-at", a->o.restart_image,
                  "from this image on, frame numbers start again at --first-frame and frameIndex "
                  "at 0, without an end message (a detector restart)");
  cmd->add_option("--acquisitions", a->o.acquisitions,
                  "send the images this many times, as back-to-back acquisitions (each with its "
                  "end message; frame numbers continue, frameIndex from 0)")->capture_default_str();
  cmd->add_option("--pause-ms", a->o.acquisition_pause_ms,
                  "pause between acquisitions, ms")->capture_default_str();
  cmd->add_option("--port-delay", a->port_delay,
                  "PORT:MS: send port PORT's parts (row * ports_x + column) MS later than the "
                  "others of their image (repeat for several ports)");
  cmd->add_option("--every", a->o.send_every,
                  "send only every N-th image (slsReceiver rx_zmqfreq N: a decimated stream)")
      ->capture_default_str();

  cmd->callback([a] {
    auto& o = a->o;
    try {
      if (!a->config.empty()) {
        const auto c = config::load(a->config);
        o.image.rows = c.detector.rows;
        o.image.cols = c.detector.cols;
        o.ports_x = c.detector.ports_x;
        o.ports_y = c.detector.ports_y;
        // One host's share of a larger detector: the headers place its ports in the whole one.
        if (const auto whole = c.detector.whole_ports()) {
          o.whole_ports_x = whole->x;
          o.whole_ports_y = whole->y;
          o.port_row0 = whole->row0;
          o.port_col0 = whole->col0;
        }
        o.endpoints = c.ingest.endpoints;
        o.dark_frames = c.pedestal.keep_previous ? 0 : c.pedestal.dark_frames;
      }
      if (!a->endpoints.empty()) o.endpoints = a->endpoints;
      if (a->ports.size() == 2) {
        o.ports_x = a->ports[0];
        o.ports_y = a->ports[1];
      }
      o.send_end = !a->no_end;
      for (const auto& f : a->faults) {
        const auto colon = f.find(':');
        const auto kind = pipeline::parse_sim_fault(f.substr(0, colon));
        uint64_t every = 10;
        if (colon != std::string::npos) {
          const char* first = f.data() + colon + 1;
          const char* last = f.data() + f.size();
          const auto [end, ec] = std::from_chars(first, last, every);
          if (ec != std::errc() || end != last || every == 0)
            throw std::invalid_argument("--fault " + f + ": EVERY must be a whole number >= 1");
        }
        o.faults.emplace_back(kind, every);
      }
      // "A:B" with whole numbers; throws naming the option.
      auto pair_of = [](const std::string& opt, const std::string& v) {
        const auto colon = v.find(':');
        uint64_t x = 0, y = 0;
        const char* end = v.data() + v.size();
        bool ok = colon != std::string::npos;
        if (ok) {
          const auto r1 = std::from_chars(v.data(), v.data() + colon, x);
          const auto r2 = std::from_chars(v.data() + colon + 1, end, y);
          ok = r1.ec == std::errc() && r1.ptr == v.data() + colon && r2.ec == std::errc() &&
               r2.ptr == end;
        }
        if (!ok) throw std::invalid_argument(opt + " " + v + ": expected two whole numbers A:B");
        return std::pair<uint64_t, uint64_t>{x, y};
      };
      if (!a->glitch.empty())
        std::tie(o.glitch_image, o.glitch_by) = pair_of("--glitch", a->glitch[0]);
      if (!a->jump.empty()) {
        std::tie(o.jump_every, o.jump_by) = pair_of("--jump", a->jump[0]);
        if (o.jump_every == 0) throw std::invalid_argument("--jump: EVERY must be at least 1");
      }
      for (const auto& d : a->port_delay) {
        const auto [port, ms] = pair_of("--port-delay", d);
        if (port >= std::size_t{o.ports_x} * o.ports_y || ms > 600000)
          throw std::invalid_argument(fmt::format(
              "--port-delay {}: PORT must be below {} (the ports), MS at most 600000", d,
              o.ports_x * o.ports_y));
        if (o.port_delay_ms.size() <= port) o.port_delay_ms.resize(port + 1, 0);
        o.port_delay_ms[port] = static_cast<uint32_t>(ms);
      }
      if (o.send_every == 0) throw std::invalid_argument("--every: N must be at least 1");
      if (o.acquisitions == 0) throw std::invalid_argument("--acquisitions must be at least 1");
    } catch (const std::exception& e) {
      fail("glint sim", e.what(), kExitUsage);
    }
    const std::atomic<bool>& stop = stop_on_signals();
    try {
      const auto r = pipeline::run_stream_simulator(o, &stop);
      if (!r.subscribers_seen) log::warn("glint sim: no subscriber within {} ms; sent anyway", o.wait_subscribers_ms);
      // The rate is of images out of this process (the sockets' queues drained), not handed
      // to ZeroMQ, which queues without limit.
      const double rate = r.seconds > 0 ? r.images / r.seconds : 0.0;
      if (!a->quiet)
        std::cout << fmt::format("glint sim: {} images ({} dark) as {} messages, {:.1f} MB sent in "
                                 "{:.2f} s ({:.0f} images/s){}\n",
                                 r.images, std::min(o.dark_frames, r.images), r.messages, r.bytes / 1e6,
                                 r.seconds, rate, r.interrupted ? ", interrupted" : "");
      if (o.rate_hz > 0 && r.images > 0 && (r.max_lag_s > 0.5 || rate < 0.95 * o.rate_hz))
        log::warn("glint sim: could not keep --rate {:g}: sent {:.0f} images/s, up to {:.2f} s "
                  "behind schedule (a lower --rate, --pool N, or a smaller image)",
                  o.rate_hz, rate, r.max_lag_s);
      bool lost = false;
      if (r.images_to_nobody > 0) {
        log::error("glint sim: {} of {} images were sent while a port had no subscriber and are "
                   "lost (start the receiver, e.g. `glint ctl start`, before glint sim)",
                   r.images_to_nobody, r.images);
        lost = true;
      }
      if (r.end_to_nobody) {
        log::error("glint sim: the end-of-acquisition message went to a port without a "
                   "subscriber; the receiver's run does not end by it");
        lost = true;
      }
      if (!r.drained && o.drain_ms > 0) {
        log::error("glint sim: messages were still queued {} ms after the last one and are lost "
                   "(the end message among them): the receiver is slower than --rate {:g}; "
                   "lower --rate or raise --drain-ms",
                   o.drain_ms, o.rate_hz);
        lost = true;
      }
      if (lost) throw CLI::RuntimeError(kExitFailure);
    } catch (const CLI::RuntimeError&) {
      throw;
    } catch (const std::exception& e) {
      fail("glint sim", e.what(), kExitFailure);
    }
  });
}

}  // namespace glint::tools
