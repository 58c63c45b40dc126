#pragma once
// glintd's configuration: YAML parsed once into plain structs and validated. yaml-cpp stays
// inside config/; the rest of glint sees only these structs. The documented defaults live in
// config/glintd.example.yaml.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace glint::config {

/// A bad configuration: names the source (file), the key (dotted path), its line (1-based, 0 when
/// unknown) and what is allowed.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string source, std::string key, int line, const std::string& what);
  const std::string& source() const { return source_; }
  const std::string& key() const { return key_; }
  int line() const { return line_; }

 private:
  std::string source_;
  std::string key_;
  int line_;
};

struct DetectorConfig {
  std::string type = "moench";       ///< moench | jungfrau | eiger | generic
  uint32_t rows = 400;               ///< assembled image rows (y)
  uint32_t cols = 400;               ///< assembled image columns (x)
  std::string pixel_type = "uint16"; ///< what the finder sees; only uint16
  uint32_t ports_x = 1;              ///< slsReceiver detshape[0]: ports side by side in x
  uint32_t ports_y = 1;              ///< detshape[1]: ports stacked in y
  uint32_t port_rows() const { return rows / ports_y; }
  uint32_t port_cols() const { return cols / ports_x; }
  uint32_t n_ports() const { return ports_x * ports_y; }
};

struct IngestConfig {
  std::vector<std::string> endpoints{"tcp://127.0.0.1:30001"};  ///< one ZeroMQ SUB per endpoint
  uint32_t queue_frames = 256;      ///< assembled frames buffered before the finder; then drops
  uint32_t reorder_frames = 128;    ///< frames waiting for missing parts before "incomplete"
  uint32_t part_timeout_ms = 500;   ///< oldest pending image is declared incomplete after this
  int receive_hwm = 10000;          ///< ZMQ_RCVHWM of each SUB socket (messages)
  int receive_buffer_bytes = 0;     ///< ZMQ_RCVBUF; 0 = the system default
  int copy_threads = -1;            ///< threads copying images into the finder's input;
                                    ///< 0 = the run's own thread, -1 ("auto") = by core count
};

struct PedestalConfig {
  uint32_t dark_frames = 1000;  ///< dark frames at the start of each run
  bool keep_previous = false;   ///< reuse the previous run's pedestal (same shape) instead
  uint32_t window = 1000;       ///< pedestal running-average window
};

struct FinderConfig {
  double n_sigma = 5.0;
  int cluster_size = 3;             ///< 3, 5, 7 or 9
  std::string backend = "auto";     ///< cpu | gpu | auto
  unsigned threads = 0;             ///< CPU threads, 0 = all
  int batch_frames = 256;           ///< frames handed to the finder at once (GPU batch)
  int streams = 2;                  ///< GPU streams per device
  std::vector<int> gpu_ids{0};
};

struct OutputConfig {
  std::filesystem::path directory = "/var/lib/glint/runs";
  std::string run_name = "run";
  uint32_t flush_interval_ms = 1000;  ///< the run file is flushed at least this often
  bool overwrite = false;
};

struct RunConfig {
  bool auto_start = false;      ///< start a run when the daemon starts and after each run
  uint64_t max_frames = 0;      ///< stop after this many frames (dark included); 0 = no limit
  double max_seconds = 0;       ///< stop after this many seconds; 0 = no limit
};

struct ControlConfig {
  std::string endpoint = "tcp://127.0.0.1:5555";
};

/// Prometheus metrics over HTTP (docs/metrics.md): off unless enabled, and only ever on a
/// loopback address (a scraper or node_exporter on the same host, or a tunnel).
struct MetricsConfig {
  bool enabled = false;
  std::string listen = "127.0.0.1:9464";  ///< 127.x.x.x:PORT, localhost:PORT or [::1]:PORT
};

struct LoggingConfig {
  std::string level = "info";
};

/// The reconstruction stage beside cluster finding (tv-solver.md): hit images of every
/// `frames_per_slice` data frames are stacked into volumes of `slices` slices; each full volume
/// (and, with solve_partial, the partial one at the end of the run) is reconstructed and
/// appended to /entry/reconstruction of the run file as soon as it is solved.
struct ReconstructionConfig {
  bool enabled = false;
  uint32_t frames_per_slice = 100;
  uint32_t slices = 16;              ///< volume depth, >= 2
  std::string weight = "centres";    ///< centres (count cluster centres) | signal (summed ADU)
  std::string forward = "identity";  ///< identity | gaussian:SX,SY,SZ | mask:FILE.h5:/dataset
  double lambda = 0.05;              ///< TV regularisation weight, >= 0
  uint32_t outer = 20;               ///< FISTA iterations
  uint32_t tv_inner = 10;            ///< FGP steps per outer iteration
  bool cold_start = false;           ///< restart the FGP dual from 0 every outer iteration
  bool nonneg = true;                ///< x >= 0
  std::string variant = "two-state"; ///< GPU kernel variant (see `glint bench tv`)
  std::string backend = "auto";      ///< cpu | gpu | auto
  /// Reconstruct the partial volume left at the end of a run (at least two slices); off: the
  /// run ends once the full volumes already handed to the worker are written. Refused with a
  /// mask forward model (the mask is shaped for full volumes).
  bool solve_partial = false;
};

struct Config {
  DetectorConfig detector;
  IngestConfig ingest;
  PedestalConfig pedestal;
  FinderConfig finder;
  OutputConfig output;
  RunConfig run;
  ControlConfig control;
  LoggingConfig logging;
  ReconstructionConfig reconstruction;
  MetricsConfig metrics;

  std::string source;  ///< where it came from (file path or "<string>")
  std::string yaml;    ///< the text it was parsed from (to_yaml() gives the effective values)
};

/// Parses and validates YAML text. Missing keys take the documented defaults; unknown keys, bad
/// types and values out of range throw ConfigError.
Config parse(std::string_view yaml_text, std::string source = "<string>");
/// Reads and parses a file; a missing or unreadable file throws ConfigError.
Config load(const std::filesystem::path& path);
/// The configuration as YAML text, every key (parses back to the same values).
std::string to_yaml(const Config& c);
/// Host and port of a metrics.listen value that passed validation ("[::1]:9464" -> "::1", 9464).
std::pair<std::string, uint16_t> split_listen(const std::string& listen);

/// `base` with `overrides` (YAML or JSON text of a partial configuration, same keys) merged on
/// top, validated again. Throws ConfigError naming the override key at fault.
Config with_overrides(const Config& base, std::string_view overrides_text);

}  // namespace glint::config
