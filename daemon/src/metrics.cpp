#include "glint/daemon/metrics.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <microhttpd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>

#include "glint/config/config.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/acquisition.hpp"
#include "glint/pipeline/sls_stream.hpp"

namespace glint::daemon {

using nlohmann::json;

namespace {

/// One sample of a family: its labels already formatted (label()) or empty, and its value.
struct Sample {
  std::string labels;
  double value;
};

/// Writes metric families: HELP and TYPE once per name, then its samples.
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help,
              const std::vector<Sample>& samples) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const Sample& sample : samples) {
      out_ += name;
      if (!sample.labels.empty()) out_ += "{" + sample.labels + "}";
      out_ += ' ';
      // Counts stay integers in the text; Prometheus reads both forms as float64.
      const double v = sample.value;
      if (v == static_cast<double>(static_cast<int64_t>(v)) && v > -1e15 && v < 1e15)
        out_ += fmt::format("{}", static_cast<int64_t>(v));
      else
        out_ += fmt::format("{}", v);
      out_ += '\n';
    }
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

/// A label value escaped as the exposition format requires (\\, \" and \n).
std::string escape(std::string_view v) {
  std::string s;
  s.reserve(v.size());
  for (char c : v) {
    if (c == '\\') s += "\\\\";
    else if (c == '"') s += "\\\"";
    else if (c == '\n') s += "\\n";
    else s += c;
  }
  return s;
}

std::string label(std::string_view name, std::string_view value) {
  return fmt::format("{}=\"{}\"", name, escape(value));
}

/// The number at `pointer` in the stats, 0 when absent or not a number.
double num(const json& j, const char* pointer) {
  const json::json_pointer p(pointer);
  if (!j.contains(p)) return 0;
  const json& v = j.at(p);
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  return v.is_number() ? v.get<double>() : 0;
}

std::string str(const json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

/// A family of one sample, its value at `pointer` in the stats.
struct Scalar {
  std::string_view name, type, help;
  const char* pointer;
};

void scalars(Exposition& e, const json& s, std::initializer_list<Scalar> list) {
  for (const Scalar& m : list) e.family(m.name, m.type, m.help, {{"", num(s, m.pointer)}});
}

/// Samples labelled key="v" for each v of `values`, each the number at prefix + v in the stats.
std::vector<Sample> by_label(const json& s, std::string_view key,
                             const std::vector<std::string>& values, const std::string& prefix) {
  std::vector<Sample> out;
  for (const std::string& v : values) out.push_back({label(key, v), num(s, (prefix + v).c_str())});
  return out;
}

}  // namespace

