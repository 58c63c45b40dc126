// `glint bench find --backend gpu`: throughput of the GPU engine against the host-to-device
// floor measured in the same run.
//
// Method: frames from glint::synth (the CPU benchmark's generator and settings: a steady
// `photons` per frame) are generated once; its 1000 dark frames build the pedestal; every stream
// slot's pinned staging is filled once and then resubmitted without a host copy, as a producer
// writing straight into the engine's staging would; a warm-up of streams x (streams + 1) batches
// captures the graphs. Timed: submit of every batch to the flush of the last, results delivered
// to a sink that counts them.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench.hpp"
#include "commands.hpp"
#include "glint/gpu/device.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/gpu/transfer.hpp"
#include "glint/daemon/tuning_env.hpp"
#include "glint/synthetic.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/products_consumer.hpp"

namespace glint::tools {

int gpu_bench_usage_problem(const BenchFindOptions& o) {
  if (o.size == 0 || o.frames == 0 || o.batch < 1 || o.streams < 1 || o.gpus.empty()) {
    std::cerr << "glint bench find: --size, --frames, --batch and --streams must be positive and "
                 "--gpus must name at least one GPU\n";
    return kExitUsage;
  }
  const int n_dev = gpu::device_count();
  for (int id : o.gpus)
    if (id < 0 || id >= n_dev) {
      std::cerr << fmt::format("glint bench find: GPU {} asked for, {} usable{}\n", id, n_dev,
                               n_dev == 0 ? ": " + gpu::unavailable_reason() : std::string());
      return kExitUsage;
    }
  return 0;
}

GpuBenchFrames gpu_bench_frames(const BenchFindOptions& o) {
  GpuBenchFrames f;
  f.config = bench_frames_config(o);
  const synth::Generator gen(f.config);
  f.pool_frames = std::min<std::size_t>(static_cast<std::size_t>(o.streams) * o.batch, 1024);
  f.dark = synthesize(gen, 0, f.config.dark_frames);
  f.pool = synthesize(gen, f.config.dark_frames, f.pool_frames);
  return f;
}

int run_bench_find_gpu(const BenchFindOptions& o) {
  if (const int rc = gpu_bench_usage_problem(o)) return rc;
  const int n_gpus = static_cast<int>(o.gpus.size());
  const FinderParams params = bench_finder_params(o);
  gpu::GpuFinderOptions g;
  g.batch_frames = o.batch;
  g.streams = o.streams;
  g.devices = o.gpus;
  g.tuning = daemon::find_tuning_from_environment();

  const std::size_t np = params.shape.pixels();
  const std::size_t frame_bytes = np * sizeof(uint16_t);
  std::cout << fmt::format(
      "glint bench find (gpu): {}x{}, {}x{}, n_sigma {}, {} frames, ~{:.0f} photons/frame, batch "
      "{}, {} stream slot(s), {} GPU(s), pixels {}\n",
      params.shape.rows, params.shape.cols, o.cluster_size, o.cluster_size, o.n_sigma, o.frames,
      o.photons, o.batch, o.streams, n_gpus, to_string(params.pixels));
  std::cout.flush();
  const GpuBenchFrames input = gpu_bench_frames(o);
  const synth::Config& c = input.config;
  const std::vector<uint16_t>& dark = input.dark;
  const std::vector<uint16_t>& pool = input.pool;
  const std::size_t pool_frames = input.pool_frames;

  // The floor: one pinned bulk copy of a batch's bytes, in this run.
  const double floor_bps = gpu::measure_h2d_bytes_per_second(frame_bytes * o.batch, 20, o.gpus[0]);
  const double floor_us = static_cast<double>(frame_bytes) / floor_bps * 1e6;

  auto finder = gpu::make_gpu_finder(params, g);
  finder->push_dark(dark);
  uint64_t clusters = 0;
  bool narrow = true;  // every batch's values came back as int16
  // The warm-up batches also time the host's reading of a batch into a table (append_clusters,
  // what the ClusterFinder sink and so glintd's run do with every batch), off the timed run.
  bool warm_up = true;
  ClusterTable table = make_result_table(params), again = make_result_table(params);
  double append_ms = 0.0, contiguous_ms = 0.0;
  uint64_t appended = 0;
  std::vector<int16_t> values16;
  finder->set_view_sink([&](const gpu::GpuBatchView& v) {
    clusters += v.n_clusters();
    for (const gpu::GpuBandView& b : v.bands) narrow = narrow && b.data.empty();
    if (warm_up && v.frame_numbers.size() == static_cast<std::size_t>(o.batch)) {
      table.clear();
      const auto a0 = std::chrono::steady_clock::now();
      gpu::append_clusters(table, v);
      append_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a0).count();
      ++appended;
      // For comparison, the same clusters laid out one frame after the other (as a pack
      // kernel wrote them), values as they came back.
      std::vector<uint32_t> counts;
      for (const FrameRecord& f : table.frames()) counts.push_back(f.n_clusters);
      gpu::GpuBandView contiguous;
      contiguous.counts = counts;
      contiguous.x = table.x();
      contiguous.y = table.y();
      if (narrow) {
        values16.assign(table.data().begin(), table.data().end());
        contiguous.data16 = values16;
      } else {
        contiguous.data = table.data();
      }
      again.clear();
      const auto c0 = std::chrono::steady_clock::now();
      gpu::append_clusters(again, gpu::GpuBatchView{v.frame_numbers, {&contiguous, 1}});
      contiguous_ms +=
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
    }
  });

