#include "glint/pipeline/run_file.hpp"

#include "glint/hdf5_handle.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <utility>

#include "glint/jungfrau.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/pixel_mask.hpp"

namespace glint::pipeline {

namespace detail {

/// One HDF5 error description as one line: HDF5 puts the wall-clock time (ctime(), which ends
/// in a newline) into some ("unable to open file: time = Wed Dec  2 ...\n, name = ..."); that
/// part says nothing about the failure and is left out, other control characters are escaped.
static std::string hdf5_description(std::string_view desc) {
  std::string text(desc);
  for (auto at = text.find("time = "); at != std::string::npos; at = text.find("time = ", at)) {
    auto end = text.find('\n', at);
    end = end == std::string::npos ? text.find(',', at) : end + 1;
    if (end == std::string::npos) end = text.size();
    if (text.compare(end, 2, ", ") == 0) end += 2;
    text.erase(at, end - at);
  }
  while (!text.empty() && (text.back() == ' ' || text.back() == ',' || text.back() == '\n'))
    text.pop_back();
  return log::one_line(text);
}

std::string hdf5_message() {
  std::string text;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_DOWNWARD,
      [](unsigned n, const H5E_error2_t* e, void* data) -> herr_t {
        auto* out = static_cast<std::string*>(data);
        if (n < 3 && e->desc && *e->desc) {
          if (!out->empty()) *out += "; ";
          *out += hdf5_description(e->desc);
        }
        return 0;
      },
      &text);
  H5Eclear2(H5E_DEFAULT);
  return text.empty() ? "HDF5 error" : text;
}

}  // namespace detail

namespace {

using detail::hdf5_message;

// --- HDF5 plumbing -------------------------------------------------------------------------

using Hid = hdf5::Handle;

/// HDF5's clean-up at exit, which closes every identifier still open, is skipped: the files
/// here are closed by their writers. H5dont_atexit works only before the library initialises,
/// hence at static initialisation of this file.
[[maybe_unused]] const bool kSkipHdf5AtExit = [] { return H5dont_atexit() >= 0; }();

/// Switches HDF5's printing of errors off for the calling thread (HDF5 keeps that setting per
/// thread): called on entry to everything here that makes HDF5 calls, since a writer's methods
/// run on the run's thread and the reconstruction thread, and each run has a thread of its own.
void silence_hdf5() {
  thread_local const bool done = [] {
    hdf5::silence_errors();
    return true;
  }();
  (void)done;
}

struct Context {
  const std::filesystem::path* path;
  [[noreturn]] void fail(const std::string& what) const {
    throw OutputError(path->string() + ": " + what + ": " + hdf5_message());
  }
  hid_t id(hid_t handle, const std::string& what) const {
    if (handle < 0) fail(what);
    return handle;
  }
  void check(herr_t status, const std::string& what) const {
    if (status < 0) fail(what);
  }
};

using glint::hdf5::native_type;

void write_string_attr(const Context& c, hid_t obj, const char* name, const std::string& value) {
  if (!glint::hdf5::write_attribute(obj, name, value)) c.fail(std::string("attribute ") + name);
}

template <class T>
void write_numeric_attr(const Context& c, hid_t obj, const char* name, std::span<const T> values) {
  if (!glint::hdf5::write_attribute<T>(obj, name, values))
    c.fail(std::string("attribute ") + name);
}

template <class T>
void write_numeric_attr(const Context& c, hid_t obj, const char* name, T value) {
  write_numeric_attr<T>(c, obj, name, std::span<const T>(&value, 1));
}

/// A scalar text dataset (variable-length UTF-8, as the attributes).
Hid write_string_dataset(const Context& c, hid_t parent, const char* name,
                         const std::string& value) {
  Hid type = hdf5::string_type();
  Hid space(c.id(H5Screate(H5S_SCALAR), "dataspace"), H5Sclose);
  Hid ds(c.id(H5Dcreate2(parent, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT),
              std::string("dataset ") + name),
         H5Dclose);
  const char* p = value.c_str();
  c.check(H5Dwrite(ds.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), name);
  return ds;
}

/// A 1-D attribute of texts (variable-length UTF-8), e.g. NXdata's axes.
void write_strings_attr(const Context& c, hid_t obj, const char* name,
                        const std::vector<std::string>& values) {
  Hid type = hdf5::string_type();
  const hsize_t n = values.size();
  Hid space(c.id(H5Screate_simple(1, &n, nullptr), "dataspace"), H5Sclose);
  Hid attr(c.id(H5Acreate2(obj, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                std::string("attribute ") + name),
           H5Aclose);
  std::vector<const char*> p;
  for (const auto& v : values) p.push_back(v.c_str());
  c.check(H5Awrite(attr.get(), type.get(), p.data()), std::string("attribute ") + name);
}

/// A fixed-size dataset of `dims`, written whole from `data` (stored as T).
template <class T>
Hid write_array(const Context& c, hid_t parent, const char* name, std::vector<hsize_t> dims,
                const T* data) {
  Hid space(c.id(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                 "dataspace"),
            H5Sclose);
  Hid ds(c.id(H5Dcreate2(parent, name, native_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT),
              std::string("dataset ") + name),
         H5Dclose);
  c.check(H5Dwrite(ds.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
          std::string("writing ") + name + " (disk full?)");
  return ds;
}

Hid make_group(const Context& c, hid_t parent, const char* name, const char* nx_class) {
  Hid g(c.id(H5Gcreate2(parent, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                std::string("group ") + name),
        H5Gclose);
  write_string_attr(c, g.get(), "NX_class", nx_class);
  return g;
}

/// An extendible dataset of rows (each row `row_dims` elements), chunked along the rows.
Hid make_table(const Context& c, hid_t parent, const char* name, hid_t type,
               std::span<const hsize_t> row_dims, hsize_t chunk_rows) {
  std::array<hsize_t, 3> dims{0, 0, 0}, maxdims{H5S_UNLIMITED, 0, 0}, chunk{chunk_rows, 0, 0};
  const int rank = 1 + static_cast<int>(row_dims.size());
  for (std::size_t i = 0; i < row_dims.size(); ++i) {
    dims[i + 1] = maxdims[i + 1] = chunk[i + 1] = row_dims[i];
  }
  Hid space(c.id(H5Screate_simple(rank, dims.data(), maxdims.data()), "dataspace"), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  c.check(H5Pset_chunk(dcpl.get(), rank, chunk.data()), "chunking");
  return Hid(c.id(H5Dcreate2(parent, name, type, space.get(), H5P_DEFAULT, dcpl.get(),
                                H5P_DEFAULT),
                     std::string("dataset ") + name),
             H5Dclose);
}

/// A fixed H x W image dataset filled with `fill` until written.
template <class T>
Hid make_image(const Context& c, hid_t parent, const char* name, FrameShape shape, T fill) {
  const std::array<hsize_t, 2> dims{shape.rows, shape.cols};
  Hid space(c.id(H5Screate_simple(2, dims.data(), nullptr), "dataspace"), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  c.check(H5Pset_fill_value(dcpl.get(), native_type<T>(), &fill), "fill value");
  c.check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_ALLOC), "fill time");
  // Space taken at creation: the end pedestal, written at close, needs none on a full disk.
  c.check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "allocation time");
  return Hid(c.id(H5Dcreate2(parent, name, native_type<T>(), space.get(), H5P_DEFAULT,
                                dcpl.get(), H5P_DEFAULT),
                     std::string("dataset ") + name),
             H5Dclose);
}

/// Appends `n` rows of `row_elems` elements each to an extendible dataset.
void append_rows(const Context& c, hid_t ds, hid_t mem_type, hsize_t old_rows, hsize_t n,
                 std::span<const hsize_t> row_dims, const void* data) {
  if (n == 0) return;
  std::array<hsize_t, 3> size{old_rows + n, 0, 0}, start{old_rows, 0, 0}, count{n, 0, 0};
  const int rank = 1 + static_cast<int>(row_dims.size());
  for (std::size_t i = 0; i < row_dims.size(); ++i) size[i + 1] = count[i + 1] = row_dims[i];
  c.check(H5Dset_extent(ds, size.data()), "extending a dataset");
  Hid file_space(c.id(H5Dget_space(ds), "dataspace"), H5Sclose);
  c.check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                              count.data(), nullptr),
          "selection");
  Hid mem_space(c.id(H5Screate_simple(rank, count.data(), nullptr), "dataspace"), H5Sclose);
  c.check(H5Dwrite(ds, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data),
          "writing (disk full?)");
}

/// Rows per chunk of the /entry/frames columns and the /entry/clusters columns (a quarter of
/// that for clusters/data).
constexpr hsize_t kFrameChunk = 4096, kClusterChunk = 4096;
/// Bytes of one /entry/frames row over its columns, with its row of the per-frame NXevent_data
/// fields in /entry/clusters (event_index, event_time_zero).
constexpr uint64_t kFrameRowBytes = 8 + 8 + 8 + 4 + 1 + 8 + 8;
/// Nanoseconds per tick of the detector timestamp (10 MHz).
constexpr uint64_t kNsPerTimestampTick = 100;

/// Bytes of /entry/reconstruction/device per row (a fixed size keeps the table SWMR-appendable).
constexpr std::size_t kDeviceChars = 64;

Hid make_device_type() {
  Hid t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), kDeviceChars);
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  return t;
}

/// An extendible (n, Z, Y, X) float32 dataset, one chunk per slice, NaN until written.
Hid make_volume_table(const Context& c, hid_t parent, const char* name, hsize_t nz, hsize_t ny,
                      hsize_t nx) {
  const std::array<hsize_t, 4> dims{0, nz, ny, nx}, maxdims{H5S_UNLIMITED, nz, ny, nx},
      chunk{1, 1, ny, nx};
  Hid space(c.id(H5Screate_simple(4, dims.data(), maxdims.data()), "dataspace"), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  c.check(H5Pset_chunk(dcpl.get(), 4, chunk.data()), "chunking");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  c.check(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_FLOAT, &nan), "fill value");
  // Every write is one whole chunk: no chunk cache, straight to the file.
  Hid dapl(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose);
  c.check(H5Pset_chunk_cache(dapl.get(), H5D_CHUNK_CACHE_NSLOTS_DEFAULT, 0,
                             H5D_CHUNK_CACHE_W0_DEFAULT),
          "chunk cache");
  return Hid(c.id(H5Dcreate2(parent, name, H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                             dapl.get()),
                  std::string("dataset ") + name),
             H5Dclose);
}

/// Writes volume row `row` (already within the extent) slice by slice: each H5Dwrite is one
/// chunk, so that the frame writer's calls interleave with a large volume's.
void write_volume_row(const Context& c, std::mutex& io, hid_t ds, hsize_t row,
                      const ReconstructionVolume& v, const float* data) {
  const hsize_t plane = hsize_t(v.nx) * v.ny;
  const std::array<hsize_t, 4> count{1, 1, v.ny, v.nx};
  Hid file_space(c.id(H5Dget_space(ds), "dataspace"), H5Sclose);
  // The memory space has the selection's shape: HDF5 then maps it to the chunk in one piece
  // (a flat one makes it walk every element, ~3x slower than the copy itself).
  Hid mem_space(c.id(H5Screate_simple(4, count.data(), nullptr), "dataspace"), H5Sclose);
  for (hsize_t z = 0; z < v.nz; ++z) {
    std::lock_guard lock(io);
    const std::array<hsize_t, 4> start{row, z, 0, 0};
    c.check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                count.data(), nullptr),
            "selection");
    c.check(H5Dwrite(ds, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT,
                     data + z * plane),
            "writing a reconstructed volume (disk full?)");
  }
}

std::string iso8601_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
}

Hid make_fapl() {
  Hid fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  return fapl;
}

/// The descriptor HDF5's default (sec2) driver holds for `file`, or -1.
int file_descriptor(hid_t file) {
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == nullptr) {
    H5Eclear2(H5E_DEFAULT);
    return -1;
  }
  return *static_cast<int*>(handle);
}

/// Makes every later write HDF5 makes to `file` go nowhere: its descriptor is replaced (dup2)
/// by an anonymous in-memory file. Used after a failed write, so that closing (which flushes
/// metadata that may refer to data never written) cannot damage what the last successful
/// flush left in the file. Reads of what was never written there return zeros; HDF5 needs few
/// at close. Returns false (logged by the caller) when it could not be done.
bool detach_from_disk(hid_t file) {
  const int fd = file_descriptor(file);
  if (fd < 0) return false;
  const int sink = memfd_create("glint-discarded-writes", MFD_CLOEXEC);
  if (sink < 0) return false;
  const bool ok = dup2(sink, fd) == fd;
  ::close(sink);
  return ok;
}

/// A module's orientation in its NXdetector_module group: @orientation and its native pixel
/// axes (module_axes) as fast_pixel_direction and slow_pixel_direction.
void write_module_orientation(const Context& c, hid_t g, ModuleOrientation o,
                              std::array<uint32_t, 2> origin, std::array<uint32_t, 2> size) {
  write_string_attr(c, g, "orientation", std::string(to_string(o)));
  const ModuleAxes axes = module_axes(o, origin, size);
  for (const auto& [name, vector] : {std::pair{"fast_pixel_direction", axes.fast},
                                     std::pair{"slow_pixel_direction", axes.slow}}) {
    const double pitch = 1.0;
    Hid ds = write_array<double>(c, g, name, {1}, &pitch);
    write_string_attr(c, ds.get(), "units", "pixel");
    write_string_attr(c, ds.get(), "transformation_type", "translation");
    write_numeric_attr<double>(c, ds.get(), "vector", vector);
    write_numeric_attr<double>(c, ds.get(), "offset", axes.offset);
    write_string_attr(c, ds.get(), "offset_units", "pixel");
  }
}

