#include "glint/config/config.hpp"

#include <array>
#include <cmath>
#include <optional>
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "glint/modular_finder.hpp"
#include "glint/tv/forward_spec.hpp"
#include "glint/tv/reconstructor.hpp"

namespace glint::config {

ConfigError::ConfigError(std::string source, std::string key, int line, const std::string& what)
    : std::runtime_error(line > 0 ? fmt::format("{}:{}: {}: {}", source, line, key, what)
                                  : fmt::format("{}: {}: {}", source, key, what)),
      source_(std::move(source)),
      key_(std::move(key)),
      line_(line) {}

namespace {

std::optional<std::string> memory_budget_problem(const Config& c);
std::string printable(std::string_view text, std::size_t max = 120);

/// What is wrong with a ZeroMQ endpoint's address, if anything: tcp://HOST:PORT with a host and
/// a port 1..65535 (`*` only where glintd binds), ipc://PATH with a path. Whether the host
/// resolves depends on the moment: see the daemon's checks.
std::optional<std::string> endpoint_problem(const std::string& ep, bool bind) {
  const std::string allowed =
      bind ? "allowed: tcp://HOST:PORT with PORT 1..65535 or *, ipc://PATH"
           : "allowed: tcp://HOST:PORT with PORT 1..65535, ipc://PATH";
  if (ep.starts_with("ipc://") || ep.starts_with("inproc://")) {
    if (ep.size() == (ep.starts_with("ipc://") ? 6u : 9u))
      return fmt::format("'{}' has no path ({})", printable(ep), allowed);
    return std::nullopt;
  }
  std::string_view rest = std::string_view(ep).substr(6);
  if (const auto semi = rest.rfind(';'); semi != std::string_view::npos)
    rest = rest.substr(semi + 1);
  const auto colon = rest.rfind(':');
  if (colon == std::string_view::npos || colon == 0)
    return fmt::format("'{}' has no HOST:PORT ({})", printable(ep), allowed);
  const std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host == "[]" || (host == "*" && !bind))
    return fmt::format("'{}' has no host to connect to ({})", printable(ep), allowed);
  if (bind && port == "*") return std::nullopt;
  unsigned long p = 0;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos ||
      (p = std::stoul(std::string(port))) < 1 || p > 65535)
    return fmt::format("'{}': port '{}' is out of range ({})", printable(ep), printable(port),
                       allowed);
  return std::nullopt;
}

bool is_run_name_char(char ch) {
  return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
         ch == '.' || ch == '_' || ch == '-';
}

int line_of(const YAML::Node& n) {
  const auto m = n.Mark();
  return m.line >= 0 ? m.line + 1 : 0;
}

/// Walks one mapping, remembering which keys were read so that the rest can be rejected.
class Section {
 public:
  Section(const std::string& source, std::string path, const YAML::Node& node,
          std::map<std::string, int>* key_lines = nullptr)
      : source_(source), path_(std::move(path)), node_(node), key_lines_(key_lines) {
    if (node_ && !node_.IsNull() && !node_.IsMap())
      fail(path_, line_of(node_), "expected a mapping of keys");
    reject_duplicates();
  }

  std::string key_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  /// The child node and its line, or an undefined node when absent.
  YAML::Node child(const std::string& key) {
    known_.insert(key);
    if (!node_ || !node_.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (it->first.Scalar() == key) {
        lines_[key] = line_of(it->first);
        if (key_lines_) (*key_lines_)[key_path(key)] = lines_[key];
        return it->second;
      }
    }
    return YAML::Node(YAML::NodeType::Undefined);
  }

  int line(const std::string& key) const {
    auto it = lines_.find(key);
    return it == lines_.end() ? line_of(node_) : it->second;
  }

  [[noreturn]] void fail(const std::string& key_path, int line, const std::string& what) const {
    throw ConfigError(source_, key_path, line, what);
  }
  [[noreturn]] void fail_key(const std::string& key, const std::string& what) const {
    fail(key_path(key), line(key), what);
  }

  std::string scalar(const std::string& key, const YAML::Node& n, const char* expected) {
    if (!n.IsScalar()) fail_key(key, fmt::format("expected {}", expected));
    return n.Scalar();
  }

  void read_string(const std::string& key, std::string& out,
                   std::initializer_list<std::string_view> allowed = {}) {
    read_string(key, out, std::span<const std::string_view>(allowed.begin(), allowed.size()));
  }

  void read_string(const std::string& key, std::string& out,
                   std::span<const std::string_view> allowed) {
    auto n = child(key);
    if (!n.IsDefined() || n.IsNull()) return;
    std::string v = scalar(key, n, "a string");
    if (allowed.size() != 0) {
      bool ok = false;
      for (auto a : allowed) ok = ok || a == v;
      if (!ok)
        fail_key(key, fmt::format("'{}' is not allowed (allowed: {})", v, fmt::join(allowed, ", ")));
    }
    out = std::move(v);
  }

  void read_nonempty_string(const std::string& key, std::string& out) {
    read_string(key, out);
    if (out.empty()) fail_key(key, "must not be empty");
  }

  template <class T>
  void read_integer(const std::string& key, T& out, long long lo, long long hi) {
    auto n = child(key);
    if (!n.IsDefined() || n.IsNull()) return;
    const std::string s = scalar(key, n, "an integer");
    long long v = 0;
    std::size_t used = 0;
    try {
      v = std::stoll(s, &used, 10);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size())
      fail_key(key, fmt::format("'{}' is not an integer (allowed: {} to {})", s, lo, hi));
    if (v < lo || v > hi) fail_key(key, fmt::format("{} is out of range (allowed: {} to {})", v, lo, hi));
    out = static_cast<T>(v);
  }

