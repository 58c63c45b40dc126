#pragma once
// glintd's configuration: YAML parsed once into plain structs and validated. yaml-cpp stays
// inside config/; the rest of glint sees only these structs. The documented defaults live in
// config/glintd.example.yaml.
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
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
  /// Modules: a grid [x, y] of equal blocks of whole ports, each with its own pedestal and finder
  /// (detector.modules). [1, 1]: the image is one module.
  uint32_t modules_x = 1;
  uint32_t modules_y = 1;
  uint32_t n_modules() const { return modules_x * modules_y; }
  uint32_t module_rows() const { return rows / modules_y; }
  uint32_t module_cols() const { return cols / modules_x; }
  /// How each module is mounted (detector.module_orientation): normal, flip_rows, flip_cols or
  /// rotate_180 (glint::ModuleOrientation's names). Empty: all normal; one entry: all modules;
  /// otherwise one per module, row-major over the grid. Never all "normal" (that is empty).
  std::vector<std::string> module_orientation;
  /// Where this image sits in a larger detector read by several glintd (detector.placement):
  /// the whole detector's shape (0: this image), this image's origin in it, and the id of its
  /// first module (ids run row-major over the module grid from there).
  uint32_t detector_rows = 0;
  uint32_t detector_cols = 0;
  uint32_t origin_row = 0;
  uint32_t origin_col = 0;
  uint32_t first_module = 0;
  uint32_t whole_rows() const { return detector_rows ? detector_rows : rows; }
  uint32_t whole_cols() const { return detector_cols ? detector_cols : cols; }
  /// Whether the run file records modules (more than one module, or part of a larger detector).
  bool has_modules() const {
    return n_modules() > 1 || whole_rows() != rows || whole_cols() != cols || first_module != 0;
  }
  /// The whole detector's port grid and this image's first port in it, as slsReceiver's headers
  /// give them on every host, when the placement puts this image in a larger detector on port
  /// boundaries; nullopt otherwise.
  struct WholePorts {
    uint32_t x, y, col0, row0;
  };
  std::optional<WholePorts> whole_ports() const {
    const uint32_t pr = port_rows(), pc = port_cols();
    if (whole_rows() == rows && whole_cols() == cols) return std::nullopt;
    if (whole_rows() % pr != 0 || whole_cols() % pc != 0 || origin_row % pr != 0 ||
        origin_col % pc != 0)
      return std::nullopt;
    return WholePorts{whole_cols() / pc, whole_rows() / pr, origin_col / pc, origin_row / pr};
  }
};

/// JUNGFRAU calibration (detector.type jungfrau only). Without a gain file, clusters are found on
/// G0 pixels only and pixels in G1/G2 are counted per frame; with one, on frames calibrated to keV.
struct CalibrationConfig {
  std::string gain_file;      ///< PSI module gain file (G0, G1, G2[, HG0, HG1, HG2] float64)
  std::string pedestal_file;  ///< G1/G2 pedestals (float64 G0, G1, G2 arrays, ADU); empty: dark
  bool hg0 = false;           ///< use the gain file's HG0 array for G0
  std::string units = "keV";  ///< what calibrated frames and cluster values are in; only keV
  bool calibrated() const { return !gain_file.empty(); }
};

/// The pixel mask (NXdetector pixel_mask bits): clusters centred on a masked pixel are removed
/// from the results and counted; the pedestal and the finder never see it.
struct MaskConfig {
  std::string file;           ///< FILE.h5:/dataset, uint32 rows x cols; empty: none
  bool from_dark = false;     ///< flag dead, noisy (and JUNGFRAU gain-switching) pixels
  double noisy_factor = 5.0;  ///< noisy: noise > noisy_factor x the median noise (from_dark)
  bool enabled() const { return !file.empty() || from_dark; }
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
  /// A frame number more than this above the port's previous one is bad input (frame_jump):
  /// a glitched counter must not end the run or write millions of missing rows.
  uint64_t max_frame_jump = 1000000;
};

