#pragma once
// Each subcommand of the `glint` tool lives in its own file and registers itself here.
#include <CLI/CLI.hpp>

namespace glint::tools {

/// Exit status of a subcommand that failed on bad input (missing file, wrong dataset, ...).
inline constexpr int kExitUsage = 2;
/// Exit status of a subcommand that failed at run time.
inline constexpr int kExitFailure = 1;

/// glint recon (recon_command.cpp).
void add_recon_command(CLI::App& app);
/// glint bench tv (bench_tv.cpp), registered under the bench command.
void add_bench_tv(CLI::App& bench);

}  // namespace glint::tools
