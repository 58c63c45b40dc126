// glint bench find: cluster-finder throughput on synthetic frames held in memory.
#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "bench.hpp"
#include "commands.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/products/run_products.hpp"
#include "glint/synthetic.hpp"

namespace glint::tools {
namespace {

struct Measurement {
  double seconds = 0.0;
  uint64_t clusters = 0;
};

/// Pushes the dark frames, then times find() over all data frames in chunks of `chunk`, each
/// chunk's clusters handed to `consume` (when given) inside the timing.
Measurement measure(ClusterFinder& finder, std::span<const uint16_t> dark,
                    std::span<const uint16_t> data, uint64_t first_number, uint64_t chunk,
                    const std::function<void(const ClusterTable&)>& consume = {},
                    const std::function<void()>& finish = {}) {
  finder.push_dark(dark);
  const std::size_t np = finder.params().shape.pixels();
  const uint64_t frames = data.size() / np;
  std::vector<uint64_t> numbers(frames);
  for (uint64_t k = 0; k < frames; ++k) numbers[k] = first_number + k;
  // One output table reused chunk after chunk, as a consumer that writes each chunk out would.
  ClusterTable out = make_result_table(finder.params());
  Measurement m;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t k = 0; k < frames; k += chunk) {
    const uint64_t n = std::min(chunk, frames - k);
    out.clear();
    finder.find(data.subspan(k * np, n * np), std::span(numbers).subspan(k, n), out);
    m.clusters += out.n_clusters();
    if (consume) consume(out);
  }
  if (finish) finish();
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m;
}

}  // namespace

void print_products_timing(const BenchFindOptions& o, double fps_off, double fps_on,
                           const pipeline::ProductsConsumer& products, uint64_t clusters,
                           double ns_per_cluster, double end_seconds) {
  const products::ProductSums sums = products.snapshot();
  const std::string where = products.on_gpu()
                                ? std::string("on the GPU")
                                : fmt::format("on {} CPU worker threads", products.threads());
  const char* queue = products.on_gpu() ? "a free staging buffer" : "room in their queue";
  std::cout << fmt::format(
      "glint bench find: products {} ({}): {:.1f} frames/s, {:.1f} us/frame "
      "with them, {:.1f} frames/s without ({:+.1f} % with); the run's thread waited {:.3f} s "
      "for {} and spent {:.3f} s copying batches into it; {} of {} clusters "
      "in the products, {} frames; the end of the run (the tables merged or downloaded, once "
      "per run) {:.3f} s\n"
      "glint bench find: one CPU products worker: {:.1f} ns per cluster (ProductSums::add on "
      "this thread, {:.1f} M clusters/s)\n",
      o.products, where, fps_on, 1e6 / fps_on, fps_off,
      100.0 * (fps_on - fps_off) / fps_off, products.wait_seconds(), queue,
      products.copy_seconds(),
      sums.clusters, clusters, sums.frames, end_seconds, ns_per_cluster, 1e3 / ns_per_cluster);
}

config::ProductsConfig bench_products_config(const BenchFindOptions& o) {
  config::ProductsConfig pc =
      products_option(o.products, "", "sum", o.eta_calibration, o.subpixel);
  pc.device = o.products_device;
  pipeline::load_subpixel_calibration(pc, o.cluster_size);  // checked before any timing
  return pc;
}

