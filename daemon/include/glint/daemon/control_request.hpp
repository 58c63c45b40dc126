#pragma once
// One control request, bounded before it is parsed: the size (control.max_request_bytes) and the
// nesting depth of its JSON are checked on the raw bytes, so that no request can make the parser
// or a later serialisation recurse deeply or hold much memory. Free of the daemon so that it can
// be fuzzed.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace glint::daemon {

inline constexpr std::size_t kDefaultMaxRequestBytes = 65536;
/// Deepest nesting of arrays and objects a request may have ({"overrides": {"a": {"b": 1}}} is 3).
inline constexpr std::size_t kMaxRequestDepth = 32;

struct ControlRequest {
  std::string command;  ///< empty when the request was refused
  nlohmann::json body;  ///< the whole request object ({} for a bare command name)
  std::string error;    ///< why it was refused (one line), empty when accepted
  bool ok() const { return error.empty(); }
};

/// The deepest nesting of JSON arrays and objects in `text` (brackets inside strings do not
/// count); stops counting once past `limit` and returns limit + 1.
std::size_t json_nesting_depth(std::string_view text, std::size_t limit);

/// Accepts {"command": NAME, ...}, a JSON string NAME, or a bare NAME (letters and '_'). Refuses,
/// with a one-line error and without parsing, a request over `max_bytes` or nested deeper than
/// kMaxRequestDepth; refuses anything else that is not one of the accepted forms.
ControlRequest parse_control_request(std::string_view text,
                                     std::size_t max_bytes = kDefaultMaxRequestBytes);

}  // namespace glint::daemon