/// Bytes a run file of this layout takes when created (the pedestal images are allocated then),
/// with the reserve for its metadata: less free space than this, and a run does not start.
uint64_t bytes_to_start(const RunMetadata& meta) {
  const uint64_t pixels = uint64_t(meta.finder.shape.rows) * meta.finder.shape.cols;
  const uint64_t calibration = meta.finder.pixels == PixelMode::jungfrau_calibrated
                                   ? uint64_t{jungfrau::kStages} * sizeof(double)
                                   : 0;
  return pixels * (6 * sizeof(double) + sizeof(uint32_t) + calibration) +
         2 * StorageGuard::kMetadataReserve;
}

/// The module layout fits the frames: whole modules, the image inside the detector, ids that
/// fit /entry/clusters/module (u16). std::invalid_argument naming what does not.
void validate_modules(const RunMetadata& meta) {
  const ModuleLayout& l = meta.modules;
  const FrameShape s = meta.finder.shape;
  if (!l.recorded(s)) return;
  if (l.modules_x == 0 || l.modules_y == 0 || s.cols % l.modules_x != 0 ||
      s.rows % l.modules_y != 0)
    throw std::invalid_argument(fmt::format(
        "RunMetadata::modules: a grid of {} x {} modules does not divide {} x {} pixels into "
        "equal modules", l.modules_x, l.modules_y, s.rows, s.cols));
  const uint64_t rows = l.detector_rows ? l.detector_rows : s.rows;
  const uint64_t cols = l.detector_cols ? l.detector_cols : s.cols;
  if (uint64_t{l.origin_row} + s.rows > rows || uint64_t{l.origin_col} + s.cols > cols)
    throw std::invalid_argument(fmt::format(
        "RunMetadata::modules: an image of {} x {} at ({}, {}) does not fit a detector of "
        "{} x {}", s.rows, s.cols, l.origin_row, l.origin_col, rows, cols));
  if (!l.orientations.empty() && l.orientations.size() != l.n_modules())
    throw std::invalid_argument(fmt::format(
        "RunMetadata::modules: {} orientations for {} modules", l.orientations.size(),
        l.n_modules()));
  if (uint64_t{l.first_module} + l.n_modules() > 65536)
    throw std::invalid_argument(fmt::format(
        "RunMetadata::modules: module ids {}..{} do not fit 16 bits", l.first_module,
        uint64_t{l.first_module} + l.n_modules() - 1));
}

}  // namespace

// --- writer ----------------------------------------------------------------------------------

struct RunFileWriter::Impl {
  std::filesystem::path path;
  Context ctx{&path};
  FinderParams finder;
  Hid file;
  Hid f_frame_number, f_timestamp, f_cluster_offset, f_n_clusters, f_flags;
  // JUNGFRAU: pixels out of G0 per frame (G1 or G2; the invalid gain code), float clusters.
  bool gain_counts = false;
  bool float_clusters = false;
  Hid f_gain_switched, f_gain_invalid;
  // With a pixel mask: the mask and the clusters it removed per frame and over the run.
  bool pixel_mask = false;
  Hid d_pixel_mask, f_masked;
  std::vector<uint32_t> col_masked;
  uint64_t masked_clusters = 0;
  std::vector<uint32_t> col_gain_switched, col_gain_invalid;
  Hid c_frame_number, c_x, c_y, c_data;
  // The modules (RunMetadata::modules), when recorded: /entry/clusters/module and x, y local
  // to the module.
  ModuleLayout layout;
  bool modules = false;
  uint32_t module_rows = 0, module_cols = 0;
  std::vector<ModuleRegion> regions;  ///< by index over the grid, with their orientations
  Hid c_module;
  std::vector<uint16_t> col_module, col_local_x, col_local_y;
  std::vector<int32_t> col_native_data;  ///< the values native to their modules (oriented)
  // Each cluster's energies (RunMetadata::cluster_energy).
  bool cluster_energy = false;
  Hid c_energy, c_energy_2x2;
  std::vector<int32_t> col_energy, col_energy_2x2;
  // Hit maps per slice (RunMetadata::slice_frames), appended as they complete.
  uint32_t slice_frames = 0;
  Hid s_counts, s_frame_start;
  uint64_t slice_rows = 0;
  // The products, written at close (set_products).
  std::shared_ptr<const products::ProductSums> products;
  // NXevent_data's fields in /entry/clusters: per cluster (event_id; event_time_offset, only
  // extended: its fill value 0 is every value) and per frame row (event_index, event_time_zero).
  Hid c_event_id, c_event_time_offset, c_event_index, c_event_time_zero;
  Hid p_calibration;  // /entry/pedestal/calibration: calibrated JUNGFRAU runs only
  Hid p_start_mean, p_start_noise, p_end_mean, p_end_noise, p_end_sum, p_end_sum2, p_end_count;
  Hid flushed_rows;  // /entry/flushed_rows
  uint64_t frames = 0;
  uint64_t clusters = 0;
  bool closed = false;
  std::optional<StorageGuard> guard;
  // Bytes of data handed to HDF5 (rows, clusters, volumes), in all and at the last flush.
  uint64_t appended_bytes = 0, flushed_bytes = 0;
  StorageCheck check_storage() {
    return guard->check(appended_bytes - flushed_bytes, appended_bytes);
  }
  std::string end_reason;
  uint64_t stream_stride = 1;
  // Set by the first failed write: the file's descriptor then discards writes (see
  // detach_from_disk). Read by failed() on other threads.
  std::atomic<bool> write_failed{false};

  /// After a failed write: nothing more reaches the file. Called under io_mu.
  void stop_writing(const std::string& why) {
    if (write_failed.exchange(true)) return;
    if (detach_from_disk(file.get()))
      log::error("{}: writing failed ({}); nothing more is written to it: it is kept as of its "
                 "last flush", path.string(), why);
    else
      log::error("{}: writing failed ({}) and its descriptor could not be detached: {}",
                 path.string(), why, std::strerror(errno));
  }

  /// Runs `f` (HDF5 writes, under io_mu); an OutputError from it stops all writing first.
  template <class F>
  void write(F&& f) {
    if (write_failed.load())
      throw OutputError(path.string() + ": an earlier write failed; the file is kept as of its "
                        "last flush");
    try {
      f();
    } catch (const OutputError& e) {
      stop_writing(e.what());
      throw;
    }
  }

  void write_flushed_rows() {
    const std::array<uint64_t, 2> rows{frames, clusters};
    ctx.check(H5Dwrite(flushed_rows.get(), H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                       rows.data()),
              "writing /entry/flushed_rows");
    ctx.check(H5Dflush(flushed_rows.get()), "flushing /entry/flushed_rows");
  }

  // Serialises the HDF5 calls of the run's thread and the reconstruction thread (HDF5 does too
  // when built thread-safe, as Debian's is; this keeps other builds correct). Held per call
  // group, so that a volume's slices interleave with frame appends.
  std::mutex io_mu;
  // Reconstruction results, appended in place (possibly from the reconstruction thread). Taken
  // before io_mu.
  std::mutex recon_mu;
  std::optional<ReconstructionLayout> recon;
  Hid r_input, r_output, r_first_frame, r_last_frame, r_slices, r_iterations, r_solve_seconds,
      r_status, r_device;
  Hid device_type;
  uint64_t recon_rows = 0;
  std::optional<ReconstructionSummary> recon_summary;
  bool recon_closed = false;

  void close_recon() {
    for (Hid* h : {&r_input, &r_output, &r_first_frame, &r_last_frame, &r_slices, &r_iterations,
                   &r_solve_seconds, &r_status, &r_device, &device_type})
      h->reset();
  }

  /// /entry/reconstruction: the run-constant attributes and the empty extendible datasets.
  void create_recon(hid_t entry, const ReconstructionLayout& l) {
    const Context& c = ctx;
    if (l.nx == 0 || l.ny == 0 || l.slices == 0)
      throw OutputError(path.string() + ": reconstruction volumes of " + std::to_string(l.nx) +
                        "x" + std::to_string(l.ny) + "x" + std::to_string(l.slices));
    Hid g = make_group(c, entry, "reconstruction", "NXprocess");
    write_string_attr(c, g.get(), "program", "glint TV reconstruction (FISTA + FGP)");
    write_string_attr(c, g.get(), "weight", l.weight);
    write_numeric_attr<uint32_t>(c, g.get(), "frames_per_slice", l.frames_per_slice);
    write_numeric_attr<uint32_t>(c, g.get(), "slices", l.slices);
    write_numeric_attr<uint32_t>(c, g.get(), "rows", l.ny);
    write_numeric_attr<uint32_t>(c, g.get(), "cols", l.nx);
    write_numeric_attr<double>(c, g.get(), "lambda", l.lambda);
    write_numeric_attr<uint32_t>(c, g.get(), "outer", l.outer);
    write_numeric_attr<uint32_t>(c, g.get(), "tv_inner", l.tv_inner);
    write_numeric_attr<uint8_t>(c, g.get(), "warm_start", l.warm_start ? 1 : 0);
    write_numeric_attr<uint8_t>(c, g.get(), "nonneg", l.nonneg ? 1 : 0);
    write_string_attr(c, g.get(), "forward", l.forward);
    write_string_attr(c, g.get(), "variant", l.variant);
    write_string_attr(c, g.get(), "backend", l.backend);
    write_numeric_attr<uint8_t>(c, g.get(), "solve_partial", l.solve_partial ? 1 : 0);
    write_string_attr(c, g.get(), "status_values", "0 complete, 1 partial (end of the run)");
    r_input = make_volume_table(c, g.get(), "input", l.slices, l.ny, l.nx);
    r_output = make_volume_table(c, g.get(), "output", l.slices, l.ny, l.nx);
    constexpr hsize_t kRows = 64;
    r_first_frame = make_table(c, g.get(), "first_frame", H5T_STD_U64LE, {}, kRows);
    r_last_frame = make_table(c, g.get(), "last_frame", H5T_STD_U64LE, {}, kRows);
    r_slices = make_table(c, g.get(), "slices", H5T_STD_U32LE, {}, kRows);
    r_iterations = make_table(c, g.get(), "iterations", H5T_STD_U32LE, {}, kRows);
    r_solve_seconds = make_table(c, g.get(), "solve_seconds", H5T_IEEE_F64LE, {}, kRows);
    r_status = make_table(c, g.get(), "status", H5T_STD_U8LE, {}, kRows);
    device_type = make_device_type();
    r_device = make_table(c, g.get(), "device", device_type.get(), {}, kRows);
    recon = l;
  }

  uint64_t cluster_bytes() const {
    return 8 + 2 + 2 + 4 + (modules ? 2 : 0) +
           4 * uint64_t(finder.cluster_size) * finder.cluster_size;
  }

  std::array<hsize_t, 2> cluster_dims() const {
    return {static_cast<hsize_t>(finder.cluster_size), static_cast<hsize_t>(finder.cluster_size)};
  }

  void write_image(hid_t ds, hid_t type, const void* data) {
    ctx.check(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "writing the pedestal");
  }

  // Column buffers of one append, kept between calls so that a batch allocates nothing once
  // they have grown to the largest batch. Used under io_mu only.
  std::vector<uint64_t> col_frame_number, col_timestamp, col_cluster_offset, col_cluster_frame;
  std::vector<uint64_t> col_time_zero;
  std::vector<uint32_t> col_n_clusters, col_event_id;
  std::vector<uint8_t> col_flags;

  void resize_frame_columns(std::size_t n) {
    col_frame_number.resize(n);
    col_timestamp.resize(n);
    col_time_zero.resize(n);
    col_cluster_offset.resize(n);
    col_n_clusters.resize(n);
    col_flags.resize(n);
    if (gain_counts) {
      col_gain_switched.assign(n, 0);
      col_gain_invalid.assign(n, 0);
    }
    if (pixel_mask) col_masked.assign(n, 0);
  }

  /// Appends the rows held in the column buffers (resize_frame_columns, then filled).
  void append_frame_columns() {
    const hsize_t n = col_frame_number.size();
    append_rows(ctx, f_frame_number.get(), H5T_NATIVE_UINT64, frames, n, {}, col_frame_number.data());
    append_rows(ctx, f_timestamp.get(), H5T_NATIVE_UINT64, frames, n, {}, col_timestamp.data());
    append_rows(ctx, f_cluster_offset.get(), H5T_NATIVE_UINT64, frames, n, {},
                col_cluster_offset.data());
    append_rows(ctx, f_n_clusters.get(), H5T_NATIVE_UINT32, frames, n, {}, col_n_clusters.data());
    append_rows(ctx, f_flags.get(), H5T_NATIVE_UINT8, frames, n, {}, col_flags.data());
    if (gain_counts) {
      append_rows(ctx, f_gain_switched.get(), H5T_NATIVE_UINT32, frames, n, {},
                  col_gain_switched.data());
      append_rows(ctx, f_gain_invalid.get(), H5T_NATIVE_UINT32, frames, n, {},
                  col_gain_invalid.data());
    }
    // NXevent_data's per-pulse fields: a frame is a pulse, its first cluster the pulse's index.
    append_rows(ctx, c_event_index.get(), H5T_NATIVE_UINT64, frames, n, {},
                col_cluster_offset.data());
    for (std::size_t i = 0; i < n; ++i)
      col_time_zero[i] = col_timestamp[i] * kNsPerTimestampTick;
    append_rows(ctx, c_event_time_zero.get(), H5T_NATIVE_UINT64, frames, n, {},
                col_time_zero.data());
    if (pixel_mask)
      append_rows(ctx, f_masked.get(), H5T_NATIVE_UINT32, frames, n, {}, col_masked.data());
    frames += n;
    appended_bytes += n * kFrameRowBytes;
  }

