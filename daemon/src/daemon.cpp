#include "glint/daemon/daemon.hpp"

#include <charconv>
#include <cmath>
#include <fmt/ranges.h>

#include <fmt/format.h>
#include <zmq.hpp>

#include "glint/daemon/control_request.hpp"
#include "glint/daemon/control_security.hpp"
#include "glint/daemon/metrics.hpp"
#include "glint/daemon/preflight.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/pedestal_source.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::daemon {

using nlohmann::json;
using pipeline::RunState;
using clock = std::chrono::steady_clock;

struct Daemon::Control {
  explicit Control(const config::ControlConfig& c) : security(c) {}
  zmq::context_t ctx{1};
  ControlSecurity security;  // its ZAP handler's socket closes before the context
  zmq::socket_t rep{ctx, zmq::socket_type::rep};
};

namespace {

/// A command name as it may appear in a reply: printable ASCII, at most 40 characters.
std::string printable_command(const std::string& cmd) {
  std::string out;
  for (char ch : cmd.substr(0, 40)) out += (ch >= 0x20 && ch < 0x7f) ? ch : '?';
  return cmd.size() > 40 ? out + "..." : out;
}

}  // namespace

std::size_t control_max_message_bytes(const config::ControlConfig& c) {
  return std::max<std::size_t>(std::size_t{c.max_request_bytes} * 16, 1 << 20);
}

uint64_t next_run_index(const std::filesystem::path& dir, const std::string& run_name) {
  uint64_t best = 0;
  // Names past kMaxRunIndex are not counted: one such file (run_9999999999999999999.h5) would
  // otherwise make every later run pick the same unusable index.
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
    uint64_t index = 0;
    const auto [end, parse] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (parse != std::errc() || end != digits.data() + digits.size() || index > kMaxRunIndex)
      continue;
    if (pipeline::run_file_path({}, run_name, index).filename() != name) continue;
    best = std::max(best, index);
  }
  // A name taken since the scan (another glintd writing here) is stepped over, a bounded number
  // of times; the run's own O_EXCL create is the final word.
  uint64_t index = best + 1;
  for (int k = 0; k < 1000 && std::filesystem::exists(
                                  pipeline::run_file_path(dir, run_name, index), ec);
       ++k)
    ++index;
  return index;
}

Daemon::Daemon(config::Config cfg, pipeline::FinderFactory make_finder,
               pipeline::RunTuning tuning)
    : cfg_(std::move(cfg)),
      make_finder_(std::move(make_finder)),
      tuning_(std::move(tuning)),
      started_(clock::now()),
      control_(std::make_unique<Control>(cfg_.control)) {
  control_->rep.set(zmq::sockopt::linger, 0);
  control_->rep.set(zmq::sockopt::rcvtimeo, 100);
  // Requests up to this size get an answer (an error past control.max_request_bytes); ZeroMQ
  // drops a connection that sends a larger one before allocating it.
  control_->rep.set(zmq::sockopt::maxmsgsize,
                    static_cast<int64_t>(control_max_message_bytes(cfg_.control)));
  control_->security.apply(control_->ctx, control_->rep);
  try {
    control_->rep.bind(cfg_.control.endpoint);
  } catch (const zmq::error_t& e) {
    throw std::runtime_error(fmt::format("{}: control.endpoint {}: cannot bind: {}", cfg_.source,
                                         cfg_.control.endpoint, e.what()));
  }
  endpoint_ = control_->rep.get(zmq::sockopt::last_endpoint);
  if (cfg_.preview.enabled) {
    try {
      preview_ = std::make_shared<pipeline::PreviewPublisher>(cfg_.preview.endpoint,
                                                              cfg_.preview.hwm);
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}: {}", cfg_.source, e.what()));
    }
    log::info("glintd: live view at {} (glint view {})", preview_->endpoint(),
              preview_->endpoint());
  }
  if (cfg_.metrics.enabled) {
    metrics_ = std::make_unique<MetricsServer>(cfg_.metrics.listen);
    log::info("glintd: metrics at {}", metrics_->url());
  }
  heartbeat_ns_.store(clock::now().time_since_epoch().count());
  log::info("glintd {}: control socket {}{}", GLINT_VERSION, endpoint_,
            control_->security.enabled()
                ? fmt::format(" (CURVE, {} client key(s))", control_->security.n_clients())
                : std::string());
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
  std::unique_lock lock(mu_);
  return finished_cv_.wait_for(lock, timeout, [&] { return finished_.load(); });
}

