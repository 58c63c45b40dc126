#pragma once
// What the run's finder reads in a pixel: the value as it is, or a JUNGFRAU pixel (gain bits over
// a 14-bit ADC) found on G0 pixels only or calibrated to keV with the configured gain maps
// (docs/cluster-finding.md, "JUNGFRAU"). The calibration tables are loaded here, once per run.
#include <vector>

#include "glint/cluster_finder.hpp"
#include "glint/config/config.hpp"
#include "glint/modular_finder.hpp"

namespace glint::pipeline {

/// The orientation of each module of `d` (detector.module_orientation): one per module,
/// row-major over the grid.
std::vector<ModuleOrientation> module_orientations(const config::DetectorConfig& d);
/// The modules of `d`'s image (detector.modules, detector.module_orientation).
std::vector<ModuleRegion> detector_modules(const config::DetectorConfig& d);

/// `params` with the pixel mode and calibration tables of `cfg` (detector.type, calibration.*).
/// Throws std::runtime_error naming the key and the file when a table cannot be loaded.
FinderParams with_detector_pixels(const config::Config& cfg, FinderParams params);

}  // namespace glint::pipeline