  void create_layout(const RunMetadata& meta);

  /// The module attributes of /entry/instrument/detector and one NXdetector_module group per
  /// module (docs/file-layout.md).
  void create_modules(hid_t det, const RunMetadata& meta) {
    const Context& c = ctx;
    layout = meta.modules;
    const FrameShape s = meta.finder.shape;
    module_rows = s.rows / layout.modules_y;
    module_cols = s.cols / layout.modules_x;
    write_numeric_attr<uint32_t>(c, det, "modules", layout.n_modules());
    const std::array<uint32_t, 2> grid{layout.modules_y, layout.modules_x};
    write_numeric_attr<uint32_t>(c, det, "module_grid", grid);
    const std::array<uint32_t, 2> whole{layout.detector_rows ? layout.detector_rows : s.rows,
                                        layout.detector_cols ? layout.detector_cols : s.cols};
    write_numeric_attr<uint32_t>(c, det, "detector_shape", whole);
    const std::array<uint32_t, 2> origin{layout.origin_row, layout.origin_col};
    write_numeric_attr<uint32_t>(c, det, "detector_origin", origin);
    regions = module_grid(s, layout.modules_x, layout.modules_y, layout.orientations);
    for (uint32_t gy = 0; gy < layout.modules_y; ++gy)
      for (uint32_t gx = 0; gx < layout.modules_x; ++gx) {
        const uint32_t k = gy * layout.modules_x + gx;
        const uint32_t id = layout.first_module + k;
        const std::string name = fmt::format("module_{:02}", id);
        Hid g = make_group(c, det, name.c_str(), "NXdetector_module");
        const std::array<uint32_t, 2> data_origin{gy * module_rows, gx * module_cols};
        const std::array<uint32_t, 2> size{module_rows, module_cols};
        const std::array<uint32_t, 2> at{layout.origin_row + data_origin[0],
                                         layout.origin_col + data_origin[1]};
        write_array<uint32_t>(c, g.get(), "data_origin", {2}, data_origin.data());
        write_array<uint32_t>(c, g.get(), "data_size", {2}, size.data());
        write_numeric_attr<uint32_t>(c, g.get(), "module_id", id);
        write_numeric_attr<uint32_t>(c, g.get(), "detector_origin", at);
        // Only with a module mounted other than normal: a file of normal modules is as before.
        if (layout.oriented())
          write_module_orientation(c, g.get(), layout.orientation(k), data_origin, size);
      }
  }

  void write_reconstruction(const ReconstructionVolume& v);

  void close_all() {
    for (Hid* h : {&f_frame_number, &f_timestamp, &f_cluster_offset, &f_n_clusters, &f_flags,
                   &f_gain_switched, &f_gain_invalid, &d_pixel_mask, &f_masked,
                   &c_frame_number, &c_x, &c_y, &c_data, &c_module, &c_event_id,
                   &c_event_time_offset,
                   &c_energy, &c_energy_2x2, &s_counts, &s_frame_start,
                   &c_event_index, &c_event_time_zero, &p_calibration, &p_start_mean,
                   &p_start_noise,
                   &p_end_mean, &p_end_noise, &p_end_sum, &p_end_sum2, &p_end_count,
                   &flushed_rows})
      h->reset();
  }

  /// After a failed write: the file is closed with its descriptor detached (detach_from_disk),
  /// so that what HDF5 writes at close goes nowhere and the file stays as of its last flush.
  /// (Closing it is safe: the heap corruption once blamed on closing a file whose write failed
  /// was a reader in the same process overrunning its buffer, see read_all; a file left open
  /// here also kept HDF5 from opening the path again in this process, or a new file that got
  /// the same device and inode.) Close errors are expected here and ignored.
  void abandon() {
    close_all();
    close_recon();
    if (file.reset() < 0) H5Eclear2(H5E_DEFAULT);
  }
};

RunFileWriter::RunFileWriter(std::filesystem::path path, const RunMetadata& meta, bool overwrite)
    : impl_(std::make_unique<Impl>()) {
  silence_hdf5();
  validate(meta.finder);
  validate_modules(meta);
  Impl& m = *impl_;
  m.path = std::move(path);
  m.finder = meta.finder;
  const Context& c = m.ctx;
  const std::string name = m.path.string();
  if (name.find('\0') != std::string::npos)
    throw OutputError("run file path contains a NUL character; refusing to create it");
  struct stat st {};
  if (lstat(m.path.c_str(), &st) == 0) {
    if (!overwrite)
      throw OutputError(name + ": file exists; refusing to overwrite a run file (another "
                        "glintd may be writing to this directory: give each its own "
                        "output.directory or output.run_name; or set output.overwrite to "
                        "replace it)");
    if (!S_ISREG(st.st_mode))
      throw OutputError(name + ": exists and is not a regular file (a symlink, directory or "
                        "device); output.overwrite replaces only an earlier run file");
    if (H5Fis_hdf5(m.path.c_str()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw OutputError(name + ": exists and is not an HDF5 file; output.overwrite replaces "
                        "only an earlier run file");
    }
    if (::unlink(m.path.c_str()) != 0)
      throw OutputError(name + ": cannot remove the earlier run file: " + std::strerror(errno));
  }
  const std::filesystem::path dir = m.path.parent_path().empty() ? "." : m.path.parent_path();
  if (std::error_code ec; std::filesystem::is_directory(dir, ec)) {
    const uint64_t free = StorageGuard::free_bytes(dir), need = bytes_to_start(meta);
    if (free < need)
      throw OutputError(fmt::format("{}: not created: disk low: {:.1f} MiB free in {}, a run "
                                    "file of this detector needs {:.1f} MiB to start and close "
                                    "cleanly", name, free / 1048576.0, dir.string(),
                                    need / 1048576.0));
  }
  Hid fapl = make_fapl();
  // H5F_ACC_EXCL is O_CREAT | O_EXCL: never an existing file, never through a symlink.
  m.file = Hid(c.id(H5Fcreate(m.path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl.get()),
                    "cannot create the file (directory missing or not writable?)"),
               H5Fclose);
  try {
    m.create_layout(meta);
  } catch (...) {
    // The file is ours (created exclusively): a half-made one goes again.
    m.close_recon();
    m.close_all();
    m.file.reset();
    ::unlink(m.path.c_str());
    throw;
  }
}

void RunFileWriter::Impl::create_layout(const RunMetadata& meta) {
  Impl& m = *this;
  const Context& c = m.ctx;
  const hid_t f = m.file.get();
  {
    Hid entry = make_group(c, f, "entry", "NXentry");
    const std::string start_time = iso8601_now();
    write_string_attr(c, entry.get(), "start_time", start_time);
    write_string_attr(c, entry.get(), "program_name", "glint");
    write_string_attr(c, entry.get(), "program_version", GLINT_VERSION);
    // The same as NXentry's fields, for NeXus readers (end_time is added at close).
    write_string_dataset(c, entry.get(), "start_time", start_time);
    {
      Hid program = write_string_dataset(c, entry.get(), "program_name", "glint");
      write_string_attr(c, program.get(), "version", GLINT_VERSION);
    }
    write_string_dataset(c, entry.get(), "config", meta.config_yaml);
    Hid instrument = make_group(c, entry.get(), "instrument", "NXinstrument");
    Hid det = make_group(c, instrument.get(), "detector", "NXdetector");
    const std::array<uint32_t, 2> shape{meta.finder.shape.rows, meta.finder.shape.cols};
    write_numeric_attr<uint32_t>(c, det.get(), "frame_shape", shape);
    write_string_attr(c, det.get(), "pixel_type", meta.pixel_type);
    write_string_attr(c, det.get(), "detector_type", meta.detector_type);
    write_string_attr(c, det.get(), "source", meta.source);
    write_numeric_attr<double>(c, det.get(), "n_sigma", meta.finder.n_sigma);
    write_numeric_attr<int32_t>(c, det.get(), "cluster_size", meta.finder.cluster_size);
    write_string_attr(c, det.get(), "backend", meta.backend);
    write_numeric_attr<uint32_t>(c, det.get(), "pedestal_window", meta.finder.pedestal_window);
    m.modules = meta.modules.recorded(meta.finder.shape);
    if (m.modules) m.create_modules(det.get(), meta);
    m.pixel_mask = meta.pixel_mask;
    if (m.pixel_mask) {
      m.d_pixel_mask = make_image<uint32_t>(c, det.get(), "pixel_mask", meta.finder.shape, 0u);
      write_string_attr(c, m.d_pixel_mask.get(), "bit_meanings", pixel_mask_bit_meanings());
    }

    Hid frames = make_group(c, entry.get(), "frames", "NXcollection");
    m.f_frame_number = make_table(c, frames.get(), "frame_number", H5T_STD_U64LE, {}, kFrameChunk);
    m.f_timestamp = make_table(c, frames.get(), "timestamp", H5T_STD_U64LE, {}, kFrameChunk);
    m.f_cluster_offset =
        make_table(c, frames.get(), "cluster_offset", H5T_STD_U64LE, {}, kFrameChunk);
    m.f_n_clusters = make_table(c, frames.get(), "n_clusters", H5T_STD_U32LE, {}, kFrameChunk);
    m.f_flags = make_table(c, frames.get(), "flags", H5T_STD_U8LE, {}, kFrameChunk);
    write_string_attr(c, frames.get(), "flag_bits",
                      "1 incomplete, 2 dark, 4 cluster overflow (reserved: glint never cuts a "
                      "frame's clusters short), 8 missing, 16 dropped");
    m.gain_counts = meta.finder.pixels != PixelMode::raw;
    m.float_clusters = meta.finder.pixels == PixelMode::jungfrau_calibrated;
    if (m.gain_counts) {
      m.f_gain_switched =
          make_table(c, frames.get(), "gain_switched", H5T_STD_U32LE, {}, kFrameChunk);
      write_string_attr(c, m.f_gain_switched.get(), "description",
                        "JUNGFRAU: pixels in G1 or G2 (gain bits 01 or 11) in the frame; never "
                        "taken as photons without gain maps (0 for dark and unsearched frames)");
      m.f_gain_invalid =
          make_table(c, frames.get(), "gain_invalid", H5T_STD_U32LE, {}, kFrameChunk);
      write_string_attr(c, m.f_gain_invalid.get(), "description",
                        "JUNGFRAU: pixels with the invalid gain bits 10 in the frame");
    }
    if (m.pixel_mask) {
      m.f_masked = make_table(c, frames.get(), "masked_clusters", H5T_STD_U32LE, {}, kFrameChunk);
      write_string_attr(c, m.f_masked.get(), "description",
                        "clusters removed from the frame: centred on a pixel of "
                        "/entry/instrument/detector/pixel_mask");
    }

    // NXcollection: NeXus places NXevent_data in NXinstrument, not in NXentry. The event view
    // of these columns is /entry/instrument/events (below).
    Hid clusters = make_group(c, entry.get(), "clusters", "NXcollection");
    const auto cd = m.cluster_dims();
    m.c_frame_number =
        make_table(c, clusters.get(), "frame_number", H5T_STD_U64LE, {}, kClusterChunk);
    m.c_x = make_table(c, clusters.get(), "x", H5T_STD_U16LE, {}, kClusterChunk);
    m.c_y = make_table(c, clusters.get(), "y", H5T_STD_U16LE, {}, kClusterChunk);
    m.c_data = make_table(c, clusters.get(), "data",
                          m.float_clusters ? H5T_IEEE_F32LE : H5T_STD_I32LE, cd,
                          kClusterChunk / 4);
    write_string_attr(c, m.c_data.get(), "units", m.float_clusters ? "keV" : "ADU");
    if (m.modules) {
      m.c_module = make_table(c, clusters.get(), "module", H5T_STD_U16LE, {}, kClusterChunk);
      write_string_attr(c, m.c_module.get(), "description",
                        "the id of the cluster's module (/entry/instrument/detector/module_<id>);"
                        " x and y are local to it");
    }
    if (meta.cluster_energy) {
      m.cluster_energy = true;
      const hid_t et = m.float_clusters ? H5T_IEEE_F32LE : H5T_STD_I32LE;
      const char* units = m.float_clusters ? "keV" : "ADU";
      m.c_energy = make_table(c, clusters.get(), "energy", et, {}, kClusterChunk);
      write_string_attr(c, m.c_energy.get(), "units", units);
      write_string_attr(c, m.c_energy.get(), "description", "the S x S sum of the cluster");
      m.c_energy_2x2 = make_table(c, clusters.get(), "energy_2x2", et, {}, kClusterChunk);
      write_string_attr(c, m.c_energy_2x2.get(), "units", units);
      write_string_attr(c, m.c_energy_2x2.get(), "description",
                        "the largest 2 x 2 quadrant sum around the cluster's centre");
    }
    if (meta.slice_frames > 0) {
      m.slice_frames = meta.slice_frames;
      Hid g = make_group(c, entry.get(), "hitmap_slices", "NXdata");
      write_string_attr(c, g.get(), "signal", "counts");
      write_strings_attr(c, g.get(), "axes", {"frame_start", "y", "x"});
      write_numeric_attr<uint32_t>(c, g.get(), "frame_start_indices", 0u);
      write_numeric_attr<uint32_t>(c, g.get(), "y_indices", 1u);
      write_numeric_attr<uint32_t>(c, g.get(), "x_indices", 2u);
      write_numeric_attr<uint32_t>(c, g.get(), "slice_frames", meta.slice_frames);
      const std::array<hsize_t, 2> image{meta.finder.shape.rows, meta.finder.shape.cols};
      m.s_counts = make_table(c, g.get(), "counts", H5T_STD_U32LE, image, 1);
      m.s_frame_start = make_table(c, g.get(), "frame_start", H5T_STD_U64LE, {}, 64);
      write_string_attr(c, m.s_frame_start.get(), "description",
                        "the first frame number of each slice");
      std::vector<double> ys(meta.finder.shape.rows), xs(meta.finder.shape.cols);
      for (std::size_t i = 0; i < ys.size(); ++i) ys[i] = static_cast<double>(i);
      for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<double>(i);
      Hid yd = write_array<double>(c, g.get(), "y", {ys.size()}, ys.data());
      write_string_attr(c, yd.get(), "units", "pixel");
      Hid xd = write_array<double>(c, g.get(), "x", {xs.size()}, xs.data());
      write_string_attr(c, xd.get(), "units", "pixel");
    }
    // NXevent_data's fields, mapped from the columns above (docs/file-layout.md): a cluster is
    // an event at its centre pixel, a frame a pulse.
    m.c_event_id = make_table(c, clusters.get(), "event_id", H5T_STD_U32LE, {}, kClusterChunk);
    write_string_attr(c, m.c_event_id.get(), "units", "");  // NX_DIMENSIONLESS
    m.c_event_time_offset =
        make_table(c, clusters.get(), "event_time_offset", H5T_STD_U32LE, {}, kClusterChunk);
    write_string_attr(c, m.c_event_time_offset.get(), "units", "ns");
    m.c_event_index =
        make_table(c, clusters.get(), "event_index", H5T_STD_U64LE, {}, kFrameChunk);
    write_string_attr(c, m.c_event_index.get(), "units", "");
    m.c_event_time_zero =
        make_table(c, clusters.get(), "event_time_zero", H5T_STD_U64LE, {}, kFrameChunk);
    write_string_attr(c, m.c_event_time_zero.get(), "units", "ns");
    {
      // NXevent_data: the four fields, as hard links (the same datasets, no copy).
      Hid events = make_group(c, instrument.get(), "events", "NXevent_data");
      for (const char* name : {"event_id", "event_time_offset", "event_index", "event_time_zero"})
        c.check(H5Lcreate_hard(clusters.get(), name, events.get(), name, H5P_DEFAULT,
                               H5P_DEFAULT),
                std::string("linking /entry/instrument/events/") + name);
    }

    Hid ped = make_group(c, entry.get(), "pedestal", "NXcollection");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    m.p_start_mean = make_image<double>(c, ped.get(), "start_mean", meta.finder.shape, nan);
    m.p_start_noise = make_image<double>(c, ped.get(), "start_noise", meta.finder.shape, nan);
    m.p_end_mean = make_image<double>(c, ped.get(), "end_mean", meta.finder.shape, nan);
    m.p_end_noise = make_image<double>(c, ped.get(), "end_noise", meta.finder.shape, nan);
    m.p_end_sum = make_image<double>(c, ped.get(), "end_sum", meta.finder.shape, nan);
    m.p_end_sum2 = make_image<double>(c, ped.get(), "end_sum2", meta.finder.shape, nan);
    m.p_end_count = make_image<uint32_t>(c, ped.get(), "end_count", meta.finder.shape, 0u);
    if (m.float_clusters) {
      const std::array<hsize_t, 3> dims{jungfrau::kStages, meta.finder.shape.rows,
                                        meta.finder.shape.cols};
      Hid space(c.id(H5Screate_simple(3, dims.data(), nullptr), "dataspace"), H5Sclose);
      Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      c.check(H5Pset_fill_value(dcpl.get(), H5T_NATIVE_DOUBLE, &nan), "fill value");
      c.check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_ALLOC), "fill time");
      c.check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "allocation time");
      m.p_calibration = Hid(c.id(H5Dcreate2(ped.get(), "calibration", H5T_IEEE_F64LE,
                                            space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                 "dataset calibration"),
                            H5Dclose);
      write_string_attr(c, m.p_calibration.get(), "units", "ADU");
      write_string_attr(c, m.p_calibration.get(), "description",
                        "JUNGFRAU: the ADC pedestal of gain stages G0, G1, G2 that the "
                        "calibration subtracts, (adc - pedestal[g]) / gain[g]");
    }

    if (meta.reconstruction) m.create_recon(entry.get(), *meta.reconstruction);

    const hsize_t two = 2;
    Hid space(c.id(H5Screate_simple(1, &two, nullptr), "dataspace"), H5Sclose);
    Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    c.check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "allocation time");
    m.flushed_rows = Hid(c.id(H5Dcreate2(entry.get(), "flushed_rows", H5T_STD_U64LE, space.get(),
                                         H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                              "dataset flushed_rows"),
                         H5Dclose);
    write_string_attr(c, m.flushed_rows.get(), "columns",
                      "frame rows, cluster rows durable at the last flush");
  }
  c.check(H5Fstart_swmr_write(f), "starting SWMR writing");
  const int fd = file_descriptor(f);
  if (fd < 0) c.fail("no file descriptor (not HDF5's default file driver?)");
  // A new chunk for each extendible dataset (see make_table's callers) may come on top of the
  // data at a flush.
  // Frames: 5 columns and event_index, event_time_zero; clusters: frame_number, x, y, event_id
  // (event_time_offset is never written, so it takes no chunk) and data.
  uint64_t slack = 7 * uint64_t{kFrameChunk} * 8 + 4 * uint64_t{kClusterChunk} * 8 +
                   uint64_t{kClusterChunk / 4} * m.cluster_bytes();
  if (meta.reconstruction)
    slack += 2 * uint64_t{meta.reconstruction->nx} * meta.reconstruction->ny * 4;
  if (meta.cluster_energy) slack += 2 * uint64_t{kClusterChunk} * 4;
  if (m.modules) slack += uint64_t{kClusterChunk} * 2;
  if (meta.slice_frames > 0) slack += meta.finder.shape.pixels() * 4 + 64 * 8;
  m.guard.emplace(m.path, fd, slack);
}

