#pragma once
// The phantom that the README and `glint bench tv` use: ellipsoids of several values on a zero
// background, painted in order (later ones replace earlier ones), in an N^3 volume or, stretched
// to fill it, in an nx x ny x nz one.
#include <cstdint>
#include <vector>

#include "glint/tv/reconstructor.hpp"

namespace glint::recon {

std::vector<float> make_phantom(int n);
/// The same ellipsoids in a volume of nx x ny x nz voxels (x fastest); make_phantom(n) is
/// make_phantom(n, n, n).
std::vector<float> make_phantom(int nx, int ny, int nz);

/// Adds Gaussian noise of standard deviation sigma (reproducible for a seed).
void add_noise(std::vector<float>& v, double sigma, std::uint64_t seed);

/// Root mean square difference.
double rmse(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace glint::recon
