#pragma once
// Tests of the tuning variables set the environment for one scope: the variables listed are unset,
// then the given ones set; on leaving the scope the listed ones are unset again.
#include <cstdlib>
#include <initializer_list>
#include <span>
#include <utility>

namespace glint::testing {

class ScopedEnvironment {
 public:
  ScopedEnvironment(std::span<const char* const> names,
                    std::initializer_list<std::pair<const char*, const char*>> vars)
      : names_(names) {
    clear();
    for (const auto& [name, value] : vars) setenv(name, value, 1);
  }
  ~ScopedEnvironment() { clear(); }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  void clear() const {
    for (const char* name : names_) unsetenv(name);
  }

  std::span<const char* const> names_;
};

}  // namespace glint::testing
