#pragma once
// Where a run's pedestal comes from (pedestal.source): its own dark frames, the previous run's
// end state, or a pedestal file. The state is the finder's whole tracking state (sum, sum2,
// count), so tracking continues exactly where it stopped.
#include <cstdint>
#include <optional>

#include "glint/config/config.hpp"
#include "glint/pedestal.hpp"

namespace glint::pipeline {

/// The pedestal run `run_index` starts from instead of dark frames, or nullopt (take dark frames):
/// - "previous" (or keep_previous): `previous` (the daemon's last run), else the end state in the
///   previous run's file (run_index - 1 in output.directory: a restarted daemon continues), when
///   its shape and window match the configuration; otherwise nullopt (logged);
/// - "file:PATH": the end state in PATH (a pedestal file from `glint pedestal`, or a run file).
///   Throws std::runtime_error naming pedestal.source when it cannot be read or does not match.
std::optional<PedestalState> initial_pedestal(const config::Config& cfg, uint64_t run_index,
                                              const std::optional<PedestalState>& previous);

}  // namespace glint::pipeline
