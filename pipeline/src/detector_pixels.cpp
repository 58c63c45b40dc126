#include "glint/pipeline/detector_pixels.hpp"

#include <stdexcept>
#include <algorithm>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "glint/jungfrau.hpp"
#include "glint/log.hpp"
#include "glint/modular_finder.hpp"

namespace glint::pipeline {

namespace {

constexpr std::string_view kModule = "{module}";

/// Whether `path` names one file per module.
bool per_module(const std::string& path) { return path.find(kModule) != std::string::npos; }

/// `path` with {module} replaced by `id`.
std::string module_path(std::string path, uint32_t id) {
  for (auto at = path.find(kModule); at != std::string::npos; at = path.find(kModule, at))
    path.replace(at, kModule.size(), std::to_string(id));
  return path;
}

/// The calibration of a detector of modules from one gain file (and pedestal file) per module,
/// each of the module's shape, placed in the image.
std::shared_ptr<jungfrau::Calibration> load_module_calibrations(const config::Config& cfg,
                                                                FrameShape shape) {
  const config::CalibrationConfig& cal = cfg.calibration;
  const config::DetectorConfig& d = cfg.detector;
  if (!per_module(cal.gain_file) || (!cal.pedestal_file.empty() && !per_module(cal.pedestal_file)))
    throw std::runtime_error("'{module}' in one of gain_file and pedestal_file: give both per "
                             "module, or both for the whole image");
  auto image = std::make_shared<jungfrau::Calibration>();
  image->shape = shape;
  image->gain.assign(jungfrau::kStages * shape.pixels(), 0.0);
  image->pedestal.assign(jungfrau::kStages * shape.pixels(), 0.0);
  // Each file is the module's native pixels: placed in the image through its orientation.
  const auto regions = detector_modules(d);
  for (std::size_t k = 0; k < regions.size(); ++k) {
    const uint32_t id = d.first_module + static_cast<uint32_t>(k);
    const auto m = jungfrau::load_calibration(
        regions[k].shape, module_path(cal.gain_file, id),
        cal.pedestal_file.empty() ? std::string() : module_path(cal.pedestal_file, id), cal.hg0);
    place_module_planes(shape, regions[k], jungfrau::kStages, m->gain, image->gain);
    place_module_planes(shape, regions[k], jungfrau::kStages, m->pedestal, image->pedestal);
    std::copy(std::begin(m->pedestal_from_dark), std::end(m->pedestal_from_dark),
              std::begin(image->pedestal_from_dark));
  }
  return image;
}

}  // namespace

std::vector<ModuleOrientation> module_orientations(const config::DetectorConfig& d) {
  std::vector<ModuleOrientation> out(d.n_modules(), ModuleOrientation::normal);
  const auto& names = d.module_orientation;
  if (names.size() > 1 && names.size() != out.size())
    throw std::invalid_argument(fmt::format("detector.module_orientation: {} entries for {} "
                                            "modules", names.size(), out.size()));
  for (std::size_t k = 0; k < out.size() && !names.empty(); ++k) {
    const std::string& name = names.size() == 1 ? names[0] : names[k];
    const auto o = parse_module_orientation(name);
    if (!o)
      throw std::invalid_argument(fmt::format("detector.module_orientation: '{}' is not an "
                                              "orientation (allowed: {})", name,
                                              kModuleOrientations));
    out[k] = *o;
  }
  return out;
}

std::vector<ModuleRegion> detector_modules(const config::DetectorConfig& d) {
  return module_grid(FrameShape{d.rows, d.cols}, d.modules_x, d.modules_y, module_orientations(d));
}

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
    if (per_module(cal.gain_file) || per_module(cal.pedestal_file))
      params.calibration = load_module_calibrations(cfg, params.shape);
    else
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
