#pragma once
// A run of the example configuration fed by the stream simulator over loopback, as the in-process
// run tests set it up.
#include <cstdint>
#include <filesystem>
#include <string>

#include "glint/config/config.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "stream_test_util.hpp"

namespace glint::testing {

struct SimulatedRun {
  config::Config cfg;
  pipeline::SimOptions sim;
};

/// A `rows` x `cols` detector on one fresh loopback port, `dark` dark frames (also the pedestal
/// window), the CPU finder in batches of `batch_frames`, the run file in a fresh directory named
/// after `name`; the simulator numbers frames from 1.
inline SimulatedRun simulated_run(const std::string& name, uint32_t rows, uint32_t cols,
                                  uint32_t dark, int batch_frames) {
  SimulatedRun c;
  c.cfg = config::load(std::filesystem::path(GLINT_SOURCE_DIR) / "config/glintd.example.yaml");
  c.cfg.detector.rows = rows;
  c.cfg.detector.cols = cols;
  const auto ep = loopback(free_tcp_port());
  c.cfg.ingest.endpoints = {ep};
  c.sim.endpoints = {ep};
  c.cfg.pedestal.dark_frames = dark;
  c.cfg.pedestal.window = dark;
  c.cfg.finder.backend = "cpu";
  c.cfg.finder.batch_frames = batch_frames;
  c.cfg.output.directory = fresh_dir(name);
  c.cfg.output.run_name = name;
  c.sim.image.rows = rows;
  c.sim.image.cols = cols;
  c.sim.dark_frames = dark;
  c.sim.first_frame_number = 1;
  return c;
}

/// A 48 x 64 detector of `ports_x` x `ports_y` ports on `endpoints` fresh loopback ports: 20
/// dark frames, 60 photon frames of ~12 photons numbered from 1000.
inline SimulatedRun small_detector_run(const std::string& name, uint32_t ports_x = 1,
                                       uint32_t ports_y = 1, uint32_t endpoints = 1) {
  SimulatedRun c = simulated_run(name, 48, 64, /*dark=*/20, /*batch_frames=*/16);
  c.cfg.detector.ports_x = ports_x;
  c.cfg.detector.ports_y = ports_y;
  for (uint32_t i = 1; i < endpoints; ++i) {  // simulated_run has the first one
    const auto ep = loopback(free_tcp_port());
    c.cfg.ingest.endpoints.push_back(ep);
    c.sim.endpoints.push_back(ep);
  }
  c.sim.image.photons = 12;
  c.sim.ports_x = ports_x;
  c.sim.ports_y = ports_y;
  c.sim.frames = 60;
  c.sim.first_frame_number = 1000;
  return c;
}

}  // namespace glint::testing
