// glint bench: the benchmarks, one subcommand per engine (find, tv, pipeline).
#include "commands.hpp"

namespace glint::tools {

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "benchmarks: find, tv, pipeline");
  bench->require_subcommand(1);
  add_bench_find(*bench);
  add_bench_tv(*bench);
  add_bench_pipeline(*bench);
}

}  // namespace glint::tools
