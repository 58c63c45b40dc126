#pragma once
// The one place where glint reads its tuning and diagnosis variables from the environment
// (docs/tuning.md); the engines take the structs filled here at construction. A value that is not
// a whole number in range, or not one of the accepted words, leaves the default.
#include "glint/gpu/find_tuning.hpp"
#include "glint/gpu/tv_solver.hpp"
#include "glint/pipeline/run_tuning.hpp"

namespace glint::daemon {

/// GLINT_FIND_THREADS, GLINT_FIND_CHUNK, GLINT_FIND_RESIDENT, GLINT_FIND_NARROW,
/// GLINT_FIND_SEGMENTS, GLINT_FIND_PROFILE, GLINT_FIND_TIMELINE and GLINT_FIND_TRACE over the GPU
/// finder's defaults.
gpu::FindTuning find_tuning_from_environment();

/// The GPU TV solver's tuning from GLINT_TV_KERNEL, _ZRUN, _SHUFFLE, _ROWS, _AHEAD,
/// _WARPS, _BLOCKS, _COLS, _CHUNK, _GROUP, _FIRST, _OX and _PITCH (docs/tuning.md). An unset
/// variable, a number that is not a whole number in the variable's range or a word other than
/// those listed leaves the default; GLINT_TV_OX and GLINT_TV_PITCH set to something else than a
/// number give a value the solver refuses with a warning.
gpu::TvTuning tv_tuning_from_environment();

/// Both of the above: what glintd reads once at start-up and the glint commands before a run.
pipeline::RunTuning run_tuning_from_environment();

}  // namespace glint::daemon
