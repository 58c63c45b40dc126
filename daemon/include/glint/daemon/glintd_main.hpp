#pragma once
// glintd's process: command line, configuration, signals, systemd notification and the exit
// status around one Daemon. The glintd executable is this function; tests run it with a finder
// of their own.
#include "glint/pipeline/finder_factory.hpp"

namespace glint::daemon {

inline constexpr int kExitFailure = 1;  ///< the service could not start (e.g. control endpoint)
inline constexpr int kExitConfig = 2;   ///< the configuration is unreadable or invalid
inline constexpr int kExitFatal = 3;    ///< a run failed fatally (a sticky CUDA error)

/// Runs glintd with its command line; returns the process's exit status (0 after a shutdown by
/// signal). Runs build their finder with `make_finder` (default pipeline::make_finder).
int glintd_main(int argc, char** argv, pipeline::FinderFactory make_finder = {});

}  // namespace glint::daemon
