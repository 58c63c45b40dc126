#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "glint/recon/cpu_solver.hpp"
#include "glint/recon/forward_model.hpp"
#include "glint/recon/phantom.hpp"
#include "glint/tv/fgp_math.hpp"
#include "glint/tv/reconstructor.hpp"
#include "independent_tv.hpp"

using glint::recon::CpuReconstructor;
using glint::tv::Dims;

namespace {

std::vector<float> random_volume(const Dims& d, unsigned seed, float lo = -0.5f, float hi = 1.5f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(d.voxels());
  for (auto& f : v) f = u(rng);
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST(FgpMath, ProjectionKeepsTheDualInTheUnitBall) {
  namespace m = glint::tv::math;
  const auto p = m::project({0.9f, 0.0f, 0.0f}, {3.0f, 4.0f, 0.0f}, 0.1f);  // q = (1.2, .4, 0)
  const float n = std::sqrt(p.x * p.x + p.y * p.y + p.z * p.z);
  EXPECT_NEAR(n, 1.0f, 1e-6f);
  EXPECT_NEAR(p.x / p.y, 3.0f, 1e-5f);
  const auto q = m::project({0.1f, 0.2f, -0.3f}, {1.0f, 0.0f, 1.0f}, 0.1f);  // inside: unchanged
  EXPECT_FLOAT_EQ(q.x, 0.2f);
  EXPECT_FLOAT_EQ(q.y, 0.2f);
  EXPECT_FLOAT_EQ(q.z, -0.2f);
  EXPECT_EQ(m::primal(0.5f, {1.f, 1.f, 1.f}, 0.f, 0.f, 0.f, 1.0f, true), 0.0f);   // 0.5 - 3 < 0
  EXPECT_EQ(m::primal(0.5f, {1.f, 1.f, 1.f}, 0.f, 0.f, 0.f, 1.0f, false), -2.5f);
  EXPECT_EQ(m::gradient(1.f, 3.f, 0.5f, 2.f, false, true, false).y, 0.0f);
}

TEST(FgpMath, MomentaFollowTheFistaSequence) {
  const auto m = glint::tv::fgp_momenta(4);
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[0], 0.0f);  // t_1 = 1
  const double t2 = (1 + std::sqrt(5.0)) / 2, t3 = (1 + std::sqrt(1 + 4 * t2 * t2)) / 2;
  EXPECT_FLOAT_EQ(m[1], float((t2 - 1) / t3));
  EXPECT_LT(m[3], 1.0f);
  EXPECT_GT(m[3], m[2]);
}

// The traffic model (docs/tv-solver.md's table): one-step variants the same at any step count;
// temporal 13 volumes per two-step pass, 10 for its last pass (p_{k+1} not written) or for the
// one-step pass that ends an odd count.
TEST(TrafficModel, TemporalCountsItsPassesOfAProximalStep) {
  using glint::tv::Variant;
  using glint::tv::traffic_volumes_per_step;
  EXPECT_EQ(traffic_volumes_per_step(Variant::separate, 10), 18);
  EXPECT_EQ(traffic_volumes_per_step(Variant::fused_march, 7), 13);
  EXPECT_EQ(traffic_volumes_per_step(Variant::two_state, 10), 10);
  EXPECT_DOUBLE_EQ(traffic_volumes_per_step(Variant::temporal, 10), 62.0 / 10);  // 4 x 13 + 10
  EXPECT_DOUBLE_EQ(traffic_volumes_per_step(Variant::temporal, 2), 5);
  EXPECT_DOUBLE_EQ(traffic_volumes_per_step(Variant::temporal, 7), 49.0 / 7);  // 3 x 13 + 10
  EXPECT_DOUBLE_EQ(traffic_volumes_per_step(Variant::temporal, 1), 10);
}

// Denoising with x >= 0 inactive: FGP run to convergence reaches the unique minimiser that an
// independent primal-dual solver (double precision) reaches.
TEST(CpuSolver, DenoisingConvergesToTheUniqueMinimiser) {
  const Dims d{11, 9, 7};
  const auto b = random_volume(d, 7);
  const float w = 0.15f;
  CpuReconstructor cpu(d, 2);
  std::vector<float> p(3 * d.voxels(), 0.0f), x(d.voxels());
  cpu.denoise(b, w, 3000, /*nonneg=*/false, p, x);
  const auto ref = glint::testing::chambolle_pock_tv(d, b, w, false, 30000);
  const double fx = glint::testing::tv_denoise_objective(d, to_double(x), b, w);
  const double fr = glint::testing::tv_denoise_objective(d, ref, b, w);
  EXPECT_LT(max_abs_diff(x, ref), 2e-3);
  EXPECT_NEAR(fx, fr, 1e-5 * fr);
  // Non-negativity really was inactive: the minimiser has negative values.
  EXPECT_LT(*std::min_element(ref.begin(), ref.end()), -0.05);
}

// Denoising with x >= 0 active: the same comparison, and the optimality conditions: x >= 0, no
// feasible perturbation lowers the objective, and b - w L(p) <= 0 wherever x = 0.
TEST(CpuSolver, ConstrainedDenoisingMeetsTheOptimalityConditions) {
  const Dims d{10, 8, 9};
  const auto b = random_volume(d, 11, -1.0f, 1.0f);
  const float w = 0.1f;
  CpuReconstructor cpu(d, 2);
  std::vector<float> p(3 * d.voxels(), 0.0f), x(d.voxels());
  cpu.denoise(b, w, 3000, /*nonneg=*/true, p, x);
  const auto ref = glint::testing::chambolle_pock_tv(d, b, w, true, 30000);
  EXPECT_LT(max_abs_diff(x, ref), 2e-3);
  std::size_t zeros = 0;
  for (float v : x) {
    ASSERT_GE(v, 0.0f);
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, d.voxels() / 10);  // the constraint is active somewhere
  // Where x = 0 the unconstrained update b - w L(p) is <= 0 (up to rounding).
  const std::size_t n = d.voxels();
  std::vector<float> p2(p), xu(n);
  CpuReconstructor cpu2(d, 1);
  cpu2.denoise(b, w, 0, /*nonneg=*/false, p2, xu);  // x = b - w L(p) with the converged p
  for (std::size_t i = 0; i < n; ++i) {
    if (x[i] == 0.0f) {
      EXPECT_LE(xu[i], 1e-5f) << "voxel " << i;
    }
  }
  // No feasible perturbation lowers the objective.
  const double f0 = glint::testing::tv_denoise_objective(d, to_double(x), b, w);
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> xp = to_double(x);
    for (auto& v : xp) v = std::max(0.0, v + 1e-3 * nd(rng));
    EXPECT_GE(glint::testing::tv_denoise_objective(d, xp, b, w), f0 - 1e-7 * f0);
  }
}