  void read_double(const std::string& key, double& out, double lo, double hi, bool lo_open) {
    auto n = child(key);
    if (!n.IsDefined() || n.IsNull()) return;
    const std::string s = scalar(key, n, "a number");
    double v = 0;
    std::size_t used = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || !std::isfinite(v))
      fail_key(key, fmt::format("'{}' is not a number", s));
    if ((lo_open ? v <= lo : v < lo) || v > hi)
      fail_key(key, fmt::format("{} is out of range (allowed: {}{}, {}]", v, lo_open ? "(" : "[", lo, hi));
    out = v;
  }

  void read_bool(const std::string& key, bool& out) {
    auto n = child(key);
    if (!n.IsDefined() || n.IsNull()) return;
    const std::string s = scalar(key, n, "true or false");
    if (s == "true" || s == "True" || s == "yes" || s == "on") out = true;
    else if (s == "false" || s == "False" || s == "no" || s == "off") out = false;
    else fail_key(key, fmt::format("'{}' is not a boolean (allowed: true, false)", s));
  }

  Section section(const std::string& key) {
    return Section(source_, key_path(key), child(key), key_lines_);
  }

  YAML::Node sequence(const std::string& key) {
    auto n = child(key);
    if (!n.IsDefined() || n.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
    if (!n.IsSequence()) fail_key(key, "expected a list, e.g. [a, b]");
    return n;
  }

  /// Rejects every key that was not read.
  void reject_unknown() const {
    if (!node_ || !node_.IsMap()) return;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string k = it->first.Scalar();
      if (!known_.contains(k)) {
        std::vector<std::string> allowed(known_.begin(), known_.end());
        fail(key_path(k), line_of(it->first),
             fmt::format("unknown key (allowed here: {})", fmt::join(allowed, ", ")));
      }
    }
  }

 private:
  /// A key given twice in one mapping: yaml-cpp keeps both and a lookup finds the first, so the
  /// second would be ignored without a word.
  void reject_duplicates() const {
    if (!node_ || !node_.IsMap()) return;
    std::map<std::string, int> seen;
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      const std::string k = it->first.IsScalar() ? it->first.Scalar() : std::string();
      const int line = line_of(it->first);
      if (auto [at, fresh] = seen.emplace(k, line); !fresh)
        fail(key_path(printable(k)), line,
             fmt::format("given twice (first on line {}); keep one (allowed: each key once)",
                         at->second));
    }
  }

  const std::string& source_;
  std::string path_;
  YAML::Node node_;
  std::map<std::string, int>* key_lines_;  ///< every key read, by dotted path (Config::lines)
  std::set<std::string> known_;
  std::map<std::string, int> lines_;
};

/// A two-integer sequence [a, b] at `key` (absent: unchanged), each in [lo, hi].
void read_pair(Section& s, const std::string& key, const char* expected, long long lo,
               long long hi, uint32_t& a, uint32_t& b) {
  auto n = s.sequence(key);
  if (!n.IsDefined()) return;
  if (n.size() != 2) s.fail_key(key, fmt::format("expected {}", expected));
  for (std::size_t i = 0; i < 2; ++i) {
    long long v = 0;
    try {
      v = n[i].as<long long>();
    } catch (const YAML::Exception&) {
      s.fail_key(key, fmt::format("expected two integers {}", expected));
    }
    if (v < lo || v > hi)
      s.fail_key(key, fmt::format("{} is out of range (allowed: {} to {})", v, lo, hi));
    (i == 0 ? a : b) = static_cast<uint32_t>(v);
  }
}

void read_detector(Section s, DetectorConfig& d) {
  s.read_string("type", d.type, {"moench", "jungfrau", "eiger", "generic"});
  s.read_integer("rows", d.rows, 1, 65536);
  s.read_integer("cols", d.cols, 1, 65536);
  s.read_string("pixel_type", d.pixel_type, {"uint16"});
  read_pair(s, "ports", "[x, y]: ports side by side and stacked", 1, 64, d.ports_x, d.ports_y);
  read_pair(s, "modules", "[x, y]: modules side by side and stacked", 1, 64, d.modules_x,
            d.modules_y);
  if (auto n = s.child("module_orientation"); n.IsDefined() && !n.IsNull()) {
    const char* expected = "one orientation for all modules, or a list with one per module "
                           "(row-major), e.g. flip_rows or [flip_rows, normal]";
    std::vector<std::string> names;
    if (n.IsScalar()) {
      names.push_back(n.Scalar());
    } else if (n.IsSequence()) {
      for (const auto& e : n) {
        if (!e.IsScalar()) s.fail_key("module_orientation", fmt::format("expected {}", expected));
        names.push_back(e.Scalar());
      }
    } else {
      s.fail_key("module_orientation", fmt::format("expected {}", expected));
    }
    for (const std::string& name : names)
      if (!parse_module_orientation(name))
        s.fail_key("module_orientation",
                   fmt::format("'{}' is not an orientation (allowed: {})", printable(name),
                               kModuleOrientations));
    if (names.size() != 1 && names.size() != d.n_modules())
      s.fail_key("module_orientation",
                 fmt::format("{} entries for the {} modules of detector.modules [{}, {}]: give "
                             "one orientation for all modules, or one per module (row-major)",
                             names.size(), d.n_modules(), d.modules_x, d.modules_y));
    if (std::all_of(names.begin(), names.end(),
                    [](const std::string& v) { return v == "normal"; }))
      names.clear();
    d.module_orientation = std::move(names);
  }
  {
    Section p = s.section("placement");
    read_pair(p, "detector_shape", "[rows, cols] of the whole detector", 0, 1 << 20,
              d.detector_rows, d.detector_cols);
    read_pair(p, "origin", "[row, col] of this image in the whole detector", 0, 1 << 20,
              d.origin_row, d.origin_col);
    p.read_integer("first_module", d.first_module, 0, 65535 - 1);
    p.reject_unknown();
    if ((d.detector_rows == 0) != (d.detector_cols == 0))
      p.fail_key("detector_shape", "give both rows and cols, or neither ([0, 0]: this image)");
    if (uint64_t{d.origin_row} + d.rows > d.whole_rows() ||
        uint64_t{d.origin_col} + d.cols > d.whole_cols())
      p.fail_key("origin", fmt::format("[{}, {}] puts the {}x{} image outside the {}x{} detector",
                                       d.origin_row, d.origin_col, d.rows, d.cols, d.whole_rows(),
                                       d.whole_cols()));
    if (uint64_t{d.first_module} + d.n_modules() > 65535)
      p.fail_key("first_module", "module ids must stay below 65535");
  }
  s.reject_unknown();
  if (d.cols % d.ports_x != 0 || d.rows % d.ports_y != 0)
    s.fail_key("ports", fmt::format("[{}, {}] does not divide the {}x{} (rows x cols) image evenly",
                                    d.ports_x, d.ports_y, d.rows, d.cols));
  if (d.ports_x % d.modules_x != 0 || d.ports_y % d.modules_y != 0)
    s.fail_key("modules", fmt::format("[{}, {}] does not divide the [{}, {}] ports: each module is "
                                      "an equal block of whole ports",
                                      d.modules_x, d.modules_y, d.ports_x, d.ports_y));
}