  std::vector<uint64_t> numbers(o.batch);
  uint64_t next_number = c.dark_frames;
  const auto submit = [&](std::size_t n, bool fill) {
    std::span<uint16_t> st = finder->staging();
    if (fill) {
      for (std::size_t k = 0; k < n; ++k)
        std::memcpy(st.data() + k * np,
                    pool.data() + ((next_number + k - c.dark_frames) % pool_frames) * np,
                    frame_bytes);
    }
    for (std::size_t k = 0; k < n; ++k) numbers[k] = next_number++;
    finder->submit(std::span<const uint64_t>(numbers.data(), n));
  };
  // Fill every slot once, then resubmit the staged frames; the warm-up pairs every slot with
  // every device frame buffer once (captures all the graphs).
  for (int s = 0; s < o.streams * (o.streams + 1); ++s) submit(o.batch, s < o.streams);
  finder->flush();
  warm_up = false;
  const gpu::GpuFinderStats before = finder->stats();
  clusters = 0;

  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t done = 0; done < o.frames;) {
    const std::size_t n = std::min<std::size_t>(o.batch, o.frames - done);
    submit(n, false);
    done += n;
  }
  finder->flush();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const gpu::GpuFinderStats st = finder->stats();

  const double frames = static_cast<double>(st.frames - before.frames);
  const double batches = static_cast<double>(st.batches - before.batches);
  const double us_frame = secs * 1e6 / frames;
  const auto per_batch = [&](uint64_t now, uint64_t then) { return (now - then) / batches; };
  std::cout << fmt::format(
      "device               {}\n"
      "frames/s             {:.0f}\n"
      "us/frame             {:.3f}\n"
      "GB/s (frame data)    {:.2f}\n"
      "kernel us/frame      {:.3f}  (device events around the find work, per GPU)\n"
      "graph launches/batch {:.2f}  ({} GPU(s))\n"
      "other launches/batch {:.2f}  (partial batches, re-runs)\n"
      "host syncs/batch     {:.2f}  (completion-event waits; none per frame)\n"
      "clusters/frame       {:.1f}\n"
      "overflow re-runs     {}\n"
      "outgrown re-runs     {}\n"
      "wide re-runs         {}  (values back as {})\n"
      "H2D floor            {:.2f} GB/s = {:.3f} us/frame (pinned bulk copy of one batch to GPU "
      "{}, this run)\n"
      "floor/us per frame   {:.1f} %{}\n",
      finder->description(), frames / secs, us_frame, frames * frame_bytes / secs * 1e-9,
      (st.kernel_ms - before.kernel_ms) * 1e3 / frames / n_gpus,
      per_batch(st.graph_launches, before.graph_launches), n_gpus,
      per_batch(st.direct_launches, before.direct_launches),
      per_batch(st.host_syncs, before.host_syncs), clusters / frames,
      st.overflow_reruns - before.overflow_reruns,
      st.outgrown_reruns - before.outgrown_reruns, st.wide_reruns - before.wide_reruns,
      narrow ? "int16" : "int32", floor_bps * 1e-9, floor_us, o.gpus[0],
      100.0 * floor_us / us_frame, n_gpus > 1 ? "  (against one GPU's floor)" : "");
  // The floor with the results: a batch's frames going up while a batch of this run's results
  // (x, y and the values of its clusters, and the per-frame counts) come down at the same time.
  const std::size_t result_bytes = static_cast<std::size_t>(
      clusters / frames * o.batch *
          (2 * sizeof(uint16_t) +
           (narrow ? sizeof(int16_t) : sizeof(int32_t)) * o.cluster_size * o.cluster_size) +
      sizeof(uint32_t) * o.batch);
  const double duplex_us =
      gpu::measure_duplex_seconds(frame_bytes * o.batch, result_bytes, 20, o.gpus[0]) * 1e6 /
      o.batch;
  std::cout << fmt::format(
      "H2D+D2H floor        {:.3f} us/frame (one batch up and {:.1f} MB of results down at "
      "once, this run)\n"
      "duplex/us per frame  {:.1f} %\n"
      "host append          {:.3f} ms/batch = {:.3f} us/frame (append_clusters into a table, "
      "{} warm-up batch(es); the same clusters one frame after the other: {:.3f} ms/batch)\n",
      duplex_us, result_bytes * 1e-6, 100.0 * duplex_us / us_frame,
      appended > 0 ? append_ms / appended : 0.0,
      appended > 0 ? append_ms * 1e3 / appended / o.batch : 0.0, appended,
      appended > 0 ? contiguous_ms / appended : 0.0);
  if (o.products.empty()) return 0;

  // With the products: the batches as the run gets them (ClusterTables through set_sink), timed
  // without and then with the products' consumer, whose workers (or GPU accumulator, on its own
  // stream) accumulate while the GPU finds the next batches.
  const config::ProductsConfig pc = bench_products_config(o);
  config::Config cfg;
  cfg.products = pc;
  cfg.finder.gpu_ids = o.gpus;  // GPU products on the finder's first GPU
  std::vector<ClusterTable> kept;
  const auto timed = [&](const std::function<void(const ClusterTable&)>& consume,
                         const std::function<void()>& finish) {
    uint64_t found = 0;
    finder->set_sink([&](const ClusterTable& t) {
      found += t.n_clusters();
      if (consume) consume(t);
    });
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t done = 0; done < o.frames;) {
      const std::size_t n = std::min<std::size_t>(o.batch, o.frames - done);
      submit(n, false);
      done += n;
    }
    finder->flush();
    if (finish) finish();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                         .count();
    return std::pair{o.frames / s, found};
  };
  const auto [fps_off, found_without] = timed(
      [&](const ClusterTable& t) {
        if (kept.size() < 16) kept.push_back(t);
      },
      {});
  pipeline::ProductsConsumer products({}, o.products_threads);
  products.on_start(pipeline::RunContext{cfg, 0, "", params, finder->description()});
  // Timed until every batch is accumulated; the end of the run (merging or downloading the
  // tables, once per run) is timed apart.
  const auto [fps_on, found_on] =
      timed([&](const ClusterTable& t) { products.on_batch(pipeline::FoundBatch{t, {}}); },
            [&] { products.drain(); });
  const auto end_start = std::chrono::steady_clock::now();
  products.on_end(pipeline::RunEnd{});
  const double end_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - end_start).count();
  print_products_timing(o, fps_off, fps_on, products, found_on,
                        products_ns_per_cluster(pc, params, kept), end_seconds);
  // Every cluster of the pass with the products is in them (no energy window here). The pass
  // without them found about as many, not the same: the pedestal tracks on from pass to pass.
  (void)found_without;
  const products::ProductSums sums = products.snapshot();
  return sums.clusters == found_on && sums.frames == o.frames ? 0 : kExitFailure;
}

}  // namespace glint::tools
