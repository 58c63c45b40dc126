#pragma once
// The tuning variables of docs/tuning.md, read from the environment in this one place. The
// engines take tuning structs at construction and never read the environment themselves; the
// glint tools and glintd call these when they build an engine's options.
#include "glint/gpu/tv_solver.hpp"

namespace glint::pipeline {

/// The GPU TV solver's tuning from GLINT_TV_KERNEL, _ZRUN, _SHUFFLE, _ROWS, _AHEAD,
/// _WARPS, _BLOCKS, _COLS, _CHUNK, _GROUP, _FIRST, _OX and _PITCH (docs/tuning.md). An unset
/// variable, a number that is not a whole number in the variable's range or a word other than
/// those listed leaves the default; GLINT_TV_OX and GLINT_TV_PITCH set to something else than a
/// number give a value the solver refuses with a warning.
gpu::TvTuning tv_tuning_from_environment();

}  // namespace glint::pipeline
