#pragma once
// The one place where glint reads its tuning and diagnosis variables from the environment
// (docs/tuning.md); the engines take the structs filled here at construction. A value that is not
// a whole number in range, or not one of the accepted words, leaves the default.
#include "glint/gpu/find_tuning.hpp"

namespace glint::pipeline {

/// GLINT_FIND_THREADS, GLINT_PACK_REGIONS, GLINT_FIND_RESIDENT, GLINT_FIND_SEGMENTS,
/// GLINT_FIND_PROFILE and GLINT_FIND_TIMELINE over the GPU finder's defaults.
gpu::FindTuning find_tuning_from_environment();

}  // namespace glint::pipeline
