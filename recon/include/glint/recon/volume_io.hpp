#pragma once
// Volumes in HDF5 files: (Z, Y, X) datasets of float32 or float64 in, float32 out.
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

struct Volume {
  tv::Dims dims;
  std::vector<float> data;  ///< x fastest
};

/// Reads a rank-3 float32 or float64 dataset; throws std::runtime_error naming file and dataset.
/// `NAME[I]` reads volume I of a rank-4 (n, Z, Y, X) dataset (e.g. a run file's
/// /entry/reconstruction/input[3]), leaving out trailing slices that were never written (all
/// NaN, as in a partial volume). Files still being written in SWMR mode (or left so by a crash)
/// are read too.
Volume read_volume(const std::string& file, const std::string& dataset);

/// Reads any rank-3 numeric dataset as float (for transfer functions and masks), returning its
/// shape (z, y, x) in dims.
Volume read_array3(const std::string& file, const std::string& dataset);

using Attribute = std::variant<double, long long, std::string>;

struct DatasetOut {
  std::string name;  ///< e.g. "/volume"
  const Volume* volume;
  std::vector<std::pair<std::string, Attribute>> attributes;
};

/// Creates (truncates) `file` and writes the datasets as float32 (Z, Y, X) with their attributes.
void write_volumes(const std::string& file, const std::vector<DatasetOut>& datasets);

}  // namespace glint::recon