struct PedestalConfig {
  uint32_t dark_frames = 1000;  ///< dark frames at the start of each run
  bool keep_previous = false;   ///< reuse the previous run's pedestal (same shape) instead
  uint32_t window = 1000;       ///< pedestal running-average window
  /// What marks a frame as dark. "none": the first dark_frames frames of the run are dark.
  /// "frame_mode": the frames whose addJsonHeader says frameMode pedestal (or newPedestal) are
  /// dark, unmarked ones data; dark_frames of them make the pedestal ready (or fewer, when an
  /// unmarked frame follows marked ones).
  std::string dark_marker = "none";
  /// Where a run's pedestal comes from: "dark" (its dark frames), "previous" (the previous run's
  /// end state, also across a restart: read from the previous run file; keep_previous: true says
  /// the same) or "file:PATH" (a pedestal file or a run file, its end state).
  std::string source = "dark";
  bool from_previous() const { return keep_previous || source == "previous"; }
  /// The PATH of "file:PATH", empty otherwise.
  std::string file() const { return source.starts_with("file:") ? source.substr(5) : ""; }
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
  /// Where a `start` override may put a run (the directory itself or below, symlinks resolved);
  /// `directory` above, from the configuration file, is trusted.
  std::vector<std::filesystem::path> allowed_roots{"/var/lib/glint/runs"};
  std::string run_name = "run";       ///< see is_safe_run_name()
  uint32_t flush_interval_ms = 1000;  ///< the run file is flushed at least this often
  bool overwrite = false;
  bool clust = false;  ///< also write the clusters as <run file>.clust (aare's ClusterFile format)
};

struct RunConfig {
  bool auto_start = false;      ///< start a run when the daemon starts and after each run
  uint64_t max_frames = 0;      ///< stop after this many frames (dark included); 0 = no limit
  double max_seconds = 0;       ///< stop after this many seconds; 0 = no limit
  uint64_t memory_budget_mb = 8192;  ///< a run whose run_memory() exceeds this is refused
  /// Rows flagged missing a run writes at most; reaching it ends the run (end reason
  /// missing_rows).
  uint64_t max_missing_rows = 10000000;
  /// A run that received data and then none for this long ends (end reason idle); 0 = never.
  double idle_end_seconds = 60;
};

struct ControlConfig {
  std::string endpoint = "tcp://127.0.0.1:5555";
  uint32_t max_request_bytes = 65536;  ///< larger requests are refused before parsing
  /// CURVE (encryption and client keys) even on a loopback endpoint; off a loopback endpoint it
  /// is always required.
  bool require_curve = false;
  std::string curve_server_key;  ///< the server's key pair file (`glint ctl keygen`)
  std::string curve_clients;     ///< file or directory of the client public keys allowed in
  std::string curve_admins;      ///< file or directory of the keys that may shutdown and abort;
                                 ///< empty: every allowed client may
  /// Whether CURVE is in force: required, or the endpoint is not loopback.
  bool curve() const;
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

/// The live view (docs/live-view.md): glintd publishes each run's images (hit map, energy image,
/// spectrum, pedestal and noise maps, ...) on a ZeroMQ PUB socket, bound once when glintd starts,
/// at most rate_hz updates a second, in slsReceiver's stream format; `glint view` shows them.
/// Sending never delays a run: what the socket cannot take at once is dropped and counted.
struct PreviewConfig {
  bool enabled = true;
  std::string endpoint = "tcp://127.0.0.1:5556";  ///< bound; tcp://HOST:* picks a free port
  double rate_hz = 2.0;  ///< updates a second at most (plus one at the end of each run)
  int hwm = 2;           ///< updates queued per subscriber; past it ZeroMQ drops messages
  std::vector<std::string> images;  ///< the images sent, by name; empty: every one offered
  /// Whether an image called `what` is sent.
  bool sends(std::string_view what) const;
};

/// The reconstruction stage beside cluster finding (docs/tv-solver.md): hit images of every
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

/// The science products of a run (docs/products.md), computed from its clusters and written into
/// the run file: hit map and energy image, hit maps per slice of frames, spectra, eta
/// distributions, the sub-pixel image, and each cluster's energy beside it.
struct ProductsConfig {
  std::string energy = "sum";           ///< sum (S x S) | 2x2 (largest quadrant): what is used
  std::vector<double> energy_window;    ///< [emin, emax] inclusive (ADU or keV); empty: none
  bool hitmap = true;                   ///< hit map and energy image
  uint32_t slice_frames = 0;            ///< > 0: a hit map per slice of this many frames
  uint32_t spectrum_bins = 500;         ///< spectrum bins (the spectrum is always made)
  double spectrum_min = 0.0;
  double spectrum_max = 0.0;            ///< 0: 2000 ADU (raw frames), 50 keV (calibrated)
  bool pixel_spectra = false;           ///< rows x cols x bins counts
  bool eta = false;                     ///< eta2 and eta3 distributions
  uint32_t eta_bins = 100;
  std::string subpixel_calibration;     ///< an eta calibration file: the sub-pixel image
  uint32_t subpixel_factor = 5;         ///< sub-pixels per pixel and axis
  bool cluster_energy = true;           ///< /entry/clusters/energy and energy_2x2
  int threads = -1;                     ///< worker threads; -1 ("auto"): min(4, cores / 4)
  /// Where the products are accumulated: auto (the GPU when one is usable, else CPU workers) |
  /// cpu | gpu (a GPU, an error at the run's start when none is usable).
  std::string device = "auto";
  /// The spectrum's upper edge: spectrum_max, or its default for the frames' units.
  double spectrum_upper(bool calibrated) const {
    return spectrum_max > 0 ? spectrum_max : (calibrated ? 50.0 : 2000.0);
  }
};

struct Config {
  DetectorConfig detector;
  CalibrationConfig calibration;
  MaskConfig mask;
  IngestConfig ingest;
  PedestalConfig pedestal;
  FinderConfig finder;
  OutputConfig output;
  RunConfig run;
  ControlConfig control;
  LoggingConfig logging;
  PreviewConfig preview;
  ReconstructionConfig reconstruction;
  MetricsConfig metrics;
  ProductsConfig products;

