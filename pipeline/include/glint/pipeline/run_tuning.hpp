#pragma once
// The engines' tuning for a run (docs/tuning.md). The program that starts runs fills it once
// (glintd at start-up, the glint commands before they run) and hands it to every run; a run
// never reads the environment itself.
#include "glint/gpu/find_tuning.hpp"
#include "glint/gpu/tv_solver.hpp"

namespace glint::pipeline {

struct RunTuning {
  gpu::FindTuning find;  ///< the GPU cluster finder's
  gpu::TvTuning tv;      ///< the GPU TV solver's, for the reconstruction stage
};

}  // namespace glint::pipeline