std::optional<std::string> Daemon::fatal_error() const {
  std::lock_guard lock(mu_);
  return fatal_error_;
}

clock::time_point Daemon::heartbeat() const { return clock::time_point(clock::duration(heartbeat_ns_.load())); }

std::string Daemon::status_line() const {
  std::lock_guard lock(mu_);
  return status_line_;
}

namespace {

/// Whether an ingest made for `a` serves a run of `b` (same detector and ingest settings).
bool same_ingest(const config::Config& a, const config::Config& b) {
  config::Config x, y;
  x.detector = a.detector;
  x.ingest = a.ingest;
  y.detector = b.detector;
  y.ingest = b.ingest;
  return config::to_yaml(x) == config::to_yaml(y);
}

}  // namespace

std::optional<std::string> Daemon::start_problem(const config::Config& cfg,
                                                 std::vector<std::string>& warnings) const {
  Preflight p = preflight(cfg, /*mask_is_fatal=*/false);
  for (const auto& w : p.warnings)
    warnings.push_back(std::string(w.what()) + "; the run goes on without its reconstruction");
  if (!p.ok()) return std::string(p.problems.front().what());
  if (cfg.pedestal.dark_frames == 0) {
    // No dark frames: the pedestal must come from elsewhere (pedestal.source), now.
    std::optional<PedestalState> from;
    try {
      from = pipeline::initial_pedestal(
          cfg, next_run_index(cfg.output.directory, cfg.output.run_name), last_pedestal_);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    if (!from)
      return config::ConfigError(
                 cfg.source, "pedestal.dark_frames", cfg.line("pedestal.dark_frames"),
                 fmt::format("0 dark frames with keep_previous, but there is no previous pedestal "
                             "of {} x {} pixels and window {} to keep (allowed for this run: at "
                             "least {} dark frames, e.g. start --overrides "
                             "'{{\"pedestal\": {{\"dark_frames\": {}}}}}')",
                             cfg.detector.rows, cfg.detector.cols, cfg.pedestal.window,
                             cfg.pedestal.window, cfg.pedestal.window))
          .what();
  }
  return std::nullopt;
}

void Daemon::start_failed(const std::string& why) {
  log::error("run not started: {}", why);
  pipeline::RunStats s;
  s.state = RunState::error;
  s.error = why;
  last_run_ = std::move(s);
  last_run_failed_ = true;
  last_run_file_written_ = false;
  auto_start_waiting_ = why;
  // No run takes what arrives now, unless an automatic one will.
  if (ingest_) ingest_->set_hold(cfg_.run.auto_start && !shutdown_.load());
  back_off();
}

std::optional<std::string> Daemon::start_run(const config::Config& cfg,
                                             std::vector<std::string>& warnings) {
  if (auto why = start_problem(cfg, warnings)) {
    start_failed(*why);
    return why;
  }
  for (const auto& w : warnings) log::warn("{}", w);
  if (ingest_ && !same_ingest(ingest_->config(), cfg)) {
    log::info("ingest: the detector or ingest configuration changed; subscribing afresh");
    ingest_.reset();
  }
  if (!ingest_) ingest_ = std::make_shared<pipeline::Ingest>(cfg);
  ingest_->set_hold(true);  // the run is starting: what arrives before it attaches is its own
  const uint64_t index = next_run_index(cfg.output.directory, cfg.output.run_name);
  log::info("run {} starting: {} dark frames, endpoints {}", index,
            cfg.pedestal.keep_previous && last_pedestal_ ? 0u : cfg.pedestal.dark_frames,
            fmt::join(cfg.ingest.endpoints, " "));
  samples_.clear();
  try {
    run_ = std::make_unique<pipeline::Acquisition>(cfg, index, last_pedestal_, make_finder_,
                                                   tuning_, ingest_, preview_);
  } catch (const std::bad_alloc&) {
    const std::string why = fmt::format(
        "out of memory setting up run {} ({} x {} images; the run needs about {}): lower "
        "detector.rows/cols, ingest.queue_frames, ingest.reorder_frames or finder.batch_frames, "
        "or free memory",
        index, cfg.detector.rows, cfg.detector.cols, config::run_memory(cfg).describe());
    start_failed(why);
    return why;
  } catch (const std::exception& e) {
    const std::string why = fmt::format("run {} could not be set up: {}", index, e.what());
    start_failed(why);
    return why;
  }
  // The reply (and the next automatic decision) reflects the run as it is once its file and
  // inputs are open: a run that fails at once is reported now, not at the next status.
  run_->wait_started(kStartWait);
  if (run_->state() == RunState::error) {
    run_->wait(std::chrono::seconds(5));  // its thread closes what it opened
    const std::string why = run_->stats().error;
    end_finished_run();
    return why.empty() ? std::string("the run failed at its start") : why;
  }
  return std::nullopt;
}

void Daemon::end_finished_run() {
  if (!run_ || !run_->done()) return;
  last_run_ = run_->stats();
  {
    std::error_code ec;
    last_run_file_written_ = std::filesystem::exists(run_->file(), ec);
  }
  if (auto p = run_->end_pedestal()) last_pedestal_ = std::move(p);
  last_run_failed_ = last_run_->state == RunState::error;
  ++runs_completed_;
  last_run_end_ = clock::now();
  const bool disk_low = last_run_->end_reason == "disk_low";
  resume_free_bytes_ = disk_low ? 2 * last_run_->disk_reserve_bytes : 0;
  auto_start_waiting_ = last_run_failed_ ? last_run_->error : disk_low ? "disk_low" : "";
  if (last_run_failed_ || disk_low) {
    back_off();
  } else {
    failed_runs_in_a_row_ = 0;
    retry_delay_ = {};
    next_auto_start_ = {};
  }
  run_.reset();  // releases the run's buffers (the ingest stays subscribed)
  // Between runs: what arrives is held for the next automatic run, or counted.
  if (ingest_) ingest_->set_hold(cfg_.run.auto_start && !shutdown_.load());
  if (last_run_->fatal && !fatal_at_) {
    // The device is unusable for the rest of this process: no retry here, a fresh process.
    fatal_at_ = last_run_end_;
    log::critical("run {} failed fatally: {}; the run file {} is closed; glintd stops so that "
                  "it can be restarted",
                  last_run_->run_index, last_run_->error, last_run_->file);
    std::lock_guard lock(mu_);
    fatal_error_ = last_run_->error;
  }
}

void Daemon::back_off() {
  ++failed_runs_in_a_row_;
  retry_delay_ = retry_delay_ == clock::duration{}
                     ? clock::duration(kFirstRetry)
                     : std::min<clock::duration>(retry_delay_ * 2, kLongestRetry);
  next_auto_start_ = clock::now() + retry_delay_;
  if (cfg_.run.auto_start)
    log::warn("next automatic run in {} s ({})",
              std::chrono::duration_cast<std::chrono::seconds>(retry_delay_).count(),
              auto_start_waiting_);
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
      if (reload->preview.enabled != cfg_.preview.enabled ||
          reload->preview.endpoint != cfg_.preview.endpoint ||
          reload->preview.hwm != cfg_.preview.hwm)
        log::warn("reload: preview.enabled, endpoint and hwm change only on restart (keeping "
                  "{}); rate_hz and images apply from the next run",
                  preview_ ? preview_->endpoint() : "none");
      log::set_level(log::parse_level(reload->logging.level));
      cfg_ = std::move(*reload);
      if (ingest_ && !run_) ingest_->set_hold(cfg_.run.auto_start);
      log::info("configuration reloaded from {}; it applies from the next run", cfg_.source);
    }
  }
  end_finished_run();
  if (shutdown_.load()) {
    if (run_) {
      if (abort_.load()) run_->abort();
      else if (run_->state() != RunState::finishing) run_->stop("shutdown");
    }
  } else if (!run_ && cfg_.run.auto_start && !fatal_at_) {
    if (now >= next_auto_start_) {
      uint64_t free = resume_free_bytes_;
      try {
        if (resume_free_bytes_ > 0)
          free = pipeline::StorageGuard::free_bytes(cfg_.output.directory);
      } catch (const std::exception&) {
      }  // the run's own start reports what is wrong with the directory
      if (free < resume_free_bytes_) {
        auto_start_waiting_ = fmt::format(
            "disk low: {:.1f} MiB free in {}; automatic runs resume at {:.1f} MiB (twice the "
            "reserve the last run ended at)",
            free / 1048576.0, cfg_.output.directory.string(), resume_free_bytes_ / 1048576.0);
        back_off();
      } else {
        std::vector<std::string> warnings;
        start_run(cfg_, warnings);
      }
    }
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
    if (last_run_->run_index == 0)  // it could not be set up
      line = fmt::format("error; run not started: {}", log::one_line(last_run_->error));
    else
      line = fmt::format("{}; last run {} {}{}", last_run_failed_ ? "error" : "idle",
                         last_run_->run_index, last_run_failed_ ? "failed: " : "ended: ",
                         log::one_line(last_run_failed_ ? last_run_->error
                                                        : last_run_->end_reason));
    if (cfg_.run.auto_start && !shutdown_.load() && now < next_auto_start_)
      line += fmt::format("; retrying in {} s",
                          std::chrono::ceil<std::chrono::seconds>(next_auto_start_ - now).count());
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
    if (fatal_at_ && clock::now() - *fatal_at_ >= kFatalLinger) break;
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
      std::string client;
      if (control_->security.enabled()) {
        const char* id = zmq_msg_gets(req.handle(), "User-Id");
        client = id ? id : "";
      }
      reply = handle_request(req.to_string(), client);
    } catch (const std::exception& e) {
      reply = json{{"ok", false}, {"error", log::one_line(e.what())}}.dump();
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
  {
    std::lock_guard lock(mu_);
    finished_.store(true);
  }
  finished_cv_.notify_all();
}

