// glint._glint: the cluster finder and the .clust reader for Python (docs/python.md). The
// package's glint/finder.py turns the arrays returned here into structured arrays.
//
// find() runs what `glint find` runs on the same frames (the same finder factory, the same dark
// and data split, frame numbers the indices in the array), so its clusters and pedestal are
// bit-identical to that command's run file. The GIL is released while the finder works.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "glint/clust_file.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/gpu/device.hpp"
#include "glint/jungfrau.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/pixel_mask.hpp"

namespace py = pybind11;

namespace {

constexpr uint8_t kFlagDark = 2;  // /entry/frames/flags: a pedestal frame (docs/file-layout.md)

/// A new numpy array of `shape` holding a copy of `values`.
template <class T>
py::array_t<T> to_array(const std::vector<T>& values, std::vector<py::ssize_t> shape) {
  py::array_t<T> out(shape);
  if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(T));
  return out;
}

template <class T>
py::array_t<T> to_array(std::span<const T> values) {
  py::array_t<T> out(static_cast<py::ssize_t>(values.size()));
  if (!values.empty()) std::memcpy(out.mutable_data(), values.data(), values.size() * sizeof(T));
  return out;
}

/// The clusters of `table` as columns: frame_number (per cluster), x, y, data (n, S, S) int32
/// (float32 for a float table: the values' bits reinterpreted, not converted).
py::dict cluster_columns(const glint::ClusterTable& table, bool float_values) {
  const std::size_t n = table.n_clusters();
  const auto s = static_cast<py::ssize_t>(table.cluster_size());
  py::array_t<uint64_t> frame_number(static_cast<py::ssize_t>(n));
  uint64_t* fn = frame_number.mutable_data();
  for (const glint::FrameRecord& r : table.frames())
    std::fill_n(fn + r.first_cluster, r.n_clusters, r.frame_number);
  const std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(n), s, s};
  py::array data = float_values ? py::array(py::dtype::of<float>(), shape)
                                : py::array(py::dtype::of<int32_t>(), shape);
  if (n > 0)
    std::memcpy(data.mutable_data(), table.data().data(), table.data().size() * sizeof(int32_t));
  py::dict out;
  out["frame_number"] = frame_number;
  out["x"] = to_array(table.x());
  out["y"] = to_array(table.y());
  out["data"] = data;
  return out;
}

std::unique_ptr<glint::ClusterFinder> make_finder(const glint::FinderParams& params,
                                                  const std::string& backend, unsigned threads,
                                                  int batch,
                                                  std::vector<glint::ModuleRegion> regions) {
  if (backend == "reference")
    return glint::make_modular_finder(
        params, std::move(regions),
        [batch](const glint::FinderParams& p, std::size_t) {
          return glint::make_reference_finder(p, batch);
        },
        false);
  glint::pipeline::FinderOptions options;
  try {
    options.backend = glint::pipeline::parse_backend(backend);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument("backend '" + backend +
                                "': allowed are auto, cpu, reference, gpu");
  }
  options.threads = threads;
  options.batch_frames = batch;
  return glint::pipeline::make_module_finders(params, std::move(regions), options,
                                              glint::pipeline::make_finder);
}

