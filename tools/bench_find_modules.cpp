// `glint bench find --backend gpu --modules X,Y`: a detector of modules, one GPU finder per
// module (as a glintd run of detector.modules builds them), spread over --gpus in contiguous
// groups, against the host-to-device floor of one GPU measured in the same run.
//
// Method as the one-image GPU bench (bench_find_gpu.cpp): the frames of the whole detector are
// generated once and cut into modules; each module's 1000 dark frames build its pedestal; every
// stream slot of every module is filled once and then resubmitted without a host copy; a warm-up
// captures the graphs. Timed: the submit of the first batch to the flush of the last, every
// module's results counted through its views. Every batch goes to every module, in module order,
// as ModularFinder does; the modules' results are not merged (the run merges them on the host,
// which `glint bench pipeline --modules` measures).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench.hpp"
#include "commands.hpp"
#include "glint/daemon/tuning_env.hpp"
#include "glint/gpu/device.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/gpu/transfer.hpp"
#include "glint/modular_finder.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/synthetic.hpp"

namespace glint::tools {

int run_bench_find_gpu_modules(const BenchFindOptions& o) {
  if (const int rc = gpu_bench_usage_problem(o)) return rc;
  const FinderParams params = bench_finder_params(o);
  std::vector<ModuleRegion> regions;
  try {
    regions = module_grid(params.shape, o.modules.at(0), o.modules.at(1));
  } catch (const std::exception& e) {
    std::cerr << "glint bench find: --modules: " << e.what() << "\n";
    return kExitUsage;
  }
  const std::size_t m = regions.size();
  std::vector<int> device(m);
  for (std::size_t k = 0; k < m; ++k) device[k] = pipeline::module_device(o.gpus, k, m);

  const std::size_t np = params.shape.pixels();
  const std::size_t frame_bytes = np * sizeof(uint16_t);
  std::cout << fmt::format(
      "glint bench find (gpu, modules): {}x{} as {} x {} modules of {}x{}, {}x{}, n_sigma {}, {} "
      "frames, ~{:.0f} photons/frame, batch {}, {} stream slot(s) per module, modules on GPUs "
      "[{}]\n",
      params.shape.rows, params.shape.cols, o.modules[0], o.modules[1], regions[0].shape.rows,
      regions[0].shape.cols, o.cluster_size, o.cluster_size, o.n_sigma, o.frames, o.photons,
      o.batch, o.streams, fmt::join(device, ", "));
  std::cout.flush();
  const GpuBenchFrames input = gpu_bench_frames(o);
  const synth::Config& c = input.config;
  const std::size_t pool_frames = input.pool_frames;

  // The floor: one pinned bulk copy of a batch of whole frames to one GPU, in this run.
  const double floor_bps = gpu::measure_h2d_bytes_per_second(frame_bytes * o.batch, 20, o.gpus[0]);
  const double floor_us = static_cast<double>(frame_bytes) / floor_bps * 1e6;

  struct Module {
    std::unique_ptr<gpu::GpuClusterFinder> finder;
    std::vector<uint16_t> pool;
    uint64_t clusters = 0;
  };
  std::vector<Module> mods(m);
  for (std::size_t k = 0; k < m; ++k) {
    const ModuleRegion& r = regions[k];
    gpu::GpuFinderOptions g;
    g.batch_frames = o.batch;
    g.streams = o.streams;
    g.devices = {device[k]};
    g.tuning = daemon::find_tuning_from_environment();
    Module& mod = mods[k];
    mod.finder = gpu::make_gpu_finder(module_params(params, r), g);
    std::vector<uint16_t> mine(c.dark_frames * r.shape.pixels());
    extract_module(params.shape, r, input.dark, c.dark_frames, mine);
    mod.finder->push_dark(mine);
    mod.pool.resize(pool_frames * r.shape.pixels());
    extract_module(params.shape, r, input.pool, pool_frames, mod.pool);
    mod.finder->set_view_sink([&mod](const gpu::GpuBatchView& v) { mod.clusters += v.n_clusters(); });
  }

  std::vector<uint64_t> numbers(o.batch);
  uint64_t next_number = c.dark_frames;
  const auto submit = [&](std::size_t n, bool fill) {
    for (std::size_t i = 0; i < n; ++i) numbers[i] = next_number + i;
    for (Module& mod : mods) {
      std::span<uint16_t> st = mod.finder->staging();
      const std::size_t mp = mod.pool.size() / pool_frames;
      if (fill)
        for (std::size_t i = 0; i < n; ++i)
          std::memcpy(st.data() + i * mp,
                      mod.pool.data() + ((next_number + i - c.dark_frames) % pool_frames) * mp,
                      mp * sizeof(uint16_t));
      mod.finder->submit(std::span<const uint64_t>(numbers.data(), n));
    }
    next_number += n;
  };
  const auto flush = [&] {
    for (Module& mod : mods) mod.finder->flush();
  };
  const auto stats = [&] {
    gpu::GpuFinderStats s;
    for (const Module& mod : mods) {
      const gpu::GpuFinderStats x = mod.finder->stats();
      s.batches += x.batches;
      s.frames += x.frames;
      s.overflow_reruns += x.overflow_reruns;
      s.kernel_ms += x.kernel_ms;
    }
    return s;
  };
  for (int s = 0; s < o.streams * (o.streams + 1); ++s) submit(o.batch, s < o.streams);
  flush();
  const gpu::GpuFinderStats before = stats();
  for (Module& mod : mods) mod.clusters = 0;

  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t done = 0; done < o.frames;) {
    const std::size_t n = std::min<std::size_t>(o.batch, o.frames - done);
    submit(n, false);
    done += n;
  }
  flush();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const gpu::GpuFinderStats st = stats();

  const double frames = static_cast<double>(o.frames);
  const double us_frame = secs * 1e6 / frames;
  uint64_t clusters = 0;
  std::vector<std::string> per_module;
  for (const Module& mod : mods) {
    clusters += mod.clusters;
    per_module.push_back(fmt::format("{:.1f}", static_cast<double>(mod.clusters) / frames));
  }
  std::map<int, int> modules_on;
  for (int d : device) ++modules_on[d];
  std::cout << fmt::format(
      "device               {}\n"
      "frames/s             {:.0f}\n"
      "us/frame             {:.3f}  (the whole detector: every module's part of the frame)\n"
      "GB/s (frame data)    {:.2f}\n"
      "kernel us/frame      {:.3f}  (device events around the find work, summed over modules, "
      "per GPU)\n"
      "clusters/frame       {:.1f}  (per module: {})\n"
      "overflow re-runs     {}\n"
      "H2D floor            {:.2f} GB/s = {:.3f} us/frame (pinned bulk copy of one batch of "
      "whole frames to GPU {}, this run)\n"
      "floor/us per frame   {:.1f} %{}\n",
      mods[0].finder->description(), frames / secs, us_frame, frames * frame_bytes / secs * 1e-9,
      (st.kernel_ms - before.kernel_ms) * 1e3 / frames / static_cast<double>(modules_on.size()),
      static_cast<double>(clusters) / frames, fmt::join(per_module, ", "),
      st.overflow_reruns - before.overflow_reruns, floor_bps * 1e-9, floor_us, o.gpus[0],
      100.0 * floor_us / us_frame, modules_on.size() > 1 ? "  (against one GPU's floor)" : "");
  return 0;
}

}  // namespace glint::tools