double products_ns_per_cluster(const config::ProductsConfig& pc, const FinderParams& params,
                               const std::vector<ClusterTable>& batches) {
  uint64_t clusters = 0;
  for (const ClusterTable& t : batches) clusters += t.n_clusters();
  if (clusters == 0) return 0.0;
  products::ProductSettings s = pipeline::product_settings(pc, params);
  s.subpixel = pipeline::load_subpixel_calibration(pc, params.cluster_size);
  products::ProductSums sums(s, false);  // per-pixel spectra shared, as the workers have them
  products::CountTable shared(s.pixel_spectra ? s.pixels() * s.spectrum.bins : 0);
  const uint64_t origin =
      batches.front().frames().empty() ? 0 : batches.front().frames().front().frame_number;
  uint64_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double secs = 0;
  do {
    for (const ClusterTable& t : batches) sums.add(t, origin, shared.span());
    done += clusters;
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (secs < 0.2);
  return secs * 1e9 / static_cast<double>(done);
}

namespace {

int run_bench_find_cpu(const BenchFindOptions& o, bool with_reference, uint64_t chunk) {
  const synth::Config c = bench_frames_config(o);
  const synth::Generator gen(c);
  const std::vector<uint16_t> dark = synthesize(gen, 0, c.dark_frames);
  const std::vector<uint16_t> data = synthesize(gen, c.dark_frames, o.frames);

  const FinderParams p = bench_finder_params(o);
  auto finder = make_cpu_finder(p, o.threads);
  const Measurement m = measure(*finder, dark, data, c.dark_frames, chunk);
  const double fps = o.frames / m.seconds;
  std::cout << fmt::format(
      "glint bench find: {}, {}x{} frames, {}x{} clusters, n_sigma {}, {} frames, {:.0f} "
      "clusters/frame: {:.1f} frames/s, {:.1f} us/frame\n",
      finder->description(), p.shape.rows, p.shape.cols, o.cluster_size, o.cluster_size,
      o.n_sigma, o.frames,
      static_cast<double>(m.clusters) / o.frames, fps, 1e6 / fps);
  if (!o.products.empty()) {
    // The same frames again with the products on (a fresh finder): the consumer copies each
    // chunk into its queue and its workers accumulate beside the finder's threads.
    const config::ProductsConfig pc = bench_products_config(o);
    config::Config cfg;
    cfg.products = pc;
    std::vector<ClusterTable> kept;
    pipeline::ProductsConsumer products({}, o.products_threads);
    products.on_start(pipeline::RunContext{cfg, 0, "", p, finder->description()});
    auto again = make_cpu_finder(p, o.threads);
    const Measurement on = measure(
        *again, dark, data, c.dark_frames, chunk,
        [&](const ClusterTable& t) {
          products.on_batch(pipeline::FoundBatch{t, {}});
          if (kept.size() < 64) kept.push_back(t);
        },
        [&] { products.drain(); });
    const auto end_start = std::chrono::steady_clock::now();
    products.on_end(pipeline::RunEnd{});
    const double end_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - end_start).count();
    print_products_timing(o, fps, o.frames / on.seconds, products, on.clusters,
                          products_ns_per_cluster(pc, p, kept), end_seconds);
    if (on.clusters != m.clusters) return kExitFailure;
  }
  if (with_reference) {
    auto ref = make_reference_finder(p);
    const Measurement r = measure(*ref, dark, data, c.dark_frames, chunk);
    const double rfps = o.frames / r.seconds;
    std::cout << fmt::format(
        "glint bench find: cpu reference (1 thread), same frames: {:.1f} frames/s, {:.1f} "
        "us/frame; {} is {:.2f}x the reference{}\n",
        rfps, 1e6 / rfps, finder->description(), fps / rfps,
        r.clusters == m.clusters ? "" : " (CLUSTER COUNTS DIFFER)");
    if (r.clusters != m.clusters) return kExitFailure;
  }
  return 0;
}

}  // namespace

FrameShape bench_shape(const BenchFindOptions& o) {
  return {o.rows != 0 ? o.rows : o.size, o.cols != 0 ? o.cols : o.size};
}

FinderParams bench_finder_params(const BenchFindOptions& o) {
  FinderParams p;
  p.shape = bench_shape(o);
  p.cluster_size = o.cluster_size;
  p.n_sigma = o.n_sigma;
  if (o.detector != "jungfrau") return p;
  if (!o.gain_file.empty()) {
    p.pixels = PixelMode::jungfrau_calibrated;
    p.calibration = jungfrau::load_calibration(p.shape, o.gain_file, o.pedestal_file, false);
  } else if (o.calibrated) {
    // As `glint synth --gain-file --pedestal-file` writes them for the same shape and seed.
    auto cal = std::make_shared<jungfrau::Calibration>();
    cal->shape = p.shape;
    const std::vector<double> maps = synth::jungfrau_gain_maps(p.shape, o.seed);
    cal->gain.assign(maps.begin(), maps.begin() + jungfrau::kStages * p.shape.pixels());
    cal->pedestal = synth::jungfrau_stage_pedestals(p.shape, o.seed);
    cal->pedestal_from_dark[1] = cal->pedestal_from_dark[2] = false;
    p.pixels = PixelMode::jungfrau_calibrated;
    p.calibration = std::move(cal);
  } else {
    p.pixels = PixelMode::jungfrau_g0;
  }
  return p;
}

synth::Config bench_frames_config(const BenchFindOptions& o) {
  synth::Config c;
  c.shape = bench_shape(o);
  c.seed = o.seed;
  c.photons = o.photons;
  c.crowded_every = 0;  // a steady load: every frame carries about `photons` photons
  c.jungfrau = o.detector == "jungfrau";  // gain switching at the generator's real-frame rate
  return c;
}

std::vector<uint16_t> synthesize(const synth::Generator& gen, uint64_t first, uint64_t count) {
  std::vector<uint16_t> frames(count * gen.config().shape.pixels());
  gen.fill_many(first, count, frames);
  return frames;
}

