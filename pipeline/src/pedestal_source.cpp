#include "glint/pipeline/pedestal_source.hpp"

#include <filesystem>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "glint/log.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::pipeline {

namespace {

bool matches(const PedestalState& p, const config::Config& cfg) {
  return p.shape == FrameShape{cfg.detector.rows, cfg.detector.cols} &&
         p.window == cfg.pedestal.window;
}

}  // namespace

std::optional<PedestalState> initial_pedestal(const config::Config& cfg, uint64_t run_index,
                                              const std::optional<PedestalState>& previous) {
  if (const std::string path = cfg.pedestal.file(); !path.empty()) {
    PedestalState p;
    try {
      p = read_pedestal_state(path);
    } catch (const std::exception& e) {
      throw std::runtime_error("pedestal.source file:" + path + ": " + e.what());
    }
    if (!matches(p, cfg))
      throw std::runtime_error(fmt::format(
          "pedestal.source file:{}: the pedestal is {} x {} with window {}; the run needs {} x {} "
          "with window {} (detector.rows, detector.cols, pedestal.window)",
          path, p.shape.rows, p.shape.cols, p.window, cfg.detector.rows, cfg.detector.cols,
          cfg.pedestal.window));
    log::info("run {}: pedestal from {} (no dark frames)", run_index, path);
    return p;
  }
  if (!cfg.pedestal.from_previous()) return std::nullopt;
  if (previous && matches(*previous, cfg)) {
    log::info("run {}: keeping the previous run's pedestal", run_index);
    return previous;
  }
  if (!previous && run_index > 0) {
    const auto file = run_file_path(cfg.output.directory, cfg.output.run_name, run_index - 1);
    std::error_code ec;
    if (std::filesystem::exists(file, ec)) {
      try {
        PedestalState p = read_pedestal_state(file);
        if (matches(p, cfg)) {
          log::info("run {}: continuing the pedestal of {}", run_index, file.string());
          return p;
        }
      } catch (const std::exception& e) {
        log::warn("run {}: the previous run file's pedestal is unusable ({})", run_index,
                  e.what());
      }
    }
  }
  log::info("run {}: no usable previous pedestal; taking {} dark frames", run_index,
            cfg.pedestal.dark_frames);
  return std::nullopt;
}

}  // namespace glint::pipeline
