#pragma once
// What the run's finder reads in a pixel: the value as it is, or a JUNGFRAU pixel (gain bits over
// a 14-bit ADC) found on G0 pixels only or calibrated to keV with the configured gain maps
// (docs/cluster-finding.md, "JUNGFRAU"). The calibration tables are loaded here, once per run.
#include "glint/cluster_finder.hpp"
#include "glint/config/config.hpp"

namespace glint::pipeline {

/// `params` with the pixel mode and calibration tables of `cfg` (detector.type, calibration.*).
/// Throws std::runtime_error naming the key and the file when a table cannot be loaded.
FinderParams with_detector_pixels(const config::Config& cfg, FinderParams params);

}  // namespace glint::pipeline