RunFileWriter::~RunFileWriter() {
  if (!impl_) return;
  if (!impl_->closed) {
    try {
      close(nullptr);
    } catch (const std::exception& e) {
      log::error("closing {}: {}", impl_->path.string(), e.what());
    }
  }
}

RunFileWriter::RunFileWriter(RunFileWriter&&) noexcept = default;
RunFileWriter& RunFileWriter::operator=(RunFileWriter&&) noexcept = default;

void RunFileWriter::write_start_pedestal(const PedestalState& p) {
  silence_hdf5();
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (p.shape != m.finder.shape) throw OutputError(m.path.string() + ": pedestal shape differs");
  const auto mean = p.means();
  const auto noise = p.noises();
  m.write([&] {
    m.write_image(m.p_start_mean.get(), H5T_NATIVE_DOUBLE, mean.data());
    m.write_image(m.p_start_noise.get(), H5T_NATIVE_DOUBLE, noise.data());
  });
}

void RunFileWriter::write_calibration_pedestal(std::span<const double> adc) {
  silence_hdf5();
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (!m.p_calibration.valid())
    throw OutputError(m.path.string() + ": the file was created without /entry/pedestal/"
                      "calibration (not calibrated JUNGFRAU frames)");
  if (adc.size() != jungfrau::kStages * m.finder.shape.pixels())
    throw std::invalid_argument(fmt::format(
        "RunFileWriter::write_calibration_pedestal: {} values, the file needs {} (G0, G1, G2 "
        "of {} x {} pixels)", adc.size(), jungfrau::kStages * m.finder.shape.pixels(),
        m.finder.shape.rows, m.finder.shape.cols));
  m.write([&] { m.write_image(m.p_calibration.get(), H5T_NATIVE_DOUBLE, adc.data()); });
}

void RunFileWriter::append(const ClusterTable& table, std::span<const uint64_t> timestamps,
                           std::span<const uint8_t> flags, std::span<const uint32_t> masked) {
  silence_hdf5();
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (m.closed) throw OutputError(m.path.string() + ": append after close");
  if (table.cluster_size() != m.finder.cluster_size)
    throw OutputError(m.path.string() + ": cluster size differs from the file's");
  if ((table.value_type() == ClusterValues::float32) != m.float_clusters)
    throw OutputError(m.path.string() + ": cluster value type differs from the file's");
  const auto recs = table.frames();
  if ((!timestamps.empty() && timestamps.size() != recs.size()) ||
      (!flags.empty() && flags.size() != recs.size()) ||
      (!masked.empty() && masked.size() != recs.size()))
    throw std::invalid_argument("RunFileWriter::append: timestamps/flags per frame expected");
  // Clusters first: a reader that sees a frame row also finds its clusters.
  const hsize_t n = table.n_clusters();
  m.col_cluster_frame.assign(n, 0);
  m.col_event_id.resize(n);
  const auto xs = table.x(), ys = table.y();
  for (hsize_t i = 0; i < n; ++i)
    m.col_event_id[i] = uint32_t{ys[i]} * m.finder.shape.cols + xs[i];
  if (m.modules) {
    // Image coordinates in, module-local ones and the module's id out.
    m.col_module.resize(n);
    m.col_local_x.resize(n);
    m.col_local_y.resize(n);
    for (hsize_t i = 0; i < n; ++i) {
      if (xs[i] >= m.finder.shape.cols || ys[i] >= m.finder.shape.rows)
        throw std::invalid_argument(fmt::format(
            "RunFileWriter::append: a cluster at x {}, y {} is outside the {} x {} image",
            xs[i], ys[i], m.finder.shape.rows, m.finder.shape.cols));
      const uint32_t gx = xs[i] / m.module_cols, gy = ys[i] / m.module_rows;
      const uint32_t k = gy * m.layout.modules_x + gx;
      m.col_module[i] = static_cast<uint16_t>(m.layout.first_module + k);
      // The module's native coordinates (its orientation undone).
      m.col_local_x[i] = static_cast<uint16_t>(m.regions[k].native_x(xs[i]));
      m.col_local_y[i] = static_cast<uint16_t>(m.regions[k].native_y(ys[i]));
    }
    if (m.layout.oriented()) {
      // And each window as the module read it.
      const auto d = table.data();
      m.col_native_data.assign(d.begin(), d.end());
      const std::size_t vpc = table.values_per_cluster();
      for (hsize_t i = 0; i < n; ++i) {
        const uint32_t k = m.col_module[i] - m.layout.first_module;
        orient_window(m.regions[k].orientation, table.cluster_size(),
                      std::span<int32_t>(m.col_native_data).subspan(i * vpc, vpc));
      }
    }
  }
  m.resize_frame_columns(recs.size());
  for (std::size_t k = 0; k < recs.size(); ++k) {
    for (uint64_t i = 0; i < recs[k].n_clusters; ++i)
      m.col_cluster_frame[recs[k].first_cluster + i] = recs[k].frame_number;
    m.col_frame_number[k] = recs[k].frame_number;
    m.col_timestamp[k] = timestamps.empty() ? 0 : timestamps[k];
    m.col_cluster_offset[k] = m.clusters + recs[k].first_cluster;
    m.col_n_clusters[k] = recs[k].n_clusters;
    m.col_flags[k] = flags.empty() ? uint8_t{0} : flags[k];
    if (m.gain_counts && table.has_gain_counts()) {
      const jungfrau::GainCounts g = table.gain_counts()[k];
      m.col_gain_switched[k] = g.g1 + g.g2;
      m.col_gain_invalid[k] = g.invalid;
    }
    if (m.pixel_mask && !masked.empty()) m.col_masked[k] = masked[k];
  }
  const auto cd = m.cluster_dims();
  m.write([&] {
    append_rows(m.ctx, m.c_frame_number.get(), H5T_NATIVE_UINT64, m.clusters, n, {},
                m.col_cluster_frame.data());
    append_rows(m.ctx, m.c_x.get(), H5T_NATIVE_UINT16, m.clusters, n, {},
                m.modules ? m.col_local_x.data() : table.x().data());
    append_rows(m.ctx, m.c_y.get(), H5T_NATIVE_UINT16, m.clusters, n, {},
                m.modules ? m.col_local_y.data() : table.y().data());
    if (m.modules)
      append_rows(m.ctx, m.c_module.get(), H5T_NATIVE_UINT16, m.clusters, n, {},
                  m.col_module.data());
    // A float table holds its values' bit patterns: written as they are, as float32.
    append_rows(m.ctx, m.c_data.get(), m.float_clusters ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32,
                m.clusters, n, cd,
                m.modules && m.layout.oriented() ? m.col_native_data.data() : table.data().data());
    append_rows(m.ctx, m.c_event_id.get(), H5T_NATIVE_UINT32, m.clusters, n, {},
                m.col_event_id.data());
    if (m.cluster_energy) {
      // A float table's energies are floats' bits: written as they are, as float32.
      products::cluster_energies(table, m.col_energy, m.col_energy_2x2);
      const hid_t et = m.float_clusters ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32;
      append_rows(m.ctx, m.c_energy.get(), et, m.clusters, n, {}, m.col_energy.data());
      append_rows(m.ctx, m.c_energy_2x2.get(), et, m.clusters, n, {}, m.col_energy_2x2.data());
    }
    if (n > 0) {
      // All zeros: the extent alone, read back as the fill value (no chunk is ever written).
      const hsize_t size = m.clusters + n;
      m.ctx.check(H5Dset_extent(m.c_event_time_offset.get(), &size),
                  "extending /entry/clusters/event_time_offset");
    }
    m.clusters += n;
    m.appended_bytes += n * m.cluster_bytes();
    m.append_frame_columns();
  });
}

