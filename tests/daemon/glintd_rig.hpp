#pragma once
// What the end-to-end glintd tests share: the configuration of a loopback run, a glintd set up
// in a fresh directory, and the command line of the `glint sim` that feeds it.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../pipeline/stream_test_util.hpp"
#include "control_client.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/pipeline/stream_simulator.hpp"
#include "process.hpp"

namespace glint::testing {

/// A glintd configuration for one data endpoint on loopback; the pedestal window is the number
/// of dark frames.
struct GlintdConfig {
  uint32_t rows = 40, cols = 40, dark = 20;
  std::string data_ep, control_ep;
  std::string ingest_extra;  ///< more keys inside ingest: {...}, starting with ", "
  std::string finder;        ///< the keys inside finder: {...}
  std::filesystem::path runs;
  std::string run_name;
  bool auto_start = false;
  std::string control_extra;  ///< more keys inside control: {...}, starting with ", "
  std::string extra;         ///< more sections, appended as they are
  /// The keys inside preview: {...}: a free port, so that glintds of tests running at once
  /// never share the live view's default endpoint.
  std::string preview = "endpoint: \"tcp://127.0.0.1:*\"";
};

inline void write_glintd_config(const std::filesystem::path& file, const GlintdConfig& c) {
  std::ofstream(file) << "detector: {rows: " << c.rows << ", cols: " << c.cols << "}\n"
                      << "ingest: {endpoints: [\"" << c.data_ep << "\"]" << c.ingest_extra << "}\n"
                      << "pedestal: {dark_frames: " << c.dark << ", window: " << c.dark << "}\n"
                      << "finder: {" << c.finder << "}\n"
                      << "output: {directory: \"" << c.runs.string()
                      << "\", run_name: " << c.run_name << "}\n"
                      << "run: {auto_start: " << (c.auto_start ? "true" : "false") << "}\n"
                      << "control: {endpoint: \"" << c.control_ep << "\"" << c.control_extra
                      << "}\n"
                      << "preview: {" << c.preview << "}\n"
                      << c.extra;
}

/// `glint sim` sending c.dark dark and `frames` photon images of c's shape to c's data endpoint.
inline std::vector<std::string> sim_argv(const GlintdConfig& c, uint64_t frames, const std::string& rate,
                                         const std::string& photons, const std::string& seed) {
  return {bin("glint").string(), "sim", "--endpoint", c.data_ep, "--rows", std::to_string(c.rows),
          "--cols", std::to_string(c.cols), "--dark", std::to_string(c.dark), "--frames",
          std::to_string(frames), "--rate", rate, "--photons", photons, "--seed", seed};
}

/// A glintd set up in the fresh directory `dir`: its configuration file `config` there (written
/// by write()), runs under dir/runs, fresh loopback endpoints, a CPU finder.
struct GlintdRig : GlintdConfig {
  std::filesystem::path dir, config;

  explicit GlintdRig(const std::string& name, uint32_t size = 40, uint32_t dark_frames = 20) {
    rows = cols = size;
    dark = dark_frames;
    finder = "backend: cpu, batch_frames: 32";
    run_name = name;
    dir = fresh_dir(name);
    data_ep = loopback(free_tcp_port());
    control_ep = loopback(free_tcp_port());
    runs = dir / "runs";
    config = dir / "glintd.yaml";
  }
  void write() const { write_glintd_config(config, *this); }
  /// The command line of `binary` (glintd, or a glintd built for a test) with this configuration.
  std::vector<std::string> glintd(const std::string& binary = "glintd") const {
    return {bin(binary).string(), "--config", config.string()};
  }
  std::filesystem::path file(uint64_t index) const {
    return pipeline::run_file_path(runs, run_name, index);
  }
  /// The images of sim_argv(*this, ..., photons "10", seed "7"), for the expected clusters.
  pipeline::SimImageParams image() const {
    pipeline::SimImageParams p;
    p.rows = rows;
    p.cols = cols;
    p.photons = 10;
    p.seed = 7;
    return p;
  }
  /// The finder's parameters for this configuration's defaults.
  FinderParams params() const {
    FinderParams p;
    p.shape = {rows, cols};
    p.pedestal_window = dark;
    return p;
  }
};

}  // namespace glint::testing

/// The names the end-to-end glintd tests use unqualified, for
/// `using namespace glint::testing::glintd_names;` at the top of a test file.
namespace glint::testing::glintd_names {
using namespace std::chrono_literals;
using glint::testing::bin;
using glint::testing::control;
using glint::testing::Process;
using glint::testing::wait_status;
using nlohmann::json;
namespace fs = std::filesystem;
}  // namespace glint::testing::glintd_names