std::string metrics_text(const json& s, const std::optional<std::filesystem::space_info>& space) {
  Exposition e;
  e.family("glint_build_info", "gauge", "glintd's version (the value is always 1).",
           {{label("version", str(s, "version")), 1}});
  scalars(e, s,
          {{"glint_uptime_seconds", "gauge", "Seconds since glintd started.", "/uptime_s"},
           {"glint_runs_completed_total", "counter", "Runs ended since glintd started.",
            "/runs_completed"},
           {"glint_shutting_down", "gauge", "1 while glintd is shutting down.",
            "/shutting_down"}});

  const std::string state = str(s, "state");
  std::vector<Sample> states;
  for (pipeline::RunState st : {pipeline::RunState::idle, pipeline::RunState::pedestal,
                                pipeline::RunState::acquiring, pipeline::RunState::finishing,
                                pipeline::RunState::error})
    states.push_back({label("state", pipeline::to_string(st)),
                      state == pipeline::to_string(st) ? 1.0 : 0.0});
  e.family("glint_run_state", "gauge",
           "1 for the state glintd is in (the current run's, else idle or error), 0 for the "
           "others.",
           states);
  scalars(e, s,
          {{"glint_run_index", "gauge",
            "Index of the run the run counters describe (the current one, else the last; 0: "
            "none).",
            "/run_index"},
           {"glint_run_elapsed_seconds", "gauge", "Seconds the run has taken so far.",
            "/elapsed_s"}});
  std::string gpus;
  if (s.contains("gpu_ids") && s["gpu_ids"].is_array())
    for (const json& id : s["gpu_ids"]) {
      if (!gpus.empty()) gpus += ',';
      gpus += id.is_number_integer() ? std::to_string(id.get<int64_t>()) : std::string("?");
    }
  e.family("glint_backend_info", "gauge",
           "The run's cluster-finder backend and the GPUs it uses (the value is always 1).",
           {{label("backend", str(s, "backend")) + "," + label("gpu_ids", gpus), 1}});

  e.family("glint_frames_total", "counter",
           "Frames of the run by outcome: dark and data frames processed, incomplete images "
           "(a port part missing), frame numbers missing from the stream, frames dropped for "
           "want of a buffer.",
           by_label(s, "outcome", {"dark", "data", "incomplete", "missing", "dropped"},
                    "/frames/"));
  scalars(
      e, s,
      {{"glint_frames_received_total", "counter", "Images assembled from port parts in the run.",
        "/frames/received"},
       {"glint_frames_processed_total", "counter",
        "Rows written for received images (dark, data and incomplete) in the run.",
        "/frames/processed"},
       {"glint_frame_rows_written_total", "counter",
        "Rows in the run file's frame table (dropped and missing frames included).",
        "/frames/rows_written"},
       {"glint_clusters_total", "counter", "Clusters found in the run.", "/clusters"},
       {"glint_messages_total", "counter", "Stream messages received in the run.", "/messages"},
       {"glint_received_bytes_total", "counter", "Bytes of stream messages received in the run.",
        "/bytes"},
       {"glint_end_messages_total", "counter", "End-of-acquisition messages received in the run.",
        "/end_messages"},
       {"glint_late_parts_total", "counter",
        "Port parts of images already emitted or dropped, or repeated, discarded in the run.",
        "/late_parts"}});
  scalars(
      e, s,
      {{"glint_masked_clusters_total", "counter",
        "Clusters centred on a masked pixel, removed in the run.", "/masked_clusters"},
       {"glint_masked_pixels", "gauge", "Pixels the run's mask excludes.", "/masked_pixels"},
       {"glint_stray_end_messages_total", "counter",
        "End headers from an endpoint that had sent no data, not taken as the end (slsReceiver's "
        "dummy header), in the run.",
        "/stray_ends"},
       {"glint_detector_restarts_total", "counter",
        "Detector restarts (frameIndex starting again) seen in the run.", "/restarts"},
       {"glint_missing_rows_unwritten_total", "counter",
        "Missing frame numbers beyond run.max_missing_rows, counted and not written.",
        "/missing_unwritten"},
       {"glint_stream_stride", "gauge",
        "Frame-number step of the stream (N for a decimated one, 1 otherwise).",
        "/stream_stride"},
       {"glint_frames_outside_run_total", "counter",
        "Images that arrived while no run took them (not held for the next run), since "
        "glintd started.",
        "/ingest/frames_outside_run"},
       {"glint_held_parts", "gauge", "Port parts held for the next automatic run.",
        "/ingest/held_parts"}});
  std::vector<Sample> consumer_frames, consumer_dropped, consumer_failed;
  if (s.contains("consumers") && s["consumers"].is_array())
    for (const json& c : s["consumers"]) {
      const std::string l = label("consumer", str(c, "name"));
      consumer_frames.push_back({l, num(c, "/frames")});
      consumer_dropped.push_back({l, num(c, "/dropped")});
      consumer_failed.push_back({l, num(c, "/failed")});
    }
  e.family("glint_consumer_frames_total", "counter",
           "Rows handed to each consumer of the run's results (run file, products, live view, "
           "...).",
           consumer_frames);
  e.family("glint_consumer_dropped_total", "counter",
           "What each consumer dropped for lack of room, in its own unit (frames, volumes, "
           "updates).",
           consumer_dropped);
  e.family("glint_consumer_failed_total", "counter",
           "What each consumer failed to produce (logged).", consumer_failed);
  // A detector of modules: each module's clusters (absent for one module).
  std::vector<Sample> module_clusters;
  if (s.contains("modules") && s["modules"].is_array())
    for (const json& m : s["modules"])
      module_clusters.push_back({label("module", std::to_string(m.value("id", 0))),
                                 num(m, "/clusters")});
  if (!module_clusters.empty())
    e.family("glint_module_clusters_total", "counter",
             "Clusters found in each module of the run's detector (module id).", module_clusters);
  std::vector<std::string> reasons;
  for (std::size_t k = 0; k < pipeline::kBadInputKinds; ++k)
    reasons.emplace_back(pipeline::to_string(static_cast<pipeline::BadInput>(k)));
  e.family("glint_malformed_messages_total", "counter",
           "Stream messages rejected in the run, by reason.",
           by_label(s, "reason", reasons, "/malformed/"));

  scalars(e, s,
          {{"glint_rate_window_seconds", "gauge",
            "Span of the samples the rates are taken over (up to 5 s; 0 until there are two).",
            "/rates/window_s"},
           {"glint_frames_per_second", "gauge", "Frames processed per second, recently.",
            "/rates/frames_per_s"},
           {"glint_received_bytes_per_second", "gauge", "Bytes received per second, recently.",
            "/rates/bytes_per_s"},
           {"glint_clusters_per_second", "gauge", "Clusters found per second, recently.",
            "/rates/clusters_per_s"}});

  e.family("glint_queue_images", "gauge",
           "Images in the run's queues: pending (waiting for port parts), queued (assembled, "
           "waiting for the finder).",
           {{label("queue", "pending"), num(s, "/queues/pending_images")},
            {label("queue", "queued"), num(s, "/queues/queued_images")}});
  scalars(e, s,
          {{"glint_staging_frames", "gauge", "Frames in the finder's input staging.",
            "/queues/staging_used"},
           {"glint_staging_capacity_frames", "gauge", "Frames the finder's input staging holds.",
            "/queues/staging_total"},
           {"glint_reconstruction_enabled", "gauge", "1 when the run reconstructs volumes.",
            "/reconstruction/enabled"},
           {"glint_reconstruction_frames_total", "counter",
            "Data frames accumulated into reconstruction hit images in the run.",
            "/reconstruction/frames"}});
  e.family("glint_reconstruction_volumes_total", "counter",
           "Volumes of the run by outcome: done (reconstructed), dropped (the worker was "
           "busy), failed.",
           by_label(s, "outcome", {"done", "dropped", "failed"}, "/reconstruction/volumes_"));

  if (space) {
    e.family("glint_output_available_bytes", "gauge",
             "Bytes available to glintd on the output directory's filesystem.",
             {{"", static_cast<double>(space->available)}});
    e.family("glint_output_free_bytes", "gauge",
             "Free bytes on the output directory's filesystem.",
             {{"", static_cast<double>(space->free)}});
    e.family("glint_output_size_bytes", "gauge", "Size of the output directory's filesystem.",
             {{"", static_cast<double>(space->capacity)}});
  }
  return e.take();
}

