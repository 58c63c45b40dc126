#include "glint/daemon/tuning_env.hpp"

#include "glint/daemon/env.hpp"

namespace glint::daemon {

gpu::FindTuning find_tuning_from_environment() {
  using glint::daemon::env_int;
  using glint::daemon::env_is;
  using glint::daemon::env_set;
  using glint::daemon::env_text;
  gpu::FindTuning t;
  const long long threads = env_int("GLINT_FIND_THREADS", t.find_threads, 128, 1024);
  if (threads % 32 == 0) t.find_threads = static_cast<int>(threads);
  t.out_chunk = static_cast<int>(env_int("GLINT_FIND_CHUNK", t.out_chunk, 1, 65536));
  t.resident = !env_is("GLINT_FIND_RESIDENT", "0");
  t.narrow = !env_is("GLINT_FIND_NARROW", "0");
  t.max_segments = env_int("GLINT_FIND_SEGMENTS", t.max_segments, 1, 1LL << 40);
  t.profile = env_set("GLINT_FIND_PROFILE");
  t.timeline = env_text("GLINT_FIND_TIMELINE");
  t.trace = env_text("GLINT_FIND_TRACE");
  return t;
}

gpu::TvTuning tv_tuning_from_environment() {
  using glint::daemon::env_int;
  using glint::daemon::env_is;
  using glint::daemon::env_set;
  using Kernel = gpu::TvTuning::Kernel;
  gpu::TvTuning t;
  if (env_is("GLINT_TV_KERNEL", "march"))
    t.kernel = Kernel::march;
  else if (env_is("GLINT_TV_KERNEL", "staged"))
    t.kernel = Kernel::staged;
  else if (env_is("GLINT_TV_KERNEL", "pair"))
    t.kernel = Kernel::pair;
  t.zrun = static_cast<int>(env_int("GLINT_TV_ZRUN", t.zrun, 1, 8));
  t.shuffle = static_cast<int>(env_int("GLINT_TV_SHUFFLE", -1, 0, 1));
  // Kernel shapes: 0 .. 1024 is passed on; the solver keeps its default for a shape it has not
  // built.
  auto shape = [&](const char* name) { return static_cast<int>(env_int(name, -1, 0, 1024)); };
  t.rows = shape("GLINT_TV_ROWS");
  t.ahead = shape("GLINT_TV_AHEAD");
  t.warps = shape("GLINT_TV_WARPS");
  t.blocks = shape("GLINT_TV_BLOCKS");
  t.cols = shape("GLINT_TV_COLS");
  t.chunk = static_cast<int>(env_int("GLINT_TV_CHUNK", 0, 1, 1 << 20));
  t.group = env_int("GLINT_TV_GROUP", -1, 0, 1 << 20);
  t.first = static_cast<int>(env_int("GLINT_TV_FIRST", -1, 0, 1 << 20));
  // Set but not a number in range: -1, which the solver refuses with a warning.
  if (env_set("GLINT_TV_OX")) t.ox = static_cast<int>(env_int("GLINT_TV_OX", -1, 0, 1024));
  if (env_set("GLINT_TV_PITCH")) t.pitch = env_int("GLINT_TV_PITCH", -1, 0, 1 << 20);
  return t;
}

pipeline::RunTuning run_tuning_from_environment() {
  return pipeline::RunTuning{find_tuning_from_environment(), tv_tuning_from_environment()};
}

}  // namespace glint::daemon