void read_ingest(Section s, IngestConfig& c) {
  if (auto n = s.sequence("endpoints"); n.IsDefined()) {
    c.endpoints.clear();
    for (const auto& e : n) {
      if (!e.IsScalar()) s.fail_key("endpoints", "expected a list of strings");
      const std::string ep = e.Scalar();
      if (ep.rfind("tcp://", 0) != 0 && ep.rfind("ipc://", 0) != 0 && ep.rfind("inproc://", 0) != 0)
        s.fail(s.key_path("endpoints"), line_of(e),
               fmt::format("'{}' is not a ZeroMQ endpoint (allowed: tcp://HOST:PORT, ipc://PATH)", ep));
      if (auto why = endpoint_problem(ep, false))
        s.fail(s.key_path("endpoints"), line_of(e), *why);
      c.endpoints.push_back(ep);
    }
    if (c.endpoints.empty()) s.fail_key("endpoints", "must list at least one endpoint");
  }
  s.read_integer("queue_frames", c.queue_frames, 2, 1 << 20);
  s.read_integer("reorder_frames", c.reorder_frames, 1, 1 << 16);
  s.read_integer("part_timeout_ms", c.part_timeout_ms, 1, 600000);
  s.read_integer("receive_hwm", c.receive_hwm, 0, std::numeric_limits<int>::max());
  s.read_integer("receive_buffer_bytes", c.receive_buffer_bytes, 0, std::numeric_limits<int>::max());
  if (auto n = s.child("copy_threads"); n.IsDefined() && n.IsScalar() && n.Scalar() == "auto")
    c.copy_threads = -1;
  else
    s.read_integer("copy_threads", c.copy_threads, 0, 64);
  s.read_integer("max_frame_jump", c.max_frame_jump, 1, 1LL << 40);
  s.reject_unknown();
}

void read_pedestal(Section s, PedestalConfig& c) {
  s.read_integer("dark_frames", c.dark_frames, 0, 10000000);
  s.read_bool("keep_previous", c.keep_previous);
  s.read_integer("window", c.window, 1, 10000000);
  s.read_string("dark_marker", c.dark_marker, {"none", "frame_mode"});
  s.read_string("source", c.source);
  s.reject_unknown();
  if (c.source != "dark" && c.source != "previous" && (!c.source.starts_with("file:") ||
                                                        c.source.size() == 5))
    s.fail_key("source", fmt::format("'{}' is not allowed (allowed: dark, previous, file:PATH)",
                                     c.source));
  if (c.keep_previous && c.source != "dark" && c.source != "previous")
    s.fail_key("keep_previous", fmt::format("true contradicts pedestal.source '{}' (keep_previous "
                                            "is pedestal.source previous)", c.source));
  // As `glint find`: the pedestal must have filled its window before the first data frame, or
  // the first data frames are searched against a pedestal of a few frames (wrong clusters).
  // 0 dark frames only reuses a pedestal from elsewhere (checked again when a run starts).
  if (c.dark_frames == 0 && !c.from_previous() && c.file().empty())
    s.fail_key("dark_frames",
               fmt::format("0 dark frames leaves the run without a pedestal (allowed: at least "
                           "pedestal.window = {}, or 0 with keep_previous: true or "
                           "pedestal.source previous or file:PATH)",
                           c.window));
  if (c.dark_frames > 0 && c.dark_frames < c.window)
    s.fail_key("dark_frames",
               fmt::format("{} is fewer than pedestal.window = {}: the pedestal would not be "
                           "settled at the first data frame (allowed: at least {}, or 0 with "
                           "keep_previous: true or pedestal.source previous or file:PATH)",
                           c.dark_frames, c.window, c.window));
}

void read_finder(Section s, FinderConfig& c) {
  s.read_double("n_sigma", c.n_sigma, 0.0, 1000.0, true);
  s.read_integer("cluster_size", c.cluster_size, 3, 9);
  if (c.cluster_size % 2 == 0)
    s.fail_key("cluster_size", fmt::format("{} is not allowed (allowed: 3, 5, 7, 9)", c.cluster_size));
  s.read_string("backend", c.backend, {"cpu", "gpu", "auto"});
  s.read_integer("threads", c.threads, 0, 1024);
  s.read_integer("batch_frames", c.batch_frames, 1, 65536);
  s.read_integer("streams", c.streams, 1, 64);
  if (auto n = s.sequence("gpu_ids"); n.IsDefined()) {
    c.gpu_ids.clear();
    for (const auto& e : n) {
      int id = -1;
      try {
        id = e.as<int>();
      } catch (const YAML::Exception&) {
        id = -1;
      }
      if (id < 0 || id > 63)
        s.fail(s.key_path("gpu_ids"), line_of(e), "expected GPU ordinals 0..63, e.g. [0, 1]");
      c.gpu_ids.push_back(id);
    }
    if (c.gpu_ids.empty()) s.fail_key("gpu_ids", "must list at least one GPU");
  }
  s.reject_unknown();
}

