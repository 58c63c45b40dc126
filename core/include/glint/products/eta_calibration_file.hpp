#pragma once
// The eta calibration file (HDF5): group /eta_calibration with eta_x_edges, eta_y_edges,
// energy_edges (1-D float64), cube, ietax, ietay (nx, ny, ne) float64, and attributes method
// ("cdf" | "rosenblatt"), eta ("eta2"), cluster_size, clusters (used), sources (run files).
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "glint/products/eta_calibration.hpp"

namespace glint::products {

/// A calibration file that cannot be written or read; the message names the file and what is
/// wrong with it.
class CalibrationFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct EtaCalibrationFile {
  EtaCube cube;
  EtaCalibration calibration;
  int cluster_size = 0;
  uint64_t clusters = 0;             ///< clusters that went into the cube
  std::vector<std::string> sources;  ///< the run files
};

/// Writes `file` to `path` (replacing an existing file only when `overwrite`). Throws
/// CalibrationFileError.
void write_eta_calibration(const std::filesystem::path& path, const EtaCalibrationFile& file,
                           bool overwrite);

/// Reads a calibration file; the tables are read as stored (not recomputed from the cube).
/// Throws CalibrationFileError naming the file and the missing or inconsistent item.
EtaCalibrationFile read_eta_calibration(const std::filesystem::path& path);

}  // namespace glint::products
