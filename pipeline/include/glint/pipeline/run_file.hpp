#pragma once
// One HDF5 file per acquisition run (docs/file-layout.md), NeXus-style, written in
// SWMR mode so that h5py and h5dump can read it while it grows and after a crash (everything
// flushed before the crash stays readable).
//
//   /entry                      NXentry: start_time, end_time, program_name, program_version,
//                               config (the run's effective configuration, YAML text)
//   /entry/instrument/detector  NXdetector: frame_shape, pixel_type, detector_type, source,
//                               n_sigma, cluster_size, backend, pedestal_window
//   /entry/instrument/detector/pixel_mask  (with a pixel mask, RunMetadata::pixel_mask) H x W
//                               uint32, NXdetector bits (pixel_mask_bit_meanings()), 0 until
//                               written at the end of the dark frames
//   /entry/instrument/detector/module_<id>  (RunMetadata::modules, when recorded: more than one
//                               module, a part of a larger detector, or a module not mounted
//                               normal) NXdetector_module per module: data_origin, data_size,
//                               @module_id, @detector_origin; with a module not mounted normal,
//                               each also @orientation and fast_pixel_direction,
//                               slow_pixel_direction (module_axes); the detector gets @modules,
//                               @module_grid, @detector_shape, @detector_origin, and
//                               /entry/clusters module u16 (the cluster's module id; x, y and
//                               data are then local and native to the module)
//   /entry/frames               frame_number u64, timestamp u64, cluster_offset u64,
//                               n_clusters u32, flags u8 (one row per frame, in order);
//                               masked_clusters u32 with a pixel mask (clusters removed)
//   /entry/clusters             NXcollection: frame_number u64, x u16, y u16,
//                               data (n, S, S) int32 (float32 keV when calibrated), and
//                               NXevent_data's fields mapped from those: per cluster event_id
//                               u32 (centre pixel y * cols + x) and event_time_offset u32 (0:
//                               extended, never written); per frame row event_index u64
//                               (= cluster_offset) and event_time_zero u64 (timestamp in ns)
//   /entry/instrument/events    NXevent_data: hard links to the four event_* datasets
//   /entry start_time, end_time, program_name: NXentry's fields (also as attributes)
//   /entry/pedestal             start_mean, start_noise, end_mean, end_noise (H x W float64,
//                               NaN until written) and the end state (end_sum, end_sum2,
//                               end_count) from which a later run can resume exactly;
//                               calibrated JUNGFRAU runs: calibration (3, H, W) float64, the
//                               ADC pedestal of G0, G1, G2 the calibration subtracts
//   /entry/reconstruction       NXprocess, created with the file when the run reconstructs
//                               (RunMetadata::reconstruction), so that volumes are appended in
//                               place during the run (SWMR) and survive a crash:
//     input, output             (n, slices, rows, cols) float32, unlimited first dimension, one
//                               chunk per slice, NaN where never written
//     first_frame, last_frame   (n) u64: the data frames each volume was built from
//     slices                    (n) u32: slices filled (< the configured depth for a partial
//                               volume at the end of the run)
//     iterations                (n) u32: FGP steps run (outer x tv_inner)
//     solve_seconds             (n) f64
//     status                    (n) u8: 0 complete volume, 1 partial volume (end of the run)
//     device                    (n) fixed 64-byte string: the solver that ran ("cpu", "gpu (..)")
//     attributes at creation: weight, frames_per_slice, slices, rows, cols, lambda, outer,
//       tv_inner, warm_start, nonneg, forward, variant, backend, solve_partial
//     attributes at close: frames, volumes_done, volumes_dropped, volumes_failed, volumes_written
//   A volume is complete in the file once it is in every per-volume table (they are extended
//   after the volume data is written and flushed); readers take the shortest table's length.
//   /entry/clusters/energy, energy_2x2  (RunMetadata::cluster_energy) per cluster: the S x S
//                               sum and the largest 2 x 2 quadrant sum (int32, float32 keV)
//   /entry/hitmap_slices        (RunMetadata::slice_frames > 0) NXdata: counts (n, H, W) u32 and
//                               frame_start (n) u64, appended as slices complete (SWMR)
//   /entry/hitmap, energy_image, spectrum, pixel_spectra, eta2, eta3, subpixel_image  NXdata
//                               of the products (set_products), written at close (docs/products.md)
//   /entry/flushed_rows          (2) u64: frame rows and cluster rows durable at the last
//                               successful flush (updated after each flush, and at close).
//                               Rows beyond it may be in the file after a failed write, with
//                               fill values: readers take only the rows it counts.
//   /entry attributes at close:  end_time; end_reason (why the run ended: "end of
//                               acquisition", "stop", "frame limit", "time limit", "abort",
//                               "shutdown", "disk_low" when free space fell below the reserve
//                               kept for a clean close, "idle", "missing_rows", "detector
//                               restart", ...); stream_stride (u64: the frame-number step of
//                               the stream, N for a decimated one: rows exist for those frame
//                               numbers only; 1 otherwise); masked_clusters (u64, with a pixel
//                               mask: the clusters it removed over the run).
//
// Storage faults: at each flush and between flushes (check_storage) the free space on the file
// system is checked against a reserve (StorageGuard) and the file's identity against its path;
// see flush(). When a write fails anyway (disk full), nothing more reaches the file: its
// descriptor is replaced by one that discards writes before HDF5 closes it, so the file stays
// as of its last successful flush (as a crash would leave it), with the SWMR-writing flag still
// set in its superblock. It opens in SWMR read mode as it is (read_run_file; h5py:
// File(path, "r", libver="latest", swmr=True)); for a plain open (h5dump, HDFView) run
// `h5clear -s FILE` once.
#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/cluster_table.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pedestal.hpp"
#include "glint/pipeline/storage_guard.hpp"
#include "glint/products/run_products.hpp"