// FISTA is not monotone in general; on the phantom deconvolution the objective falls from the
// start and its largest rise between outer iterations stays below 1% of the total decrease.
TEST(CpuSolver, ObjectiveDecreasesOverOuterIterations) {
  const int n = 16;
  const Dims d{n, n, n};
  const auto truth = glint::recon::make_phantom(n);
  const auto fm = glint::recon::make_forward_model("gaussian:1,1,1", d);
  auto y = glint::recon::apply_forward(fm.H, d, truth, 1);
  glint::recon::add_noise(y, 0.05, 5);
  const float lambda = 0.02f;
  CpuReconstructor cpu(d, 2);
  glint::tv::SolverOptions o;
  o.lambda = lambda;
  std::vector<double> f;
  std::vector<float> x0(y);
  for (auto& v : x0) v = std::max(v, 0.0f);
  f.push_back(glint::recon::objective(fm.H, d, y, x0, lambda, 1));
  for (int outer = 1; outer <= 12; ++outer) {
    o.outer = outer;
    std::vector<float> x(d.voxels());
    cpu.solve(y, fm.H, o, x);
    f.push_back(glint::recon::objective(fm.H, d, y, x, lambda, 1));
  }
  const double drop = f.front() - f.back();
  EXPECT_GT(drop, 0.1 * f.front());
  double worst_rise = 0;
  for (std::size_t k = 1; k < f.size(); ++k) worst_rise = std::max(worst_rise, f[k] - f[k - 1]);
  EXPECT_LT(worst_rise, 0.01 * drop);
  // The reconstruction is closer to the phantom than the measurement is.
  o.outer = 20;
  std::vector<float> x(d.voxels());
  cpu.solve(y, fm.H, o, x);
  EXPECT_LT(glint::recon::rmse(x, truth), glint::recon::rmse(y, truth));
}

