#include "glint/tv/forward_spec.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace glint::tv {

namespace {

// Every refusal names the spec, what is wrong and the allowed forms, once.
constexpr std::string_view kForms =
    "allowed: identity, gaussian:SX,SY,SZ with sigmas >= 0 in voxels, mask:FILE.h5:/dataset";

double parse_sigma(std::string_view spec, std::string_view s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(std::string(s), &used);
    if (used != s.size() || !(v >= 0) || !std::isfinite(v)) throw std::invalid_argument("");
    return v;
  } catch (const std::exception&) {
    throw std::invalid_argument(fmt::format(
        "forward model '{}': sigma '{}' is not a non-negative number ({})", spec, s, kForms));
  }
}

}  // namespace

ForwardSpec parse_forward_spec(std::string_view spec) {
  ForwardSpec f;
  if (spec == "identity") return f;
  if (spec.starts_with("gaussian:")) {
    const std::string_view rest = spec.substr(9);
    const auto c1 = rest.find(',');
    const auto c2 = c1 == rest.npos ? rest.npos : rest.find(',', c1 + 1);
    if (c1 == rest.npos || c2 == rest.npos || rest.find(',', c2 + 1) != rest.npos)
      throw std::invalid_argument(fmt::format(
          "forward model '{}': expected three sigmas, gaussian:SX,SY,SZ ({})", spec, kForms));
    f.kind = ForwardSpec::Kind::gaussian;
    f.sigma = {parse_sigma(spec, rest.substr(0, c1)),
               parse_sigma(spec, rest.substr(c1 + 1, c2 - c1 - 1)),
               parse_sigma(spec, rest.substr(c2 + 1))};
    return f;
  }
  if (spec.starts_with("mask:")) {
    const std::string_view rest = spec.substr(5);
    const auto c = rest.rfind(":/");
    if (c == rest.npos || c == 0 || c + 2 == rest.size())
      throw std::invalid_argument(fmt::format(
          "forward model '{}': expected a file and a dataset, mask:FILE.h5:/dataset ({})", spec,
          kForms));
    f.kind = ForwardSpec::Kind::mask;
    f.file = std::string(rest.substr(0, c));
    f.dataset = std::string(rest.substr(c + 1));
    return f;
  }
  throw std::invalid_argument(fmt::format("unknown forward model '{}' ({})", spec, kForms));
}

}  // namespace glint::tv
