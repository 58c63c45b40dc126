#include "glint/daemon/daemon.hpp"

#include <cmath>
#include <fmt/ranges.h>

#include <fmt/format.h>
#include <zmq.hpp>

#include "glint/daemon/metrics.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::daemon {

using nlohmann::json;
using pipeline::RunState;
using clock = std::chrono::steady_clock;

struct Daemon::Control {
  zmq::context_t ctx{1};
  zmq::socket_t rep{ctx, zmq::socket_type::rep};
};

uint64_t next_run_index(const std::filesystem::path& dir, const std::string& run_name) {
  uint64_t best = 0;
  std::error_code ec;
  const std::string prefix = run_name + "_";
  for (auto it = std::filesystem::directory_iterator(dir, ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() + 3 || name.size() > prefix.size() + 19 + 3 ||
        !name.starts_with(prefix) || !name.ends_with(".h5"))
      continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 3);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    // Only the names the run files get (pipeline::run_file_path: at least six digits).
    const uint64_t index = std::stoull(digits);
    if (pipeline::run_file_path({}, run_name, index).filename() != name) continue;
    best = std::max(best, index);
  }
  return best + 1;
}

Daemon::Daemon(config::Config cfg)
    : cfg_(std::move(cfg)), started_(clock::now()), control_(std::make_unique<Control>()) {
  control_->rep.set(zmq::sockopt::linger, 0);
  control_->rep.set(zmq::sockopt::rcvtimeo, 100);
  try {
    control_->rep.bind(cfg_.control.endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format("{}: control.endpoint {}: cannot bind: {}", cfg_.source,
                                         cfg_.control.endpoint, e.what()));
  }
  endpoint_ = control_->rep.get(zmq::sockopt::last_endpoint);
  if (cfg_.metrics.enabled) {
    metrics_ = std::make_unique<MetricsServer>(cfg_.metrics.listen);
    log::info("glintd: metrics at {}", metrics_->url());
  }
  heartbeat_ns_.store(clock::now().time_since_epoch().count());
  log::info("glintd {}: control socket {}", GLINT_VERSION, endpoint_);
  thread_ = std::jthread([this](std::stop_token st) { serve(st); });
}

Daemon::~Daemon() {
  request_shutdown(true);
  thread_.request_stop();
  if (thread_.joinable()) thread_.join();
}

void Daemon::request_shutdown(bool abort) {
  if (abort) abort_.store(true);
  shutdown_.store(true);
}

void Daemon::request_reload(config::Config cfg) {
  std::lock_guard lock(mu_);
  pending_reload_ = std::move(cfg);
}