namespace glint::pipeline {

/// Bits of /entry/frames/flags.
enum FrameFlag : uint8_t {
  kFlagIncomplete = 1,       ///< a port part never arrived, or completeImage was 0
  kFlagDark = 2,             ///< a pedestal (dark) frame: no clusters searched
  /// Reserved by the file layout for a frame whose clusters were cut short. glint never cuts
  /// them (a GPU batch with more clusters than its output holds is re-run exactly and counted in
  /// GpuFinderStats::overflow_reruns), so it never sets this bit.
  kFlagClusterOverflow = 4,
  kFlagMissing = 8,          ///< the frame number never arrived
  kFlagDropped = 16,         ///< arrived but dropped at the ingest (pipeline could not keep up)
};

struct FrameRow {
  uint64_t frame_number = 0;
  uint64_t timestamp = 0;
  uint64_t cluster_offset = 0;  ///< first row of the frame's clusters in /entry/clusters
  uint32_t n_clusters = 0;
  uint8_t flags = 0;
  friend bool operator==(const FrameRow&, const FrameRow&) = default;
};

/// The reconstruction's run-constant parameters: /entry/reconstruction and its datasets are
/// created with the file from these (attributes), before SWMR writing starts.
struct ReconstructionLayout {
  uint32_t nx = 0, ny = 0;           ///< slice extent (detector cols, rows)
  uint32_t slices = 0;               ///< configured volume depth (datasets' second dimension)
  uint32_t frames_per_slice = 0;
  std::string weight;                ///< hit mode: centres | signal
  double lambda = 0;
  uint32_t outer = 0, tv_inner = 0;
  bool warm_start = true, nonneg = true;
  std::string forward, variant, backend;  ///< as configured (backend: cpu | gpu | auto)
  bool solve_partial = false;        ///< the partial volume at the end of a run is reconstructed
  friend bool operator==(const ReconstructionLayout&, const ReconstructionLayout&) = default;
};

/// Where this file's image sits among the modules of a detector (docs/modules.md): a grid of
/// modules_x x modules_y equal modules over the image, module index k = gy * modules_x + gx
/// with id first_module + k, and the image at (origin_row, origin_col) of a detector of
/// detector_rows x detector_cols pixels (0: the image's own shape). The default is one module
/// that is the whole detector: the file then holds no module datasets.
struct ModuleLayout {
  uint32_t modules_x = 1, modules_y = 1;
  uint32_t detector_rows = 0, detector_cols = 0;
  uint32_t origin_row = 0, origin_col = 0;
  uint32_t first_module = 0;
  /// How each module is mounted (index k as above); empty: all normal.
  std::vector<ModuleOrientation> orientations;
  uint32_t n_modules() const { return modules_x * modules_y; }
  /// Module k's orientation.
  ModuleOrientation orientation(std::size_t k) const {
    return orientations.empty() ? ModuleOrientation::normal : orientations.at(k);
  }
  /// Whether a module is mounted other than normal.
  bool oriented() const {
    return std::any_of(orientations.begin(), orientations.end(),
                       [](ModuleOrientation o) { return o != ModuleOrientation::normal; });
  }
  /// Whether a file of frames of `shape` records its modules (config's has_modules(), or a
  /// module not mounted normal).
  bool recorded(FrameShape shape) const {
    return n_modules() > 1 || (detector_rows != 0 && detector_rows != shape.rows) ||
           (detector_cols != 0 && detector_cols != shape.cols) || origin_row != 0 ||
           origin_col != 0 || first_module != 0 || oriented();
  }
  friend bool operator==(const ModuleLayout&, const ModuleLayout&) = default;
};

/// One module of a run file (/entry/instrument/detector/module_<id>, NXdetector_module).
struct ModuleInfo {
  uint32_t id = 0;
  std::array<uint32_t, 2> data_origin{};      ///< (row, col) in the file's image
  std::array<uint32_t, 2> data_size{};        ///< (rows, cols)
  std::array<uint32_t, 2> detector_origin{};  ///< (row, col) in the whole detector
  /// How the image shows the module (@orientation; normal when the file has none). The
  /// clusters' x, y and values in the file are the module's native ones.
  ModuleOrientation orientation = ModuleOrientation::normal;
  /// The module's block of the file's image.
  ModuleRegion region() const {
    return ModuleRegion{data_origin[0], data_origin[1], {data_size[0], data_size[1]}, orientation};
  }
  friend bool operator==(const ModuleInfo&, const ModuleInfo&) = default;
};

/// A module's native pixel axes as NeXus writes them (fast_pixel_direction, slow_pixel_direction
/// of NXdetector_module), in pixels along the axes of the image: x its columns, y its rows. The
/// image pixel (column, row) of native pixel (x, y) is offset + x * fast + y * slow (the first two
/// components; the third is 0). `origin` (row, col) and `size` (rows, cols): the module's block.
struct ModuleAxes {
  std::array<double, 3> fast{}, slow{}, offset{};
};
ModuleAxes module_axes(ModuleOrientation o, std::array<uint32_t, 2> origin,
                       std::array<uint32_t, 2> size);

struct RunMetadata {
  std::string config_yaml;          ///< the run's effective configuration
  FinderParams finder;
  std::string detector_type = "unknown";
  std::string source;               ///< input file or stream endpoints
  std::string pixel_type = "uint16";
  std::string backend;              ///< e.g. "cpu (16 threads)", "gpu (NVIDIA H200)"
  /// Present when the run reconstructs: /entry/reconstruction is created with the file.
  std::optional<ReconstructionLayout> reconstruction;
  /// The run has a pixel mask: /entry/instrument/detector/pixel_mask and
  /// /entry/frames/masked_clusters are created with the file.
  bool pixel_mask = false;
  /// Each cluster's energies (/entry/clusters/energy, energy_2x2) are written with it.
  bool cluster_energy = false;
  /// > 0: /entry/hitmap_slices is created with the file (append_hitmap_slice).
  uint32_t slice_frames = 0;
  /// The modules of the image (default: one, nothing recorded). When recorded, the clusters
  /// handed to append() in image coordinates and orientation are stored with x, y local to
  /// their module and the module's id in /entry/clusters/module, x, y and values in the
  /// module's native orientation.
  ModuleLayout modules;
};

/// One reconstructed volume of the run (row i of the /entry/reconstruction datasets).
struct ReconstructionVolume {
  uint64_t first_frame = 0, last_frame = 0;  ///< the data frames the volume was built from
  uint32_t nx = 0, ny = 0, nz = 0;           ///< extent; input and output are (nz, ny, nx)
  std::vector<float> input, output;          ///< x fastest
  // Run-constant: written from the layout, read back from its attributes.
  double lambda = 0;
  uint32_t outer = 0, tv_inner = 0;
  bool warm_start = true, nonneg = true;
  std::string forward, variant;
  // Per volume.
  std::string backend;                       ///< the solver that ran, e.g. "gpu (NVIDIA H200)"
  double solve_seconds = 0;
  bool partial = false;                      ///< fewer slices than the layout's (end of the run)
};

/// What the reconstruction stage did over the whole run (attributes of /entry/reconstruction
/// written at close; the run-constant ones are in ReconstructionLayout).
struct ReconstructionSummary {
  uint64_t frames = 0, volumes_done = 0, volumes_dropped = 0, volumes_failed = 0;
};

/// A failure to create or write an output file: names the file and what failed.
class OutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RunFileWriter {
 public:
  /// Creates `path` with the metadata and all datasets, then switches to SWMR writing. The file
  /// is always created new (O_EXCL: a symlink or a file put there meanwhile is never written
  /// through). An existing file is refused, unless `overwrite` and it is a regular HDF5 file (an
  /// earlier run file): then it is unlinked first, never truncated (a hard link elsewhere keeps
  /// its data). Refused as well when the file system has less free space than a run needs to
  /// start and close cleanly. Nothing is left behind when creation fails. Throws OutputError.
  RunFileWriter(std::filesystem::path path, const RunMetadata& meta, bool overwrite = false);
  ~RunFileWriter();  // closes without the end pedestal if close() was not called; never throws
  RunFileWriter(RunFileWriter&&) noexcept;
  RunFileWriter& operator=(RunFileWriter&&) noexcept;
  RunFileWriter(const RunFileWriter&) = delete;
  RunFileWriter& operator=(const RunFileWriter&) = delete;