void RunFileWriter::append_hitmap_slice(uint64_t frame_start, std::span<const uint32_t> counts) {
  silence_hdf5();
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (m.closed) throw OutputError(m.path.string() + ": hit map slice after close");
  if (m.slice_frames == 0)
    throw OutputError(m.path.string() + ": the file was created without /entry/hitmap_slices");
  if (counts.size() != m.finder.shape.pixels())
    throw std::invalid_argument(fmt::format("RunFileWriter::append_hitmap_slice: {} counts, the "
                                            "frames have {} pixels", counts.size(),
                                            m.finder.shape.pixels()));
  const std::array<hsize_t, 2> image{m.finder.shape.rows, m.finder.shape.cols};
  m.write([&] {
    append_rows(m.ctx, m.s_counts.get(), H5T_NATIVE_UINT32, m.slice_rows, 1, image,
                counts.data());
    append_rows(m.ctx, m.s_frame_start.get(), H5T_NATIVE_UINT64, m.slice_rows, 1, {},
                &frame_start);
    ++m.slice_rows;
    m.appended_bytes += counts.size() * sizeof(uint32_t) + sizeof(uint64_t);
  });
}

void RunFileWriter::set_products(std::shared_ptr<const products::ProductSums> sums) {
  std::lock_guard io(impl_->io_mu);
  if (!sums) return;
  const products::ProductSettings& s = sums->settings();
  if (s.rows != impl_->finder.shape.rows || s.cols != impl_->finder.shape.cols)
    throw std::invalid_argument("RunFileWriter::set_products: products of another frame shape");
  impl_->products = std::move(sums);
}

void RunFileWriter::write_pixel_mask(std::span<const uint32_t> mask) {
  silence_hdf5();
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (!m.pixel_mask) throw OutputError(m.path.string() + ": created without a pixel mask");
  if (mask.size() != m.finder.shape.pixels())
    throw std::invalid_argument("RunFileWriter::write_pixel_mask: the mask has " +
                                std::to_string(mask.size()) + " pixels, the frames " +
                                std::to_string(m.finder.shape.pixels()));
  m.write([&] {
    m.ctx.check(H5Dwrite(m.d_pixel_mask.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         mask.data()),
                "writing the pixel mask");
  });
}

void RunFileWriter::set_masked_clusters(uint64_t n) { impl_->masked_clusters = n; }

void RunFileWriter::append_empty_frames(std::span<const FrameRow> rows) {
  silence_hdf5();
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (m.closed) throw OutputError(m.path.string() + ": append after close");
  m.resize_frame_columns(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    m.col_frame_number[i] = rows[i].frame_number;
    m.col_timestamp[i] = rows[i].timestamp;
    m.col_cluster_offset[i] = m.clusters;  // no clusters: the offset of the next one
    m.col_n_clusters[i] = 0;
    m.col_flags[i] = rows[i].flags;
  }
  m.write([&] { m.append_frame_columns(); });
}

/// add_reconstruction's writes (under recon_mu; takes io_mu per call group).
void RunFileWriter::Impl::write_reconstruction(const ReconstructionVolume& v) {
  Impl& m = *this;
  const ReconstructionLayout& l = *m.recon;
  const Context& c = m.ctx;
  const hsize_t row = m.recon_rows;
  // The volume data first, flushed; then one row in every table (a reader counts a volume once
  // it is in all of them).
  const std::array<hsize_t, 4> size{row + 1, l.slices, l.ny, l.nx};
  {
    std::lock_guard io(m.io_mu);
    c.check(H5Dset_extent(m.r_input.get(), size.data()), "extending /entry/reconstruction/input");
    c.check(H5Dset_extent(m.r_output.get(), size.data()), "extending /entry/reconstruction/output");
  }
  write_volume_row(c, m.io_mu, m.r_input.get(), row, v, v.input.data());
  write_volume_row(c, m.io_mu, m.r_output.get(), row, v, v.output.data());
  std::lock_guard io(m.io_mu);
  c.check(H5Dflush(m.r_input.get()), "flushing /entry/reconstruction/input");
  c.check(H5Dflush(m.r_output.get()), "flushing /entry/reconstruction/output");
  const uint32_t iterations = v.outer * v.tv_inner;
  const uint8_t status = v.nz < l.slices ? 1 : 0;
  std::array<char, kDeviceChars> device{};
  std::copy_n(v.backend.begin(), std::min(v.backend.size(), kDeviceChars), device.begin());
  append_rows(c, m.r_first_frame.get(), H5T_NATIVE_UINT64, row, 1, {}, &v.first_frame);
  append_rows(c, m.r_last_frame.get(), H5T_NATIVE_UINT64, row, 1, {}, &v.last_frame);
  append_rows(c, m.r_slices.get(), H5T_NATIVE_UINT32, row, 1, {}, &v.nz);
  append_rows(c, m.r_iterations.get(), H5T_NATIVE_UINT32, row, 1, {}, &iterations);
  append_rows(c, m.r_solve_seconds.get(), H5T_NATIVE_DOUBLE, row, 1, {}, &v.solve_seconds);
  append_rows(c, m.r_device.get(), m.device_type.get(), row, 1, {}, device.data());
  append_rows(c, m.r_status.get(), H5T_NATIVE_UINT8, row, 1, {}, &status);
  for (const Hid* h : {&m.r_first_frame, &m.r_last_frame, &m.r_slices, &m.r_iterations,
                       &m.r_solve_seconds, &m.r_device, &m.r_status})
    c.check(H5Dflush(h->get()), "flushing /entry/reconstruction");
  m.appended_bytes += 2 * uint64_t(v.nz) * v.ny * v.nx * sizeof(float);
  ++m.recon_rows;
}

void RunFileWriter::add_reconstruction(const ReconstructionVolume& v) {
  silence_hdf5();
  Impl& m = *impl_;
  const std::size_t n = std::size_t(v.nx) * v.ny * v.nz;
  if (n == 0 || v.input.size() != n || v.output.size() != n)
    throw std::invalid_argument("RunFileWriter::add_reconstruction: input and output must hold nx*ny*nz values");
  std::lock_guard lock(m.recon_mu);
  if (m.recon_closed) throw OutputError(m.path.string() + ": reconstruction handed over after close");
  if (!m.recon)
    throw OutputError(m.path.string() + ": the file was created without reconstruction datasets");
  const ReconstructionLayout& l = *m.recon;
  if (v.nx != l.nx || v.ny != l.ny || v.nz > l.slices)
    throw std::invalid_argument(fmt::format(
        "RunFileWriter::add_reconstruction: volume {}x{}x{} does not fit the file's {}x{}x{}",
        v.nx, v.ny, v.nz, l.nx, l.ny, l.slices));
  if (m.write_failed.load())
    throw OutputError(m.path.string() + ": an earlier write failed; the file is kept as of its "
                      "last flush");
  try {
    m.write_reconstruction(v);
  } catch (const OutputError& e) {
    std::lock_guard io(m.io_mu);
    m.stop_writing(e.what());
    throw;
  }
}

void RunFileWriter::set_reconstruction_summary(const ReconstructionSummary& summary) {
  std::lock_guard lock(impl_->recon_mu);
  if (!impl_->recon)
    throw OutputError(impl_->path.string() +
                      ": the file was created without reconstruction datasets");
  impl_->recon_summary = summary;
}

namespace {

/// The stage's totals as attributes of /entry/reconstruction (file reopened in normal mode).
void write_recon_summary(const Context& c, hid_t entry, const ReconstructionSummary& sum,
                         uint64_t written) {
  Hid g(c.id(H5Gopen2(entry, "reconstruction", H5P_DEFAULT), "group /entry/reconstruction"),
        H5Gclose);
  write_numeric_attr<uint64_t>(c, g.get(), "frames", sum.frames);
  write_numeric_attr<uint64_t>(c, g.get(), "volumes_done", sum.volumes_done);
  write_numeric_attr<uint64_t>(c, g.get(), "volumes_dropped", sum.volumes_dropped);
  write_numeric_attr<uint64_t>(c, g.get(), "volumes_failed", sum.volumes_failed);
  write_numeric_attr<uint64_t>(c, g.get(), "volumes_written", written);
}

/// The attributes every product group carries (docs/products.md).
void write_product_attrs(const Context& c, hid_t g, const products::ProductSums& p) {
  const products::ProductSettings& s = p.settings();
  write_string_attr(c, g, "energy_kind", std::string(products::energy_kind_name(s.energy)));
  const std::array<double, 2> window{s.emin, s.emax};
  write_numeric_attr<double>(c, g, "energy_window", window);
  write_numeric_attr<uint64_t>(c, g, "clusters", p.clusters);
  write_numeric_attr<uint64_t>(c, g, "frames", p.frames);
}

/// An NXdata group with its signal and axes (attributes; the axis datasets are the caller's).
Hid make_nxdata(const Context& c, hid_t entry, const char* name, const char* signal,
                const std::vector<std::string>& axes, const products::ProductSums& p) {
  Hid g = make_group(c, entry, name, "NXdata");
  write_string_attr(c, g.get(), "signal", signal);
  if (axes.size() == 1) write_string_attr(c, g.get(), "axes", axes[0]);
  else write_strings_attr(c, g.get(), "axes", axes);
  for (std::size_t i = 0; i < axes.size(); ++i)
    write_numeric_attr<uint32_t>(c, g.get(), (axes[i] + "_indices").c_str(),
                                 static_cast<uint32_t>(i));
  write_product_attrs(c, g.get(), p);
  return g;
}

/// Pixel indices 0..n-1 as float64 (the y and x axes of the images).
std::vector<double> pixel_axis(uint32_t n) {
  std::vector<double> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return v;
}

/// The products as NXdata groups under /entry (file reopened in normal mode at close).
void write_products(const Context& c, hid_t file, hid_t entry, const products::ProductSums& p,
                    bool slices) {
  const products::ProductSettings& s = p.settings();
  const std::string units = s.calibrated ? "keV" : "ADU";
  const std::vector<double> ys = pixel_axis(s.rows), xs = pixel_axis(s.cols);
  auto pixel_axes = [&](hid_t g) {
    Hid y = write_array<double>(c, g, "y", {ys.size()}, ys.data());
    write_string_attr(c, y.get(), "units", "pixel");
    Hid x = write_array<double>(c, g, "x", {xs.size()}, xs.data());
    write_string_attr(c, x.get(), "units", "pixel");
  };
  const std::vector<hsize_t> image{s.rows, s.cols};
  if (s.hitmap) {
    Hid g = make_nxdata(c, entry, "hitmap", "counts", {"y", "x"}, p);
    write_array<uint64_t>(c, g.get(), "counts", image, p.hitmap.data());
    pixel_axes(g.get());
    Hid e = make_nxdata(c, entry, "energy_image", "energy", {"y", "x"}, p);
    std::vector<double> energy(p.energy.size());
    const double scale = s.energy_scale();
    for (std::size_t i = 0; i < energy.size(); ++i)
      energy[i] = static_cast<double>(p.energy[i]) / scale;
    Hid ds = write_array<double>(c, e.get(), "energy", image, energy.data());
    write_string_attr(c, ds.get(), "units", units);
    pixel_axes(e.get());
  }
  if (slices) {
    Hid g(c.id(H5Gopen2(entry, "hitmap_slices", H5P_DEFAULT), "group hitmap_slices"), H5Gclose);
    write_product_attrs(c, g.get(), p);
  }
  const std::vector<double> edges = s.spectrum.edges(), centres = s.spectrum.centres();
  auto energy_axis = [&](hid_t g) {
    Hid a = write_array<double>(c, g, "energy", {centres.size()}, centres.data());
    write_string_attr(c, a.get(), "units", units);
    Hid b = write_array<double>(c, g, "energy_edges", {edges.size()}, edges.data());
    write_string_attr(c, b.get(), "units", units);
  };
  {
    Hid g = make_nxdata(c, entry, "spectrum", "counts", {"energy"}, p);
    write_array<uint64_t>(c, g.get(), "counts", {p.spectrum.size()}, p.spectrum.data());
    energy_axis(g.get());
    write_numeric_attr<uint64_t>(c, g.get(), "underflow", p.underflow);
    write_numeric_attr<uint64_t>(c, g.get(), "overflow", p.overflow);
  }
  if (s.pixel_spectra) {
    Hid g = make_nxdata(c, entry, "pixel_spectra", "counts", {"y", "x", "energy"}, p);
    write_array<uint32_t>(c, g.get(), "counts", {s.rows, s.cols, s.spectrum.bins},
                          p.pixel_spectra.data());
    pixel_axes(g.get());
    energy_axis(g.get());
  }
  if (s.eta) {
    for (const bool three : {false, true}) {
      const products::Binning b = three ? s.eta3_binning() : s.eta2_binning();
      Hid g = make_nxdata(c, entry, three ? "eta3" : "eta2", "counts", {"eta_y", "eta_x"}, p);
      const auto& counts = three ? p.eta3 : p.eta2;
      write_array<uint64_t>(c, g.get(), "counts", {b.bins, b.bins}, counts.data());
      const std::vector<double> centre = b.centres();
      write_array<double>(c, g.get(), "eta_y", {centre.size()}, centre.data());
      write_array<double>(c, g.get(), "eta_x", {centre.size()}, centre.data());
      write_numeric_attr<uint64_t>(c, g.get(), "outside",
                                   three ? p.eta3_outside : p.eta2_outside);
    }
  }
  if (p.subpixel) {
    const products::SubpixelImage& img = *p.subpixel;
    const uint32_t f = img.factor();
    Hid g = make_nxdata(c, entry, "subpixel_image", "counts", {"y", "x"}, p);
    write_array<uint64_t>(c, g.get(), "counts", {img.rows() * f, img.cols() * f},
                          img.counts().data());
    // Bin centres in pixel units: sub-pixel i spans [i / f, (i + 1) / f).
    for (const auto& [name, n] :
         {std::pair{"y", img.rows() * f}, std::pair{"x", img.cols() * f}}) {
      std::vector<double> axis(n);
      for (std::size_t i = 0; i < n; ++i) axis[i] = (static_cast<double>(i) + 0.5) / f;
      Hid a = write_array<double>(c, g.get(), name, {n}, axis.data());
      write_string_attr(c, a.get(), "units", "pixel");
    }
    write_numeric_attr<uint32_t>(c, g.get(), "factor", f);
    write_string_attr(c, g.get(), "calibration", s.subpixel_calibration);
    write_numeric_attr<uint64_t>(c, g.get(), "outside", p.subpixel_outside);
    write_numeric_attr<uint64_t>(c, g.get(), "off_detector", img.outside());
  }
  if (s.hitmap) write_string_attr(c, entry, "default", "hitmap");
  write_string_attr(c, file, "default", "entry");
}

}  // namespace

