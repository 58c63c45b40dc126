#pragma once
#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace glint::testing {

/// One request to glintd's control socket; {"ok": false, "error": "timeout"} when it does not answer.
inline nlohmann::json control(const std::string& endpoint, const nlohmann::json& req, int timeout_ms = 3000) {
  static zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::req);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, timeout_ms);
  s.connect(endpoint);
  s.send(zmq::buffer(req.dump()), zmq::send_flags::none);
  zmq::message_t rep;
  if (!s.recv(rep)) return {{"ok", false}, {"error", "timeout"}};
  return nlohmann::json::parse(rep.to_string());
}

inline nlohmann::json control(const std::string& endpoint, const char* command) {
  return control(endpoint, nlohmann::json{{"command", command}});
}

/// Polls `status` until `pred(reply)` or the timeout; returns the last reply.
template <class Pred>
nlohmann::json wait_status(const std::string& endpoint, Pred pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  nlohmann::json r;
  while (std::chrono::steady_clock::now() < until) {
    r = control(endpoint, "status", 1000);
    if (r.value("ok", false) && pred(r)) return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return r;
}

}  // namespace glint::testing