json Daemon::status_json() const {
  json j;
  const auto uptime = std::chrono::duration<double>(clock::now() - started_).count();
  j["uptime_s"] = uptime;
  j["version"] = GLINT_VERSION;
  j["config"] = cfg_.source;
  j["control_endpoint"] = endpoint_;
  if (preview_) {
    const auto p = preview_->stats();
    j["preview"] = {{"endpoint", preview_->endpoint()},
                    {"updates_sent", p.updates_sent},
                    {"updates_dropped", p.updates_replaced + p.updates_refused}};
  }
  j["runs_completed"] = runs_completed_;
  j["shutting_down"] = shutdown_.load();
  if (run_) {
    const auto s = run_->stats();
    j["state"] = to_string(s.state);
    j["run_index"] = s.run_index;
    j["file"] = s.file;
    j["backend"] = s.backend;
    j["error"] = log::one_line(s.error);
    j["frames"] = s.frames_processed;
  } else {
    j["state"] = last_run_failed_ ? "error" : "idle";
    j["error"] = last_run_failed_ && last_run_ ? log::one_line(last_run_->error) : "";
    // Waiting before the next automatic run after failed ones.
    const auto now = clock::now();
    if (cfg_.run.auto_start && !shutdown_.load() && now < next_auto_start_)
      j["retry_in_s"] = std::chrono::duration<double>(next_auto_start_ - now).count();
    if (cfg_.run.auto_start && !auto_start_waiting_.empty())
      j["auto_start_waiting"] = log::one_line(auto_start_waiting_);
  }
  j["fatal"] = fatal_at_.has_value() || (run_ && run_->stats().fatal);
  j["failed_runs_in_a_row"] = failed_runs_in_a_row_;
  if (last_run_) {
    // file_written: false when the run failed before creating its file (or it is gone).
    j["last_run"] = {{"run_index", last_run_->run_index}, {"file", last_run_->file},
                     {"file_written", last_run_file_written_},
                     {"end_reason", last_run_->end_reason}, {"frames", last_run_->rows_written},
                     {"clusters", last_run_->clusters},
                     {"masked_clusters", last_run_->masked_clusters},
                     {"error", log::one_line(last_run_->error)}};
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
  j["storage"] = {{"free_bytes", s.disk_free_bytes}, {"reserve_bytes", s.disk_reserve_bytes}};
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
  j["stream_stride"] = s.stream_stride;
  j["restarts"] = s.restarts;
  j["missing_unwritten"] = s.missing_unwritten;
  // Since the ingest was subscribed (it outlives runs): parts that reached no run.
  const pipeline::IngestCounters ic = ingest_ ? ingest_->counters() : pipeline::IngestCounters{};
  j["ingest"] = {{"frames_outside_run", ic.frames_outside_run},
                 {"held_parts", ic.held_parts},
                 {"restarts", ic.restarts}};
  j["clusters"] = s.clusters;
  j["masked_clusters"] = s.masked_clusters;
  j["masked_pixels"] = s.masked_pixels;
  if (!s.module_clusters.empty()) {
    // A detector of modules: clusters per module, by module id.
    nlohmann::json modules = nlohmann::json::array();
    for (std::size_t k = 0; k < s.module_clusters.size(); ++k)
      modules.push_back({{"id", cfg_.detector.first_module + k},
                         {"clusters", s.module_clusters[k]}});
    j["modules"] = modules;
  }
  j["messages"] = s.messages;
  j["bytes"] = s.bytes;
  j["end_messages"] = s.end_messages;
  j["stray_ends"] = s.stray_ends;
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
  json consumers = json::array();
  for (const auto& c : s.consumers)
    consumers.push_back(
        {{"name", c.name}, {"frames", c.frames}, {"dropped", c.dropped}, {"failed", c.failed}});
  j["consumers"] = consumers;
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
  return handle_request(request, {});
}

std::string Daemon::handle_request(const std::string& request, const std::string& client_key) {
  ControlRequest parsed = parse_control_request(request, cfg_.control.max_request_bytes);
  if (!parsed.ok()) return json{{"ok", false}, {"error", parsed.error}}.dump();
  const std::string cmd = std::move(parsed.command);
  json req = std::move(parsed.body);
  if (!control_->security.allows(client_key, cmd))
    return json{
        {"ok", false},
        {"error", fmt::format("'{}' is not allowed for this client key (control.curve_admins)",
                              printable_command(cmd))}}
        .dump();
  auto ok = [](json j) {
    j["ok"] = true;
    return j.dump();
  };
  auto err = [](const std::string& what) {
    return json{{"ok", false}, {"error", log::one_line(what)}}.dump();
  };

  // A run that failed is in the error state a moment before its thread has closed the file.
  if (run_ && run_->state() == RunState::error) run_->wait(std::chrono::seconds(2));
  end_finished_run();
  if (cmd == "status") return ok(status_json());
  if (cmd == "stats") return ok(stats_json());
  if (cmd == "config") return ok(json{{"source", cfg_.source}, {"yaml", config::to_yaml(cfg_)}});
  if (cmd == "pedestal") return ok(pedestal_json());
  if (cmd == "start") {
    if (fatal_at_) return err("the daemon is stopping after a fatal error: " + last_run_->error);
    if (shutdown_.load()) return err("the daemon is shutting down");
    if (run_) return err(fmt::format("run {} is in progress ({})", run_->stats().run_index, to_string(run_->state())));
    config::Config c = cfg_;
    if (req.contains("overrides")) {
      if (!req["overrides"].is_object()) return err("overrides: expected an object of config sections");
      try {
        // The depth is bounded (parse_control_request), so this dump cannot recurse deeply.
        c = config::with_overrides(cfg_, req["overrides"].dump());
      } catch (const config::ConfigError& e) {
        return err(e.what());
      }
    }
    try {
      config::check_memory_budget(c);  // overrides are checked in with_overrides; this is cfg_
    } catch (const config::ConfigError& e) {
      return err(e.what());
    }
    std::vector<std::string> warnings;
    if (auto why = start_run(c, warnings)) return err(*why);
    const auto st = run_->stats();
    json reply{{"run_index", st.run_index}, {"file", st.file}, {"state", to_string(st.state)},
               {"backend", st.backend}};
    if (!warnings.empty()) {
      json w = json::array();
      for (const auto& x : warnings) w.push_back(log::one_line(x));
      reply["warnings"] = w;
    }
    return ok(reply);
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
  return err(
      fmt::format("unknown command '{}' (allowed: status, stats, start, stop, abort, config, "
                  "pedestal, shutdown)",
                  printable_command(cmd)));
}

}  // namespace glint::daemon
