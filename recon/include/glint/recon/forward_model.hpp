#pragma once
// Forward models A = F^-1 diag(H) F: identity (denoising), Gaussian transfer function
// (deconvolution), a Fourier-domain mask or transfer function read from HDF5 (inpainting).
#include <string>
#include <string_view>
#include <vector>

#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

struct ForwardModel {
  std::string spec;  ///< as given: identity | gaussian:SX,SY,SZ | mask:FILE.h5:/dataset
  tv::TransferFunction H;
};

/// Parses a forward-model specification and builds H for `dims`. Throws std::invalid_argument
/// naming the spec, file, dataset or value that is wrong.
ForwardModel make_forward_model(std::string_view spec, const tv::Dims& dims);

/// The Gaussian optical transfer function with the given PSF sigmas in voxels (x, y, z).
tv::TransferFunction gaussian_transfer(const tv::Dims& dims, double sx, double sy, double sz);

/// A x for an unpadded volume x.
std::vector<float> apply_forward(const tv::TransferFunction& H, const tv::Dims& dims,
                                 const std::vector<float>& x, int threads = 0);

/// Isotropic TV with forward differences (0 on the last face), in double.
double total_variation(const tv::Dims& dims, const std::vector<float>& x);

/// 1/2 ||A x - y||^2 + lambda TV(x), in double.
double objective(const tv::TransferFunction& H, const tv::Dims& dims, const std::vector<float>& y,
                 const std::vector<float>& x, double lambda, int threads = 0);

}  // namespace glint::recon
