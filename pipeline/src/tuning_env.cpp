#include "glint/pipeline/tuning_env.hpp"

#include "glint/detail/env.hpp"

namespace glint::pipeline {

gpu::FindTuning find_tuning_from_environment() {
  using glint::detail::env_int;
  using glint::detail::env_is;
  using glint::detail::env_set;
  using glint::detail::env_text;
  gpu::FindTuning t;
  const long long threads = env_int("GLINT_FIND_THREADS", t.find_threads, 128, 1024);
  if (threads % 32 == 0) t.find_threads = static_cast<int>(threads);
  t.pack_regions = static_cast<int>(env_int("GLINT_PACK_REGIONS", t.pack_regions, 1, 1024));
  t.resident = !env_is("GLINT_FIND_RESIDENT", "0");
  t.max_segments = env_int("GLINT_FIND_SEGMENTS", t.max_segments, 1, 1LL << 40);
  t.profile = env_set("GLINT_FIND_PROFILE");
  t.timeline = env_text("GLINT_FIND_TIMELINE");
  return t;
}

}  // namespace glint::pipeline