/// `text` with every byte outside printable ASCII written as \xNN (NUL, newlines, ...).
std::string printable(std::string_view text, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < max; ++i) {
    const auto ch = static_cast<unsigned char>(text[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\')
      out += static_cast<char>(ch);
    else
      out += fmt::format("\\x{:02x}", ch);
  }
  if (text.size() > max) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

bool has_control_characters(std::string_view text) {
  for (char ch : text)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) return true;
  return false;
}

void read_output(Section s, OutputConfig& c) {
  std::string dir = c.directory.string();
  s.read_nonempty_string("directory", dir);
  if (has_control_characters(dir))
    s.fail_key("directory",
               fmt::format("'{}' contains control characters (NUL, newline, ...)", printable(dir)));
  c.directory = dir;
  if (auto n = s.sequence("allowed_roots"); n.IsDefined()) {
    c.allowed_roots.clear();
    for (const auto& e : n) {
      if (!e.IsScalar()) s.fail_key("allowed_roots", "expected a list of absolute directories");
      const std::string root = e.Scalar();
      if (root.empty() || root.front() != '/' || has_control_characters(root))
        s.fail(s.key_path("allowed_roots"), line_of(e),
               fmt::format("'{}' is not an absolute directory (allowed: /PATH, no control "
                           "characters)",
                           printable(root)));
      c.allowed_roots.emplace_back(root);
    }
  }
  s.read_nonempty_string("run_name", c.run_name);
  if (!is_safe_run_name(c.run_name)) {
    // Say what is wrong with it, then what is allowed.
    std::string why;
    if (c.run_name.size() > kMaxRunNameLength)
      why = fmt::format("it is {} characters long", c.run_name.size());
    else if (c.run_name.front() == '.')
      why = "it starts with '.'";
    else if (c.run_name.find("..") != std::string::npos)
      why = "it contains '..'";
    for (char ch : c.run_name) {
      if (!why.empty()) break;
      if (!is_run_name_char(ch))
        why = fmt::format("it contains '{}'", printable(std::string_view(&ch, 1)));
    }
    s.fail_key("run_name", fmt::format("'{}' is not allowed: {} ({})", printable(c.run_name), why,
                                       run_name_rule()));
  }
  s.read_integer("flush_interval_ms", c.flush_interval_ms, 10, 1000);
  s.read_bool("overwrite", c.overwrite);
  s.read_bool("clust", c.clust);
  s.reject_unknown();
}

void read_run(Section s, RunConfig& c) {
  s.read_bool("auto_start", c.auto_start);
  s.read_integer("max_frames", c.max_frames, 0, std::numeric_limits<long long>::max());
  s.read_double("max_seconds", c.max_seconds, 0.0, 1e9, false);
  s.read_integer("memory_budget_mb", c.memory_budget_mb, 1, 1LL << 40);
  s.read_integer("max_missing_rows", c.max_missing_rows, 1, 1LL << 40);
  s.read_double("idle_end_seconds", c.idle_end_seconds, 0.0, 1e9, false);
  s.reject_unknown();
}

void read_control(Section s, ControlConfig& c) {
  s.read_nonempty_string("endpoint", c.endpoint);
  if (c.endpoint.rfind("tcp://", 0) != 0 && c.endpoint.rfind("ipc://", 0) != 0)
    s.fail_key("endpoint",
               fmt::format("'{}' is not a ZeroMQ endpoint (allowed: tcp://HOST:PORT, ipc://PATH)",
                           printable(c.endpoint)));
  if (auto why = endpoint_problem(c.endpoint, true)) s.fail_key("endpoint", *why);
  s.read_integer("max_request_bytes", c.max_request_bytes, 1024, 16 << 20);
  s.read_bool("require_curve", c.require_curve);
  s.read_string("curve_server_key", c.curve_server_key);
  s.read_string("curve_clients", c.curve_clients);
  s.read_string("curve_admins", c.curve_admins);
  if (c.curve() && (c.curve_server_key.empty() || c.curve_clients.empty())) {
    const std::string why = c.require_curve
                                ? std::string("control.require_curve is set")
                                : fmt::format(
                                      "'{}' is not a loopback endpoint (127.0.0.0/8, [::1], "
                                      "localhost, ipc://)",
                                      c.endpoint);
    s.fail_key(c.curve_server_key.empty() ? "curve_server_key" : "curve_clients",
               fmt::format("{}: CURVE is required; set control.curve_server_key (a key pair "
                           "file from `glint ctl keygen`) and control.curve_clients (a file or "
                           "directory of allowed client public keys)",
                           why));
  }
  if (!c.curve() && !c.curve_admins.empty())
    s.fail_key("curve_admins", "needs CURVE (control.require_curve or a non-loopback endpoint)");
  s.reject_unknown();
}

void read_logging(Section s, LoggingConfig& c) {
  s.read_string("level", c.level, {"trace", "debug", "info", "warn", "error", "critical", "off"});
  s.reject_unknown();
}

void read_preview(Section s, PreviewConfig& c) {
  s.read_bool("enabled", c.enabled);
  s.read_nonempty_string("endpoint", c.endpoint);
  if (!c.endpoint.starts_with("tcp://") && !c.endpoint.starts_with("ipc://"))
    s.fail_key("endpoint",
               fmt::format("'{}' is not a ZeroMQ endpoint (allowed: tcp://HOST:PORT, "
                           "tcp://HOST:*, ipc://PATH)",
                           printable(c.endpoint)));
  if (auto why = endpoint_problem(c.endpoint, true)) s.fail_key("endpoint", *why);
  s.read_double("rate_hz", c.rate_hz, 0.0, 100.0, true);
  s.read_integer("hwm", c.hwm, 1, 1000);
  if (auto n = s.sequence("images"); n.IsDefined()) {
    c.images.clear();
    for (const auto& e : n) {
      const std::string what = e.IsScalar() ? e.Scalar() : std::string();
      if (what.empty() || what.size() > 32 ||
          what.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
        s.fail(s.key_path("images"), line_of(e),
               fmt::format("'{}' is not an image name (allowed: 1 to 32 characters of a-z 0-9 _, "
                           "e.g. hitmap, energy, spectrum, subpixel, pedestal, noise)",
                           printable(what)));
      c.images.push_back(what);
    }
  }
  s.reject_unknown();
}

void read_reconstruction(Section s, ReconstructionConfig& c) {
  s.read_bool("enabled", c.enabled);
  s.read_integer("frames_per_slice", c.frames_per_slice, 1, 100000000);
  s.read_integer("slices", c.slices, 2, 4096);
  s.read_string("weight", c.weight, {"centres", "signal"});
  s.read_nonempty_string("forward", c.forward);
  tv::ForwardSpec forward;
  try {
    forward = tv::parse_forward_spec(c.forward);  // the mask file itself is read when a run starts
  } catch (const std::invalid_argument& e) {
    s.fail_key("forward", e.what());  // the message names the allowed forms
  }
  s.read_double("lambda", c.lambda, 0.0, 1e6, false);
  s.read_integer("outer", c.outer, 1, 100000);
  s.read_integer("tv_inner", c.tv_inner, 1, 100000);
  s.read_bool("cold_start", c.cold_start);
  s.read_bool("nonneg", c.nonneg);
  s.read_string("variant", c.variant, tv::kVariantNames);
  s.read_string("backend", c.backend, {"cpu", "gpu", "auto"});
  s.read_bool("solve_partial", c.solve_partial);
  // A mask is shaped for the full volume, so a partial last volume (fewer slices) cannot use it.
  if (c.solve_partial && forward.kind == tv::ForwardSpec::Kind::mask)
    s.fail_key("solve_partial",
               "a partial last volume cannot be reconstructed with a mask forward model (the mask "
               "is shaped for full volumes of 'slices' slices); set solve_partial: false, or use "
               "identity or gaussian:SX,SY,SZ");
  s.reject_unknown();
}

std::optional<std::string> memory_budget_problem(const Config& c) {
  const RunMemory m = run_memory(c);
  const uint64_t budget = c.run.memory_budget_mb * 1000000ULL;
  if (m.total() <= budget) return std::nullopt;
  return fmt::format(
      "the run needs {} but the budget is {} MB (raise run.memory_budget_mb, or "
      "lower ingest.queue_frames, ingest.reorder_frames, finder.batch_frames, "
      "finder.streams or reconstruction.slices)",
      m.describe(), c.run.memory_budget_mb);
}

void read_metrics(Section s, MetricsConfig& c) {
  s.read_bool("enabled", c.enabled);
  s.read_nonempty_string("listen", c.listen);
  try {
    split_listen(c.listen);
  } catch (const std::invalid_argument& e) {
    s.fail_key("listen", fmt::format("'{}' {} (allowed: 127.x.x.x:PORT, localhost:PORT or "
                                     "[::1]:PORT, PORT 1..65535)", c.listen, e.what()));
  }
  s.reject_unknown();
}

void read_calibration(Section s, CalibrationConfig& c, const DetectorConfig& d) {
  s.read_string("gain_file", c.gain_file);
  s.read_string("pedestal_file", c.pedestal_file);
  s.read_bool("hg0", c.hg0);
  s.read_string("units", c.units, {"keV"});
  s.reject_unknown();
  const char* set = !c.gain_file.empty() ? "gain_file"
                    : !c.pedestal_file.empty() ? "pedestal_file"
                    : c.hg0 ? "hg0" : nullptr;
  if (set && d.type != "jungfrau")
    s.fail_key(set, fmt::format("calibration applies to detector.type jungfrau only (the type is "
                                "{})", d.type));
  if (!c.gain_file.empty()) return;
  if (!c.pedestal_file.empty())
    s.fail_key("pedestal_file", "needs calibration.gain_file (calibrated frames)");
  if (c.hg0) s.fail_key("hg0", "needs calibration.gain_file (calibrated frames)");
}

void read_mask(Section s, MaskConfig& c) {
  s.read_string("file", c.file);
  s.read_bool("from_dark", c.from_dark);
  s.read_double("noisy_factor", c.noisy_factor, 1.0, 1e6, false);
  s.reject_unknown();
  if (!c.file.empty()) {
    const auto colon = c.file.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 >= c.file.size() ||
        c.file[colon + 1] != '/')
      s.fail_key("file", fmt::format("'{}' is not FILE.h5:/dataset (an HDF5 file and the path "
                                     "of a uint32 rows x cols dataset in it)", printable(c.file)));
  }
}

/// Largest per-pixel spectra table a run may hold (rows x cols x bins uint32), in values.
constexpr uint64_t kMaxPixelSpectraValues = uint64_t{1} << 28;

void read_products(Section s, ProductsConfig& c, const DetectorConfig& d, bool calibrated) {
  s.read_string("energy", c.energy, {"sum", "2x2"});
  if (auto n = s.sequence("energy_window"); n.IsDefined()) {
    c.energy_window.clear();
    for (const auto& e : n) {
      double v = 0;
      bool ok = e.IsScalar();
      if (ok) {
        try {
          std::size_t used = 0;
          v = std::stod(e.Scalar(), &used);
          ok = used == e.Scalar().size() && std::isfinite(v);
        } catch (const std::exception&) {
          ok = false;
        }
      }
      if (!ok)
        s.fail(s.key_path("energy_window"), line_of(e),
               "expected [emin, emax]: two finite numbers (ADU, or keV for calibrated frames)");
      c.energy_window.push_back(v);
    }
    if (!c.energy_window.empty() && c.energy_window.size() != 2)
      s.fail_key("energy_window", fmt::format("has {} values (allowed: [] for no window, or "
                                              "[emin, emax])", c.energy_window.size()));
    if (c.energy_window.size() == 2 && !(c.energy_window[0] < c.energy_window[1]))
      s.fail_key("energy_window", fmt::format("[{}, {}]: emin must be below emax",
                                              c.energy_window[0], c.energy_window[1]));
  }
  s.read_bool("hitmap", c.hitmap);
  s.read_integer("slice_frames", c.slice_frames, 0, 1000000000);
  {
    Section sp = s.section("spectrum");
    sp.read_integer("bins", c.spectrum_bins, 1, 100000);
    sp.read_double("min", c.spectrum_min, -1e9, 1e9, false);
    sp.read_double("max", c.spectrum_max, -1e9, 1e9, false);
    sp.reject_unknown();
    if (c.spectrum_max != 0 && !(c.spectrum_min < c.spectrum_max))
      sp.fail_key("max", fmt::format("{} is not above products.spectrum.min = {} (allowed: a "
                                     "larger value, or 0 for 2000 ADU / 50 keV)",
                                     c.spectrum_max, c.spectrum_min));
    if (c.spectrum_max == 0 && !(c.spectrum_min < c.spectrum_upper(calibrated)))
      sp.fail_key("min", fmt::format("{} is not below the default max ({} {}); set "
                                     "products.spectrum.max", c.spectrum_min,
                                     c.spectrum_upper(calibrated), calibrated ? "keV" : "ADU"));
  }
  s.read_bool("pixel_spectra", c.pixel_spectra);
  if (c.pixel_spectra &&
      uint64_t{d.rows} * d.cols * c.spectrum_bins > kMaxPixelSpectraValues)
    s.fail_key("pixel_spectra",
               fmt::format("{} x {} pixels x {} bins is more than {} counts (allowed: fewer "
                           "products.spectrum.bins)", d.rows, d.cols, c.spectrum_bins,
                           kMaxPixelSpectraValues));
  s.read_bool("eta", c.eta);
  s.read_integer("eta_bins", c.eta_bins, 1, 10000);
  {
    Section sub = s.section("subpixel");
    sub.read_string("calibration", c.subpixel_calibration);
    sub.read_integer("factor", c.subpixel_factor, 1, 100);
    sub.reject_unknown();
    if (has_control_characters(c.subpixel_calibration))
      sub.fail_key("calibration", fmt::format("'{}' contains control characters",
                                              printable(c.subpixel_calibration)));
  }
  s.read_bool("cluster_energy", c.cluster_energy);
  if (auto n = s.child("threads"); n.IsDefined() && n.IsScalar() && n.Scalar() == "auto")
    c.threads = -1;
  else
    s.read_integer("threads", c.threads, 1, 64);
  s.read_string("device", c.device, {"auto", "cpu", "gpu"});
  s.reject_unknown();
}

Config from_node(const YAML::Node& root, const std::string& source, std::string text) {
  Config c;
  c.source = source;
  Section top(source, "", root, &c.lines);
  read_detector(top.section("detector"), c.detector);
  read_ingest(top.section("ingest"), c.ingest);
  read_pedestal(top.section("pedestal"), c.pedestal);
  read_finder(top.section("finder"), c.finder);
  read_output(top.section("output"), c.output);
  read_run(top.section("run"), c.run);
  read_control(top.section("control"), c.control);
  read_logging(top.section("logging"), c.logging);
  read_preview(top.section("preview"), c.preview);
  read_reconstruction(top.section("reconstruction"), c.reconstruction);
  read_metrics(top.section("metrics"), c.metrics);
  read_calibration(top.section("calibration"), c.calibration, c.detector);
  read_mask(top.section("mask"), c.mask);
  read_products(top.section("products"), c.products, c.detector, c.calibration.calibrated());
  top.reject_unknown();
  if (c.calibration.calibrated() && c.pedestal.source != "dark") {
    Section ped = top.section("pedestal");
    ped.child("source");
    ped.fail_key("source", "not with calibration.gain_file: calibrated runs take their G0 "
                           "pedestal from their own dark frames (allowed: dark)");
  }
  if (c.calibration.calibrated() && c.pedestal.keep_previous) {
    Section ped = top.section("pedestal");
    ped.child("keep_previous");
    ped.fail_key("keep_previous", "not with calibration.gain_file: calibrated runs take their "
                                  "G0 pedestal from their own dark frames (allowed: false)");
  }
  {
    Section run = top.section("run");
    run.child("memory_budget_mb");
    if (auto why = memory_budget_problem(c)) run.fail_key("memory_budget_mb", *why);
  }
  c.yaml = std::move(text);
  return c;
}

YAML::Node load_node(std::string_view text, const std::string& source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    throw ConfigError(source, "(syntax)", e.mark.line + 1, e.msg);
  }
}

