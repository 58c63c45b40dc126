#include "glint/pipeline/detector_pixels.hpp"

#include <stdexcept>
#include <string>

#include "glint/jungfrau.hpp"
#include "glint/log.hpp"

namespace glint::pipeline {

FinderParams with_detector_pixels(const config::Config& cfg, FinderParams params) {
  if (cfg.detector.type != "jungfrau") return params;
  const config::CalibrationConfig& cal = cfg.calibration;
  if (!cal.calibrated()) {
    params.pixels = PixelMode::jungfrau_g0;
    log::info("detector.type jungfrau without calibration.gain_file: clusters on G0 pixels only, "
              "pixels in G1/G2 counted per frame");
    return params;
  }
  params.pixels = PixelMode::jungfrau_calibrated;
  try {
    params.calibration =
        jungfrau::load_calibration(params.shape, cal.gain_file, cal.pedestal_file, cal.hg0);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("calibration.gain_file / calibration.pedestal_file: ") +
                             e.what());
  }
  log::info("detector.type jungfrau: frames calibrated to keV with '{}'{}; G1/G2 pedestals {}",
            cal.gain_file, cal.hg0 ? " (HG0 for G0)" : "",
            cal.pedestal_file.empty() ? std::string("from the dark frames")
                                      : "from '" + cal.pedestal_file + "'");
  return params;
}

}  // namespace glint::pipeline