// Warm and cold dual starts solve the same problem; with the identity the outer loop only
// continues FGP on b = y, so the warm start converges at least as well.
TEST(CpuSolver, WarmAndColdStartsAgreeOnTheMinimiser) {
  const Dims d{12, 10, 8};
  const auto y = random_volume(d, 21, 0.0f, 1.0f);
  glint::tv::TransferFunction id;
  CpuReconstructor cpu(d, 2);
  glint::tv::SolverOptions o;
  o.lambda = 0.1f;
  o.outer = 30;
  o.tv_inner = 10;
  std::vector<float> xw(d.voxels()), xc(d.voxels());
  cpu.solve(y, id, o, xw);
  o.warm_start = false;
  cpu.solve(y, id, o, xc);
  const auto ref = glint::testing::chambolle_pock_tv(d, y, 0.1, true, 30000);
  const double fr = glint::testing::tv_denoise_objective(d, ref, y, 0.1);
  const double fw = glint::testing::tv_denoise_objective(d, to_double(xw), y, 0.1);
  const double fc = glint::testing::tv_denoise_objective(d, to_double(xc), y, 0.1);
  EXPECT_LT(fw - fr, 1e-4 * fr);
  EXPECT_LE(fw - fr, fc - fr + 1e-7 * fr);
}

// lambda = 0: no TV term; the solve is the non-negative least-squares fit, finite everywhere.
TEST(CpuSolver, ZeroLambdaIsTheProjectionOfTheFit) {
  const Dims d{9, 8, 7};
  const auto y = random_volume(d, 31, -0.5f, 1.0f);
  glint::tv::TransferFunction id;
  CpuReconstructor cpu(d, 1);
  glint::tv::SolverOptions o;
  o.lambda = 0.0f;
  o.outer = 3;
  std::vector<float> x(d.voxels());
  cpu.solve(y, id, o, x);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(x[i], std::max(y[i], 0.0f), 1e-6f);
}

TEST(CpuSolver, RejectsArgumentsThatDoNotFitThePlan) {
  const glint::tv::Dims d{6, 5, 4};
  CpuReconstructor cpu(d, 1);
  const std::vector<float> y(d.voxels(), 1.0f);
  std::vector<float> x(d.voxels()), short_x(d.voxels() - 1);
  glint::tv::SolverOptions o;
  EXPECT_THROW(cpu.solve(y, {}, o, short_x), std::invalid_argument);
  glint::tv::TransferFunction wrong;
  wrong.h.assign(d.spectrum_size() + 1, 1.0f);
  EXPECT_THROW(cpu.solve(y, wrong, o, x), std::invalid_argument);
  o.outer = 0;
  EXPECT_THROW(cpu.solve(y, {}, o, x), std::invalid_argument);
  o.outer = 1;
  o.tv_inner = 1;
  EXPECT_NO_THROW(cpu.solve(y, {}, o, x));
  EXPECT_GT(x[0], 0.0f);
  // denoise: b and x one volume each, p three.
  std::vector<float> p(3 * d.voxels()), short_p(3 * d.voxels() - 1);
  EXPECT_THROW(cpu.denoise(y, 0.1f, 1, true, short_p, x), std::invalid_argument);
  EXPECT_THROW(cpu.denoise(y, 0.1f, 1, true, p, short_x), std::invalid_argument);
  EXPECT_NO_THROW(cpu.denoise(y, 0.1f, 1, true, p, x));
}

// Every pass splits the volume into z planes whose voxels are computed independently, so the
// result does not depend on the thread count: 1 and 3 threads (7 planes, an uneven split) agree
// to the bit, with the deconvolution's spectral passes too.
TEST(CpuSolver, ThreadCountDoesNotChangeTheResult) {
  const Dims d{10, 9, 7};
  const auto fm = glint::recon::make_forward_model("gaussian:1,0.5,1", d);
  const auto y = random_volume(d, 41, 0.0f, 1.0f);
  glint::tv::SolverOptions o;
  o.lambda = 0.05f;
  o.outer = 6;
  o.tv_inner = 4;
  std::vector<float> x1(d.voxels()), x3(d.voxels());
  CpuReconstructor one(d, 1), three(d, 3);
  one.solve(y, fm.H, o, x1);
  three.solve(y, fm.H, o, x3);
  EXPECT_EQ(x1, x3);
  EXPECT_NE(x1, y);
  // A second solve on the same reconstructor (workers and momenta reused) repeats the first.
  std::vector<float> again(d.voxels());
  three.solve(y, fm.H, o, again);
  EXPECT_EQ(again, x3);
}