void add_bench_find(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "find", "cluster-finder throughput on synthetic frames generated in memory");
  struct Args {
    BenchFindOptions o;
    std::string backend = "cpu";
    bool reference = false;
    uint64_t chunk = 256;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--backend", a->backend, "cpu or gpu")->capture_default_str();
  cmd->add_option("--size", a->o.size, "frames are SIZE x SIZE pixels")->capture_default_str();
  cmd->add_option("--rows", a->o.rows, "frames have ROWS rows (default: SIZE)");
  cmd->add_option("--cols", a->o.cols, "frames have COLS columns (default: SIZE)");
  cmd->add_option("--frames", a->o.frames, "data frames (after 1000 dark frames)")
      ->capture_default_str();
  cmd->add_option("--threads", a->o.threads, "CPU threads, 0 = all cores")->capture_default_str();
  cmd->add_option("--photons", a->o.photons, "mean photons per frame")->capture_default_str();
  cmd->add_option("--cluster-size", a->o.cluster_size, "3, 5, 7 or 9")->capture_default_str();
  cmd->add_option("--n-sigma", a->o.n_sigma, "photon threshold in noise rms")->capture_default_str();
  cmd->add_option("--seed", a->o.seed, "random seed")->capture_default_str();
  cmd->add_option("--batch", a->o.batch, "GPU frames per batch")->capture_default_str();
  cmd->add_option("--streams", a->o.streams, "GPU streams per device")->capture_default_str();
  cmd->add_option("--gpus", a->o.gpus, "GPU ids")->capture_default_str();
  cmd->add_option("--chunk", a->chunk, "CPU: frames per find() call")->capture_default_str();
  cmd->add_option("--detector", a->o.detector,
                  "generic, or jungfrau (gain bits over a 14-bit ADC, with gain switching; "
                  "clusters on G0 pixels only unless calibrated)")
      ->capture_default_str();
  cmd->add_option("--gain-file", a->o.gain_file,
                  "JUNGFRAU: calibrated frames with these gain maps (PSI module file)");
  cmd->add_option("--pedestal-file", a->o.pedestal_file,
                  "JUNGFRAU with --gain-file: G0, G1, G2 pedestals (G1 and G2 are used)");
  cmd->add_flag("--calibrated", a->o.calibrated,
                "JUNGFRAU: calibrated frames with glint synth's gain maps and G1/G2 pedestals");
  cmd->add_option("--products", a->o.products,
                  "also time the same frames with these products on (as glint find --products: "
                  "all, or hitmap,spectrum,eta,pixel_spectra,subpixel,slices:N) and one "
                  "products worker's cost per cluster");
  cmd->add_option("--eta-calibration", a->o.eta_calibration,
                  "with --products: time the sub-pixel image with this eta calibration file");
  cmd->add_option("--subpixel", a->o.subpixel, "sub-pixels per pixel and axis (1 to 100)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--products-threads", a->o.products_threads,
                  "products worker threads, 0 = as glintd (min(4, cores / 4))")
      ->capture_default_str();
  cmd->add_option("--modules", a->o.modules,
                  "GPU: the frames are a detector of X x Y modules (X,Y), each with its own "
                  "pedestal and finder, in contiguous groups over --gpus (as glintd)")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  cmd->add_option("--products-device", a->o.products_device,
                  "where the products are accumulated (as products.device): auto (the GPU when "
                  "one is usable), cpu (worker threads) or gpu")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))
      ->capture_default_str();
  cmd->add_flag("--reference", a->reference,
                "CPU: also time the single-threaded reference finder on the same frames");
  cmd->callback([a] {
    const auto& o = a->o;
    if (o.size == 0 || o.size > 65536 || o.rows > 65536 || o.cols > 65536 || o.frames == 0 ||
        a->chunk == 0)
      fail("glint bench find",
           "--size (1..65536), --rows and --cols (at most 65536), --frames and --chunk must be "
           "positive",
           kExitUsage);
    if (o.cluster_size != 3 && o.cluster_size != 5 && o.cluster_size != 7 && o.cluster_size != 9)
      fail("glint bench find",
           fmt::format("cluster size {} is not supported (allowed: 3, 5, 7, 9)", o.cluster_size),
           kExitUsage);
    if (o.detector != "generic" && o.detector != "jungfrau")
      fail("glint bench find",
           fmt::format("--detector {}: allowed are generic, jungfrau", o.detector), kExitUsage);
    if (o.detector != "jungfrau" && (!o.gain_file.empty() || o.calibrated))
      fail("glint bench find", "--gain-file and --calibrated need --detector jungfrau",
           kExitUsage);
    if (!o.gain_file.empty() && o.calibrated)
      fail("glint bench find", "--gain-file and --calibrated exclude each other", kExitUsage);
    if (!o.pedestal_file.empty() && o.gain_file.empty())
      fail("glint bench find", "--pedestal-file needs --gain-file", kExitUsage);
    if (!o.products.empty()) {
      try {
        bench_products_config(o);
      } catch (const std::invalid_argument& e) {
        fail("glint bench find", e.what(), kExitUsage);
      }
    }
    int rc = 0;
    try {
      if (a->backend == "cpu") {
        if (o.modules != std::vector<uint32_t>{1, 1})
          fail("glint bench find", "--modules needs --backend gpu", kExitUsage);
        rc = run_bench_find_cpu(o, a->reference, a->chunk);
      } else if (a->backend == "gpu" && o.modules != std::vector<uint32_t>{1, 1}) {
        if (!o.products.empty())
          fail("glint bench find", "--modules and --products: time them apart", kExitUsage);
        rc = run_bench_find_gpu_modules(o);
      } else if (a->backend == "gpu") {
        rc = run_bench_find_gpu(o);
      } else {
        fail("glint bench find",
             fmt::format("unknown backend '{}' (allowed: cpu, gpu)", a->backend), kExitUsage);
      }
    } catch (const CLI::Error&) {
      throw;
    } catch (const std::exception& e) {
      fail("glint bench find", e.what(), kExitFailure);
    }
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace glint::tools