  /// The pedestal at the start of data taking.
  void write_start_pedestal(const PedestalState& pedestal);

  /// The ADC pedestal the calibration subtracts, per gain stage: kStages * pixels values,
  /// stage-major (G0, G1, G2), as jungfrau::Calibration::pedestal. Written to
  /// /entry/pedestal/calibration, which exists in files created for calibrated JUNGFRAU frames
  /// only (OutputError otherwise); std::invalid_argument for a table of the wrong size.
  void write_calibration_pedestal(std::span<const double> adc);

  /// Appends one frame row per frame of `table` (in order) and all its clusters.
  /// `timestamps`, `flags` and `masked` (clusters the pixel mask removed) are per frame of the
  /// table, or empty for zeros.
  void append(const ClusterTable& table, std::span<const uint64_t> timestamps = {},
              std::span<const uint8_t> flags = {}, std::span<const uint32_t> masked = {});

  /// The run's pixel mask (H x W, NXdetector bits); the file must have been created with
  /// RunMetadata::pixel_mask. Throws OutputError (std::invalid_argument for a wrong size).
  void write_pixel_mask(std::span<const uint32_t> mask);
  /// Clusters the pixel mask removed over the run: /entry's masked_clusters at close.
  void set_masked_clusters(uint64_t n);

  /// Appends rows of frames that carry no clusters (missing, dropped or dark frames); the
  /// writer sets cluster_offset and n_clusters.
  void append_empty_frames(std::span<const FrameRow> rows);

