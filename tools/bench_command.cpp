// glint bench: the benchmarks, one subcommand per engine (find, tv, pipeline).
#include "commands.hpp"

namespace glint::tools {

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "benchmarks: find, tv, pipeline");
  bench->require_subcommand(1);
  add_bench_find(*bench);
#if defined(GLINT_HAVE_BENCH_TV)
  add_bench_tv(*bench);
#endif
#if defined(GLINT_HAVE_BENCH_PIPELINE)
  add_bench_pipeline(*bench);
#endif
}

}  // namespace glint::tools
