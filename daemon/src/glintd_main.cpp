// glintd: the streaming daemon. Runs in the foreground (systemd Type=notify).
//   SIGTERM / SIGINT: finish the current run (drain, write, close) and exit 0; a second one aborts
//   the run (its file is still closed). SIGHUP: reload the configuration for the next run.
//   A fatal error in a run (a sticky CUDA error) closes its file and ends glintd with exit
//   status 3; the systemd unit (Restart=on-failure) starts it again.
#include "glint/daemon/glintd_main.hpp"

#include <csignal>
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>
#include <hdf5.h>
#include <systemd/sd-daemon.h>

#include "glint/config/config.hpp"
#include "glint/daemon/control_security.hpp"
#include "glint/daemon/daemon.hpp"
#include "glint/daemon/preflight.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/ingest.hpp"
#include "glint/daemon/tuning_env.hpp"

namespace glint::daemon {

int glintd_main(int argc, char** argv, pipeline::FinderFactory make_finder) {
  // Every run file is closed by its run. HDF5 1.10 keeps a file whose close failed (disk full)
  // in its tables and crashes closing it again in its exit handler: glintd ends without it.
  H5dont_atexit();
  CLI::App app{"glintd: exact photon cluster finding daemon for slsReceiver streams"};
  app.set_version_flag("--version", std::string("glintd ") + GLINT_VERSION);
  std::string config_path;
  std::string log_level;
  bool check_only = false;
  app.add_option("-c,--config", config_path, "YAML configuration file")->required();
  app.add_option("--log-level", log_level, "overrides logging.level: trace, debug, info, warn, error, critical, off");
  app.add_flag("--check", check_only, "validate the configuration and exit");
  CLI11_PARSE(app, argc, argv);

  // The configuration file, with --log-level in place of logging.level (also after SIGHUP),
  // checked against this machine: what a run will need (its directory, its hosts, a GPU, a mask
  // file) is refused here rather than at the first run.
  auto load_checked = [&] {
    glint::config::Config c = glint::config::load(config_path);
    if (!log_level.empty()) {
      glint::log::parse_level(log_level);
      c.logging.level = log_level == "warning" ? "warn" : log_level;
    }
    glint::daemon::ControlSecurity keys(c.control);  // the CURVE key files, when CURVE is on
    glint::daemon::check_environment(c);
    return c;
  };
  glint::config::Config cfg;
  try {
    cfg = load_checked();
    glint::log::set_level(glint::log::parse_level(cfg.logging.level));
  } catch (const std::exception& e) {
    std::cerr << "glintd: " << glint::log::one_line(e.what()) << "\n";
    return kExitConfig;
  }
  if (check_only) {
    std::cout << config_path << ": ok\n";
    return 0;
  }

  // Signals are taken synchronously by this thread only; every thread started from here on
  // inherits the blocked mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  // Received message buffers are reused instead of being faulted in afresh (see the function).
  glint::pipeline::keep_receive_buffers();

  // The tuning variables (docs/tuning.md) are read once, here: a reload keeps them.
  std::unique_ptr<glint::daemon::Daemon> daemon;
  try {
    daemon = std::make_unique<glint::daemon::Daemon>(cfg, std::move(make_finder),
                                                     daemon::run_tuning_from_environment());
  } catch (const std::exception& e) {
    glint::log::critical("{}", e.what());
    return kExitFailure;
  }

  uint64_t watchdog_us = 0;
  const bool watchdog = sd_watchdog_enabled(0, &watchdog_us) > 0 && watchdog_us > 0;
  sd_notifyf(0, "READY=1\nSTATUS=idle, control %s\nMAINPID=%lu", daemon->control_endpoint().c_str(),
             static_cast<unsigned long>(getpid()));
  if (watchdog) glint::log::info("systemd watchdog every {} ms", watchdog_us / 1000);

  int term_signals = 0;
  std::string last_status;
  auto last_ping = std::chrono::steady_clock::now();
  while (!daemon->finished()) {
    timespec ts{0, 200'000'000};
    const int sig = sigtimedwait(&sigs, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) {
      ++term_signals;
      if (term_signals == 1) {
        glint::log::info("{}: finishing the current run, then exiting (again to abort)", strsignal(sig));
        sd_notify(0, "STOPPING=1\nSTATUS=finishing the run and stopping");
        daemon->request_shutdown(false);
      } else {
        glint::log::warn("{} again: aborting the run (its file is closed)", strsignal(sig));
        daemon->request_shutdown(true);
      }
    } else if (sig == SIGHUP) {
      try {
        auto fresh = load_checked();  // the service thread sets its logging.level
        daemon->request_reload(std::move(fresh));
        sd_notify(0, "RELOADING=1");
        sd_notify(0, "READY=1");
      } catch (const std::exception& e) {
        glint::log::error("SIGHUP: configuration not reloaded, keeping the current one: {}", e.what());
      }
    }
    const auto now = std::chrono::steady_clock::now();
    // The watchdog is fed only while the service thread is alive and going round its loop.
    if (watchdog && now - last_ping >= std::chrono::microseconds(watchdog_us / 3) &&
        now - daemon->heartbeat() < std::chrono::microseconds(watchdog_us / 2)) {
      sd_notify(0, "WATCHDOG=1");
      last_ping = now;
    }
    std::string status = daemon->status_line();
    if (status != last_status) {
      sd_notifyf(0, "STATUS=%s", status.c_str());
      last_status = std::move(status);
    }
  }
  const std::optional<std::string> fatal = daemon->fatal_error();
  daemon.reset();
  if (fatal) {
    glint::log::critical("glintd: exiting after a fatal error: {}", *fatal);
    sd_notifyf(0, "STATUS=fatal error: %s", fatal->c_str());
    return kExitFatal;
  }
  glint::log::info("glintd: exiting");
  return 0;
}

}  // namespace glint::daemon
