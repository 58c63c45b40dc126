#pragma once
#include <chrono>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace glint::testing {

/// One request to glintd's control socket; {"ok": false, "error": "timeout"} when it does not answer.
/// The default timeout leaves room for `start`, which replies once the run has opened its file,
/// finder and inputs (GPU and cuFFT set-up can take seconds).
inline nlohmann::json control(const std::string& endpoint, const nlohmann::json& req,
                              int timeout_ms = 15000) {
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

/// A CURVE client's keys (Z85): its own pair and the server's public key.
struct CurveClient {
  std::string public_key, secret_key, server_key;
};

/// One request of raw bytes, optionally as a CURVE client; {"ok": false, "error": "timeout"}
/// when glintd does not answer.
inline nlohmann::json control_raw(const std::string& endpoint, const std::string& request,
                                  int timeout_ms = 3000, const CurveClient* curve = nullptr) {
  static zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::req);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::rcvtimeo, timeout_ms);
  s.set(zmq::sockopt::sndtimeo, timeout_ms);
  if (curve) {
    s.set(zmq::sockopt::curve_serverkey, curve->server_key);
    s.set(zmq::sockopt::curve_publickey, curve->public_key);
    s.set(zmq::sockopt::curve_secretkey, curve->secret_key);
  }
  s.connect(endpoint);
  if (!s.send(zmq::buffer(request), zmq::send_flags::none))
    return {{"ok", false}, {"error", "timeout"}};
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