  /// Appends a reconstructed volume to /entry/reconstruction in place (extend, write slice by
  /// slice, flush: SWMR-legal, so readers see it during the run and it survives a crash). The
  /// file must have been created with RunMetadata::reconstruction; nx, ny must match it and nz
  /// be at most its slices. Safe to call from another thread than the rest (HDF5 serialises the
  /// calls); throws OutputError (e.g. disk full, no reconstruction layout, or after close) and
  /// std::invalid_argument for a volume of the wrong size.
  void add_reconstruction(const ReconstructionVolume& volume);
  /// Records the stage's totals; close() writes them as attributes of /entry/reconstruction.
  void set_reconstruction_summary(const ReconstructionSummary& summary);

  /// Appends one slice's hit map (H x W counts) and its first frame number to
  /// /entry/hitmap_slices (the file must have been created with RunMetadata::slice_frames).
  /// Throws OutputError (std::invalid_argument for a wrong size).
  void append_hitmap_slice(uint64_t frame_start, std::span<const uint32_t> counts);
  /// The run's products (hit map, energy image, spectrum, per-pixel spectra, eta), written as
  /// NXdata groups at close (shared, not copied); the slices' group gets its attributes from them
  /// too. std::invalid_argument for products of another frame shape.
  void set_products(std::shared_ptr<const products::ProductSums> sums);