/// Recursively merges `over` into `base` (maps merge, everything else replaces).
YAML::Node merged(const YAML::Node& base, const YAML::Node& over) {
  if (!over.IsMap() || !base.IsMap()) return YAML::Clone(over);
  YAML::Node out = YAML::Clone(base);
  for (auto it = over.begin(); it != over.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (out[k]) out[k] = merged(out[k], it->second);
    else out[k] = YAML::Clone(it->second);
  }
  return out;
}

}  // namespace

int Config::line(const std::string& key) const {
  const auto it = lines.find(key);
  return it == lines.end() ? 0 : it->second;
}

bool PreviewConfig::sends(std::string_view what) const {
  if (images.empty()) return true;
  for (const auto& i : images)
    if (i == what) return true;
  return false;
}

bool ControlConfig::curve() const { return require_curve || !is_loopback_endpoint(endpoint); }

bool is_safe_run_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxRunNameLength || name.front() == '.') return false;
  if (name.find("..") != std::string_view::npos) return false;
  for (char ch : name)
    if (!is_run_name_char(ch)) return false;
  return true;
}

std::string_view run_name_rule() {
  return "allowed: 1 to 64 characters of A-Z a-z 0-9 . _ -, not starting with '.', no '..'";
}

bool is_loopback_endpoint(std::string_view ep) {
  if (ep.starts_with("ipc://")) return true;
  if (!ep.starts_with("tcp://")) return false;
  std::string_view host = ep.substr(6);
  // tcp://SOURCE;HOST:PORT binds or connects from SOURCE; the host is what counts.
  if (const auto semi = host.rfind(';'); semi != std::string_view::npos)
    host = host.substr(semi + 1);
  if (host.starts_with("[")) {
    const auto close = host.find(']');
    return close != std::string_view::npos && host.substr(1, close - 1) == "::1";
  }
  const auto colon = host.rfind(':');
  if (colon == std::string_view::npos) return false;
  host = host.substr(0, colon);
  if (host == "localhost") return true;
  // A dotted IPv4 address in 127.0.0.0/8.
  if (!host.starts_with("127.")) return false;
  int dots = 0, digits = 0;
  for (char ch : host) {
    if (ch == '.') {
      if (digits == 0) return false;
      ++dots;
      digits = 0;
    } else if (ch >= '0' && ch <= '9' && digits < 3) {
      ++digits;
    } else {
      return false;
    }
  }
  return dots == 3 && digits > 0;
}

