// glint bench tv: the GPU TV solver's variants on the phantom, timed as docs/tv-solver.md says:
// per FGP step = (solve with tv_inner = K - solve with tv_inner = 0) / (outer x K), medians of 5
// solves timed by CUDA events, against the device copy bandwidth measured in the same run.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "glint/detail/median.hpp"
#include "glint/gpu/device.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "glint/daemon/tuning_env.hpp"
#include "glint/recon/forward_model.hpp"
#include "glint/recon/phantom.hpp"

namespace glint::tools {

namespace {

struct BenchTvArgs {
  int field = 256;
  std::string shape;  // NX,NY,NZ: instead of field^3
  int tv_inner = 10;
  int outer = 20;
  std::string variant = "all";
  std::string forward = "gaussian:1,1,1";
  float lambda = 0.02f;
  double noise = 0.05;
  int repeats = 5;
  int device = 0;
};

/// "NX,NY,NZ" (each at least 4).
tv::Dims parse_shape(const std::string& text) {
  tv::Dims d{};
  int* axes[] = {&d.nx, &d.ny, &d.nz};
  std::string_view rest = text;
  for (int k = 0; k < 3; ++k) {
    const auto comma = rest.find(',');
    if ((k < 2) == (comma == rest.npos)) break;
    const std::string part(rest.substr(0, comma));
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || part.empty() || v < 4)
      throw std::invalid_argument("--shape " + text + ": expected NX,NY,NZ, each at least 4");
    *axes[k] = v;
    rest = comma == rest.npos ? std::string_view() : rest.substr(comma + 1);
    if (k == 2) return d;
  }
  throw std::invalid_argument("--shape " + text + ": expected NX,NY,NZ, each at least 4");
}

int run_bench_tv(const BenchTvArgs& a) {
  std::vector<tv::Variant> variants;
  tv::Dims d{a.field, a.field, a.field};
  try {
    if (a.variant == "all") {
      variants.assign(std::begin(tv::kAllVariants), std::end(tv::kAllVariants));
    } else {
      std::string_view rest = a.variant;
      while (!rest.empty()) {
        const auto comma = rest.find(',');
        variants.push_back(tv::parse_variant(rest.substr(0, comma)));
        rest = comma == rest.npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
    if (a.field < 8) throw std::invalid_argument("--field must be >= 8");
    if (!a.shape.empty()) d = parse_shape(a.shape);
    if (a.tv_inner < 1 || a.outer < 1 || a.repeats < 1)
      throw std::invalid_argument("--tv-inner, --outer and --repeats must be >= 1");
  } catch (const std::exception& e) {
    std::cerr << "glint bench tv: " << e.what() << "\n";
    return kExitUsage;
  }
  try {
    const std::string why = gpu::unavailable_reason();
    if (!why.empty()) throw std::runtime_error(why);
    const auto info = gpu::device_info(a.device);
    const auto truth = recon::make_phantom(d.nx, d.ny, d.nz);
    const auto fm = recon::make_forward_model(a.forward, d);
    auto y = recon::apply_forward(fm.H, d, truth, 0);
    recon::add_noise(y, a.noise, 1);
    const double vol_bytes = double(d.voxels()) * sizeof(float);
    const double copy_gbs =
        gpu::measure_copy_bandwidth(std::max<std::size_t>(1ull << 30, 2 * d.voxels() * 4), 20,
                                    a.device);
    std::cout << fmt::format(
        "glint bench tv: {} phantom, forward {}, lambda {}, noise {}, {} outer x {} TV steps, "
        "medians of {}\n{} ({} SMs); device copy bandwidth {:.0f} GB/s (read + write, "
        "cudaMemcpy D2D, same run)\n",
        d.nx == d.ny && d.ny == d.nz ? fmt::format("{}^3", d.nx)
                                     : fmt::format("{}x{}x{}", d.nx, d.ny, d.nz),
        fm.spec, a.lambda, a.noise, a.outer, a.tv_inner, a.repeats, info.name,
        info.sm_count, copy_gbs);
    std::cout << fmt::format("{:<12} {:>10} {:>11} {:>8} {:>9} {:>7} {:>10} {:>10} {:>12}\n",
                             "variant", "solve ms", "step ms", "volumes", "GB/s", "% copy",
                             "floor ms", "RMSE", "max |d| sep");
    std::vector<float> xsep;
    const gpu::TvTuning tuning = daemon::tv_tuning_from_environment();
    for (tv::Variant v : variants) {
      gpu::GpuReconstructor solver(d, v, !fm.H.identity(), a.device, /*low_priority=*/false,
                                   tuning);
      tv::SolverOptions o;
      o.lambda = a.lambda;
      o.outer = a.outer;
      o.variant = v;
      std::vector<float> x(d.voxels()), x0(d.voxels());
      std::vector<double> tk, t0;
      o.tv_inner = a.tv_inner;
      solver.solve(y, fm.H, o, x);  // warm-up: module load, cuFFT set-up
      for (int r = 0; r < a.repeats; ++r) {
        o.tv_inner = a.tv_inner;
        tk.push_back(solver.solve(y, fm.H, o, x).seconds * 1e3);
        o.tv_inner = 0;
        t0.push_back(solver.solve(y, fm.H, o, x0).seconds * 1e3);
      }
      const double solve_ms = detail::median(tk);
      const double step_ms = (solve_ms - detail::median(t0)) / (double(a.outer) * a.tv_inner);
      const double vols = tv::traffic_volumes_per_step(v, a.tv_inner);
      const double gbs = vols * vol_bytes / (step_ms * 1e-3) / 1e9;
      const double floor_ms = vols * vol_bytes / (copy_gbs * 1e9) * 1e3;
      double maxd = 0;
      if (v == tv::Variant::separate) xsep = x;
      if (!xsep.empty())
        for (std::size_t i = 0; i < x.size(); ++i)
          maxd = std::max(maxd, double(std::abs(x[i] - xsep[i])));
      std::cout << fmt::format(
          "{:<12} {:>10.2f} {:>11.4f} {:>8.1f} {:>9.0f} {:>6.1f}% {:>10.4f} {:>10.5f} {:>12}\n",
          tv::variant_name(v), solve_ms, step_ms, vols, gbs, 100.0 * gbs / copy_gbs, floor_ms,
          recon::rmse(x, truth),
          xsep.empty() ? std::string("n/a") : fmt::format("{:.3g}", maxd));
      std::cout.flush();
    }
    std::cout << fmt::format("measurement RMSE vs phantom: {:.5f}\n", recon::rmse(y, truth));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "glint bench tv: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace

void add_bench_tv(CLI::App& bench) {
  auto a = std::make_shared<BenchTvArgs>();
  CLI::App* c = bench.add_subcommand("tv", "time the GPU TV solver's kernel variants");
  c->add_option("--field", a->field, "phantom edge N (N^3 voxels)")->capture_default_str();
  c->add_option("--shape", a->shape,
                "NX,NY,NZ: a phantom of this extent instead of N^3 (e.g. a detector's volume of "
                "slices, 400,400,16)");
  c->add_option("--tv-inner", a->tv_inner, "FGP steps per outer iteration")->capture_default_str();
  c->add_option("--outer", a->outer, "FISTA iterations")->capture_default_str();
  c->add_option("--variant", a->variant,
                "all, or a comma list of " + tv::variant_names_list())
      ->capture_default_str();
  c->add_option("--forward", a->forward, "forward model")->capture_default_str();
  c->add_option("--lambda", a->lambda, "TV weight")->capture_default_str();
  c->add_option("--noise", a->noise, "Gaussian noise sigma")->capture_default_str();
  c->add_option("--repeats", a->repeats, "solves per median")->capture_default_str();
  c->add_option("--device", a->device, "GPU")->capture_default_str();
  c->callback([a] {
    const int rc = run_bench_tv(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace glint::tools
