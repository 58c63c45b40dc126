#pragma once
// The master file of a detector read by several glintd, one per receiver host, each writing the
// run file of its own modules (docs/modules.md "Several hosts and the master file"). It holds no
// data of its own: external links to each run's /entry and HDF5 virtual datasets that assemble
// the run files' images into detector-shaped ones and concatenate their cluster tables, so that
// h5py reads one detector:
//
//   /entry                        NXentry
//   /entry/instrument/detector    NXdetector: @detector_shape [R, C] (= @frame_shape), @modules
//     module_<id>                 NXdetector_module per module of every run: data_origin (its
//                                 place in the master's detector-shaped images), data_size,
//                                 @module_id, @detector_origin, @run (its /entry/runs name)
//     pixel_mask                  (R, C) when every run has one; bit 0 (gap) where none
//   /entry/runs/<name>            external link to each run file's /entry
//   /entry/pedestal               start_mean, start_noise, end_mean, end_noise (R, C), NaN where
//                                 no module
//   /entry/hitmap, energy_image, subpixel_image   NXdata (R, C) (subpixel: (R f, C f)) when
//                                 every run has the product; 0 where no module
//   /entry/clusters               frame_number, x, y, module, data (and energy, energy_2x2 when
//                                 every run has them): the runs' tables one after the other, in
//                                 the order of their first module id; @runs, @run_offsets
//
// The virtual datasets have the sizes the run files had when the master was made: make it once
// the runs have closed (an open run is refused unless allowed).
#include <array>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "glint/pipeline/run_file.hpp"

namespace glint::pipeline {

/// Run files that cannot be joined: missing, unreadable, not a run file, another detector,
/// overlapping images, the same module twice, a run that never closed. One line naming the
/// file(s).
class MasterInputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct MasterOptions {
  bool overwrite = false;   ///< replace an existing output file
  bool allow_open = false;  ///< join runs that never closed (their rows at this moment)
};

/// One run file as joined.
struct MasterRun {
  std::filesystem::path path;
  std::string name;                           ///< its link under /entry/runs
  FrameShape shape{};                         ///< its image
  std::array<uint32_t, 2> detector_origin{};  ///< its image in the detector
  std::vector<ModuleInfo> modules;            ///< in id order
  uint64_t clusters = 0;                      ///< cluster rows joined
  uint64_t cluster_offset = 0;                ///< its first row in /entry/clusters
  bool closed = true;                         ///< it has an end_time
};

struct MasterSummary {
  std::array<uint32_t, 2> detector_shape{};
  std::vector<MasterRun> runs;          ///< in the master's order (first module id)
  uint64_t clusters = 0;
  std::vector<std::string> images;      ///< the assembled image datasets (paths in the master)
  std::vector<std::string> cluster_fields;  ///< the /entry/clusters datasets
};

/// Writes the master file `output` joining `inputs` (docs/modules.md). Throws MasterInputError
/// for inputs that cannot be joined or an existing output (unless options.overwrite), and
/// OutputError when writing fails (nothing is left behind then).
MasterSummary write_master_file(const std::vector<std::filesystem::path>& inputs,
                                const std::filesystem::path& output,
                                const MasterOptions& options = {});

}  // namespace glint::pipeline
