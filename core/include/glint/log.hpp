#pragma once
// Logging facade: the rest of glint logs through these functions; spdlog stays behind log.cpp.
//
// Levels: trace (per-message detail, off in production), debug (per-batch detail), info (run and
// lifecycle events an operator wants in the journal), warn (something was dropped, retried or is
// degraded; the process goes on), error (a run or request failed), critical (the process exits).
#include <string>
#include <string_view>

// nvcc cannot compile fmt 9 in C++20 mode: CUDA sources get the plain write() only.
#if !defined(__CUDACC__)
#include <fmt/format.h>
#endif

namespace glint::log {

enum class Level { trace, debug, info, warn, error, critical, off };

/// Parses "trace|debug|info|warn|error|critical|off"; throws std::invalid_argument otherwise.
Level parse_level(std::string_view name);
void set_level(Level level);
Level level();

/// Writes one line: control characters in `message` are escaped (see one_line()), so that text
/// from outside (a run name, a stream header, a library's message) cannot split or forge lines.
void write(Level level, std::string_view message);

/// `text` on one line: control characters (newline, carriage return, tab, NUL, ESC, DEL, ...)
/// written as \n, \r, \t or \xNN; everything else, UTF-8 included, as it is. Used for every
/// log line and every control reply, so that both escape alike.
std::string one_line(std::string_view text);

#if !defined(__CUDACC__)

template <class... Args>
void trace(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::trace) write(Level::trace, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::error) write(Level::error, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void critical(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::critical) write(Level::critical, fmt::format(f, std::forward<Args>(a)...));
}

#endif  // !__CUDACC__

}  // namespace glint::log
