#include "glint/daemon/control_request.hpp"

#include <fmt/format.h>

namespace glint::daemon {

using nlohmann::json;

std::size_t json_nesting_depth(std::string_view text, std::size_t limit) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '{' || ch == '[') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return limit + 1;
    } else if ((ch == '}' || ch == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

namespace {

bool is_bare_name(std::string_view text) {
  if (text.empty() || text.size() > 32) return false;
  for (char ch : text)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_')) return false;
  return true;
}

ControlRequest refused(std::string what) {
  ControlRequest r;
  r.error = std::move(what);
  return r;
}

}  // namespace

ControlRequest parse_control_request(std::string_view text, std::size_t max_bytes) {
  if (text.size() > max_bytes)
    return refused(
        fmt::format("request of {} bytes refused: larger than control.max_request_bytes "
                    "({} bytes)",
                    text.size(), max_bytes));
  if (json_nesting_depth(text, kMaxRequestDepth) > kMaxRequestDepth)
    return refused(
        fmt::format("request refused: JSON nested deeper than {} levels", kMaxRequestDepth));
  ControlRequest r;
  json req = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) {
    std::string_view t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' '))
      t.remove_suffix(1);
    if (!is_bare_name(t)) return refused("request is not JSON (expected {\"command\": NAME, ...})");
    r.command = std::string(t);
    r.body = json::object();
  } else if (req.is_object() && req.contains("command") && req["command"].is_string()) {
    r.command = req["command"].get<std::string>();
    r.body = std::move(req);
  } else if (req.is_string()) {
    r.command = req.get<std::string>();
    r.body = json::object();
  } else {
    return refused("expected {\"command\": NAME, ...}");
  }
  if (r.command.empty()) return refused("expected {\"command\": NAME, ...} with a non-empty NAME");
  return r;
}

}  // namespace glint::daemon
