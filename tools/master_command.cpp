// glint master: joins the run files of several glintd (one per receiver host, each on its own
// modules) into one master file that h5py reads as one detector (docs/modules.md).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "glint/pipeline/master_file.hpp"

namespace glint::tools {

void add_master_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "master", "join the run files of several glintd (parts of one detector, each with "
                "detector.placement) into a master file of external links and virtual datasets");
  struct Args {
    std::vector<std::string> inputs;
    std::string output;
    bool overwrite = false, allow_open = false, quiet = false;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("inputs", a->inputs, "the run files, one per glintd")->required();
  cmd->add_option("-o,--output", a->output, "master file to create (HDF5)")->required();
  cmd->add_flag("--overwrite", a->overwrite, "replace an existing output file");
  cmd->add_flag("--allow-open", a->allow_open,
                "join runs that never closed (no end_time): their rows written so far");
  cmd->add_flag("-q,--quiet", a->quiet, "no summary");
  cmd->callback([a] {
    pipeline::MasterSummary sum;
    try {
      std::vector<std::filesystem::path> inputs(a->inputs.begin(), a->inputs.end());
      pipeline::MasterOptions options;
      options.overwrite = a->overwrite;
      options.allow_open = a->allow_open;
      sum = pipeline::write_master_file(inputs, a->output, options);
    } catch (const pipeline::MasterInputError& e) {
      fail("glint master", e.what(), kExitUsage);
    } catch (const std::exception& e) {
      fail("glint master", e.what(), kExitFailure);
    }
    if (a->quiet) return;
    std::size_t modules = 0;
    for (const auto& r : sum.runs) modules += r.modules.size();
    std::cout << fmt::format("glint master: {}: {} modules, detector {} x {}, {} clusters\n",
                             a->output, modules, sum.detector_shape[0], sum.detector_shape[1],
                             sum.clusters);
    for (const auto& r : sum.runs) {
      std::vector<uint32_t> ids;
      for (const auto& m : r.modules) ids.push_back(m.id);
      std::cout << fmt::format("  /entry/runs/{} -> {}: modules {}, image {} x {} at ({}, {}), "
                               "{} clusters{}\n",
                               r.name, r.path.string(), fmt::join(ids, ","), r.shape.rows,
                               r.shape.cols, r.detector_origin[0], r.detector_origin[1],
                               r.clusters, r.closed ? "" : " (run still open)");
    }
    std::cout << fmt::format("  images: {}\n", fmt::join(sum.images, " "));
    std::cout << fmt::format("  /entry/clusters: {}\n", fmt::join(sum.cluster_fields, " "));
  });
}

}  // namespace glint::tools
