// glint sim: publishes detector images as slsReceiver's ZeroMQ streamers do.
#include <atomic>
#include <charconv>
#include <iostream>

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
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--config", a->config,
                  "take detector shape, ports, endpoints and dark frames from a glintd config");
  cmd->add_option("--endpoint", a->endpoints, "bind here (repeat for several ports; parts go round-robin) "
                  "[tcp://127.0.0.1:30001]");
  cmd->add_option("--rows", a->o.image.rows, "image rows")->capture_default_str();
  cmd->add_option("--cols", a->o.image.cols, "image columns")->capture_default_str();
  cmd->add_option("--ports", a->ports, "detshape X Y: ports side by side and stacked")->expected(2);
  cmd->add_option("--bitmode", a->o.bitmode, "4, 8, 16 or 32")->capture_default_str();
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
                  "missing-field, unknown-port, backwards");
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
  cmd->add_flag("-q,--quiet", a->quiet, "no summary line");

  cmd->callback([a] {
    auto& o = a->o;
    try {
      if (!a->config.empty()) {
        const auto c = config::load(a->config);
        o.image.rows = c.detector.rows;
        o.image.cols = c.detector.cols;
        o.ports_x = c.detector.ports_x;
        o.ports_y = c.detector.ports_y;
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
    } catch (const std::exception& e) {
      fail("glint sim", e.what(), kExitUsage);
    }
    const std::atomic<bool>& stop = stop_on_signals();
    try {
      const auto r = pipeline::run_stream_simulator(o, &stop);
      if (!r.subscribers_seen) log::warn("glint sim: no subscriber within {} ms; sent anyway", o.wait_subscribers_ms);
      if (!a->quiet)
        std::cout << fmt::format("glint sim: {} images ({} dark) as {} messages, {:.1f} MB in {:.2f} s "
                                 "({:.0f} images/s){}\n",
                                 r.images, std::min(o.dark_frames, r.images), r.messages, r.bytes / 1e6,
                                 r.seconds, r.seconds > 0 ? r.images / r.seconds : 0.0,
                                 stop.load() ? ", interrupted" : "");
    } catch (const std::exception& e) {
      fail("glint sim", e.what(), kExitFailure);
    }
  });
}

}  // namespace glint::tools