bool directory_within(const std::filesystem::path& dir,
                      const std::vector<std::filesystem::path>& roots) {
  std::error_code ec;
  const auto d = std::filesystem::weakly_canonical(std::filesystem::absolute(dir, ec), ec);
  if (ec) return false;
  for (const auto& root : roots) {
    std::error_code rec;
    const auto r = std::filesystem::weakly_canonical(root, rec);
    if (rec || r.empty()) continue;
    auto di = d.begin();
    bool under = true;
    for (auto ri = r.begin(); ri != r.end(); ++ri, ++di) {
      if (ri->empty()) continue;  // a trailing separator
      if (di == d.end() || *di != *ri) {
        under = false;
        break;
      }
    }
    if (under) return true;
  }
  return false;
}

std::string RunMemory::describe() const {
  auto mb = [](uint64_t b) { return (b + 999999) / 1000000; };
  return fmt::format(
      "{} MB (assembler {} MB, batch {} MB, pinned staging {} MB, device {} MB, "
      "pedestal {} MB, reconstruction {} MB)",
      mb(total()), mb(assembler), mb(batch), mb(pinned), mb(device), mb(pedestal),
      mb(reconstruction));
}

RunMemory run_memory(const Config& c) {
  RunMemory m;
  const uint64_t image = uint64_t{c.detector.rows} * c.detector.cols * sizeof(uint16_t);
  const uint64_t pixels = uint64_t{c.detector.rows} * c.detector.cols;
  // Payloads stay in their messages while queued or waiting for their other ports' parts.
  m.assembler = (uint64_t{c.ingest.queue_frames} + c.ingest.reorder_frames) * image;
  const uint64_t batch = static_cast<uint64_t>(c.finder.batch_frames) * image;
  m.batch = batch;
  if (c.finder.backend != "cpu") {
    // One image in bands over the GPUs: each GPU stages whole batches. Modules: each module's
    // finder stages its own block, on one GPU.
    const uint64_t gpus = c.detector.n_modules() > 1 ? 1 : c.finder.gpu_ids.size();
    m.pinned = batch * static_cast<uint64_t>(c.finder.streams) * gpus;
    m.device = m.pinned + gpus * pixels * 3 * sizeof(double);  // + pedestal sums and noise
  }
  m.pedestal = pixels * 3 * sizeof(double) * 2;  // running sums; the start and end copies
  if (c.reconstruction.enabled) {
    // The volume being stacked, the one being solved and the solver's arrays (x, y, the
    // previous x, the gradient, the three-component dual and its previous value, ...).
    const uint64_t volume = pixels * c.reconstruction.slices * sizeof(float);
    m.reconstruction = volume * 14;
  }
  return m;
}

