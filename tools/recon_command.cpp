// glint recon: TV-regularised reconstruction of a volume read from HDF5, or of the phantom.
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

#include "commands.hpp"
#include "glint/log.hpp"
#include "glint/daemon/tuning_env.hpp"
#include "glint/recon/forward_model.hpp"
#include "glint/recon/phantom.hpp"
#include "glint/recon/solver_factory.hpp"
#include "glint/recon/volume_io.hpp"

namespace glint::tools {

namespace {

struct ReconArgs {
  std::string input, dataset = "/volume", output;
  int phantom = 0;
  double noise = 0.05;
  unsigned long long seed = 1;
  float lambda = 0.05f;
  int outer = 20, tv_inner = 10;
  std::string forward = "identity";
  bool no_nonneg = false, cold_start = false;
  std::string backend = "auto", variant = "two-state";
  int threads = 0;
};

/// A one-line progress bar on stderr, redrawn after each outer iteration.
void progress_bar(int done, int total) {
  const int width = 30, fill = width * done / total;
  std::fprintf(stderr, "\r[%s%s] %d/%d", std::string(fill, '#').c_str(),
               std::string(width - fill, ' ').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

int run_recon(const ReconArgs& a) {
  recon::Volume truth, measured;
  recon::ForwardModel fm;
  tv::SolverOptions o;
  recon::BackendOptions bo;
  try {
    if (a.phantom == 0 && a.input.empty())
      throw std::invalid_argument("give --input VOL.h5 or --phantom N");
    if (a.phantom != 0 && !a.input.empty())
      throw std::invalid_argument("--input and --phantom exclude each other");
    // The phantom's result is its RMSE, printed; a volume read from a file is only worth its
    // output file.
    if (a.phantom == 0 && a.output.empty())
      throw std::invalid_argument("--output OUT.h5 is required with --input");
    if (!(a.lambda >= 0)) throw std::invalid_argument("--lambda must be >= 0");
    o.lambda = a.lambda;
    o.outer = a.outer;
    o.tv_inner = a.tv_inner;
    o.nonneg = !a.no_nonneg;
    o.warm_start = !a.cold_start;
    o.variant = tv::parse_variant(a.variant);
    bo.backend = recon::parse_backend(a.backend);
    bo.variant = o.variant;
    bo.threads = a.threads;
    bo.tv_tuning = daemon::tv_tuning_from_environment();
    if (a.phantom != 0) {
      if (a.phantom < 2) throw std::invalid_argument("--phantom N needs N >= 2");
      truth.dims = tv::Dims{a.phantom, a.phantom, a.phantom};
      truth.data = recon::make_phantom(a.phantom);
      fm = recon::make_forward_model(a.forward, truth.dims);
      measured.dims = truth.dims;
      measured.data = recon::apply_forward(fm.H, truth.dims, truth.data, a.threads);
      recon::add_noise(measured.data, a.noise, a.seed);
    } else {
      measured = recon::read_volume(a.input, a.dataset);
      fm = recon::make_forward_model(a.forward, measured.dims);
    }
    bo.with_fft = !fm.H.identity();
  } catch (const std::exception& e) {
    std::cerr << "glint recon: " << e.what() << "\n";
    return kExitUsage;
  }
  try {
    const tv::Dims& d = measured.dims;
    auto solver = recon::make_reconstructor(d, bo);
    log::info("recon: {}x{}x{} on {}, forward {}, lambda {}, {} x {} steps, variant {}", d.nx,
              d.ny, d.nz, solver->name(), fm.spec, o.lambda, o.outer, o.tv_inner,
              tv::variant_name(o.variant));
    recon::Volume x{d, std::vector<float>(d.voxels())};
    const tv::Progress bar = isatty(STDERR_FILENO) ? tv::Progress(progress_bar) : tv::Progress();
    const tv::SolveReport rep = solver->solve(measured.data, fm.H, o, x.data, bar);
    const double obj0 = recon::objective(fm.H, d, measured.data, measured.data, o.lambda,
                                         a.threads);
    const double obj = recon::objective(fm.H, d, measured.data, x.data, o.lambda, a.threads);
    std::vector<std::pair<std::string, recon::Attribute>> attrs{
        {"lambda", double(o.lambda)},
        {"outer", (long long)o.outer},
        {"tv_inner", (long long)o.tv_inner},
        {"forward", fm.spec},
        {"nonneg", (long long)o.nonneg},
        {"warm_start", (long long)o.warm_start},
        {"variant", std::string(tv::variant_name(o.variant))},
        {"backend", solver->name()},
        {"objective", obj},
        {"solve_seconds", rep.seconds}};
    std::optional<double> err;
    if (a.phantom != 0) {
      err = recon::rmse(x.data, truth.data);
      attrs.emplace_back("rmse", *err);
      attrs.emplace_back("noise", a.noise);
      attrs.emplace_back("seed", (long long)a.seed);
    } else {
      attrs.emplace_back("input", a.input + ":" + a.dataset);
    }
    std::vector<recon::DatasetOut> out{{"/volume", &x, attrs}};
    if (a.phantom != 0) {
      out.push_back({"/phantom", &truth, {}});
      out.push_back({"/measured", &measured, {{"forward", fm.spec}, {"noise", a.noise}}});
    }
    if (!a.output.empty()) recon::write_volumes(a.output, out);
    std::cout << fmt::format(
        "reconstructed {}x{}x{} on {}: {} outer x {} TV steps in {:.3f} s; objective {:.6g} "
        "(measurement {:.6g})",
        d.nx, d.ny, d.nz, solver->name(), rep.outer, rep.tv_inner, rep.seconds, obj, obj0);
    if (err)
      std::cout << fmt::format("; RMSE vs phantom {:.5f} (measurement {:.5f})", *err,
                               recon::rmse(measured.data, truth.data));
    std::cout << (a.output.empty() ? std::string("\n") : "\nwrote " + a.output + ":/volume\n");
    return 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << "glint recon: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "glint recon: " << e.what() << "\n";
    return kExitFailure;
  }
}

}  // namespace

void add_recon_command(CLI::App& app) {
  auto a = std::make_shared<ReconArgs>();
  CLI::App* c = app.add_subcommand(
      "recon", "TV-regularised 3D reconstruction (denoising, deconvolution, Fourier inpainting)");
  c->add_option("--input", a->input, "HDF5 file with a float32/float64 (Z, Y, X) volume");
  c->add_option("--dataset", a->dataset,
                "dataset in --input; NAME[I] for volume I of an (n, Z, Y, X) stack, e.g. a run "
                "file's /entry/reconstruction/input[I]")
      ->capture_default_str();
  c->add_option("--output", a->output,
                 "HDF5 file to write (/volume, float32); required with --input, optional with "
                 "--phantom");
  c->add_option("--phantom", a->phantom,
                "reconstruct the N^3 phantom after the forward model and noise");
  c->add_option("--noise", a->noise, "phantom: Gaussian noise sigma")->capture_default_str();
  c->add_option("--seed", a->seed, "phantom: noise seed")->capture_default_str();
  c->add_option("--lambda", a->lambda, "TV weight")->capture_default_str();
  c->add_option("--outer", a->outer, "FISTA iterations")->capture_default_str()->check(
      CLI::Range(1, 100000));
  c->add_option("--tv-inner", a->tv_inner, "FGP steps per proximal step")
      ->capture_default_str()
      ->check(CLI::Range(0, 100000));
  c->add_option("--forward", a->forward, "identity | gaussian:SX,SY,SZ | mask:FILE.h5:/dataset")
      ->capture_default_str();
  c->add_flag("--no-nonneg", a->no_nonneg, "do not constrain x >= 0");
  c->add_flag("--cold-start", a->cold_start, "restart the TV dual at every outer iteration");
  c->add_option("--backend", a->backend, "cpu | gpu | auto")->capture_default_str();
  c->add_option("--variant", a->variant,
                "GPU kernel: " + tv::variant_names_list())
      ->capture_default_str();
  c->add_option("--threads", a->threads, "CPU threads (0: all)")->capture_default_str();
  c->callback([a] {
    const int rc = run_recon(*a);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace glint::tools
