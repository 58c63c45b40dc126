// glint eta-calibrate: an eta calibration file (aare's Interpolator tables) from the clusters of
// one or more run files, for sub-pixel positions (products.subpixel.calibration).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "frame_file.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/products/eta_calibration.hpp"
#include "glint/products/eta_calibration_file.hpp"
#include "glint/products/table_eta.hpp"

namespace glint::tools {
namespace {

namespace gp = glint::products;

/// Calls fn(eta2) for every cluster of a run file's table (int32 or float values).
template <class Fn>
void for_each_eta2(const ClusterTable& t, Fn&& fn) {
  const std::size_t n = t.n_clusters();
  if (t.value_type() == ClusterValues::float32) {
    for (std::size_t i = 0; i < n; ++i) fn(gp::eta2_float(t, i));
  } else {
    for (std::size_t i = 0; i < n; ++i) fn(gp::eta2_int(t, i));
  }
}

}  // namespace

void add_eta_calibrate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "eta-calibrate",
      "write an eta calibration file (aare's Interpolator tables from the eta2 of every cluster) "
      "from run files, for products.subpixel.calibration");
  struct Args {
    std::vector<std::string> inputs;
    std::string output, method = "cdf";
    std::size_t bins = 100, energy_bins = 1;
    double eta_min = -0.1, eta_max = 1.1;
    std::optional<double> emin, emax;
    bool overwrite = false, quiet = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("runs", a->inputs, "run files (glintd or glint find --output)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("-o,--output", a->output, "calibration file to create (HDF5)")->required();
  cmd->add_option("--bins", a->bins, "eta bins on x and on y")->capture_default_str();
  cmd->add_option("--eta-min", a->eta_min, "lowest eta edge (eta2 of pedestal-subtracted "
                  "clusters reaches a little beyond [0, 1])")->capture_default_str();
  cmd->add_option("--eta-max", a->eta_max, "highest eta edge")->capture_default_str();
  cmd->add_option("--energy-bins", a->energy_bins, "bins of the 2 x 2 energy")
      ->capture_default_str();
  cmd->add_option("--emin", a->emin,
                  "lowest energy edge (ADU raw, keV calibrated); default: the smallest 2 x 2 sum");
  cmd->add_option("--emax", a->emax,
                  "highest energy edge; default: just above the largest 2 x 2 sum");
  cmd->add_option("--method", a->method, "cdf (aare's Interpolator) or rosenblatt")
      ->capture_default_str();
  cmd->add_flag("--overwrite", a->overwrite, "replace an existing file");
  cmd->add_flag("-q,--quiet", a->quiet, "no summary");
  cmd->callback([a] {
    const std::string name = "glint eta-calibrate";
    gp::EtaMethod method = gp::EtaMethod::cdf;
    try {
      method = gp::parse_eta_method(a->method);
      if (a->bins == 0 || a->energy_bins == 0)
        throw InputError("--bins and --energy-bins must be >= 1");
      if (!(a->eta_min < a->eta_max))
        throw InputError(fmt::format("--eta-min {} must be below --eta-max {}", a->eta_min,
                                     a->eta_max));
      if (a->emin && a->emax && !(*a->emin < *a->emax))
        throw InputError(fmt::format("--emin {} must be below --emax {}", *a->emin, *a->emax));
      if (!a->overwrite && std::filesystem::exists(a->output))
        throw InputError(a->output + " exists already (use --overwrite to replace it)");
    } catch (const std::exception& e) {
      fail(name, e.what(), kExitUsage);
    }

    // Every run file must hold clusters of one size and one kind of values (ADU or keV).
    int cluster_size = 0;
    std::optional<ClusterValues> values;
    auto read = [&](const std::string& path) {
      pipeline::RunFileContents f;
      try {
        f = pipeline::read_run_file(path);
      } catch (const std::exception& e) {
        fail(name, e.what(), kExitUsage);
      }
      if (cluster_size == 0) cluster_size = f.clusters.cluster_size();
      if (!values) values = f.clusters.value_type();
      if (f.clusters.cluster_size() != cluster_size)
        fail(name, fmt::format("{}: clusters of {} x {}, the first run file has {} x {}", path,
                               f.clusters.cluster_size(), f.clusters.cluster_size(),
                               cluster_size, cluster_size), kExitUsage);
      if (f.clusters.value_type() != *values)
        fail(name, fmt::format("{}: {} clusters, the first run file has {} ones (energies in "
                               "different units)", path,
                               f.clusters.value_type() == ClusterValues::float32 ? "calibrated"
                                                                                 : "raw",
                               *values == ClusterValues::float32 ? "calibrated" : "raw"),
             kExitUsage);
      // Modules mounted flipped: their windows as the image shows them, as the products (the
      // sub-pixel image this calibration is for) see them; the file keeps them native.
      if (std::any_of(f.modules.begin(), f.modules.end(), [](const pipeline::ModuleInfo& m) {
            return m.orientation != ModuleOrientation::normal;
          }))
        f.clusters = pipeline::image_clusters(f);
      return f;
    };

    try {
      // The energy range: as given, else from the data (a first pass over the files).
      double emin = a->emin.value_or(0.0), emax = a->emax.value_or(0.0);
      uint64_t clusters = 0;
      if (!a->emin || !a->emax) {
        double lo = std::numeric_limits<double>::infinity(), hi = -lo;
        for (const auto& path : a->inputs) {
          const auto f = read(path);
          for_each_eta2(f.clusters, [&](const auto& eta) {
            const double e = static_cast<double>(eta.sum);
            if (std::isfinite(e)) {
              lo = std::min(lo, e);
              hi = std::max(hi, e);
            }
          });
        }
        if (!(lo <= hi))
          fail(name, "the run files hold no clusters with a finite energy", kExitUsage);
        // Raw energies are integers: [min, max + 1) holds them all; calibrated ones: the next
        // double above the largest.
        const double top = *values == ClusterValues::float32
                               ? std::nextafter(hi, std::numeric_limits<double>::infinity())
                               : hi + 1.0;
        if (!a->emin) emin = lo;
        if (!a->emax) emax = top;
        if (!(emin < emax))
          fail(name, fmt::format("energy range [{}, {}] is empty (set --emin and --emax)", emin,
                                 emax), kExitUsage);
      }
      gp::EtaCube cube = gp::EtaCube::regular(a->bins, a->eta_min, a->eta_max, a->energy_bins,
                                              emin, emax);
      for (const auto& path : a->inputs) {
        const auto f = read(path);
        clusters += f.clusters.n_clusters();
        for_each_eta2(f.clusters, [&](const auto& eta) { cube.add(eta); });
      }
      gp::EtaCalibrationFile file{cube, gp::EtaCalibration(cube, method), cluster_size,
                                  cube.added(), a->inputs};
      gp::write_eta_calibration(a->output, file, a->overwrite);
      if (!a->quiet) {
        const char* unit = *values == ClusterValues::float32 ? "keV" : "ADU";
        std::cout << fmt::format(
            "{}: {} clusters ({} x {}, {}) from {} run file(s); {} in the cube, {} outside it "
            "(eta outside [{}, {}) or energy outside [{}, {}) {})\n",
            name, clusters, cluster_size, cluster_size,
            *values == ClusterValues::float32 ? "calibrated" : "raw", a->inputs.size(),
            cube.added(), cube.outside(), a->eta_min, a->eta_max, emin, emax, unit);
        std::cout << fmt::format("{}: {} x {} eta bins, {} energy bins, method {}, written to {}\n",
                                 name, a->bins, a->bins, a->energy_bins, gp::to_string(method),
                                 a->output);
      }
    } catch (const CLI::Error&) {
      throw;  // fail() above: reported already
    } catch (const std::invalid_argument& e) {
      fail(name, e.what(), kExitUsage);
    } catch (const std::exception& e) {
      fail(name, e.what(), kExitFailure);
    }
  });
}

}  // namespace glint::tools
