#include "glint/pipeline/pixel_mask.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "glint/hdf5_handle.hpp"
#include "glint/jungfrau.hpp"

namespace glint::pipeline {

std::string pixel_mask_bit_meanings() {
  return "NXdetector pixel_mask: 0 = good; bit 0 gap, 1 dead, 2 under-responding, "
         "3 over-responding (glint: JUNGFRAU pixel out of G0 in a dark frame), 4 noisy, "
         "6 part of a cluster of problematic pixels, 8 user-defined, 31 virtual";
}

void DarkGainSwitches::add(std::span<const uint16_t> frames) {
  const std::size_t np = shape_.pixels();
  if (np == 0 || frames.size() % np != 0)
    throw std::invalid_argument("DarkGainSwitches::add: whole frames expected");
  for (std::size_t off = 0; off < frames.size(); off += np) {
    const uint16_t* f = frames.data() + off;
    for (std::size_t i = 0; i < np; ++i) counts_[i] += jungfrau::in_g0(f[i]) ? 0u : 1u;
    ++frames_;
  }
}

void DarkGainSwitches::add(std::span<const uint16_t> frames, const ModuleRegion& region,
                           bool count_frames) {
  const std::size_t np = region.shape.pixels();
  if (np == 0 || frames.size() % np != 0 || region.row0 + region.shape.rows > shape_.rows ||
      region.col0 + region.shape.cols > shape_.cols)
    throw std::invalid_argument("DarkGainSwitches::add: whole module frames inside the image "
                                "expected");
  for (std::size_t off = 0; off < frames.size(); off += np) {
    const uint16_t* f = frames.data() + off;
    // The module's native frames, counted where the image shows each pixel (its orientation).
    for (uint32_t y = 0; y < region.shape.rows; ++y) {
      uint32_t* c = counts_.data() + std::size_t{region.image_y(y)} * shape_.cols;
      const uint16_t* row = f + std::size_t{y} * region.shape.cols;
      if (flips_cols(region.orientation))
        for (uint32_t x = 0; x < region.shape.cols; ++x)
          c[region.image_x(x)] += jungfrau::in_g0(row[x]) ? 0u : 1u;
      else
        for (uint32_t x = 0; x < region.shape.cols; ++x)
          c[region.col0 + x] += jungfrau::in_g0(row[x]) ? 0u : 1u;
    }
    if (count_frames) ++frames_;
  }
}

DarkMaskCounts flag_from_dark(std::span<uint32_t> mask, const PedestalState& pedestal,
                              double noisy_factor, const DarkGainSwitches* gains) {
  const std::size_t np = pedestal.shape.pixels();
  if (mask.size() != np || pedestal.count.size() != np ||
      (gains && gains->counts().size() != np))
    throw std::invalid_argument("flag_from_dark: mask, pedestal and gain counts differ in shape");
  DarkMaskCounts out;
  std::vector<double> noise(np);
  std::vector<double> live;
  live.reserve(np);
  for (std::size_t i = 0; i < np; ++i) {
    noise[i] = pedestal.noise(i);
    const bool dead = pedestal.count[i] == 0 || !(noise[i] > 0.0);  // 0 or NaN
    if (dead) {
      mask[i] |= kMaskDead;
      ++out.dead;
    } else {
      live.push_back(noise[i]);
    }
  }
  if (!live.empty()) {
    // The median: the middle value, or the mean of the two middle values.
    const std::size_t mid = live.size() / 2;
    std::nth_element(live.begin(), live.begin() + mid, live.end());
    double median = live[mid];
    if (live.size() % 2 == 0) median = (median + *std::max_element(live.begin(),
                                                                    live.begin() + mid)) / 2.0;
    out.median_noise = median;
    const double limit = noisy_factor * median;
    for (std::size_t i = 0; i < np; ++i) {
      if ((mask[i] & kMaskDead) == 0 && noise[i] > limit) {
        mask[i] |= kMaskNoisy;
        ++out.noisy;
      }
    }
  }
  if (gains) {
    const auto c = gains->counts();
    for (std::size_t i = 0; i < np; ++i) {
      if (c[i] == 0) continue;
      mask[i] |= kMaskOverResponding;
      ++out.gain_switching;
    }
  }
  return out;
}

namespace {

using Id = hdf5::Handle;

std::pair<std::string, std::string> split_spec(const std::string& spec) {
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= spec.size() ||
      spec[colon + 1] != '/')
    throw std::runtime_error(fmt::format(
        "mask file '{}': expected FILE.h5:/dataset (an HDF5 file and a dataset path)", spec));
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

}  // namespace

std::vector<uint32_t> read_mask_file(const std::string& spec, FrameShape shape) {
  hdf5::silence_errors();
  const auto [path, dataset] = split_spec(spec);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw std::runtime_error(fmt::format("mask file {}: no such file", path));
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw std::runtime_error(fmt::format("mask file {}: not an HDF5 file", path));
  const Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) throw std::runtime_error(fmt::format("mask file {}: cannot be opened", path));
  if (H5Lexists(file.get(), dataset.c_str(), H5P_DEFAULT) <= 0)
    throw std::runtime_error(fmt::format("mask file {}: no dataset '{}'", path, dataset));
  const Id ds(H5Dopen2(file.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
  if (!ds.valid())
    throw std::runtime_error(fmt::format("mask file {}: '{}' is not a dataset", path, dataset));
  const Id type(H5Dget_type(ds.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_size(type.get()) > 4)
    throw std::runtime_error(fmt::format(
        "mask file {}:{}: holds no integers of up to 32 bits (expected uint32, as NXdetector "
        "pixel_mask)", path, dataset));
  const Id space(H5Dget_space(ds.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  hsize_t dims[2] = {0, 0};
  if (rank != 2 || H5Sget_simple_extent_dims(space.get(), dims, nullptr) != 2 ||
      dims[0] != shape.rows || dims[1] != shape.cols)
    throw std::runtime_error(fmt::format(
        "mask file {}:{}: shape {}, expected [{}, {}] (detector.rows, detector.cols)", path,
        dataset,
        rank == 2 ? fmt::format("[{}, {}]", dims[0], dims[1]) : fmt::format("of rank {}", rank),
        shape.rows, shape.cols));
  std::vector<uint32_t> mask(shape.pixels());
  if (H5Tget_sign(type.get()) == H5T_SGN_NONE) {
    if (H5Dread(ds.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask.data()) < 0)
      throw std::runtime_error(fmt::format("mask file {}:{}: cannot be read", path, dataset));
    return mask;
  }
  std::vector<int64_t> values(shape.pixels());
  if (H5Dread(ds.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    throw std::runtime_error(fmt::format("mask file {}:{}: cannot be read", path, dataset));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0)
      throw std::runtime_error(fmt::format(
          "mask file {}:{}: pixel ({}, {}) is {} (expected bits of NXdetector pixel_mask, >= 0)",
          path, dataset, i / shape.cols, i % shape.cols, values[i]));
    mask[i] = static_cast<uint32_t>(values[i]);
  }
  return mask;
}

void write_mask_file(const std::string& path, const std::string& dataset,
                     std::span<const uint32_t> mask, FrameShape shape) {
  hdf5::silence_errors();
  if (mask.size() != shape.pixels())
    throw std::invalid_argument("write_mask_file: mask and shape differ");
  std::error_code ec;
  Id file = std::filesystem::exists(path, ec)
                ? Id(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose)
                : Id(H5Fcreate(path.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) throw std::runtime_error(fmt::format("mask file {}: cannot be written", path));
  const hsize_t dims[2] = {shape.rows, shape.cols};
  const Id space(H5Screate_simple(2, dims, nullptr), H5Sclose);
  const Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  const Id ds(H5Dcreate2(file.get(), dataset.c_str(), H5T_STD_U32LE, space.get(), lcpl.get(),
                         H5P_DEFAULT, H5P_DEFAULT),
              H5Dclose);
  if (!ds.valid() ||
      H5Dwrite(ds.get(), H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask.data()) < 0)
    throw std::runtime_error(fmt::format("mask file {}: cannot write '{}'", path, dataset));
}

MaskFilter::MaskFilter(std::vector<uint32_t> mask, FrameShape shape)
    : mask_(std::move(mask)), shape_(shape) {
  if (mask_.size() != shape_.pixels())
    throw std::invalid_argument("MaskFilter: the mask does not have the frame's pixels");
  masked_ = static_cast<uint64_t>(
      std::count_if(mask_.begin(), mask_.end(), [](uint32_t m) { return m != 0; }));
}

uint64_t MaskFilter::apply(const ClusterTable& in, ClusterTable& out,
                           std::vector<uint32_t>& removed) const {
  // `out` keeps its buffers from batch to batch: nothing is allocated once they have grown.
  if (out.cluster_size() != in.cluster_size() || out.value_type() != in.value_type() ||
      out.has_gain_counts() != in.has_gain_counts())
    out = ClusterTable(in.cluster_size(), in.value_type(), in.has_gain_counts());
  out.clear();
  out.reserve(in.n_frames(), in.n_clusters());
  removed.assign(in.n_frames(), 0);
  const auto frames = in.frames();
  const auto xs = in.x();
  const auto ys = in.y();
  auto& ox = out.x_mut();
  auto& oy = out.y_mut();
  auto& od = out.data_mut();
  uint64_t total = 0;
  for (std::size_t k = 0; k < frames.size(); ++k) {
    FrameRecord r{frames[k].frame_number, ox.size(), 0};
    for (uint64_t c = frames[k].first_cluster; c < frames[k].first_cluster + frames[k].n_clusters;
         ++c) {
      const std::size_t pixel = std::size_t{ys[c]} * shape_.cols + xs[c];
      if (pixel < mask_.size() && mask_[pixel] != 0) {
        ++removed[k];
        continue;
      }
      ox.push_back(xs[c]);
      oy.push_back(ys[c]);
      const auto values = in.cluster_data(c);
      od.insert(od.end(), values.begin(), values.end());
      ++r.n_clusters;
    }
    out.frames_mut().push_back(r);
    total += removed[k];
  }
  if (in.has_gain_counts()) {
    const auto g = in.gain_counts();
    out.gain_counts_mut().assign(g.begin(), g.end());
  }
  return total;
}

}  // namespace glint::pipeline
