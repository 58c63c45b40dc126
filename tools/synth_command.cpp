// glint synth: writes synthetic detector frames (glint::synth) to an HDF5 file for `glint find`.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "frame_file.hpp"
#include "glint/jungfrau.hpp"
#include "glint/synthetic.hpp"

namespace glint::tools {

void add_synth_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "synth", "write synthetic frames (dark frames, then photon frames) to an HDF5 file");
  struct Args {
    synth::Config config;
    std::string output;
    std::string dataset = "/data";
    uint64_t frames = 1000;
    bool overwrite = false;
    bool quiet = false;
    std::string gain_file, pedestal_file;
    std::vector<double> photon_at;
  };
  auto a = std::make_shared<Args>();
  a->config.shape = {400, 400};
  cmd->add_option("-o,--output", a->output, "HDF5 file to create")->required();
  cmd->add_option("--dataset", a->dataset, "dataset name")->capture_default_str();
  cmd->add_option("--dark", a->config.dark_frames, "dark frames first")->capture_default_str();
  cmd->add_option("--frames", a->frames, "photon frames after the dark frames")->capture_default_str();
  cmd->add_option("--rows", a->config.shape.rows, "frame rows")->capture_default_str();
  cmd->add_option("--cols", a->config.shape.cols, "frame columns")->capture_default_str();
  cmd->add_option("--photons", a->config.photons, "mean photons per frame")->capture_default_str();
  cmd->add_option("--photon-adu", a->config.photon_adu, "photon charge, ADU")->capture_default_str();
  cmd->add_option("--crowded-every", a->config.crowded_every,
                  "every n-th photon frame carries 12x the photons (0: never)")
      ->capture_default_str();
  cmd->add_option("--photon-grid", a->config.photon_grid,
                  "N > 0: one photon in every N x N cell of each photon frame, isolated, in the "
                  "cell's central pixel (in place of --photons): a flat field for glint "
                  "eta-calibrate, or known positions with --photon-at")
      ->check(CLI::Range(0u, 65535u))
      ->capture_default_str();
  cmd->add_option("--photon-at", a->photon_at,
                  "X,Y in [0, 1): with --photon-grid, every photon at this position within its "
                  "pixel (default: uniform over the pixel)")
      ->delimiter(',');
  cmd->add_option("--seed", a->config.seed, "random seed (same seed, same bytes)")
      ->capture_default_str();
  cmd->add_flag("--jungfrau", a->config.jungfrau,
                "JUNGFRAU frames: gain bits 15:14 over a 14-bit ADC, with gain switching");
  cmd->add_option("--gain-switch-rate", a->config.gain_switch_rate,
                  "JUNGFRAU: per pixel and photon frame, a switch to G1/G2")
      ->capture_default_str();
  cmd->add_option("--dark-switch-rate", a->config.dark_switch_rate,
                  "JUNGFRAU: the same in dark frames")
      ->capture_default_str();
  cmd->add_option("--invalid-gain-rate", a->config.invalid_gain_rate,
                  "JUNGFRAU: per pixel and frame, the invalid gain code 10")
      ->capture_default_str();
  cmd->add_option("--stuck-pixels", a->config.stuck_pixels,
                  "pixels (row * cols + col) always reading the same value (dead)")
      ->delimiter(',');
  cmd->add_option("--noisy-pixels", a->config.noisy_pixels,
                  "pixels (row * cols + col) with 8x the noise")
      ->delimiter(',');
  cmd->add_option("--dark-g1-pixels", a->config.dark_g1_pixels,
                  "JUNGFRAU: pixels (row * cols + col) in G1 in every odd-indexed dark frame")
      ->delimiter(',');
  cmd->add_option("--gain-file", a->gain_file,
                  "JUNGFRAU: also write synthetic gain maps (PSI module file layout) here");
  cmd->add_option("--pedestal-file", a->pedestal_file,
                  "JUNGFRAU: also write synthetic G1/G2 pedestals (G0, G1, G2 float64) here");
  cmd->add_flag("--overwrite", a->overwrite, "replace an existing file");
  cmd->add_flag("-q,--quiet", a->quiet, "no summary line");
  cmd->callback([a] {
    if (!a->photon_at.empty()) {
      const auto& v = a->photon_at;
      if (v.size() != 2 || !(v[0] >= 0.0 && v[0] < 1.0 && v[1] >= 0.0 && v[1] < 1.0))
        fail("glint synth", "--photon-at: expected X,Y with each in [0, 1)", kExitUsage);
      if (a->config.photon_grid == 0)
        fail("glint synth", "--photon-at needs --photon-grid N", kExitUsage);
      a->config.photon_grid_x = v[0];
      a->config.photon_grid_y = v[1];
    }
    std::unique_ptr<synth::Generator> gen;
    try {
      gen = std::make_unique<synth::Generator>(a->config);
    } catch (const std::exception& e) {
      fail("glint synth", e.what(), kExitUsage);
    }
    if ((!a->gain_file.empty() || !a->pedestal_file.empty()) && !a->config.jungfrau)
      fail("glint synth", "--gain-file and --pedestal-file need --jungfrau", kExitUsage);
    try {
      for (const auto& path : {a->gain_file, a->pedestal_file})
        if (!path.empty() && !a->overwrite && std::filesystem::exists(path))
          throw std::runtime_error(path + " exists already (use --overwrite to replace it)");
      if (!a->gain_file.empty())
        jungfrau::write_pedestal_file(  // the same layout: float64 arrays back to back
            a->gain_file, synth::jungfrau_gain_maps(a->config.shape, a->config.seed));
      if (!a->pedestal_file.empty())
        jungfrau::write_pedestal_file(
            a->pedestal_file, synth::jungfrau_stage_pedestals(a->config.shape, a->config.seed));
      const uint64_t total = a->config.dark_frames + a->frames;
      const std::size_t np = a->config.shape.pixels();
      FrameFileWriter out(a->output, a->dataset, total, a->config.shape, a->overwrite);
      out.set_attribute("dark_frames", a->config.dark_frames);
      out.set_attribute("seed", a->config.seed);
      const uint64_t chunk = frames_per_chunk(a->config.shape);
      std::vector<uint16_t> buf;
      for (uint64_t f = 0; f < total; f += chunk) {
        const uint64_t n = std::min(chunk, total - f);
        buf.resize(n * np);
        gen->fill_many(f, n, buf);
        out.write(f, n, buf);
      }
      out.close();
      if (!a->quiet)
        std::cout << fmt::format("glint synth: {} frames ({} dark, {} photon frames) of {} x {} "
                                 "to '{}' in {}\n",
                                 total, a->config.dark_frames, a->frames, a->config.shape.rows,
                                 a->config.shape.cols, a->dataset, a->output);
    } catch (const std::exception& e) {
      fail("glint synth", e.what(), kExitFailure);
    }
  });
}

}  // namespace glint::tools