bool Daemon::wait(std::chrono::milliseconds timeout) const {
  const auto until = clock::now() + timeout;
  while (!finished_.load()) {
    if (clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

clock::time_point Daemon::heartbeat() const { return clock::time_point(clock::duration(heartbeat_ns_.load())); }

std::string Daemon::status_line() const {
  std::lock_guard lock(mu_);
  return status_line_;
}

void Daemon::start_run(const config::Config& cfg) {
  const uint64_t index = next_run_index(cfg.output.directory, cfg.output.run_name);
  log::info("run {} starting: {} dark frames, endpoints {}", index,
            cfg.pedestal.keep_previous && last_pedestal_ ? 0u : cfg.pedestal.dark_frames,
            fmt::join(cfg.ingest.endpoints, " "));
  samples_.clear();
  run_ = std::make_unique<pipeline::Acquisition>(cfg, index, last_pedestal_);
}

void Daemon::end_finished_run() {
  if (!run_ || !run_->done()) return;
  last_run_ = run_->stats();
  if (auto p = run_->end_pedestal()) last_pedestal_ = std::move(p);
  last_run_failed_ = last_run_->state == RunState::error;
  ++runs_completed_;
  last_run_end_ = clock::now();
  run_.reset();  // releases the run's buffers and sockets
}

void Daemon::housekeeping() {
  const auto now = clock::now();
  heartbeat_ns_.store(now.time_since_epoch().count());
  {
    std::optional<config::Config> reload;
    {
      std::lock_guard lock(mu_);
      reload.swap(pending_reload_);
    }
    if (reload) {
      if (reload->control.endpoint != cfg_.control.endpoint)
        log::warn("reload: control.endpoint changes only on restart (keeping {})", endpoint_);
      if (reload->metrics.enabled != cfg_.metrics.enabled ||
          reload->metrics.listen != cfg_.metrics.listen)
        log::warn("reload: metrics changes only on restart (keeping {})",
                  metrics_ ? metrics_->url() : "none");
      log::set_level(log::parse_level(reload->logging.level));
      cfg_ = std::move(*reload);
      log::info("configuration reloaded from {}; it applies from the next run", cfg_.source);
    }
  }
  end_finished_run();
  if (shutdown_.load()) {
    if (run_) {
      if (abort_.load()) run_->abort();
      else if (run_->state() != RunState::finishing) run_->stop("shutdown");
    }
  } else if (!run_ && cfg_.run.auto_start) {
    // After a failed run, wait a little before the next attempt (no tight loop on a full disk).
    if (!last_run_failed_ || now - last_run_end_ >= std::chrono::seconds(2)) start_run(cfg_);
  }
  std::string line;
  if (run_) {
    const auto s = run_->stats();
    if (samples_.empty() || now - samples_.back().t >= std::chrono::seconds(1)) {
      samples_.push_back(Sample{now, s.frames_processed, s.bytes, s.clusters});
      while (samples_.size() > 6) samples_.pop_front();
    }
    line = fmt::format("run {} {}: {} frames, {} clusters, {} dropped, {} bad", s.run_index,
                       to_string(s.state), s.frames_processed, s.clusters, s.dropped, s.bad_total);
  } else if (last_run_) {
    line = fmt::format("{}; last run {} {}{}", last_run_failed_ ? "error" : "idle", last_run_->run_index,
                       last_run_failed_ ? "failed: " : "ended: ",
                       last_run_failed_ ? last_run_->error : last_run_->end_reason);
  } else {
    line = "idle";
  }
  if (metrics_) metrics_->publish(stats_json(), run_ ? run_->config().output.directory
                                                    : cfg_.output.directory);
  std::lock_guard lock(mu_);
  status_line_ = std::move(line);
}

void Daemon::serve(std::stop_token st) {
  auto& rep = control_->rep;
  while (!st.stop_requested()) {
    housekeeping();
    if (shutdown_.load() && !run_) break;
    zmq::message_t req;
    bool got = false;
    try {
      got = static_cast<bool>(rep.recv(req));
    } catch (const zmq::error_t& e) {
      log::error("control socket: {}", e.what());
      continue;
    }
    if (!got) continue;
    std::string reply;
    try {
      reply = handle_request(req.to_string());
    } catch (const std::exception& e) {
      reply = json{{"ok", false}, {"error", e.what()}}.dump();
    }
    try {
      rep.send(zmq::buffer(reply), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
      log::error("control socket: reply failed: {}", e.what());
    }
  }
  if (run_) {  // stopped from outside: never leave a file open
    run_->abort();
    run_->wait(std::chrono::seconds(30));
  }
  end_finished_run();
  log::info("glintd: service stopped after {} run(s)", runs_completed_);
  finished_.store(true);
}

json Daemon::status_json() const {
  json j;
  const auto uptime = std::chrono::duration<double>(clock::now() - started_).count();
  j["uptime_s"] = uptime;
  j["version"] = GLINT_VERSION;
  j["config"] = cfg_.source;
  j["control_endpoint"] = endpoint_;
  j["runs_completed"] = runs_completed_;
  j["shutting_down"] = shutdown_.load();
  if (run_) {
    const auto s = run_->stats();
    j["state"] = to_string(s.state);
    j["run_index"] = s.run_index;
    j["file"] = s.file;
    j["backend"] = s.backend;
    j["error"] = s.error;
    j["frames"] = s.frames_processed;
  } else {
    j["state"] = last_run_failed_ ? "error" : "idle";
    j["error"] = last_run_failed_ && last_run_ ? last_run_->error : "";
  }
  if (last_run_) {
    j["last_run"] = {{"run_index", last_run_->run_index}, {"file", last_run_->file},
                     {"end_reason", last_run_->end_reason}, {"frames", last_run_->rows_written},
                     {"clusters", last_run_->clusters}, {"error", last_run_->error}};
  }
  return j;
}

json Daemon::stats_json() const {
  const pipeline::RunStats s = run_ ? run_->stats() : last_run_.value_or(pipeline::RunStats{});
  json j = status_json();
  j["run"] = run_ ? "current" : (last_run_ ? "last" : "none");
  j["run_index"] = s.run_index;
  j["file"] = s.file;
  j["backend"] = s.backend;
  j["gpu_ids"] = s.backend.rfind("gpu", 0) == 0 ? json(cfg_.finder.gpu_ids) : json::array();
  j["end_reason"] = s.end_reason;
  j["elapsed_s"] = s.elapsed_s;
  j["frames"] = {{"received", s.frames_received}, {"processed", s.frames_processed},
                 {"dark", s.dark_frames},         {"data", s.data_frames},
                 {"incomplete", s.incomplete},    {"missing", s.missing},
                 {"dropped", s.dropped},          {"rows_written", s.rows_written}};
  json bad = json::object();
  for (std::size_t k = 0; k < pipeline::kBadInputKinds; ++k)
    bad[std::string(pipeline::to_string(static_cast<pipeline::BadInput>(k)))] = s.bad[k];
  j["malformed"] = bad;
  j["malformed_total"] = s.bad_total;
  j["late_parts"] = s.late_parts;
  j["clusters"] = s.clusters;
  j["messages"] = s.messages;
  j["bytes"] = s.bytes;
  j["end_messages"] = s.end_messages;
  // Over the samples kept (up to the last 5 s of the current run; 0 until there are two).
  double window = 0, fps = 0, bps = 0, cps = 0;
  if (run_ && samples_.size() >= 2) {
    const auto& a = samples_.front();
    const auto& b = samples_.back();
    const double dt = std::chrono::duration<double>(b.t - a.t).count();
    if (dt > 0) {
      window = dt;
      fps = static_cast<double>(b.frames - a.frames) / dt;
      bps = static_cast<double>(b.bytes - a.bytes) / dt;
      cps = static_cast<double>(b.clusters - a.clusters) / dt;
    }
  }
  j["rates"] = {{"window_s", window}, {"frames_per_s", fps}, {"bytes_per_s", bps}, {"clusters_per_s", cps}};
  j["queues"] = {{"pending_images", s.pending_images}, {"queued_images", s.queued_images},
                 {"staging_used", s.staging_used}, {"staging_total", s.staging_total}};
  j["reconstruction"] = {{"enabled", s.recon_enabled},
                         {"frames", s.recon_frames},
                         {"volumes_done", s.recon_volumes_done},
                         {"volumes_dropped", s.recon_volumes_dropped},
                         {"volumes_failed", s.recon_volumes_failed}};
  return j;
}

json Daemon::pedestal_json() const {
  std::optional<PedestalState> p;
  std::string source;
  if (run_) {
    p = run_->start_pedestal();
    source = fmt::format("run {} (start of data taking)", run_->stats().run_index);
  }
  if (!p && last_pedestal_) {
    p = last_pedestal_;
    source = last_run_ ? fmt::format("run {} (end)", last_run_->run_index) : "previous run";
  }
  if (!p) return json{{"available", false}};
  double mean_sum = 0, noise_sum = 0;
  std::size_t n_noise = 0;
  const auto means = p->means();
  const auto noises = p->noises();
  for (double m : means) mean_sum += m;
  for (double v : noises)
    if (std::isfinite(v)) {
      noise_sum += v;
      ++n_noise;
    }
  return json{{"available", true},
              {"source", source},
              {"rows", p->shape.rows},
              {"cols", p->shape.cols},
              {"window", p->window},
              {"frames", p->min_count()},
              {"mean_adu", means.empty() ? 0.0 : mean_sum / static_cast<double>(means.size())},
              {"noise_adu", n_noise ? noise_sum / static_cast<double>(n_noise) : 0.0}};
}

std::string Daemon::handle_request(const std::string& request) {
  json req = json::parse(request, nullptr, false);
  std::string cmd;
  if (req.is_discarded()) {
    cmd = request;  // a bare command name
    req = json::object();
  } else if (req.is_object() && req.contains("command") && req["command"].is_string()) {
    cmd = req["command"].get<std::string>();
  } else if (req.is_string()) {
    cmd = req.get<std::string>();
    req = json::object();
  } else {
    return json{{"ok", false}, {"error", "expected {\"command\": NAME, ...}"}}.dump();
  }
  auto ok = [](json j) {
    j["ok"] = true;
    return j.dump();
  };
  auto err = [](const std::string& what) { return json{{"ok", false}, {"error", what}}.dump(); };

  // A run that failed is in the error state a moment before its thread has closed the file.
  if (run_ && run_->state() == RunState::error) run_->wait(std::chrono::seconds(2));
  end_finished_run();
  if (cmd == "status") return ok(status_json());
  if (cmd == "stats") return ok(stats_json());
  if (cmd == "config") return ok(json{{"source", cfg_.source}, {"yaml", config::to_yaml(cfg_)}});
  if (cmd == "pedestal") return ok(pedestal_json());
  if (cmd == "start") {
    if (shutdown_.load()) return err("the daemon is shutting down");
    if (run_) return err(fmt::format("run {} is in progress ({})", run_->stats().run_index, to_string(run_->state())));
    config::Config c = cfg_;
    if (req.contains("overrides")) {
      if (!req["overrides"].is_object()) return err("overrides: expected an object of config sections");
      try {
        c = config::with_overrides(cfg_, req["overrides"].dump());
      } catch (const config::ConfigError& e) {
        return err(e.what());
      }
    }
    start_run(c);
    return ok(json{{"run_index", run_->stats().run_index}, {"file", run_->file().string()}});
  }
  if (cmd == "stop" || cmd == "abort") {
    if (!run_) return err("no run in progress");
    if (cmd == "stop") run_->stop("stop");
    else run_->abort();
    return ok(json{{"run_index", run_->stats().run_index}, {"file", run_->file().string()}});
  }
  if (cmd == "shutdown") {
    request_shutdown(req.value("abort", false));
    return ok(json{{"state", run_ ? "finishing" : "stopping"}});
  }
  return err(fmt::format("unknown command '{}' (allowed: status, stats, start, stop, abort, config, "
                         "pedestal, shutdown)", cmd));
}

}  // namespace glint::daemon