struct MetricsServer::Http {
  MHD_Daemon* daemon = nullptr;
  ~Http() {
    if (daemon != nullptr) MHD_stop_daemon(daemon);
  }
};

namespace {

MHD_Result reply(MHD_Connection* c, unsigned status, const std::string& body, const char* type) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (r == nullptr) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  const MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result answer(void* cls, MHD_Connection* c, const char* url, const char* method,
                  const char* /*version*/, const char* /*upload_data*/,
                  size_t* upload_size, void** /*state*/) {
  const auto* self = static_cast<const MetricsServer*>(cls);
  constexpr const char* kText = "text/plain; charset=utf-8";
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    *upload_size = 0;  // a body is not read
    return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET /metrics\n", kText);
  }
  if (std::strcmp(url, "/metrics") != 0)
    return reply(c, MHD_HTTP_NOT_FOUND, "only GET /metrics\n", kText);
  return reply(c, MHD_HTTP_OK, self->render(), "text/plain; version=0.0.4; charset=utf-8");
}

/// libmicrohttpd's own messages, through glint's log.
void log_http(void* /*cls*/, const char* fmt, va_list ap) {
  char line[512];
  std::vsnprintf(line, sizeof line, fmt, ap);
  std::string_view s(line);
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  log::warn("metrics: {}", s);
}

}  // namespace

MetricsServer::MetricsServer(const std::string& listen) : http_(std::make_unique<Http>()) {
  const auto [host, port] = config::split_listen(listen);
  const bool v6 = host.find(':') != std::string::npos;
  sockaddr_in a4{};
  sockaddr_in6 a6{};
  const sockaddr* addr = nullptr;
  if (v6) {
    a6.sin6_family = AF_INET6;
    a6.sin6_port = htons(port);
    inet_pton(AF_INET6, host.c_str(), &a6.sin6_addr);
    addr = reinterpret_cast<const sockaddr*>(&a6);
  } else {
    a4.sin_family = AF_INET;
    a4.sin_port = htons(port);
    inet_pton(AF_INET, host.c_str(), &a4.sin_addr);
    addr = reinterpret_cast<const sockaddr*>(&a4);
  }
  const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
                         (v6 ? static_cast<unsigned>(MHD_USE_IPv6) : 0u);
  http_->daemon = MHD_start_daemon(flags, port, nullptr, nullptr, &answer, this,
                                   // first, so that every message of libmicrohttpd goes there
                                   MHD_OPTION_EXTERNAL_LOGGER, &log_http, nullptr,
                                   MHD_OPTION_SOCK_ADDR, addr,
                                   MHD_OPTION_CONNECTION_LIMIT, 16u,
                                   MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                   MHD_OPTION_CONNECTION_MEMORY_LIMIT, size_t{64 * 1024},
                                   MHD_OPTION_END);
  if (http_->daemon == nullptr)
    throw std::runtime_error(
        fmt::format("metrics.listen {}: cannot listen (port in use?)", listen));
  url_ = fmt::format("http://{}:{}/metrics", v6 ? "[" + host + "]" : host, port);
}

MetricsServer::~MetricsServer() = default;

void MetricsServer::publish(json stats, std::filesystem::path output_directory) {
  std::lock_guard lock(mu_);
  stats_ = std::move(stats);
  output_directory_ = std::move(output_directory);
}

std::string MetricsServer::render() const {
  json stats;
  std::filesystem::path dir;
  {
    std::lock_guard lock(mu_);
    stats = stats_;
    dir = output_directory_;
  }
  std::error_code ec;
  std::optional<std::filesystem::space_info> space;
  if (!dir.empty()) {
    const auto si = std::filesystem::space(dir, ec);
    if (!ec) space = si;
  }
  return metrics_text(stats, space);
}

}  // namespace glint::daemon
