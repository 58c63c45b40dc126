#pragma once
// The reconstruction stage's interface (docs/tv-solver.md): minimise
// 1/2 ||A x - y||^2 + lambda TV(x) (subject to x >= 0) with A = F^-1 diag(H) F, by FISTA outer
// iterations whose proximal step is solved by FGP. A CPU and a GPU implementation stand behind
// it; recon/'s factory picks one.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace glint::tv {

/// Volume extent; voxels are stored x-fastest, (z, y, x).
struct Dims {
  int nx = 0, ny = 0, nz = 0;

  std::size_t voxels() const { return std::size_t(nx) * ny * nz; }
  /// Row length of the padded layout of the CPU solver: 2 (nx/2 + 1) floats, so that in-place
  /// real FFTs fit (the GPU solver's rows are nx floats rounded up to 128 bytes, its transforms
  /// out of place).
  std::size_t padded_x() const { return 2 * (std::size_t(nx) / 2 + 1); }
  std::size_t padded_voxels() const { return padded_x() * ny * nz; }
  /// Complex coefficients of the half spectrum: nz x ny x (nx/2 + 1).
  std::size_t spectrum_size() const { return (std::size_t(nx) / 2 + 1) * ny * nz; }
  bool operator==(const Dims&) const = default;
};

/// The FGP kernel variants (all do the same arithmetic; they differ in how they move data).
enum class Variant { separate, fused, fused_cube, fused_march, two_state, temporal };

inline constexpr Variant kAllVariants[] = {Variant::separate,    Variant::fused,
                                           Variant::fused_cube,  Variant::fused_march,
                                           Variant::two_state,   Variant::temporal};

/// The variants' names, in the order of kAllVariants (which is the enum's order): the one
/// spelling of configurations, command lines, messages and reports.
inline constexpr std::string_view kVariantNames[] = {"separate",    "fused",     "fused-cube",
                                                     "fused-march", "two-state", "temporal"};
static_assert(std::size(kVariantNames) == std::size(kAllVariants));
static_assert([] {
  for (std::size_t i = 0; i < std::size(kAllVariants); ++i)
    if (static_cast<std::size_t>(kAllVariants[i]) != i) return false;
  return true;
}());

inline std::string_view variant_name(Variant v) {
  const auto i = static_cast<std::size_t>(v);
  return i < std::size(kVariantNames) ? kVariantNames[i] : "?";
}

/// The variant names joined by ", " ("separate, fused, ..."), for messages and help texts.
inline std::string variant_names_list() {
  std::string s;
  for (std::string_view n : kVariantNames) {
    if (!s.empty()) s += ", ";
    s += n;
  }
  return s;
}

/// Parses a variant name as printed by variant_name(); throws std::invalid_argument otherwise.
inline Variant parse_variant(std::string_view s) {
  for (Variant v : kAllVariants)
    if (variant_name(v) == s) return v;
  throw std::invalid_argument("unknown TV kernel variant '" + std::string(s) + "' (" +
                              variant_names_list() + ")");
}

/// Volumes of device memory traffic per FGP step by the variant's model (docs/tv-solver.md's
/// table), averaged over the `tv_inner` steps of a proximal step: temporal moves 13 volumes per
/// pass of two steps, 10 in the last one (which does not write p_{k+1}) and 10 in the one-step
/// pass that ends an odd count (whose pass before it writes both).
inline double traffic_volumes_per_step(Variant v, int tv_inner) {
  switch (v) {
    case Variant::separate: return 18;
    case Variant::fused:
    case Variant::fused_cube:
    case Variant::fused_march: return 13;
    case Variant::two_state: return 10;
    case Variant::temporal:
      if (tv_inner < 2) return 10;
      return (13.0 * (tv_inner / 2) + (tv_inner % 2 == 0 ? -3 : 10)) / tv_inner;
  }
  return 0;
}

struct SolverOptions {
  float lambda = 0.05f;
  int outer = 20;          ///< FISTA iterations
  int tv_inner = 10;       ///< FGP steps per proximal step
  bool warm_start = true;  ///< keep the dual between outer iterations (else start from 0)
  bool nonneg = true;      ///< x >= 0
  /// GPU kernel variant (the CPU runs the reference); two-state measured fastest on the H200.
  Variant variant = Variant::two_state;
};

/// The forward model's transfer function on the half spectrum (nz x ny x (nx/2+1), real, >= 0).
/// Empty means the identity (denoising): then no FFT is needed at all.
struct TransferFunction {
  std::vector<float> h;
  bool identity() const { return h.empty(); }
};

