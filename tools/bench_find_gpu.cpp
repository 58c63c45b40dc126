// `glint bench find --backend gpu`: throughput of the GPU engine against the host-to-device
// floor measured in the same run.
//
// Method: synthetic frames (per-pixel pedestal and noise, photons with charge sharing) are
// generated once; 1000 dark frames build the pedestal; every stream slot's pinned staging is
// filled once (this first pass also captures the graphs) and then resubmitted without a host
// copy, as a producer writing straight into the engine's staging would. Timed: submit of every
// batch to the flush of the last, results delivered to a sink that counts them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "bench.hpp"
#include "commands.hpp"
#include "glint/gpu/device.hpp"
#include "glint/gpu/gpu_finder.hpp"
#include "glint/gpu/transfer.hpp"
#include "glint/log.hpp"

namespace glint::tools {
namespace {

/// Frames of the benchmark: fixed per-pixel pedestal/noise, Gaussian noise, `photons` photons
/// per frame whose charge spreads into the neighbours. Generated on several threads.
std::vector<uint16_t> make_frames(uint32_t size, std::size_t n, std::size_t photons,
                                  uint64_t detector_seed, uint64_t seed) {
  const std::size_t np = static_cast<std::size_t>(size) * size;
  std::vector<double> ped(np), sig(np);
  std::mt19937_64 base(detector_seed);  // the same detector for dark and data frames
  std::uniform_real_distribution<double> up(900.0, 1300.0), us(3.0, 12.0);
  for (std::size_t i = 0; i < np; ++i) {
    ped[i] = up(base);
    sig[i] = us(base);
  }
  std::vector<uint16_t> out(n * np);
  const unsigned workers = std::max(1u, std::min(8u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) {
    pool.emplace_back([&, w] {
      std::mt19937_64 rng(seed * 7919 + w + 1);
      std::normal_distribution<double> g(0.0, 1.0);
      std::uniform_int_distribution<uint32_t> pos(0, size - 1);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      std::vector<double> img(np);
      for (std::size_t k = w; k < n; k += workers) {
        for (std::size_t i = 0; i < np; ++i) img[i] = ped[i] + sig[i] * g(rng);
        for (std::size_t p = 0; p < photons; ++p) {
          const int y = static_cast<int>(pos(rng)), x = static_cast<int>(pos(rng));
          const double q = 400.0 * (0.7 + 0.6 * u(rng));
          const double share = 0.5 * u(rng);
          for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx) {
              const int yy = y + dy, xx = x + dx;
              if (yy < 0 || xx < 0 || yy >= static_cast<int>(size) || xx >= static_cast<int>(size))
                continue;
              const double part = (dy == 0 && dx == 0) ? q * (1.0 - share) : q * share / 8.0;
              img[static_cast<std::size_t>(yy) * size + xx] += part * (0.5 + u(rng));
            }
        }
        for (std::size_t i = 0; i < np; ++i)
          out[k * np + i] = static_cast<uint16_t>(std::clamp(std::lround(img[i]), 0L, 65535L));
      }
    });
  }
  for (auto& t : pool) t.join();
  return out;
}

}  // namespace

int run_bench_find_gpu(const BenchFindOptions& o) {
  if (o.size == 0 || o.frames == 0 || o.batch < 1 || o.streams < 1 || o.gpus < 1) {
    std::fprintf(stderr, "bench find: size, frames, batch, streams and gpus must be positive\n");
    return kExitUsage;
  }
  const int n_dev = gpu::device_count();
  if (n_dev < o.gpus) {
    std::fprintf(stderr, "bench find: %d GPU(s) asked for, %d usable (%s)\n", o.gpus, n_dev,
                 n_dev == 0 ? gpu::unavailable_reason().c_str() : "too few");
    return kExitUsage;
  }
  FinderParams params;
  params.shape = {o.size, o.size};
  params.cluster_size = o.cluster_size;
  params.n_sigma = o.n_sigma;
  gpu::GpuFinderOptions g;
  g.batch_frames = o.batch;
  g.streams = o.streams;
  g.devices.resize(o.gpus);
  std::iota(g.devices.begin(), g.devices.end(), 0);

  const std::size_t np = params.shape.pixels();
  const std::size_t frame_bytes = np * sizeof(uint16_t);
  const std::size_t pool_frames =
      std::min<std::size_t>(static_cast<std::size_t>(o.streams) * o.batch, 1024);
  std::printf("bench find gpu: %ux%u, %d x %d, n_sigma %.1f, %zu frames, ~%zu photons/frame, "
              "batch %d, %d stream slot(s), %d GPU(s)\n",
              o.size, o.size, o.cluster_size, o.cluster_size, o.n_sigma, o.frames, o.photons,
              o.batch, o.streams, o.gpus);
  const std::vector<uint16_t> dark = make_frames(o.size, 100, 0, o.seed, o.seed + 1);
  const std::vector<uint16_t> pool = make_frames(o.size, pool_frames, o.photons, o.seed, o.seed + 2);

  // The floor: one pinned bulk copy of a batch's bytes, in this run.
  const double floor_bps = gpu::measure_h2d_bytes_per_second(frame_bytes * o.batch, 20, 0);
  const double floor_us = frame_bytes / floor_bps * 1e6;

  auto finder = gpu::make_gpu_finder(params, g);
  for (int r = 0; r < 10; ++r) finder->push_dark(dark);
  uint64_t clusters = 0;
  finder->set_sink([&](const gpu::GpuBatchView& v) { clusters += v.x.size(); });

  std::vector<uint64_t> numbers(o.batch);
  uint64_t next_number = 0;
  const auto submit = [&](std::size_t n, bool fill) {
    std::span<uint16_t> st = finder->staging();
    if (fill) {
      for (std::size_t k = 0; k < n; ++k)
        std::memcpy(st.data() + k * np, pool.data() + ((next_number + k) % pool_frames) * np,
                    frame_bytes);
    }
    for (std::size_t k = 0; k < n; ++k) numbers[k] = next_number++;
    finder->submit(std::span<const uint64_t>(numbers.data(), n));
  };
  // Fill every slot once (captures the graphs), then resubmit the staged frames.
  for (int s = 0; s < o.streams; ++s) submit(o.batch, true);
  finder->flush();
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
  std::printf("device               %s\n", finder->description().c_str());
  std::printf("frames/s             %.0f\n", frames / secs);
  std::printf("us/frame             %.3f\n", us_frame);
  std::printf("GB/s (frame data)    %.2f\n", frames * frame_bytes / secs * 1e-9);
  std::printf("kernel us/frame      %.3f  (device events around the find work, per GPU)\n",
              (st.kernel_ms - before.kernel_ms) * 1e3 / frames / o.gpus);
  std::printf("graph launches/batch %.2f  (per GPU: %.2f)\n",
              (st.graph_launches - before.graph_launches) / batches,
              (st.graph_launches - before.graph_launches) / batches / o.gpus);
  std::printf("other launches/batch %.2f\n", (st.direct_launches - before.direct_launches) / batches);
  std::printf("host syncs/batch     %.2f  (per GPU: %.2f)\n",
              (st.host_syncs - before.host_syncs) / batches,
              (st.host_syncs - before.host_syncs) / batches / o.gpus);
  std::printf("clusters/frame       %.1f\n", clusters / frames);
  std::printf("overflow re-runs     %llu\n",
              static_cast<unsigned long long>(st.overflow_reruns - before.overflow_reruns));
  std::printf("H2D floor            %.2f GB/s = %.3f us/frame (pinned bulk copy of one batch, "
              "GPU 0, this run)\n",
              floor_bps * 1e-9, floor_us);
  std::printf("floor/us per frame   %.1f %%%s\n", 100.0 * floor_us / us_frame,
              o.gpus > 1 ? "  (against one GPU's floor)" : "");
  return 0;
}

}  // namespace glint::tools
