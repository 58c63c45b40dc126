// The control socket: every request reaches Daemon::handle_request on the service thread. A
// real Daemon (small detector, CPU finder, scratch output directory) serves on an ipc://
// endpoint in a scratch directory; each input is sent as one request over ZeroMQ, as `glint ctl`
// sends it, and must get a JSON object with a boolean "ok" within 10 s. A run the input started
// is aborted after it, and a daemon told to shut down is replaced.
//
// Everything a request meets is behind Rig::ask: a free request parser with size and depth
// bounds, once there is one, gets its own in-process target beside this one (same corpus).
//
// Inputs whose `start` overrides name output.directory are skipped: they would make the fuzzer
// write run files anywhere on the host (the override allow-list is what keeps clients from it).
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "fuzz_util.hpp"
#include "glint/daemon/daemon.hpp"
#include "glint/log.hpp"

using namespace glint;
using nlohmann::json;

namespace {

config::Config base_config() {
  config::Config c;
  const auto dir = fuzz::scratch_dir();
  c.detector.rows = 16;
  c.detector.cols = 16;
  c.ingest.endpoints = {"ipc://" + (dir / "data.ipc").string()};
  c.ingest.queue_frames = 4;
  c.ingest.reorder_frames = 2;
  c.ingest.copy_threads = 0;
  c.pedestal.dark_frames = 2;
  c.pedestal.window = 2;
  c.finder.backend = "cpu";
  c.finder.threads = 1;
  c.finder.batch_frames = 4;
  c.output.directory = dir / "runs";
  c.output.run_name = "fuzz";
  c.control.endpoint = "ipc://" + (dir / "control.ipc").string();
  // Not the default tcp port 5556: the README's examples and the demo bind it, maybe meanwhile.
  c.preview.endpoint = "ipc://" + (dir / "preview.ipc").string();
  c.logging.level = "off";
  return c;
}

struct Rig {
  zmq::context_t ctx{1};
  std::unique_ptr<daemon::Daemon> daemon;

  Rig() {
    log::set_level(log::parse_level("off"));
    std::filesystem::create_directories(fuzz::scratch_dir() / "runs");
    restart();
  }
  void restart() {
    daemon.reset();
    daemon = std::make_unique<daemon::Daemon>(base_config());
  }
  /// One request and its reply; aborts (a finding) when none comes within 10 s.
  std::string ask(const std::string& request) {
    zmq::socket_t s(ctx, zmq::socket_type::req);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::rcvtimeo, 10'000);
    s.connect(daemon->control_endpoint());
    s.send(zmq::buffer(request), zmq::send_flags::none);
    zmq::message_t reply;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      try {
        GLINT_FUZZ_CHECK(s.recv(reply).has_value() && "the daemon answers within 10 s");
        return reply.to_string();
      } catch (const zmq::error_t& e) {
        // libFuzzer's timeout timer (SIGALRM) interrupts the wait.
        GLINT_FUZZ_CHECK(e.num() == EINTR && std::chrono::steady_clock::now() < until);
      }
    }
  }
};

/// True for a request that starts a run with its own output directory.
bool names_output_directory(const std::string& request) {
  const json j = json::parse(request, nullptr, false);
  if (!j.is_object() || !j.contains("overrides")) return false;
  const json& o = j["overrides"];
  return o.is_object() && o.contains("output") && o["output"].is_object() &&
         o["output"].contains("directory");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static Rig rig;
  const std::string request(reinterpret_cast<const char*>(data), size);
  if (names_output_directory(request)) return -1;
  const std::string reply = rig.ask(request);
  const json r = json::parse(reply, nullptr, false);
  GLINT_FUZZ_CHECK(r.is_object() && r.contains("ok") && r["ok"].is_boolean());
  if (!r["ok"].get<bool>())
    GLINT_FUZZ_CHECK(r.contains("error") && r["error"].is_string());
  // A shutdown's reply is {"ok": true, "state": ...} alone: the service is ending.
  if (r["ok"].get<bool>() && r.size() == 2 && r.contains("state")) {
    rig.restart();
    return 0;
  }
  const json a = json::parse(rig.ask(R"({"command": "abort"})"), nullptr, false);
  GLINT_FUZZ_CHECK(a.is_object() && a.contains("ok"));
  if (a["ok"] == true) {  // a run was started: wait for it to end, then forget its file
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (true) {
      const json s = json::parse(rig.ask(R"({"command": "status"})"));
      const std::string state = s.value("state", "");
      if (state == "idle" || state == "error") break;
      GLINT_FUZZ_CHECK(std::chrono::steady_clock::now() < until && "an aborted run ends");
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(fuzz::scratch_dir() / "runs", ec))
      std::filesystem::remove_all(e.path(), ec);
  }
  return 0;
}
