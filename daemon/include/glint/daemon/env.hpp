#pragma once
// How tuning and diagnosis variables (docs/tuning.md) are read: a value that is not a whole
// number in range, or not one of the accepted words, leaves the default. Only
// daemon/src/tuning_env.cpp reads them; engines, stages and the run take tuning structs.
#include <cerrno>
#include <cstdlib>
#include <string>
#include <string_view>

namespace glint::daemon {

/// The value of `name` if it is set to a whole number in [lo, hi]; otherwise `fallback`.
inline long long env_int(const char* name, long long fallback, long long lo, long long hi) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(e, &end, 10);
  if (errno != 0 || *end != '\0' || v < lo || v > hi) return fallback;
  return v;
}

/// Whether `name` is set (to anything, also empty).
inline bool env_set(const char* name) { return std::getenv(name) != nullptr; }

/// Whether `name` is set to exactly `value`.
inline bool env_is(const char* name, std::string_view value) {
  const char* e = std::getenv(name);
  return e != nullptr && value == e;
}

/// The text of `name`, empty when it is not set.
inline std::string env_text(const char* name) {
  const char* e = std::getenv(name);
  return e != nullptr ? std::string(e) : std::string();
}

}  // namespace glint::daemon
