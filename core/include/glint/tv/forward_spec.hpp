#pragma once
// The text of a forward model, identity | gaussian:SX,SY,SZ | mask:FILE.h5:/dataset
// (docs/tv-solver.md). One parser for every place that reads it (the daemon's configuration,
// glint recon, the reconstruction stage), so that all accept the same texts.
#include <array>
#include <string>
#include <string_view>

namespace glint::tv {

struct ForwardSpec {
  enum class Kind { identity, gaussian, mask } kind = Kind::identity;
  std::array<double, 3> sigma{};  ///< gaussian: PSF sigmas in voxels (x, y, z), finite, >= 0
  std::string file, dataset;      ///< mask: the HDF5 file and the dataset path (starting "/")
};

/// Parses a forward-model text; throws std::invalid_argument naming the text and what is wrong.
/// The mask file is not opened here.
ForwardSpec parse_forward_spec(std::string_view spec);

}  // namespace glint::tv
