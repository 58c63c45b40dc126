// The YAML configuration: glintd's config file (config::parse) and the per-run overrides of a
// `start` request (config::with_overrides). Input: YAML text, optionally followed by a NUL and
// override text applied on top. Bad input must end in ConfigError (any other exception escapes
// and is a finding); an accepted configuration must survive to_yaml -> parse unchanged.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "glint/config/config.hpp"

using namespace glint;

namespace {

void check_round_trip(const config::Config& c) {
  const std::string once = config::to_yaml(c);
  config::Config back;
  try {
    back = config::parse(once, "<to_yaml>");
  } catch (const config::ConfigError& e) {
    std::fprintf(stderr, "to_yaml output rejected: %s\n---\n%s\n", e.what(), once.c_str());
    GLINT_FUZZ_CHECK(false && "to_yaml output parses");
  }
  GLINT_FUZZ_CHECK(config::to_yaml(back) == once);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = all.find('\0');
  const std::string_view base = all.substr(0, nul);
  config::Config c;
  try {
    c = config::parse(base, "<fuzz>");
  } catch (const config::ConfigError& e) {
    GLINT_FUZZ_CHECK(std::string_view(e.what()).size() > 0);
    return 0;
  }
  check_round_trip(c);
  if (nul == std::string_view::npos) return 0;
  try {
    c = config::with_overrides(c, all.substr(nul + 1));
  } catch (const config::ConfigError& e) {
    GLINT_FUZZ_CHECK(std::string_view(e.what()).size() > 0);
    return 0;
  }
  check_round_trip(c);
  return 0;
}