StorageCheck RunFileWriter::flush() {
  silence_hdf5();
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (m.closed) return {};
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  m.write([&] {
    m.ctx.check(H5Fflush(m.file.get(), H5F_SCOPE_LOCAL), "flushing (disk full?)");
    // Only once the rows are in the file: the count never covers a row that is not.
    m.write_flushed_rows();
  });
  const auto t1 = clock::now();
  const uint64_t since = m.appended_bytes - m.flushed_bytes;
  m.flushed_bytes = m.appended_bytes;
  StorageCheck check = m.check_storage();
  const auto ms = [](auto a, auto b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  log::debug("{}: flushed {:.1f} MB in {:.1f} ms, storage check {:.1f} ms",
             m.path.filename().string(), since / 1e6, ms(t0, t1), ms(t1, clock::now()));
  return check;
}

StorageCheck RunFileWriter::check_storage() {
  Impl& m = *impl_;
  std::lock_guard io(m.io_mu);
  if (m.closed || m.write_failed.load()) return {};
  return m.check_storage();
}

void RunFileWriter::set_end_reason(std::string reason) {
  std::lock_guard io(impl_->io_mu);
  impl_->end_reason = std::move(reason);
}

void RunFileWriter::set_stream_stride(uint64_t stride) {
  std::lock_guard io(impl_->io_mu);
  impl_->stream_stride = stride;
}

bool RunFileWriter::failed() const { return impl_ && impl_->write_failed.load(); }

void RunFileWriter::close(const PedestalState* end) {
  silence_hdf5();
  Impl& m = *impl_;
  if (m.closed) return;
  m.closed = true;
  // No more volumes from here on (one being written finishes first).
  std::unique_lock recon_lock(m.recon_mu);
  m.recon_closed = true;
  std::lock_guard io(m.io_mu);
  // Whichever way the close ends (the reopened file below closed first), the space kept beyond
  // the file's end goes back to the file system.
  struct ReleaseReserve {
    Impl& m;
    ~ReleaseReserve() {
      if (m.guard) m.guard->release_reserve();
    }
  } release_reserve{m};
  if (m.write_failed.load()) {
    m.abandon();  // what closing writes goes to the discarding descriptor
    log::warn("{}: kept as of its last flush (/entry/flushed_rows); open it in SWMR read mode, "
              "or run `h5clear -s` on it for a plain open", m.path.string());
    return;
  }
  std::string failure;
  if (end && end->shape != m.finder.shape) {
    failure = m.path.string() + ": end pedestal shape differs";
    end = nullptr;
  }
  try {
    m.write([&] {
      if (end) {
        const auto mean = end->means();
        const auto noise = end->noises();
        m.write_image(m.p_end_mean.get(), H5T_NATIVE_DOUBLE, mean.data());
        m.write_image(m.p_end_noise.get(), H5T_NATIVE_DOUBLE, noise.data());
        m.write_image(m.p_end_sum.get(), H5T_NATIVE_DOUBLE, end->sum.data());
        m.write_image(m.p_end_sum2.get(), H5T_NATIVE_DOUBLE, end->sum2.data());
        m.write_image(m.p_end_count.get(), H5T_NATIVE_UINT32, end->count.data());
      }
      m.ctx.check(H5Fflush(m.file.get(), H5F_SCOPE_LOCAL), "flushing (disk full?)");
      m.write_flushed_rows();
    });
  } catch (const OutputError&) {
    m.abandon();  // into the discarding descriptor
    throw;
  }
  m.close_all();
  m.close_recon();
  if (m.file.reset() < 0 && failure.empty())
    failure = m.path.string() + ": closing: " + hdf5_message();
  if (!failure.empty()) throw OutputError(failure);
  if (!m.guard->still_names_file())
    throw OutputError(m.path.string() + ": the path no longer names the file written (deleted "
                      "or replaced); end_time is not written through it");
  // SWMR forbids new attributes; the end time, the end reason and the reconstruction totals
  // (small attributes; the volumes are already in place) are added once the file is closed.
  // HDF5 truncated the file to its end at close, and with it the space claimed beyond.
  m.guard->claim_for_reopen();
  Hid fapl = make_fapl();
  // A reader that has the file open in SWMR mode (a live h5py session, a viewer) holds HDF5's
  // shared lock on it: the exclusive lock of a plain open would fail, and the end time, the end
  // reason and the products would never reach the file. This is glintd's own file, closed by it
  // a moment ago, and the only writer: it is reopened without the lock. A reader sees what is
  // added here once it opens the file again.
  m.ctx.check(H5Pset_file_locking(fapl.get(), false, true), "file access without locking");
  Hid file(m.ctx.id(H5Fopen(m.path.c_str(), H5F_ACC_RDWR, fapl.get()), "reopening"),
           H5Fclose);
  Hid entry(m.ctx.id(H5Gopen2(file.get(), "entry", H5P_DEFAULT), "group entry"), H5Gclose);
  try {
    if (m.recon) {
      ReconstructionSummary sum = m.recon_summary.value_or(ReconstructionSummary{});
      if (!m.recon_summary) sum.volumes_done = m.recon_rows;
      write_recon_summary(m.ctx, entry.get(), sum, m.recon_rows);
    }
    if (m.products) write_products(m.ctx, file.get(), entry.get(), *m.products,
                                   m.slice_frames > 0);
    const std::string end_time = iso8601_now();
    write_string_attr(m.ctx, entry.get(), "end_time", end_time);
    write_string_dataset(m.ctx, entry.get(), "end_time", end_time);
    if (!m.end_reason.empty()) write_string_attr(m.ctx, entry.get(), "end_reason", m.end_reason);
    write_numeric_attr<uint64_t>(m.ctx, entry.get(), "stream_stride", m.stream_stride);
    if (m.pixel_mask)
      write_numeric_attr<uint64_t>(m.ctx, entry.get(), "masked_clusters", m.masked_clusters);
    if (H5Fflush(file.get(), H5F_SCOPE_LOCAL) < 0) m.ctx.fail("flushing (disk full?)");
  } catch (const OutputError&) {
    // Out of space even for these (beyond the reserve): nothing more reaches the file (see
    // Impl::abandon).
    detach_from_disk(file.get());
    entry.reset();
    if (file.reset() < 0) H5Eclear2(H5E_DEFAULT);
    throw;
  }
  entry.reset();
  if (file.reset() < 0) m.ctx.fail("closing");
}

bool RunFileWriter::is_open() const { return impl_ && !impl_->closed; }
uint64_t RunFileWriter::frames_written() const { return impl_->frames; }
uint64_t RunFileWriter::clusters_written() const { return impl_->clusters; }
const std::filesystem::path& RunFileWriter::path() const { return impl_->path; }

std::filesystem::path run_file_path(const std::filesystem::path& dir, std::string_view run_name,
                                    uint64_t run_index) {
  char idx[32];
  std::snprintf(idx, sizeof idx, "_%06llu.h5", static_cast<unsigned long long>(run_index));
  return dir / (std::string(run_name) + idx);
}

// --- reader ----------------------------------------------------------------------------------

namespace {

bool has_attr(hid_t obj, const char* name) { return H5Aexists(obj, name) > 0; }

std::string read_string_attr(const Context& c, hid_t obj, const char* name) {
  if (!has_attr(obj, name)) return {};
  Hid attr(c.id(H5Aopen(obj, name, H5P_DEFAULT), name), H5Aclose);
  Hid type = hdf5::string_type();
  char* p = nullptr;
  c.check(H5Aread(attr.get(), type.get(), &p), name);
  std::string s = p ? p : "";
  H5free_memory(p);
  return s;
}

template <class T>
std::vector<T> read_numeric_attr(const Context& c, hid_t obj, const char* name) {
  Hid attr(c.id(H5Aopen(obj, name, H5P_DEFAULT), name), H5Aclose);
  Hid space(H5Aget_space(attr.get()), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<T> v(static_cast<std::size_t>(n));
  c.check(H5Aread(attr.get(), native_type<T>(), v.data()), name);
  return v;
}

template <class T>
std::vector<T> read_all(const Context& c, hid_t file, const char* name) {
  Hid ds(c.id(H5Dopen2(file, name, H5P_DEFAULT), name), H5Dclose);
  Hid space(c.id(H5Dget_space(ds.get()), name), H5Sclose);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<T> v(static_cast<std::size_t>(std::max<hssize_t>(n, 0)));
  if (n <= 0) return v;
  // The extent read above, not H5S_ALL: in the process writing the file, HDF5 shares the
  // dataset with the writer, which may extend it between the two calls (H5S_ALL would then
  // read the new extent into the buffer sized for the old one).
  const hsize_t count = hsize_t(n);
  Hid mem(c.id(H5Screate_simple(1, &count, nullptr), name), H5Sclose);
  c.check(H5Dread(ds.get(), native_type<T>(), mem.get(), space.get(), H5P_DEFAULT, v.data()),
          name);
  return v;
}

/// The first `nz` slices of row `row` of an (n, Z, Y, X) float32 dataset.
std::vector<float> read_volume(const Context& c, hid_t ds, hsize_t row, hsize_t nz, hsize_t ny,
                               hsize_t nx, const char* what) {
  const std::array<hsize_t, 4> start{row, 0, 0, 0}, count{1, nz, ny, nx};
  std::vector<float> v(static_cast<std::size_t>(nz * ny * nx));
  Hid file_space(c.id(H5Dget_space(ds), what), H5Sclose);
  c.check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                              count.data(), nullptr),
          what);
  Hid mem_space(c.id(H5Screate_simple(4, count.data(), nullptr), what), H5Sclose);
  c.check(H5Dread(ds, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT, v.data()),
          what);
  return v;
}

/// /entry/reconstruction: the layout, the totals (from the table when the run never closed)
/// and every volume that is in all per-volume tables.
void read_reconstruction(const Context& c, hid_t f, RunFileContents& out) {
  Hid g(c.id(H5Gopen2(f, "entry/reconstruction", H5P_DEFAULT), "group /entry/reconstruction"),
        H5Gclose);
  const hid_t gid = g.get();
  auto u32 = [&](const char* name) { return read_numeric_attr<uint32_t>(c, gid, name).at(0); };
  auto u64_or = [&](const char* name, uint64_t dflt) {
    return has_attr(gid, name) ? read_numeric_attr<uint64_t>(c, gid, name).at(0) : dflt;
  };
  if (!has_attr(gid, "rows") || H5Lexists(gid, "input", H5P_DEFAULT) <= 0)
    c.fail("/entry/reconstruction is not in the per-volume table layout (written by an older "
           "glint?)");
  ReconstructionLayout l;
  l.weight = read_string_attr(c, gid, "weight");
  l.frames_per_slice = u32("frames_per_slice");
  l.slices = u32("slices");
  l.ny = u32("rows");
  l.nx = u32("cols");
  l.lambda = read_numeric_attr<double>(c, gid, "lambda").at(0);
  l.outer = u32("outer");
  l.tv_inner = u32("tv_inner");
  l.warm_start = read_numeric_attr<uint8_t>(c, gid, "warm_start").at(0) != 0;
  l.nonneg = read_numeric_attr<uint8_t>(c, gid, "nonneg").at(0) != 0;
  l.forward = read_string_attr(c, gid, "forward");
  l.variant = read_string_attr(c, gid, "variant");
  l.backend = read_string_attr(c, gid, "backend");
  l.solve_partial = read_numeric_attr<uint8_t>(c, gid, "solve_partial").at(0) != 0;
  out.reconstruction_layout = l;

  const auto first = read_all<uint64_t>(c, gid, "first_frame");
  const auto last = read_all<uint64_t>(c, gid, "last_frame");
  const auto slices = read_all<uint32_t>(c, gid, "slices");
  const auto iterations = read_all<uint32_t>(c, gid, "iterations");
  const auto seconds = read_all<double>(c, gid, "solve_seconds");
  const auto status = read_all<uint8_t>(c, gid, "status");
  Hid in(c.id(H5Dopen2(gid, "input", H5P_DEFAULT), "/entry/reconstruction/input"), H5Dclose);
  Hid outp(c.id(H5Dopen2(gid, "output", H5P_DEFAULT), "/entry/reconstruction/output"), H5Dclose);
  Hid dev(c.id(H5Dopen2(gid, "device", H5P_DEFAULT), "/entry/reconstruction/device"), H5Dclose);
  std::array<hsize_t, 4> din{}, dout{};
  for (auto [ds, dims] : {std::pair{in.get(), &din}, std::pair{outp.get(), &dout}}) {
    Hid space(c.id(H5Dget_space(ds), "/entry/reconstruction volume space"), H5Sclose);
    if (H5Sget_simple_extent_ndims(space.get()) != 4)
      c.fail("/entry/reconstruction/input and output must be (n, Z, Y, X)");
    H5Sget_simple_extent_dims(space.get(), dims->data(), nullptr);
  }
  if (din[1] != l.slices || din[2] != l.ny || din[3] != l.nx || dout[1] != din[1] ||
      dout[2] != din[2] || dout[3] != din[3])
    c.fail("/entry/reconstruction/input and output do not match the slices, rows and cols "
           "attributes");
  Hid dev_space(c.id(H5Dget_space(dev.get()), "/entry/reconstruction/device"), H5Sclose);
  const hsize_t n_dev = static_cast<hsize_t>(H5Sget_simple_extent_npoints(dev_space.get()));
  const hsize_t n = std::min<hsize_t>({first.size(), last.size(), slices.size(),
                                       iterations.size(), seconds.size(), status.size(), n_dev,
                                       din[0], dout[0]});
  std::vector<char> devices(static_cast<std::size_t>(n_dev) * kDeviceChars);
  if (n_dev > 0) {
    Hid type = make_device_type();
    // The extent read above (see read_all).
    Hid mem(c.id(H5Screate_simple(1, &n_dev, nullptr), "/entry/reconstruction/device"),
            H5Sclose);
    c.check(H5Dread(dev.get(), type.get(), mem.get(), dev_space.get(), H5P_DEFAULT,
                    devices.data()),
            "/entry/reconstruction/device");
  }

  ReconstructionSummary sum;
  sum.frames = u64_or("frames", 0);
  sum.volumes_done = u64_or("volumes_done", n);
  sum.volumes_dropped = u64_or("volumes_dropped", 0);
  sum.volumes_failed = u64_or("volumes_failed", 0);
  out.reconstruction_summary = sum;

  for (std::size_t i = 0; i < n; ++i) {
    if (slices[i] == 0 || slices[i] > l.slices)
      c.fail("/entry/reconstruction/slices[" + std::to_string(i) + "] is " +
             std::to_string(slices[i]) + ", not 1.." + std::to_string(l.slices));
    ReconstructionVolume v;
    v.first_frame = first[i];
    v.last_frame = last[i];
    v.nx = l.nx;
    v.ny = l.ny;
    v.nz = slices[i];
    // Each volume straight into its own vectors: only its filled slices, no copy of the table.
    v.input = read_volume(c, in.get(), i, v.nz, l.ny, l.nx, "/entry/reconstruction/input");
    v.output = read_volume(c, outp.get(), i, v.nz, l.ny, l.nx, "/entry/reconstruction/output");
    v.lambda = l.lambda;
    v.outer = l.outer;
    v.tv_inner = l.outer ? iterations[i] / l.outer : 0;
    v.warm_start = l.warm_start;
    v.nonneg = l.nonneg;
    v.forward = l.forward;
    v.variant = l.variant;
    const char* d = devices.data() + i * kDeviceChars;
    v.backend.assign(d, strnlen(d, kDeviceChars));
    v.solve_seconds = seconds[i];
    v.partial = status[i] == 1;
    out.reconstruction.push_back(std::move(v));
  }
}

/// The module groups of /entry/instrument/detector (NXdetector_module), in id order, and the
/// detector's shape and this image's origin in it; one module, the whole detector, for a file
/// that records none.
void read_modules(const Context& c, hid_t det, RunFileContents& out) {
  out.detector_shape = {out.shape.rows, out.shape.cols};
  out.detector_origin = {0, 0};
  auto pair = [&](hid_t obj, const char* name) {
    const auto v = read_numeric_attr<uint32_t>(c, obj, name);
    if (v.size() != 2) c.fail(fmt::format("attribute {} must have two entries", name));
    return std::array<uint32_t, 2>{v[0], v[1]};
  };
  if (has_attr(det, "detector_shape")) out.detector_shape = pair(det, "detector_shape");
  if (has_attr(det, "detector_origin")) out.detector_origin = pair(det, "detector_origin");
  std::vector<std::string> names;
  H5Literate(
      det, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
        if (std::string_view(name).starts_with("module_"))
          static_cast<std::vector<std::string>*>(data)->emplace_back(name);
        return 0;
      },
      &names);
  for (const std::string& name : names) {
    Hid g(c.id(H5Gopen2(det, name.c_str(), H5P_DEFAULT), "group " + name), H5Gclose);
    if (read_string_attr(c, g.get(), "NX_class") != "NXdetector_module") continue;
    ModuleInfo m;
    const std::string where = "/entry/instrument/detector/" + name;
    const auto id = has_attr(g.get(), "module_id")
                        ? read_numeric_attr<uint32_t>(c, g.get(), "module_id")
                        : std::vector<uint32_t>{};
    if (id.size() != 1) c.fail(where + ": module_id must be one number");
    m.id = id[0];
    const auto origin = read_all<uint32_t>(c, g.get(), "data_origin");
    const auto size = read_all<uint32_t>(c, g.get(), "data_size");
    if (origin.size() != 2 || size.size() != 2)
      c.fail(where + ": data_origin and data_size must have two entries");
    m.data_origin = {origin[0], origin[1]};
    m.data_size = {size[0], size[1]};
    m.detector_origin = pair(g.get(), "detector_origin");
    if (has_attr(g.get(), "orientation")) {
      const std::string o = read_string_attr(c, g.get(), "orientation");
      const auto parsed = parse_module_orientation(o);
      if (!parsed)
        c.fail(fmt::format("{}: @orientation '{}' is none of {}", where, o, kModuleOrientations));
      m.orientation = *parsed;
    }
    out.modules.push_back(m);
  }
  std::sort(out.modules.begin(), out.modules.end(),
            [](const ModuleInfo& a, const ModuleInfo& b) { return a.id < b.id; });
  if (out.modules.empty())
    out.modules.push_back(ModuleInfo{0, {0, 0}, {out.shape.rows, out.shape.cols},
                                     out.detector_origin});
}