void check_memory_budget(const Config& c) {
  if (auto why = memory_budget_problem(c))
    throw ConfigError(c.source, "run.memory_budget_mb", 0, *why);
}

Config parse(std::string_view yaml_text, std::string source) {
  YAML::Node root = load_node(yaml_text, source);
  if (root.IsDefined() && !root.IsNull() && !root.IsMap())
    throw ConfigError(source, "(top level)", line_of(root), "expected a mapping of sections");
  return from_node(root, source, std::string(yaml_text));
}

Config load(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(path.string(), "(file)", 0,
                      "is a directory (expected a YAML file, e.g. config/glintd.example.yaml)");
  std::ifstream in(path);
  if (!in) throw ConfigError(path.string(), "(file)", 0, "cannot be opened for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(path.string(), "(file)", 0, "cannot be read");
  const std::string text = ss.str();
  // A file without a single key is a mistake (an emptied or truncated file), not "all defaults".
  const YAML::Node root = load_node(text, path.string());
  if (!root.IsDefined() || root.IsNull() || (root.IsMap() && root.size() == 0))
    throw ConfigError(path.string(), "(file)", 0,
                      "holds no configuration (expected sections such as detector:, ingest:, "
                      "output:; every key is in config/glintd.example.yaml)");
  return parse(text, path.string());
}

std::string to_yaml(const Config& c) {
  YAML::Emitter e;
  auto kv = [&](const char* key, const auto& value) { e << YAML::Key << key << YAML::Value << value; };
  auto flow = [&](const char* key, const auto& seq) {
    e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
    for (const auto& v : seq) e << v;
    e << YAML::EndSeq;
  };
  auto begin = [&](const char* section) { e << YAML::Key << section << YAML::Value << YAML::BeginMap; };
  e << YAML::BeginMap;
  begin("detector");
  kv("type", c.detector.type);
  kv("rows", c.detector.rows);
  kv("cols", c.detector.cols);
  kv("pixel_type", c.detector.pixel_type);
  flow("ports", std::vector<uint32_t>{c.detector.ports_x, c.detector.ports_y});
  flow("modules", std::vector<uint32_t>{c.detector.modules_x, c.detector.modules_y});
  // Written when set only: a run of normal modules records the configuration it always did.
  if (c.detector.module_orientation.size() == 1)
    kv("module_orientation", c.detector.module_orientation[0]);
  else if (!c.detector.module_orientation.empty())
    flow("module_orientation", c.detector.module_orientation);
  begin("placement");
  flow("detector_shape", std::vector<uint32_t>{c.detector.detector_rows, c.detector.detector_cols});
  flow("origin", std::vector<uint32_t>{c.detector.origin_row, c.detector.origin_col});
  kv("first_module", c.detector.first_module);
  e << YAML::EndMap;
  e << YAML::EndMap;
  if (c.detector.type == "jungfrau") {
    begin("calibration");
    kv("gain_file", c.calibration.gain_file);
    kv("pedestal_file", c.calibration.pedestal_file);
    kv("hg0", c.calibration.hg0);
    kv("units", c.calibration.units);
    e << YAML::EndMap;
  }
  begin("mask");
  kv("file", c.mask.file);
  kv("from_dark", c.mask.from_dark);
  kv("noisy_factor", c.mask.noisy_factor);
  e << YAML::EndMap;
  begin("ingest");
  flow("endpoints", c.ingest.endpoints);
  kv("queue_frames", c.ingest.queue_frames);
  kv("reorder_frames", c.ingest.reorder_frames);
  kv("part_timeout_ms", c.ingest.part_timeout_ms);
  kv("receive_hwm", c.ingest.receive_hwm);
  kv("receive_buffer_bytes", c.ingest.receive_buffer_bytes);
  if (c.ingest.copy_threads < 0) kv("copy_threads", "auto");
  else kv("copy_threads", c.ingest.copy_threads);
  kv("max_frame_jump", c.ingest.max_frame_jump);
  e << YAML::EndMap;
  begin("pedestal");
  kv("dark_frames", c.pedestal.dark_frames);
  kv("keep_previous", c.pedestal.keep_previous);
  kv("window", c.pedestal.window);
  kv("dark_marker", c.pedestal.dark_marker);
  kv("source", c.pedestal.source);
  e << YAML::EndMap;
  begin("finder");
  kv("n_sigma", c.finder.n_sigma);
  kv("cluster_size", c.finder.cluster_size);
  kv("backend", c.finder.backend);
  kv("threads", c.finder.threads);
  kv("batch_frames", c.finder.batch_frames);
  kv("streams", c.finder.streams);
  flow("gpu_ids", c.finder.gpu_ids);
  e << YAML::EndMap;
  begin("output");
  kv("directory", c.output.directory.string());
  flow("allowed_roots", [&] {
    std::vector<std::string> roots;
    for (const auto& r : c.output.allowed_roots) roots.push_back(r.string());
    return roots;
  }());
  kv("run_name", c.output.run_name);
  kv("flush_interval_ms", c.output.flush_interval_ms);
  kv("overwrite", c.output.overwrite);
  kv("clust", c.output.clust);
  e << YAML::EndMap;
  begin("run");
  kv("auto_start", c.run.auto_start);
  kv("max_frames", c.run.max_frames);
  kv("max_seconds", c.run.max_seconds);
  kv("memory_budget_mb", c.run.memory_budget_mb);
  kv("max_missing_rows", c.run.max_missing_rows);
  kv("idle_end_seconds", c.run.idle_end_seconds);
  e << YAML::EndMap;
  begin("control");
  kv("endpoint", c.control.endpoint);
  kv("max_request_bytes", c.control.max_request_bytes);
  kv("require_curve", c.control.require_curve);
  kv("curve_server_key", c.control.curve_server_key);
  kv("curve_clients", c.control.curve_clients);
  kv("curve_admins", c.control.curve_admins);
  e << YAML::EndMap;
  begin("logging");
  kv("level", c.logging.level);
  e << YAML::EndMap;
  begin("preview");
  kv("enabled", c.preview.enabled);
  kv("endpoint", c.preview.endpoint);
  kv("rate_hz", c.preview.rate_hz);
  kv("hwm", c.preview.hwm);
  flow("images", c.preview.images);
  e << YAML::EndMap;
  begin("reconstruction");
  const auto& r = c.reconstruction;
  kv("enabled", r.enabled);
  kv("frames_per_slice", r.frames_per_slice);
  kv("slices", r.slices);
  kv("weight", r.weight);
  kv("forward", r.forward);
  kv("lambda", r.lambda);
  kv("outer", r.outer);
  kv("tv_inner", r.tv_inner);
  kv("cold_start", r.cold_start);
  kv("nonneg", r.nonneg);
  kv("variant", r.variant);
  kv("backend", r.backend);
  kv("solve_partial", r.solve_partial);
  e << YAML::EndMap;
  begin("metrics");
  kv("enabled", c.metrics.enabled);
  kv("listen", c.metrics.listen);
  e << YAML::EndMap;
  begin("products");
  const auto& p = c.products;
  kv("energy", p.energy);
  flow("energy_window", p.energy_window);
  kv("hitmap", p.hitmap);
  kv("slice_frames", p.slice_frames);
  begin("spectrum");
  kv("bins", p.spectrum_bins);
  kv("min", p.spectrum_min);
  kv("max", p.spectrum_max);
  e << YAML::EndMap;
  kv("pixel_spectra", p.pixel_spectra);
  kv("eta", p.eta);
  kv("eta_bins", p.eta_bins);
  begin("subpixel");
  kv("calibration", p.subpixel_calibration);
  kv("factor", p.subpixel_factor);
  e << YAML::EndMap;
  kv("cluster_energy", p.cluster_energy);
  if (p.threads < 0) kv("threads", "auto");
  else kv("threads", p.threads);
  kv("device", p.device);
  e << YAML::EndMap;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

namespace {

// What a run may choose without the operator's file: names and limits of the run, the finder's
// arithmetic, the pixel mask (a filter on the results), the reconstruction (its volume is within
// the memory budget). Not the detector, the ingest endpoints and sizes, the finder's threads and
// GPU batch sizes, the control socket or logging.
// The products are what a run computes from its clusters (not their worker threads).
constexpr std::array<std::string_view, 24> kOverrideKeys = {
    "output.run_name",      "output.directory",       "output.overwrite",
    "output.flush_interval_ms", "run.max_frames",     "run.max_seconds",
    "pedestal.dark_frames", "pedestal.keep_previous", "pedestal.window",
    "finder.n_sigma",       "finder.cluster_size",    "finder.backend",
    "mask.*",               "reconstruction.*",       "products.energy",
    "products.energy_window", "products.hitmap",      "products.slice_frames",
    "products.spectrum",    "products.pixel_spectra", "products.eta",
    "products.eta_bins",    "products.subpixel",      "products.cluster_energy"};

bool override_allowed(const std::string& section, const std::string& key) {
  for (auto k : kOverrideKeys)
    if (k == section + "." + key || k == section + ".*") return true;
  return false;
}

/// Every key of `over` must be in kOverrideKeys.
void check_override_keys(const YAML::Node& over, const std::string& src) {
  for (auto it = over.begin(); it != over.end(); ++it) {
    const std::string section = it->first.Scalar();
    const YAML::Node body = it->second;  // a copy: the iterator's pair is a temporary
    if (!body.IsMap()) {
      throw ConfigError(src, section, line_of(it->first),
                        "expected a mapping of keys, e.g. {\"run\": {\"max_frames\": 100}}");
    }
    for (auto k = body.begin(); k != body.end(); ++k) {
      const std::string key = k->first.Scalar();
      if (!override_allowed(section, key))
        throw ConfigError(src, section + "." + key, line_of(k->first),
                          fmt::format("cannot be changed by a start override (allowed: {}); "
                                      "change the configuration file instead",
                                      fmt::join(kOverrideKeys, ", ")));
    }
  }
}

}  // namespace

std::span<const std::string_view> override_keys() { return kOverrideKeys; }

std::pair<std::string, uint16_t> split_listen(const std::string& listen) {
  const std::size_t colon = listen.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("has no :PORT");
  std::string host = listen.substr(0, colon);
  const std::string port = listen.substr(colon + 1);
  unsigned long p = 0;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || (p = std::stoul(port)) < 1 ||
      p > 65535)
    throw std::invalid_argument("has no port in 1..65535");
  if (host == "[::1]") return {"::1", static_cast<uint16_t>(p)};
  if (host == "localhost") return {"127.0.0.1", static_cast<uint16_t>(p)};
  unsigned a = 0, b = 0, c = 0, d = 0;
  char tail = 0;
  if (std::sscanf(host.c_str(), "%3u.%3u.%3u.%3u%c", &a, &b, &c, &d, &tail) != 4 || a != 127 ||
      b > 255 || c > 255 || d > 255 || host.find_first_not_of("0123456789.") != std::string::npos)
    throw std::invalid_argument("is not a loopback address");
  return {host, static_cast<uint16_t>(p)};
}

Config with_overrides(const Config& base, std::string_view overrides_text) {
  const std::string src = "overrides";
  YAML::Node over = load_node(overrides_text, src);
  if (!over.IsDefined() || over.IsNull()) return base;
  if (!over.IsMap()) throw ConfigError(src, "(top level)", line_of(over), "expected a mapping of sections");
  check_override_keys(over, src);
  // Merged onto the struct's values (which callers may have changed since parsing).
  YAML::Node root = load_node(to_yaml(base), base.source);
  YAML::Node m = merged(root, over);
  YAML::Emitter emitter;
  emitter << m;
  Config c = from_node(m, base.source + " + overrides", std::string(emitter.c_str()) + "\n");
  // Lines refer to the configuration file: an overridden key has none.
  c.lines = base.lines;
  for (auto it = over.begin(); it != over.end(); ++it)
    for (auto k = it->second.begin(); k != it->second.end(); ++k)
      c.lines.erase(it->first.Scalar() + "." + k->first.Scalar());
  // A directory from an override is confined to the roots (the configured one is trusted).
  if (over["output"] && over["output"]["directory"] &&
      c.output.directory != base.output.directory &&
      !directory_within(c.output.directory, base.output.allowed_roots)) {
    std::vector<std::string> roots;
    for (const auto& r : base.output.allowed_roots) roots.push_back(r.string());
    throw ConfigError(
        src, "output.directory", line_of(over["output"]["directory"]),
        fmt::format("'{}' is not within output.allowed_roots (allowed: {} or below, "
                    "symlinks resolved; or {})",
                    printable(c.output.directory.string()),
                    roots.empty() ? std::string("none") : fmt::format("{}", fmt::join(roots, ", ")),
                    base.output.directory.string()));
  }
  return c;
}

}  // namespace glint::config
