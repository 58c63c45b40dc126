// glintd with a finder that fails with a sticky CUDA error at its GLINT_TEST_FAIL_AT-th data
// batch (default 3): the process the fatal-error tests run, on any machine.
#include <atomic>
#include <cstdlib>
#include <string>

#include "glint/daemon/glintd_main.hpp"
#include "sticky_fault.hpp"

int main(int argc, char** argv) {
  const char* at = std::getenv("GLINT_TEST_FAIL_AT");
  static std::atomic<uint64_t> ok{0};
  const uint64_t fail_at = at ? std::stoull(at) : 3;
  return glint::daemon::glintd_main(argc, argv, glint::testing::sticky_fault_factory(fail_at, &ok));
}