/// The clusters of `run` shifted by each one's module's origin (data_origin, or
/// detector_origin when `detector`).
ClusterTable shifted_clusters(const RunFileContents& run, bool detector) {
  ClusterTable t = run.clusters;
  if (run.cluster_module.empty()) {
    // No module column: one module at (0, 0) of the image.
    if (detector) {
      for (auto& x : t.x_mut()) x = static_cast<uint16_t>(x + run.detector_origin[1]);
      for (auto& y : t.y_mut()) y = static_cast<uint16_t>(y + run.detector_origin[0]);
    }
    return t;
  }
  auto& xs = t.x_mut();
  auto& ys = t.y_mut();
  if (run.cluster_module.size() < xs.size())
    throw OutputError(fmt::format("{} clusters but {} module ids", xs.size(),
                                  run.cluster_module.size()));
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const uint32_t id = run.cluster_module[i];
    const auto known = std::find_if(run.modules.begin(), run.modules.end(),
                                    [&](const ModuleInfo& m) { return m.id == id; });
    if (known == run.modules.end())
      throw OutputError(fmt::format("cluster row {} is in module {}, which the file does not "
                                    "describe (/entry/instrument/detector/module_<id>)", i, id));
    const ModuleInfo& m = *known;
    const auto& o = detector ? m.detector_origin : m.data_origin;
    // Native (x, y) of the module where its block shows it, then at the block's origin.
    const ModuleRegion r{0, 0, {m.data_size[0], m.data_size[1]}, m.orientation};
    xs[i] = static_cast<uint16_t>(r.image_x(xs[i]) + o[1]);
    ys[i] = static_cast<uint16_t>(r.image_y(ys[i]) + o[0]);
    if (m.orientation != ModuleOrientation::normal) {
      const std::size_t vpc = t.values_per_cluster();
      orient_window(m.orientation, t.cluster_size(),
                    std::span<int32_t>(t.data_mut()).subspan(i * vpc, vpc));
    }
  }
  return t;
}

/// Opens a run file for reading (also while glintd writes it). A file that is not
/// HDF5, or not laid out as glint's run and pedestal files, is named as such, not by the HDF5
/// call that first failed on it.
Hid open_for_reading(const Context& c) {
  silence_hdf5();
  // (< 0: it cannot be opened at all, which the open below describes)
  if (H5Fis_hdf5(c.path->c_str()) == 0)
    throw OutputError(c.path->string() + ": not an HDF5 file (not a glint run or pedestal file)");
  H5Eclear2(H5E_DEFAULT);
  Hid file = hdf5::open_read_only(c.path->c_str());
  if (!file.valid()) c.fail("cannot open");
  for (const char* group : {"entry", "entry/instrument", "entry/instrument/detector"})
    if (H5Lexists(file.get(), group, H5P_DEFAULT) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      throw OutputError(c.path->string() + ": not a glint run or pedestal file (no group /" +
                        group + ")");
    }
  return file;
}

}  // namespace

PedestalState read_pedestal_state(const std::filesystem::path& path) {
  const Context c{&path};
  Hid file = open_for_reading(c);
  const hid_t f = file.get();
  Hid det(c.id(H5Gopen2(f, "entry/instrument/detector", H5P_DEFAULT), "detector group"),
          H5Gclose);
  const auto shape = read_numeric_attr<uint32_t>(c, det.get(), "frame_shape");
  if (shape.size() != 2) c.fail("frame_shape must have two entries");
  PedestalState s;
  s.shape = {shape[0], shape[1]};
  s.window = read_numeric_attr<uint32_t>(c, det.get(), "pedestal_window").at(0);
  s.sum = read_all<double>(c, f, "entry/pedestal/end_sum");
  if (s.sum.empty() || std::isnan(s.sum[0]))
    c.fail("holds no end pedestal (the run did not close, or closed without one)");
  s.sum2 = read_all<double>(c, f, "entry/pedestal/end_sum2");
  s.count = read_all<uint32_t>(c, f, "entry/pedestal/end_count");
  const std::size_t pixels = s.shape.pixels();
  if (s.sum.size() != pixels || s.sum2.size() != pixels || s.count.size() != pixels)
    c.fail(fmt::format("/entry/pedestal end_sum, end_sum2 and end_count hold {}, {} and {} "
                       "values, frame_shape [{}, {}] has {} pixels", s.sum.size(), s.sum2.size(),
                       s.count.size(), s.shape.rows, s.shape.cols, pixels));
  return s;
}

void write_pedestal_file(const std::filesystem::path& path, const PedestalState& state,
                         const std::string& source, bool overwrite) {
  RunMetadata meta;
  meta.finder.shape = state.shape;
  meta.finder.pedestal_window = state.window;
  meta.detector_type = "pedestal";
  meta.source = source;
  meta.config_yaml = "# glint pedestal\nsource: " + source + "\n";
  RunFileWriter w(path, meta, overwrite);
  w.write_start_pedestal(state);
  w.close(&state);
}

