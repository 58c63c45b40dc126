#pragma once
// What a configuration needs from the machine at the moment it is used, beyond what its text
// can say: the output directory can be written, the stream hosts resolve, a GPU is there for the
// GPU backend, the reconstruction's mask file can be read. `glintd --check`, glintd's start and
// SIGHUP refuse a configuration that fails them; every run checks again at its start (the disk,
// the network or the driver may have changed) and its `start` reply says what failed.
#include <string>
#include <vector>

#include "glint/config/config.hpp"

namespace glint::daemon {

/// One thing the machine does not provide: the key it concerns, its line in the configuration
/// file (0 when not given there) and what is wrong and allowed, as a ConfigError says it.
struct Preflight {
  std::vector<config::ConfigError> problems;  ///< refuse the configuration
  std::vector<config::ConfigError> warnings;  ///< the run goes on without the part concerned
  bool ok() const { return problems.empty(); }
};

/// Checks `c` against this machine now. With `mask_is_fatal` a reconstruction mask file that
/// cannot be read is a problem, otherwise a warning (a run then goes on without its
/// reconstruction, counted as failed). Never throws.
Preflight preflight(const config::Config& c, bool mask_is_fatal = true);

/// Throws the first problem of preflight(c) (a ConfigError naming the key and its line).
void check_environment(const config::Config& c);

}  // namespace glint::daemon
