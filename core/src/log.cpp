#include "glint/log.hpp"

#include <atomic>
#include <stdexcept>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace glint::log {
namespace {

std::atomic<Level> g_level{Level::info};

spdlog::logger& logger() {
  // Logs go to stderr so that a tool's stdout stays machine-readable.
  static auto instance = [] {
    auto l = spdlog::stderr_color_mt("glint");
    l->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
    l->set_level(spdlog::level::trace);
    return l;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(Level l) {
  switch (l) {
    case Level::trace: return spdlog::level::trace;
    case Level::debug: return spdlog::level::debug;
    case Level::info: return spdlog::level::info;
    case Level::warn: return spdlog::level::warn;
    case Level::error: return spdlog::level::err;
    case Level::critical: return spdlog::level::critical;
    case Level::off: return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

Level parse_level(std::string_view name) {
  if (name == "trace") return Level::trace;
  if (name == "debug") return Level::debug;
  if (name == "info") return Level::info;
  if (name == "warn" || name == "warning") return Level::warn;
  if (name == "error") return Level::error;
  if (name == "critical") return Level::critical;
  if (name == "off") return Level::off;
  throw std::invalid_argument("unknown log level '" + std::string(name) +
                              "' (allowed: trace, debug, info, warn, error, critical, off)");
}

void set_level(Level l) { g_level.store(l, std::memory_order_relaxed); }
Level level() { return g_level.load(std::memory_order_relaxed); }

std::string one_line(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto b = static_cast<unsigned char>(ch);
    if (b >= 0x20 && b != 0x7f) {
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else {
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  return out;
}

void write(Level l, std::string_view message) {
  if (l < level()) return;  // the formatting helpers check first; direct callers rely on this
  logger().log(to_spdlog(l), "{}", one_line(message));
}

}  // namespace glint::log