/// The products' groups (docs/products.md), when the file has them.
void read_products(const Context& c, hid_t f, RunFileContents& out) {
  if (H5Lexists(f, "entry/clusters/energy", H5P_DEFAULT) > 0) {
    const bool float_data = out.clusters.value_type() == ClusterValues::float32;
    for (auto [name, to] : {std::pair{"entry/clusters/energy", &out.cluster_energy},
                            std::pair{"entry/clusters/energy_2x2", &out.cluster_energy_2x2}}) {
      if (float_data) {
        const auto v = read_all<float>(c, f, name);
        to->resize(v.size());
        std::transform(v.begin(), v.end(), to->begin(),
                       [](float e) { return std::bit_cast<int32_t>(e); });
      } else {
        *to = read_all<int32_t>(c, f, name);
      }
      if (to->size() > out.clusters.n_clusters()) to->resize(out.clusters.n_clusters());
    }
  }
  ProductsContents& p = out.products;
  // One number, or a clear error naming the attribute (never an exception of another kind).
  auto scalar = [&](hid_t g, const char* name) {
    const auto v = read_numeric_attr<uint64_t>(c, g, name);
    if (v.size() != 1)
      c.fail(fmt::format("attribute {} of a product group must be one number", name));
    return v[0];
  };
  if (H5Lexists(f, "entry/hitmap_slices", H5P_DEFAULT) > 0) {
    p.slice_frame_start = read_all<uint64_t>(c, f, "entry/hitmap_slices/frame_start");
    p.slices = read_all<uint32_t>(c, f, "entry/hitmap_slices/counts");
    p.slices.resize(std::min(p.slices.size(), p.slice_frame_start.size() * out.shape.pixels()));
  }
  if (H5Lexists(f, "entry/spectrum", H5P_DEFAULT) <= 0) return;
  p.present = true;
  {
    Hid g(c.id(H5Gopen2(f, "entry/spectrum", H5P_DEFAULT), "group /entry/spectrum"), H5Gclose);
    p.energy_kind = read_string_attr(c, g.get(), "energy_kind");
    p.energy_window = read_numeric_attr<double>(c, g.get(), "energy_window");
    p.clusters = scalar(g.get(), "clusters");
    p.frames = scalar(g.get(), "frames");
    p.underflow = scalar(g.get(), "underflow");
    p.overflow = scalar(g.get(), "overflow");
    Hid ds(c.id(H5Dopen2(g.get(), "energy", H5P_DEFAULT), "spectrum energy"), H5Dclose);
    p.units = read_string_attr(c, ds.get(), "units");
  }
  p.spectrum = read_all<uint64_t>(c, f, "entry/spectrum/counts");
  p.spectrum_energy = read_all<double>(c, f, "entry/spectrum/energy");
  p.spectrum_edges = read_all<double>(c, f, "entry/spectrum/energy_edges");
  if (H5Lexists(f, "entry/hitmap", H5P_DEFAULT) > 0) {
    p.hitmap = read_all<uint64_t>(c, f, "entry/hitmap/counts");
    p.energy_image = read_all<double>(c, f, "entry/energy_image/energy");
  }
  if (H5Lexists(f, "entry/pixel_spectra", H5P_DEFAULT) > 0)
    p.pixel_spectra = read_all<uint32_t>(c, f, "entry/pixel_spectra/counts");
  if (H5Lexists(f, "entry/eta2", H5P_DEFAULT) > 0) {
    p.eta2 = read_all<uint64_t>(c, f, "entry/eta2/counts");
    p.eta3 = read_all<uint64_t>(c, f, "entry/eta3/counts");
    p.eta2_x = read_all<double>(c, f, "entry/eta2/eta_x");
    p.eta3_x = read_all<double>(c, f, "entry/eta3/eta_x");
    for (auto [name, to] : {std::pair{"entry/eta2", &p.eta2_outside},
                            std::pair{"entry/eta3", &p.eta3_outside}}) {
      Hid g(c.id(H5Gopen2(f, name, H5P_DEFAULT), name), H5Gclose);
      *to = scalar(g.get(), "outside");
    }
  }
  if (H5Lexists(f, "entry/subpixel_image", H5P_DEFAULT) > 0) {
    p.subpixel = read_all<uint64_t>(c, f, "entry/subpixel_image/counts");
    p.subpixel_x = read_all<double>(c, f, "entry/subpixel_image/x");
    p.subpixel_y = read_all<double>(c, f, "entry/subpixel_image/y");
    Hid g(c.id(H5Gopen2(f, "entry/subpixel_image", H5P_DEFAULT), "group /entry/subpixel_image"),
          H5Gclose);
    const auto factor = read_numeric_attr<uint32_t>(c, g.get(), "factor");
    if (factor.size() != 1)
      c.fail("attribute factor of /entry/subpixel_image must be one number");
    p.subpixel_factor = factor[0];
    p.subpixel_calibration = read_string_attr(c, g.get(), "calibration");
    p.subpixel_outside = scalar(g.get(), "outside");
    p.subpixel_off_detector = scalar(g.get(), "off_detector");
  }
}

const ModuleInfo& RunFileContents::module(uint32_t id) const {
  for (const ModuleInfo& m : modules)
    if (m.id == id) return m;
  throw std::out_of_range(fmt::format("the run file has no module {}", id));
}

ModuleAxes module_axes(ModuleOrientation o, std::array<uint32_t, 2> origin,
                       std::array<uint32_t, 2> size) {
  const bool fr = flips_rows(o), fc = flips_cols(o);
  ModuleAxes a;
  a.fast = {fc ? -1.0 : 1.0, 0.0, 0.0};
  a.slow = {0.0, fr ? -1.0 : 1.0, 0.0};
  a.offset = {static_cast<double>(origin[1] + (fc ? size[1] - 1 : 0)),
              static_cast<double>(origin[0] + (fr ? size[0] - 1 : 0)), 0.0};
  return a;
}

ClusterTable image_clusters(const RunFileContents& run) { return shifted_clusters(run, false); }

ClusterTable detector_clusters(const RunFileContents& run) {
  return shifted_clusters(run, true);
}

RunFileContents read_run_file(const std::filesystem::path& path) {
  const Context c{&path};
  Hid file = open_for_reading(c);
  const hid_t f = file.get();
  RunFileContents out;
  {
    Hid entry(c.id(H5Gopen2(f, "entry", H5P_DEFAULT), "group /entry"), H5Gclose);
    out.start_time = read_string_attr(c, entry.get(), "start_time");
    out.end_time = read_string_attr(c, entry.get(), "end_time");
    out.end_reason = read_string_attr(c, entry.get(), "end_reason");
    if (has_attr(entry.get(), "stream_stride"))
      out.stream_stride = read_numeric_attr<uint64_t>(c, entry.get(), "stream_stride").at(0);
    if (has_attr(entry.get(), "masked_clusters"))
      out.masked_clusters = read_numeric_attr<uint64_t>(c, entry.get(), "masked_clusters").at(0);
    Hid det(c.id(H5Gopen2(f, "entry/instrument/detector", H5P_DEFAULT), "detector group"),
            H5Gclose);
    const auto shape = read_numeric_attr<uint32_t>(c, det.get(), "frame_shape");
    if (shape.size() != 2) c.fail("frame_shape must have two entries");
    out.shape = {shape[0], shape[1]};
    out.cluster_size = read_numeric_attr<int32_t>(c, det.get(), "cluster_size").at(0);
    out.n_sigma = read_numeric_attr<double>(c, det.get(), "n_sigma").at(0);
    out.pedestal_window = read_numeric_attr<uint32_t>(c, det.get(), "pedestal_window").at(0);
    out.backend = read_string_attr(c, det.get(), "backend");
    read_modules(c, det.get(), out);
    Hid cfg(c.id(H5Dopen2(f, "entry/config", H5P_DEFAULT), "config"), H5Dclose);
    Hid type = hdf5::string_type();
    char* p = nullptr;
    c.check(H5Dread(cfg.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &p), "config");
    out.config_yaml = p ? p : "";
    H5free_memory(p);
  }
  // Files written since /entry/flushed_rows exists: only the rows it counts are known to be
  // whole (after a failed write the extents may cover rows never written). It is read before
  // the rows: a row it counts was written before it, so before the reads below began, while a
  // count read after them could cover rows that were extended but not yet written when read
  // (their fill values).
  std::size_t flushed_frames = std::numeric_limits<std::size_t>::max();
  std::size_t flushed_clusters = flushed_frames;
  if (H5Lexists(f, "entry/flushed_rows", H5P_DEFAULT) > 0) {
    const auto flushed = read_all<uint64_t>(c, f, "entry/flushed_rows");
    if (flushed.size() != 2) c.fail("/entry/flushed_rows must hold two counts");
    flushed_frames = static_cast<std::size_t>(flushed[0]);
    flushed_clusters = static_cast<std::size_t>(flushed[1]);
  }
  const auto fn = read_all<uint64_t>(c, f, "entry/frames/frame_number");
  const auto ts = read_all<uint64_t>(c, f, "entry/frames/timestamp");
  const auto off = read_all<uint64_t>(c, f, "entry/frames/cluster_offset");
  const auto nc = read_all<uint32_t>(c, f, "entry/frames/n_clusters");
  const auto fl = read_all<uint8_t>(c, f, "entry/frames/flags");
  // A concurrent reader may see columns of slightly different lengths: take the common rows.
  const std::size_t rows =
      std::min({fn.size(), ts.size(), off.size(), nc.size(), fl.size(), flushed_frames});
  auto cx = read_all<uint16_t>(c, f, "entry/clusters/x");
  auto cy = read_all<uint16_t>(c, f, "entry/clusters/y");
  bool float_data = false;
  {
    Hid ds(c.id(H5Dopen2(f, "entry/clusters/data", H5P_DEFAULT), "entry/clusters/data"),
           H5Dclose);
    Hid type(c.id(H5Dget_type(ds.get()), "entry/clusters/data"), H5Tclose);
    float_data = H5Tget_class(type.get()) == H5T_FLOAT;
  }
  std::vector<int32_t> cdata;
  if (float_data) {
    const auto values = read_all<float>(c, f, "entry/clusters/data");
    cdata.resize(values.size());
    std::transform(values.begin(), values.end(), cdata.begin(),
                   [](float v) { return std::bit_cast<int32_t>(v); });
  } else {
    cdata = read_all<int32_t>(c, f, "entry/clusters/data");
  }
  if (H5Lexists(f, "entry/instrument/detector/pixel_mask", H5P_DEFAULT) > 0) {
    out.pixel_mask = read_all<uint32_t>(c, f, "entry/instrument/detector/pixel_mask");
    out.frame_masked_clusters = read_all<uint32_t>(c, f, "entry/frames/masked_clusters");
    if (out.frame_masked_clusters.size() > rows) out.frame_masked_clusters.resize(rows);
  }
  if (H5Lexists(f, "entry/frames/gain_switched", H5P_DEFAULT) > 0) {
    out.gain_switched = read_all<uint32_t>(c, f, "entry/frames/gain_switched");
    out.gain_invalid = read_all<uint32_t>(c, f, "entry/frames/gain_invalid");
  }
  const std::size_t per = static_cast<std::size_t>(out.cluster_size) * out.cluster_size;
  const bool has_modules = H5Lexists(f, "entry/clusters/module", H5P_DEFAULT) > 0;
  if (has_modules) out.cluster_module = read_all<uint16_t>(c, f, "entry/clusters/module");
  const std::size_t n_clusters = std::min(
      {cx.size(), cy.size(), per ? cdata.size() / per : std::size_t{0}, flushed_clusters,
       has_modules ? out.cluster_module.size() : std::numeric_limits<std::size_t>::max()});
  out.clusters = ClusterTable(out.cluster_size,
                              float_data ? ClusterValues::float32 : ClusterValues::int32);
  for (std::size_t i = 0; i < rows; ++i) {
    const FrameRow r{fn[i], ts[i], off[i], nc[i], fl[i]};
    // Clusters not visible yet (also an offset so large that offset + n wraps).
    if (r.cluster_offset > n_clusters || r.n_clusters > n_clusters - r.cluster_offset) break;
    out.frames.push_back(r);
    out.clusters.frames_mut().push_back(FrameRecord{r.frame_number, r.cluster_offset, r.n_clusters});
  }
  if (has_modules) out.cluster_module.resize(n_clusters);
  cx.resize(n_clusters);
  cy.resize(n_clusters);
  cdata.resize(n_clusters * per);
  out.clusters.x_mut() = std::move(cx);
  out.clusters.y_mut() = std::move(cy);
  out.clusters.data_mut() = std::move(cdata);
  out.start_mean = read_all<double>(c, f, "entry/pedestal/start_mean");
  out.start_noise = read_all<double>(c, f, "entry/pedestal/start_noise");
  out.end_mean = read_all<double>(c, f, "entry/pedestal/end_mean");
  out.end_noise = read_all<double>(c, f, "entry/pedestal/end_noise");
  auto end_sum = read_all<double>(c, f, "entry/pedestal/end_sum");
  auto end_count = read_all<uint32_t>(c, f, "entry/pedestal/end_count");
  if (H5Lexists(f, "entry/pedestal/calibration", H5P_DEFAULT) > 0) {
    out.calibration_pedestal = read_all<double>(c, f, "entry/pedestal/calibration");
    if (out.calibration_pedestal.size() != jungfrau::kStages * out.shape.pixels())
      c.fail(fmt::format("/entry/pedestal/calibration holds {} values, frame_shape [{}, {}] "
                         "needs {} (G0, G1, G2)", out.calibration_pedestal.size(), out.shape.rows,
                         out.shape.cols, jungfrau::kStages * out.shape.pixels()));
  }
  if (H5Lexists(f, "entry/reconstruction", H5P_DEFAULT) > 0) read_reconstruction(c, f, out);
  read_products(c, f, out);
  if (!end_sum.empty() && !std::isnan(end_sum[0])) {
    PedestalState s;  // not sized from frame_shape: the datasets give the pixels
    s.shape = out.shape;
    s.window = out.pedestal_window;
    s.sum = std::move(end_sum);
    s.sum2 = read_all<double>(c, f, "entry/pedestal/end_sum2");
    s.count = std::move(end_count);
    const std::size_t pixels = out.shape.pixels();
    if (s.sum.size() != pixels || s.sum2.size() != pixels || s.count.size() != pixels)
      c.fail(fmt::format("/entry/pedestal end_sum, end_sum2 and end_count hold {}, {} and {} "
                         "values, frame_shape [{}, {}] has {} pixels", s.sum.size(), s.sum2.size(),
                         s.count.size(), out.shape.rows, out.shape.cols, pixels));
    out.end_state = std::move(s);
  }
  return out;
}

}  // namespace glint::pipeline
