#include "commands.hpp"

#include <csignal>
#include <iostream>

namespace glint::tools {

void fail(const std::string& command, const std::string& message, int status) {
  std::cerr << command << ": " << message << "\n";
  throw CLI::RuntimeError(status);
}

namespace {
std::atomic<bool> g_stop_requested{false};
extern "C" void on_stop_signal(int) { g_stop_requested.store(true); }
}  // namespace

const std::atomic<bool>& stop_on_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  return g_stop_requested;
}

}  // namespace glint::tools