py::dict find(const py::array& frames_in, uint64_t n_dark, double n_sigma, int cluster_size,
              uint32_t pedestal_window, const std::string& backend, unsigned threads, int batch,
              const std::string& detector, const std::string& gain_file,
              const std::string& pedestal_file, bool hg0, const std::optional<py::array>& mask,
              bool mask_from_dark, double noisy_factor, uint32_t modules_x, uint32_t modules_y,
              const std::vector<std::string>& module_orientation) {
  if (!py::dtype::of<uint16_t>().is(frames_in.dtype()))
    throw std::invalid_argument(fmt::format(
        "frames: must be uint16 (raw detector frames, N x rows x cols), got {}",
        std::string(py::str(frames_in.dtype()))));
  if (frames_in.ndim() != 3)
    throw std::invalid_argument(
        fmt::format("frames: must have 3 dimensions (N, rows, cols), got {}", frames_in.ndim()));
  if (batch < 1) throw std::invalid_argument("batch: must be at least 1");
  // A C-contiguous view (a copy only where the array is not contiguous already).
  const auto frames = py::array_t<uint16_t, py::array::c_style>::ensure(frames_in);
  const uint64_t n_frames = static_cast<uint64_t>(frames.shape(0));
  glint::FinderParams params;
  params.shape = {static_cast<uint32_t>(frames.shape(1)), static_cast<uint32_t>(frames.shape(2))};
  params.cluster_size = cluster_size;
  params.n_sigma = n_sigma;
  params.pedestal_window = pedestal_window;
  if (detector != "generic" && detector != "jungfrau")
    throw std::invalid_argument("detector '" + detector + "': allowed are generic, jungfrau");
  if (detector != "jungfrau" && (!gain_file.empty() || !pedestal_file.empty() || hg0))
    throw std::invalid_argument("gain_file, pedestal_file and hg0 need detector='jungfrau'");
  if (gain_file.empty() && (!pedestal_file.empty() || hg0))
    throw std::invalid_argument("pedestal_file and hg0 need gain_file (calibrated frames)");
  if (detector == "jungfrau") {
    params.pixels = gain_file.empty() ? glint::PixelMode::jungfrau_g0
                                      : glint::PixelMode::jungfrau_calibrated;
    if (!gain_file.empty())
      params.calibration =
          glint::jungfrau::load_calibration(params.shape, gain_file, pedestal_file, hg0);
  }
  glint::validate(params);
  std::vector<glint::ModuleRegion> regions;
  try {
    regions = glint::module_grid(params.shape, modules_x, modules_y);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("modules: ") + e.what());
  }
  std::vector<glint::ModuleOrientation> orientations;
  for (const std::string& name : module_orientation) {
    const auto o = glint::parse_module_orientation(name);
    if (!o)
      throw std::invalid_argument(fmt::format("module_orientation: '{}' is not an orientation "
                                              "(allowed: {})", name,
                                              glint::kModuleOrientations));
    orientations.push_back(*o);
  }
  try {
    regions = glint::module_grid(params.shape, modules_x, modules_y, orientations);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("module_orientation: ") + e.what());
  }
  const bool oriented =
      std::any_of(regions.begin(), regions.end(), [](const glint::ModuleRegion& r) {
        return r.orientation != glint::ModuleOrientation::normal;
      });
  const std::vector<glint::ModuleRegion> module_regions = regions;
  if (n_dark < params.pedestal_window)
    throw std::invalid_argument(fmt::format(
        "n_dark {}: fewer dark frames than the pedestal window ({}); the first data frame would "
        "corrupt the pedestal (pass pedestal_window=n_dark or fewer)",
        n_dark, params.pedestal_window));
  if (n_dark > n_frames)
    throw std::invalid_argument(
        fmt::format("n_dark {}: the array holds only {} frames", n_dark, n_frames));

  // The pixel mask, as glint find --mask / --mask-from-dark builds it.
  std::vector<uint32_t> mask_bits;
  const bool masked = mask.has_value() || mask_from_dark;
  if (mask) {
    const auto m = py::array_t<uint32_t, py::array::c_style>::ensure(*mask);
    if (!m || m.ndim() != 2 || static_cast<uint32_t>(m.shape(0)) != params.shape.rows ||
        static_cast<uint32_t>(m.shape(1)) != params.shape.cols)
      throw std::invalid_argument(fmt::format("mask: must be uint32 (rows, cols) = ({}, {}), "
                                              "NXdetector pixel_mask bits",
                                              params.shape.rows, params.shape.cols));
    mask_bits.assign(m.data(), m.data() + m.size());
  } else if (mask_from_dark) {
    mask_bits.assign(params.shape.pixels(), 0);
  }
  if (mask_from_dark && n_dark == 0)
    throw std::invalid_argument("mask_from_dark needs dark frames (n_dark > 0)");
  std::optional<glint::pipeline::DarkGainSwitches> dark_gains;
  if (mask_from_dark && detector == "jungfrau") dark_gains.emplace(params.shape);

  const bool float_values = params.pixels == glint::PixelMode::jungfrau_calibrated;
  const std::size_t np = params.shape.pixels();
  const uint16_t* pixels = frames.data();
  glint::ClusterTable all = glint::make_result_table(params);
  glint::PedestalState start, end;
  std::vector<double> calibration_pedestal;
  std::string description;
  std::vector<uint32_t> removed_per_frame;
  uint64_t masked_clusters = 0;
  {
    py::gil_scoped_release release;
    auto finder = make_finder(params, backend, threads, batch, std::move(regions));
    description = finder->description();
    // Dark and data frames in chunks of whole batches, as glint find reads them.
    const uint64_t chunk = std::max<uint64_t>(16 * static_cast<uint64_t>(batch), 1);
    for (uint64_t f = 0; f < n_dark; f += chunk) {
      const uint64_t n = std::min(chunk, n_dark - f);
      const std::span<const uint16_t> dark(pixels + f * np, n * np);
      finder->push_dark(dark);
      if (dark_gains && oriented) {
        // The frames hold each module natively: counted where the image shows its pixels.
        std::vector<uint16_t> mine;
        for (std::size_t k = 0; k < module_regions.size(); ++k) {
          mine.resize(n * module_regions[k].shape.pixels());
          glint::extract_module(params.shape, module_regions[k], dark, n, mine);
          dark_gains->add(mine, module_regions[k], k == 0);
        }
      } else if (dark_gains) {
        dark_gains->add(dark);
      }
    }
    // The mask is final once the dark frames are in (pipeline::MaskFilter, as glint find).
    glint::pipeline::MaskFilter mask_filter;
    if (masked) {
      if (mask_from_dark)
        glint::pipeline::flag_from_dark(mask_bits, finder->pedestal(), noisy_factor,
                                        dark_gains ? &*dark_gains : nullptr);
      mask_filter = glint::pipeline::MaskFilter(mask_bits, params.shape);
    }
    start = finder->pedestal();
    calibration_pedestal = finder->calibration_pedestal();
    glint::ClusterTable table = glint::make_result_table(params);
    glint::ClusterTable kept = glint::make_result_table(params);
    std::vector<uint32_t> removed;
    std::vector<uint64_t> numbers;
    for (uint64_t f = n_dark; f < n_frames; f += chunk) {
      const uint64_t n = std::min(chunk, n_frames - f);
      numbers.resize(n);
      for (uint64_t k = 0; k < n; ++k) numbers[k] = f + k;
      table.clear();
      finder->find(std::span<const uint16_t>(pixels + f * np, n * np), numbers, table);
      if (mask_filter.active()) {
        masked_clusters += mask_filter.apply(table, kept, removed);
        std::swap(table, kept);
      } else {
        removed.assign(table.n_frames(), 0);
      }
      removed_per_frame.insert(removed_per_frame.end(), removed.begin(), removed.end());
      all.append(table);
    }
    end = finder->pedestal();
  }

  // One row per frame, as /entry/frames of glint find's run file: dark rows (flag 2) first.
  const std::size_t rows = n_dark + all.n_frames();
  std::vector<uint64_t> frame_number(rows), cluster_offset(rows, 0);
  std::vector<uint32_t> n_clusters(rows, 0);
  std::vector<uint8_t> flags(rows, 0);
  std::vector<uint32_t> gain_switched(rows, 0), gain_invalid(rows, 0), masked_rows(rows, 0);
  for (uint64_t f = 0; f < n_dark; ++f) {
    frame_number[f] = f;
    flags[f] = kFlagDark;
  }
  const auto records = all.frames();
  const auto gains = all.gain_counts();
  for (std::size_t k = 0; k < records.size(); ++k) {
    const std::size_t row = n_dark + k;
    frame_number[row] = records[k].frame_number;
    cluster_offset[row] = records[k].first_cluster;
    n_clusters[row] = records[k].n_clusters;
    masked_rows[row] = removed_per_frame[k];
    if (!gains.empty()) {
      gain_switched[row] = gains[k].g1 + gains[k].g2;
      gain_invalid[row] = gains[k].invalid;
    }
  }
  py::dict frame_columns;
  const auto r = static_cast<py::ssize_t>(rows);
  frame_columns["frame_number"] = to_array(frame_number, {r});
  frame_columns["cluster_offset"] = to_array(cluster_offset, {r});
  frame_columns["n_clusters"] = to_array(n_clusters, {r});
  frame_columns["flags"] = to_array(flags, {r});
  if (all.has_gain_counts()) {
    frame_columns["gain_switched"] = to_array(gain_switched, {r});
    frame_columns["gain_invalid"] = to_array(gain_invalid, {r});
  }
  if (masked) frame_columns["masked_clusters"] = to_array(masked_rows, {r});

  const std::vector<py::ssize_t> image = {static_cast<py::ssize_t>(params.shape.rows),
                                          static_cast<py::ssize_t>(params.shape.cols)};
  py::dict out;
  out["clusters"] = cluster_columns(all, float_values);
  out["frames"] = frame_columns;
  out["pedestal"] = to_array(end.means(), image);
  out["noise"] = to_array(end.noises(), image);
  out["start_pedestal"] = to_array(start.means(), image);
  out["start_noise"] = to_array(start.noises(), image);
  out["pedestal_sum"] = to_array(end.sum, image);
  out["pedestal_sum2"] = to_array(end.sum2, image);
  out["pedestal_count"] = to_array(end.count, image);
  if (!calibration_pedestal.empty())
    out["calibration_pedestal"] = to_array(
        calibration_pedestal,
        {static_cast<py::ssize_t>(glint::jungfrau::kStages), image[0], image[1]});
  if (masked) {
    out["pixel_mask"] = to_array(mask_bits, image);
    out["masked_clusters"] = masked_clusters;
  }
  out["backend"] = description;
  out["units"] = float_values ? "keV" : "ADU";
  return out;
}

