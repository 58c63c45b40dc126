#include "commands.hpp"

#include <iostream>

namespace glint::tools {

void fail(const std::string& command, const std::string& message, int status) {
  std::cerr << command << ": " << message << "\n";
  throw CLI::RuntimeError(status);
}

}  // namespace glint::tools