  /// Makes everything written so far visible to readers and durable against a crash, records
  /// it in /entry/flushed_rows, then checks the storage (StorageGuard::check): the caller ends
  /// the run on Result::disk_low (cleanly, end reason "disk_low") and Result::lost (an error).
  /// Throws OutputError when the flush fails.
  StorageCheck flush();

  /// The storage check alone (no flush): cheap (three system calls), for between flushes.
  StorageCheck check_storage();

  /// Why the run ended: written as /entry's end_reason attribute at close.
  void set_end_reason(std::string reason);
  /// The stream's frame-number step (a decimated stream: N): /entry's stream_stride at close.
  void set_stream_stride(uint64_t stride);

  /// Writes the end pedestal (when given), end_time, end_reason and the reconstruction totals,
  /// and closes. After a failed write nothing more is written: the file is closed as of its
  /// last successful flush (see the storage faults above). Idempotent.
  void close(const PedestalState* end_pedestal);

  /// True once a write to the file failed (the file is kept as of its last successful flush).
  bool failed() const;

  bool is_open() const;
  uint64_t frames_written() const;
  uint64_t clusters_written() const;
  const std::filesystem::path& path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `<dir>/<run_name>_<run_index:06>.h5`.
std::filesystem::path run_file_path(const std::filesystem::path& dir, std::string_view run_name,
                                    uint64_t run_index);

/// The products' groups of a run file, read back (empty vectors for those it does not hold).
struct ProductsContents {
  bool present = false;             ///< /entry/spectrum exists (the products were written)
  std::string energy_kind;          ///< the groups' energy_kind attribute
  std::vector<double> energy_window;
  uint64_t clusters = 0, frames = 0;
  std::string units;                ///< of the energies: ADU | keV
  std::vector<uint64_t> hitmap;     ///< H x W
  std::vector<double> energy_image; ///< H x W
  std::vector<uint32_t> slices;     ///< n x H x W
  std::vector<uint64_t> slice_frame_start;
  std::vector<uint64_t> spectrum;
  std::vector<double> spectrum_energy, spectrum_edges;
  uint64_t underflow = 0, overflow = 0;
  std::vector<uint32_t> pixel_spectra;  ///< H x W x bins
  std::vector<uint64_t> eta2, eta3;     ///< bins x bins, eta y rows
  std::vector<double> eta2_x, eta3_x;   ///< bin centres (eta_y the same)
  uint64_t eta2_outside = 0, eta3_outside = 0;
  std::vector<uint64_t> subpixel;       ///< (H f) x (W f), /entry/subpixel_image
  std::vector<double> subpixel_x, subpixel_y;  ///< bin centres, pixel units
  uint32_t subpixel_factor = 0;
  std::string subpixel_calibration;
  uint64_t subpixel_outside = 0;        ///< eta outside the calibration
  uint64_t subpixel_off_detector = 0;   ///< positions off the detector
};

/// Everything a run file holds, read back (tests, tools, pedestal hand-over).
struct RunFileContents {
  std::vector<FrameRow> frames;
  ClusterTable clusters;            ///< one record per frame row, clusters in file order
  FrameShape shape{};
  int cluster_size = 0;
  double n_sigma = 0.0;
  uint32_t pedestal_window = 0;
  std::string start_time;
  std::string end_time;             ///< empty when the run never closed (crash)
  std::string end_reason;           ///< empty when the run never closed or before glint wrote it
  uint64_t stream_stride = 0;       ///< /entry/stream_stride; 0 when not written
  /// /entry/instrument/detector/pixel_mask (H x W NXdetector bits); empty without a mask.
  std::vector<uint32_t> pixel_mask;
  /// /entry/frames/masked_clusters per frame row; empty without a mask.
  std::vector<uint32_t> frame_masked_clusters;
  std::optional<uint64_t> masked_clusters;  ///< /entry's masked_clusters, when written
  std::string config_yaml;
  std::string backend;
  std::vector<double> start_mean, start_noise, end_mean, end_noise;
  /// JUNGFRAU runs: per frame row, pixels in G1/G2 and with the invalid gain code.
  std::vector<uint32_t> gain_switched, gain_invalid;
  std::optional<PedestalState> end_state;  ///< present when the end pedestal was written
  /// Calibrated JUNGFRAU runs: /entry/pedestal/calibration, the ADC pedestal of G0, G1, G2
  /// (stage-major, kStages * pixels; NaN until written). Empty when the file has none.
  std::vector<double> calibration_pedestal;
  /// When the run reconstructed; the counts are the table length after a crash (no totals).
  std::optional<ReconstructionSummary> reconstruction_summary;
  std::optional<ReconstructionLayout> reconstruction_layout;
  std::vector<ReconstructionVolume> reconstruction;             ///< in the order reconstructed
  /// /entry/clusters/energy and energy_2x2 per cluster (int32, or float32 bits when the
  /// clusters are float); empty when the file has none.
  std::vector<int32_t> cluster_energy, cluster_energy_2x2;
  ProductsContents products;
  /// The modules (docs/modules.md). A file that records none reads as one module, id 0, at
  /// (0, 0) of a detector of its own shape, and `cluster_module` is then empty.
  std::vector<ModuleInfo> modules;
  std::array<uint32_t, 2> detector_shape{};   ///< /entry/instrument/detector's detector_shape
  std::array<uint32_t, 2> detector_origin{};  ///< this file's image in the detector
  /// /entry/clusters/module per cluster row (the id of its module); `clusters` then holds x, y
  /// local to that module and values native to it, as the file does. image_clusters() and
  /// detector_clusters() give them in the image's and in the detector's coordinates, through
  /// each module's orientation (x, y and the values as the image shows them).
  std::vector<uint16_t> cluster_module;
  /// The module of that id (std::out_of_range when the file has none).
  const ModuleInfo& module(uint32_t id) const;
};

/// The clusters of `run` with x, y in its image (frame_shape) coordinates and values in the
/// image's orientation.
ClusterTable image_clusters(const RunFileContents& run);
/// The clusters of `run` with x, y in the whole detector's coordinates (values as
/// image_clusters()).
ClusterTable detector_clusters(const RunFileContents& run);

/// Reads a run file (also one still being written, through SWMR). Throws OutputError.
RunFileContents read_run_file(const std::filesystem::path& path);

/// The end pedestal state (sum, sum2, count, window, shape) of a run file or a pedestal file,
/// without reading the rest. Throws OutputError naming the file when it holds none (a run that
/// never closed) or cannot be read.
PedestalState read_pedestal_state(const std::filesystem::path& path);

/// Writes a pedestal file: a run file without frames whose start and end pedestal are `state`
/// (read_pedestal_state and read_run_file read it back). `source` is recorded (e.g. the frames
/// it was made from). Throws OutputError.
void write_pedestal_file(const std::filesystem::path& path, const PedestalState& state,
                         const std::string& source, bool overwrite);

namespace detail {
/// HDF5's own message for its most recent failure as one line (its automatic printing is
/// switched off); the error stack is cleared.
std::string hdf5_message();
}  // namespace detail

}  // namespace glint::pipeline