py::dict read_clust(const std::string& path, int cluster_size) {
  if (!std::filesystem::exists(path))
    throw std::invalid_argument(path + ": no such file");
  glint::ClusterTable table;
  {
    py::gil_scoped_release release;
    table = glint::read_clust(path, cluster_size);
  }
  py::dict out = cluster_columns(table, false);
  std::vector<uint64_t> frame_number, n_clusters;
  for (const glint::FrameRecord& r : table.frames()) {
    frame_number.push_back(r.frame_number);
    n_clusters.push_back(r.n_clusters);
  }
  out["record_frame_number"] =
      to_array(frame_number, {static_cast<py::ssize_t>(frame_number.size())});
  out["record_n_clusters"] = to_array(n_clusters, {static_cast<py::ssize_t>(n_clusters.size())});
  return out;
}

}  // namespace

PYBIND11_MODULE(_glint, m) {
  m.doc() = "glint's C++ cluster finder and .clust reader (use the glint package's functions)";
  m.attr("__version__") = GLINT_VERSION;
  m.attr("cuda_built") = glint::gpu::built_with_cuda();
  m.def("find", &find, py::arg("frames"), py::arg("n_dark"), py::arg("n_sigma"),
        py::arg("cluster_size"), py::arg("pedestal_window"), py::arg("backend"),
        py::arg("threads"), py::arg("batch"), py::arg("detector"), py::arg("gain_file"),
        py::arg("pedestal_file"), py::arg("hg0"), py::arg("mask"), py::arg("mask_from_dark"),
        py::arg("noisy_factor"), py::arg("modules_x"), py::arg("modules_y"),
        py::arg("module_orientation"));
  m.def("read_clust", &read_clust, py::arg("path"), py::arg("cluster_size"));
  m.def("gpu_unavailable_reason", [] { return glint::gpu::unavailable_reason(); },
        "Why the GPU backend cannot run here; empty when it can.");
}