/// Called after every outer iteration with (done, total); must be cheap.
using Progress = std::function<void(int, int)>;

struct SolveReport {
  double seconds = 0;  ///< wall time of the solve (device time on the GPU, by events)
  int outer = 0;
  int tv_inner = 0;
};

class Reconstructor {
 public:
  virtual ~Reconstructor() = default;
  /// "cpu" or "gpu (device name)".
  virtual std::string name() const = 0;
  virtual Dims dims() const = 0;
  /// Reconstructs x (nz*ny*nx, unpadded) from y (same layout). H must match dims().
  virtual SolveReport solve(std::span<const float> y, const TransferFunction& H,
                            const SolverOptions& options, std::span<float> x,
                            const Progress& progress = {}) = 0;
  /// The constrained TV denoising of b with weight w by `steps` FGP steps from the dual p
  /// (3 planes of nz*ny*nx: p_x, p_y, p_z; updated). Writes x = max(b - w L(p), 0).
  /// Exposed so that backends and variants can be compared step by step.
  virtual void denoise(std::span<const float> b, float w, int steps, bool nonneg,
                       std::span<float> p, std::span<float> x) = 0;
};

/// Checks the arguments of Reconstructor::solve against the planned dims: volume sizes, the
/// transfer function's length and the iteration counts. Throws std::invalid_argument.
inline void check_solve_arguments(const Dims& d, std::span<const float> y,
                                  const TransferFunction& H, const SolverOptions& o,
                                  std::span<const float> x) {
  if (y.size() != d.voxels() || x.size() != d.voxels())
    throw std::invalid_argument("TV solver: volume sizes do not match the planned " +
                                std::to_string(d.nx) + "x" + std::to_string(d.ny) + "x" +
                                std::to_string(d.nz));
  if (!H.identity() && H.h.size() != d.spectrum_size())
    throw std::invalid_argument("TV solver: transfer function has " + std::to_string(H.h.size()) +
                                " values, expected " + std::to_string(d.spectrum_size()));
  if (o.outer < 1 || o.tv_inner < 0)
    throw std::invalid_argument("TV solver: outer must be >= 1 and tv_inner >= 0");
}

/// Checks the arguments of Reconstructor::denoise against the planned dims: b and x one volume
/// each, p three. Throws std::invalid_argument.
inline void check_denoise_arguments(const Dims& d, std::span<const float> b,
                                    std::span<const float> p, std::span<const float> x) {
  const std::size_t n = d.voxels();
  if (b.size() != n || x.size() != n || p.size() != 3 * n)
    throw std::invalid_argument("TV denoise: sizes do not match the planned volume");
}

/// The FGP momentum coefficients m_k = (t_k - 1) / t_{k+1}, t_1 = 1, for k = 1..steps; computed
/// once on the host so that every backend uses the same floats.
inline std::vector<float> fgp_momenta(int steps) {
  std::vector<float> m;
  double t = 1.0;
  for (int k = 0; k < steps; ++k) {
    const double tn = (1.0 + std::sqrt(1.0 + 4.0 * t * t)) / 2.0;
    m.push_back(static_cast<float>((t - 1.0) / tn));
    t = tn;
  }
  return m;
}

/// The FISTA momentum coefficients (t_k - 1) / t_{k+1} for the outer loop, k = 1..outer.
inline std::vector<float> fista_momenta(int outer) { return fgp_momenta(outer); }

/// c = 1 / (12 w), the dual step; the same float everywhere.
inline float dual_step(float w) { return static_cast<float>(1.0 / (12.0 * double(w))); }

/// Largest |H|^2 (sets the FISTA step t = 1 / max H^2); 1 for the identity.
inline double max_h2(const TransferFunction& H) {
  double m = 0;
  for (float v : H.h) m = std::max(m, double(v) * v);
  return H.identity() ? 1.0 : m;
}

/// The FISTA step t = 1 / max H^2, as the float every backend uses.
inline float fista_step(const TransferFunction& H) { return static_cast<float>(1.0 / max_h2(H)); }

/// The proximal step's TV weight w = t * lambda, as the float every backend uses.
inline float prox_weight(float t, float lambda) { return t * lambda; }

/// 1 / N for the unnormalised FFT pair, as the float every backend uses.
inline float inverse_size(const Dims& d) { return static_cast<float>(1.0 / double(d.voxels())); }

}  // namespace glint::tv
