#pragma once
// Each subcommand of the `glint` tool lives in its own file and registers itself here.
#include <atomic>
#include <string>

#include <CLI/CLI.hpp>

#include "glint/config/config.hpp"

namespace glint::tools {

/// Exit status of a subcommand that failed on bad input (missing file, wrong dataset, ...).
inline constexpr int kExitUsage = 2;
/// Exit status of a subcommand that failed at run time.
inline constexpr int kExitFailure = 1;

/// `glint sim`: slsReceiver stream emulator.
void add_sim_command(CLI::App& app);
/// `glint ctl`: glintd's control client.
void add_ctl_command(CLI::App& app);
/// Prints "<command>: <message>" to stderr and ends the subcommand with `status` (CLI11 exits
/// with a RuntimeError's code but does not print its message).
[[noreturn]] void fail(const std::string& command, const std::string& message, int status);

/// Makes SIGINT (and SIGTERM) set the returned flag instead of ending the process, so that a
/// long-running subcommand (glint sim, glint ctl watch) can stop cleanly and report.
const std::atomic<bool>& stop_on_signals();

/// `glint find`: cluster finding over an HDF5 frame file.
void add_find_command(CLI::App& app);
/// The products: section that `--products LIST [--energy-window EMIN,EMAX] [--energy KIND]
/// [--eta-calibration FILE] [--subpixel F]` stand for (glint find, glint bench find); glintd's
/// defaults otherwise. An eta calibration turns the sub-pixel image on (as
/// products.subpixel.calibration); the list item `subpixel` asks for it and needs one. Throws
/// std::invalid_argument naming the option and what is allowed.
config::ProductsConfig products_option(const std::string& list, const std::string& window,
                                       const std::string& energy,
                                       const std::string& eta_calibration = "",
                                       uint32_t subpixel_factor = 5);
/// `glint synth`: writes synthetic frames to an HDF5 file.
void add_synth_command(CLI::App& app);
/// `glint pedestal`: a pedestal file from dark frames in an HDF5 file.
void add_pedestal_command(CLI::App& app);
/// `glint bench`: registers the benchmark subcommands below.
void add_bench_command(CLI::App& app);
/// `glint bench find` (tools/bench_find.cpp).
void add_bench_find(CLI::App& bench);
/// `glint bench tv` (tools/bench_tv.cpp).
void add_bench_tv(CLI::App& bench);
/// `glint bench pipeline` (tools/bench_pipeline.cpp).
void add_bench_pipeline(CLI::App& bench);
/// `glint recon` (tools/recon_command.cpp).
void add_recon_command(CLI::App& app);
/// `glint eta-calibrate` (tools/eta_calibrate_command.cpp).
void add_eta_calibrate_command(CLI::App& app);
/// `glint view`: glintd's live view as PNG files (tools/view_command.cpp).
void add_view_command(CLI::App& app);
/// `glint plot`: runs python3 -m glint.plot with the glint package (tools/plot_command.cpp).
void add_plot_command(CLI::App& app);
/// `glint master`: joins the run files of several glintd into one detector (master_command.cpp).
void add_master_command(CLI::App& app);

}  // namespace glint::tools