  std::string source;  ///< where it came from (file path or "<string>")
  std::string yaml;    ///< the text it was parsed from (to_yaml() gives the effective values)
  std::map<std::string, int> lines;  ///< the line of every key given, by dotted path
  /// The line `key` (dotted path, e.g. "output.directory") was given on; 0 when it was not.
  int line(const std::string& key) const;
};

/// Run names are file name prefixes: 1 to kMaxRunNameLength characters of A-Z a-z 0-9 . _ -,
/// not starting with '.', without "..".
inline constexpr std::size_t kMaxRunNameLength = 64;
bool is_safe_run_name(std::string_view name);
/// What is allowed in a run name, for error messages.
std::string_view run_name_rule();

/// Control endpoints that only this host can reach: ipc://, and tcp:// on 127.0.0.0/8, [::1]
/// or localhost.
bool is_loopback_endpoint(std::string_view endpoint);

/// Whether `dir` is one of `roots` or below one, both resolved (symlinks, "..") with
/// std::filesystem::weakly_canonical.
bool directory_within(const std::filesystem::path& dir,
                      const std::vector<std::filesystem::path>& roots);

/// The keys a `start` override may change (dotted paths; "reconstruction.*" for a section).
std::span<const std::string_view> override_keys();

/// What a run with this configuration holds in memory, roughly and from above (bytes): images
/// queued and waiting for parts in the assembler (16 bits a pixel), the CPU finder's batch, per
/// GPU the pinned staging (batch_frames x streams images) and as much again on the device, the
/// pedestal, and the reconstruction's volumes. With backend auto the GPU figures are counted.
struct RunMemory {
  uint64_t assembler = 0, batch = 0, pinned = 0, device = 0, pedestal = 0, reconstruction = 0;
  uint64_t total() const { return assembler + batch + pinned + device + pedestal + reconstruction; }
  std::string describe() const;  ///< "N MB (assembler A MB, ...)"
};
RunMemory run_memory(const Config& c);
/// Throws ConfigError (key run.memory_budget_mb) with the figure and the budget when
/// run_memory(c) exceeds c.run.memory_budget_mb.
void check_memory_budget(const Config& c);

/// Parses and validates YAML text. Missing keys take the documented defaults; unknown keys, keys
/// given twice, bad types and values out of range throw ConfigError.
Config parse(std::string_view yaml_text, std::string source = "<string>");
/// Reads and parses a file; a missing or unreadable file, a directory and a file without any key
/// throw ConfigError.
Config load(const std::filesystem::path& path);
/// The configuration as YAML text, every key (parses back to the same values).
std::string to_yaml(const Config& c);
/// Host and port of a metrics.listen value that passed validation ("[::1]:9464" -> "::1", 9464).
std::pair<std::string, uint16_t> split_listen(const std::string& listen);

/// `base` with `overrides` (YAML or JSON text of a partial configuration, same keys) merged on
/// top, validated again. Only override_keys() may be given; output.directory must be within
/// base's output.allowed_roots (or be base's directory). Throws ConfigError naming the override
/// key at fault.
Config with_overrides(const Config& base, std::string_view overrides_text);

}  // namespace glint::config
