// glint: the command-line face of the engine (find, recon, sim, ctl, bench).
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "glint/log.hpp"

int main(int argc, char** argv) {
  CLI::App app{"glint: exact photon cluster finding and 3D reconstruction for pixel detectors"};
  app.set_version_flag("--version", std::string("glint ") + GLINT_VERSION);
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off")
      ->capture_default_str();
  glint::tools::add_sim_command(app);
  glint::tools::add_ctl_command(app);
  glint::tools::add_find_command(app);
  glint::tools::add_synth_command(app);
  glint::tools::add_pedestal_command(app);
  glint::tools::add_bench_command(app);
  glint::tools::add_recon_command(app);
  glint::tools::add_eta_calibrate_command(app);
  glint::tools::add_view_command(app);
  glint::tools::add_plot_command(app);
  glint::tools::add_master_command(app);
  app.parse_complete_callback([&] { glint::log::set_level(glint::log::parse_level(log_level)); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // The commands end with their own status (CLI::RuntimeError); --help exits 0; CLI11's own
    // usage errors exit 2, as the commands' checks of their arguments do.
    const int code = app.exit(e);
    if (code == 0 || dynamic_cast<const CLI::RuntimeError*>(&e) != nullptr) return code;
    return glint::tools::kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "glint: " << e.what() << "\n";
    return glint::tools::kExitUsage;
  }
  return 0;
}
