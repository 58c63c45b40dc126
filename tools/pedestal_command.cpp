// glint pedestal: a pedestal file (the finder's whole tracking state) from dark frames stored in
// an HDF5 file, for `pedestal.source: file:PATH`.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "frame_file.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pipeline/run_file.hpp"

namespace glint::tools {

void add_pedestal_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "pedestal", "write a pedestal file (sum, sum2, count per pixel) from dark frames in an HDF5 "
                  "file, for glintd's pedestal.source file:PATH");
  struct Args {
    std::string input, dataset = "/data", output, detector = "generic";
    uint64_t dark = 1000;
    uint32_t window = 1000;
    unsigned threads = 0;
    bool overwrite = false, quiet = false;
    std::vector<uint32_t> modules{1, 1};
    std::vector<std::string> module_orientation;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("-i,--input", a->input, "HDF5 file with the frames")->required();
  cmd->add_option("--dataset", a->dataset, "dataset holding the frames")->capture_default_str();
  cmd->add_option("--dark", a->dark, "the first DARK frames are pushed")->capture_default_str();
  cmd->add_option("--window", a->window, "pedestal window (pedestal.window)")
      ->capture_default_str();
  cmd->add_option("--detector", a->detector,
                  "generic or jungfrau (G0 pixels only are pushed, as glintd's G0-only mode)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU threads, 0 = all cores")->capture_default_str();
  cmd->add_option("--modules", a->modules,
                  "module grid X,Y of the frames (as glintd's detector.modules), for "
                  "--module-orientation")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  cmd->add_option("--module-orientation", a->module_orientation,
                  "how each module is mounted, one for all or one per module (row-major), "
                  "comma-separated: normal, flip_rows, flip_cols, rotate_180 (as glintd's "
                  "detector.module_orientation): the frames hold each module as its ports send "
                  "it, the pedestal file is the image, each module shown flipped (as glintd "
                  "loads it)")
      ->delimiter(',');
  cmd->add_option("-o,--output", a->output, "pedestal file to create (HDF5)")->required();
  cmd->add_flag("--overwrite", a->overwrite, "replace an existing file");
  cmd->add_flag("-q,--quiet", a->quiet, "no summary line");
  cmd->callback([a] {
    std::unique_ptr<FrameFileReader> in;
    FinderParams params;
    std::vector<ModuleRegion> regions;
    try {
      if (a->detector != "generic" && a->detector != "jungfrau")
        throw InputError("--detector " + a->detector + ": allowed are generic, jungfrau");
      in = std::make_unique<FrameFileReader>(a->input, a->dataset);
      params.shape = in->shape();
      params.pedestal_window = a->window;
      if (a->detector == "jungfrau") params.pixels = PixelMode::jungfrau_g0;
      validate(params);
      if (a->dark == 0 || a->dark > in->frames())
        throw InputError(fmt::format("--dark {}: dataset '{}' in {} holds {} frames", a->dark,
                                     a->dataset, a->input, in->frames()));
      if (!a->overwrite && std::filesystem::exists(a->output))
        throw InputError(a->output + " exists already (use --overwrite to replace it)");
      std::vector<ModuleOrientation> orientations;
      for (const std::string& o : a->module_orientation) {
        const auto parsed = parse_module_orientation(o);
        if (!parsed)
          throw InputError(fmt::format("--module-orientation: '{}' is not an orientation "
                                       "(allowed: {})", o, kModuleOrientations));
        orientations.push_back(*parsed);
      }
      try {
        regions = module_grid(params.shape, a->modules.at(0), a->modules.at(1), orientations);
      } catch (const std::exception& e) {
        throw InputError(std::string("--modules / --module-orientation: ") + e.what());
      }
    } catch (const InputError& e) {
      fail("glint pedestal", e.what(), kExitUsage);
    } catch (const std::invalid_argument& e) {
      fail("glint pedestal", e.what(), kExitUsage);
    }
    try {
      auto finder = make_cpu_finder(params, a->threads);
      const std::size_t np = params.shape.pixels();
      const uint64_t chunk = frames_per_chunk(params.shape);
      std::vector<uint16_t> buf;
      for (uint64_t f = 0; f < a->dark; f += chunk) {
        const uint64_t n = std::min(chunk, a->dark - f);
        buf.resize(n * np);
        in->read(f, n, buf);
        finder->push_dark(buf);
      }
      PedestalState state = finder->pedestal();
      if (std::any_of(regions.begin(), regions.end(), [](const ModuleRegion& r) {
            return r.orientation != ModuleOrientation::normal;
          })) {
        // Each pixel's pedestal is its own: the frames' blocks, each module turned as the image
        // shows it.
        PedestalState image(state.shape, state.window);
        for (const ModuleRegion& r : regions) {
          const ModuleRegion native{r.row0, r.col0, r.shape, ModuleOrientation::normal};
          place_pedestal(extract_pedestal(state, native), r, image);
        }
        state = std::move(image);
      }
      pipeline::write_pedestal_file(
          a->output, state,
          fmt::format("{}:{} frames 0..{} ({})", a->input, a->dataset, a->dark - 1, a->detector),
          a->overwrite);
      if (!a->quiet)
        std::cout << fmt::format("glint pedestal: {} dark frames of {} x {}, window {}, to {}\n",
                                 a->dark, params.shape.rows, params.shape.cols, a->window,
                                 a->output);
    } catch (const std::exception& e) {
      fail("glint pedestal", e.what(), kExitFailure);
    }
  });
}

}  // namespace glint::tools
