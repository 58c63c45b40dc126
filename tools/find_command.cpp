// glint find: cluster finding over frames stored in an HDF5 file.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.hpp"
#include "frame_file.hpp"
#include "glint/clust_file.hpp"
#include "glint/cluster_finder.hpp"
#include "glint/log.hpp"
#include "glint/pipeline/finder_factory.hpp"
#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/products_consumer.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/daemon/tuning_env.hpp"

namespace glint::tools {
namespace {

struct FindArgs {
  std::string input;
  std::string dataset = "/data";
  uint64_t dark = 1000;
  bool dark_given = false;            ///< --dark was given (else 0 with a pedestal file)
  std::string pedestal_source = "dark";  ///< dark | file:PATH
  double n_sigma = 5.0;
  int cluster_size = 3;
  std::string backend = "auto";
  unsigned threads = 0;
  int batch = 256;
  std::string output;
  std::string clust;
  bool overwrite = false;
  bool quiet = false;
  std::string detector = "generic";  ///< generic | jungfrau
  std::string gain_file;             ///< JUNGFRAU gain maps: calibrated frames in keV
  std::string pedestal_file;         ///< JUNGFRAU G1/G2 pedestals (ADU)
  bool hg0 = false;
  std::string mask;                  ///< FILE.h5:/dataset, NXdetector pixel_mask bits
  bool mask_from_dark = false;       ///< dead, noisy (and JUNGFRAU gain-switching) pixels
  double noisy_factor = 5.0;
  std::string products;              ///< all | hitmap,spectrum,eta,pixel_spectra,slices:N
  std::string energy_window;         ///< EMIN,EMAX
  std::string energy = "sum";        ///< sum | 2x2
  std::string eta_calibration;       ///< the sub-pixel image's calibration file
  uint32_t subpixel = 5;             ///< sub-pixels per pixel and axis
  unsigned products_threads = 0;     ///< 0: as glintd's products.threads auto
  std::vector<uint32_t> modules{1, 1};  ///< module grid [x, y] (detector.modules)
  std::vector<std::string> module_orientation;  ///< one for all, or one per module
};

}  // namespace

config::ProductsConfig products_option(const std::string& list, const std::string& window,
                                       const std::string& energy,
                                       const std::string& eta_calibration,
                                       uint32_t subpixel_factor) {
  config::ProductsConfig p;
  bool subpixel = false;
  p.hitmap = false;
  if (energy != "sum" && energy != "2x2")
    throw std::invalid_argument("--energy " + energy +
                                ": allowed are sum (the S x S sum) and 2x2 (the largest 2 x 2 "
                                "quadrant)");
  p.energy = energy;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(start, comma - start);
    start = comma + 1;
    if (item == "all") {
      p.hitmap = p.eta = p.pixel_spectra = true;
    } else if (item == "hitmap") {
      p.hitmap = true;
    } else if (item == "spectrum") {
      // Always made.
    } else if (item == "eta") {
      p.eta = true;
    } else if (item == "pixel_spectra") {
      p.pixel_spectra = true;
    } else if (item == "subpixel") {
      subpixel = true;
    } else if (item.starts_with("slices:") && item.size() > 7 &&
               item.find_first_not_of("0123456789", 7) == std::string::npos &&
               item.size() <= 16 && std::stoull(item.substr(7)) > 0 &&
               std::stoull(item.substr(7)) <= 1000000000) {
      p.slice_frames = static_cast<uint32_t>(std::stoull(item.substr(7)));
    } else {
      throw std::invalid_argument("--products " + list + ": '" + item +
                                  "' is not allowed (allowed: all, or a comma-separated list of "
                                  "hitmap, spectrum, eta, pixel_spectra, subpixel, slices:N "
                                  "with N > 0)");
    }
  }
  if (subpixel && eta_calibration.empty())
    throw std::invalid_argument("--products " + list +
                                ": subpixel needs --eta-calibration FILE (a file made by glint "
                                "eta-calibrate)");
  if (subpixel_factor < 1 || subpixel_factor > 100)
    throw std::invalid_argument(fmt::format("--subpixel {}: allowed are 1 to 100 sub-pixels per "
                                            "pixel and axis",
                                            subpixel_factor));
  p.subpixel_calibration = eta_calibration;
  p.subpixel_factor = subpixel_factor;
  if (!window.empty()) {
    const auto comma = window.find(',');
    double lo = 0, hi = 0;
    bool ok = comma != std::string::npos;
    try {
      std::size_t u1 = 0, u2 = 0;
      if (ok) {
        const std::string l = window.substr(0, comma), h = window.substr(comma + 1);
        lo = std::stod(l, &u1);
        hi = std::stod(h, &u2);
        ok = u1 == l.size() && u2 == h.size() && std::isfinite(lo) && std::isfinite(hi);
      }
    } catch (const std::exception&) {
      ok = false;
    }
    if (!ok || !(lo < hi))
      throw std::invalid_argument("--energy-window " + window +
                                  ": expected EMIN,EMAX with EMIN < EMAX (ADU, or keV for "
                                  "calibrated frames)");
    p.energy_window = {lo, hi};
  }
  return p;
}

namespace {


/// Progress on stderr, only when it is a terminal; redrawn at most 5 times a second.
class Progress {
 public:
  Progress(uint64_t total, bool enabled)
      : total_(total), enabled_(enabled && ::isatty(STDERR_FILENO) == 1) {}
  void update(uint64_t done, uint64_t clusters) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    std::fprintf(stderr, "\rglint find: %llu/%llu frames (%3.0f%%), %llu clusters ",
                 static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_),
                 total_ ? 100.0 * done / total_ : 100.0, static_cast<unsigned long long>(clusters));
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_) std::fprintf(stderr, "\r\033[K");
  }

 private:
  uint64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point last_{};
};

std::string settings_yaml(const FindArgs& a, const std::string& backend) {
  const std::string modules =
      a.modules == std::vector<uint32_t>{1, 1}
          ? std::string()
          : fmt::format("  modules: [{}, {}]\n", a.modules[0], a.modules[1]);
  const bool all_normal = std::all_of(a.module_orientation.begin(), a.module_orientation.end(),
                                      [](const std::string& o) { return o == "normal"; });
  const std::string orientation =
      all_normal
          ? std::string()
          : fmt::format("  module_orientation: [{}]\n", fmt::join(a.module_orientation, ", "));
  return fmt::format(
      "# glint find\ninput: {}\ndataset: {}\ndark_frames: {}\npedestal:\n  source: '{}'\n"
      "finder:\n  n_sigma: {}\n"
      "  cluster_size: {}\n  backend: {}\n  threads: {}\ndetector:\n  type: {}\n{}"
      "calibration:\n  gain_file: '{}'\n  pedestal_file: '{}'\n  hg0: {}\n"
      "mask:\n  file: '{}'\n  from_dark: {}\n  noisy_factor: {}\n"
      "products:\n  list: '{}'\n  energy_window: '{}'\n  energy: {}\n"
      "  subpixel: {{calibration: '{}', factor: {}}}\n",
      a.input, a.dataset, a.dark, a.pedestal_source, a.n_sigma, a.cluster_size, backend,
      a.threads, a.detector, modules + orientation, a.gain_file, a.pedestal_file, a.hg0, a.mask,
      a.mask_from_dark, a.noisy_factor, a.products, a.energy_window, a.energy, a.eta_calibration,
      a.subpixel);
}

/// The pedestal of --pedestal-source file:PATH (a pedestal file, or a closed run file), checked
/// against the frames' shape.
PedestalState load_pedestal_source(const std::string& path, FrameShape shape) {
  PedestalState p;
  try {
    p = pipeline::read_pedestal_state(path);
  } catch (const std::exception& e) {
    throw InputError("--pedestal-source file:" + path + ": " + e.what());
  }
  if (p.shape != shape)
    throw InputError(fmt::format("--pedestal-source file:{}: the pedestal is {} x {}, the frames "
                                 "are {} x {}", path, p.shape.rows, p.shape.cols, shape.rows,
                                 shape.cols));
  return p;
}

int run_find(FindArgs a) {
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();

  // Everything that can be wrong with the input is checked before any output is created.
  FrameFileReader in(a.input, a.dataset);
  FinderParams params;
  params.shape = in.shape();
  params.cluster_size = a.cluster_size;
  params.n_sigma = a.n_sigma;
  if (a.detector != "generic" && a.detector != "jungfrau")
    throw InputError("--detector " + a.detector + ": allowed are generic, jungfrau");
  if (a.detector != "jungfrau" && (!a.gain_file.empty() || !a.pedestal_file.empty() || a.hg0))
    throw InputError("--gain-file, --pedestal-file and --hg0 need --detector jungfrau");
  if (a.gain_file.empty() && (!a.pedestal_file.empty() || a.hg0))
    throw InputError("--pedestal-file and --hg0 need --gain-file (calibrated frames)");
  if (a.detector == "jungfrau") {
    params.pixels = a.gain_file.empty() ? PixelMode::jungfrau_g0 : PixelMode::jungfrau_calibrated;
    if (!a.gain_file.empty()) {
      try {
        params.calibration =
            jungfrau::load_calibration(params.shape, a.gain_file, a.pedestal_file, a.hg0);
      } catch (const std::runtime_error& e) {
        throw InputError(e.what());
      }
    }
  }
  std::optional<PedestalState> loaded;
  if (a.pedestal_source.starts_with("file:") && a.pedestal_source.size() > 5) {
    if (params.pixels == PixelMode::jungfrau_calibrated)
      throw InputError("--pedestal-source " + a.pedestal_source + ": a pedestal file serves raw "
                       "and G0-only frames (as glint pedestal makes it); with --gain-file the "
                       "pedestal comes from the dark frames (--pedestal-source dark)");
    loaded = load_pedestal_source(a.pedestal_source.substr(5), params.shape);
    params.pedestal_window = loaded->window;
    if (!a.dark_given) a.dark = 0;
  } else if (a.pedestal_source != "dark") {
    throw InputError("--pedestal-source " + a.pedestal_source +
                     ": allowed are dark (the first --dark frames) and file:PATH (a pedestal "
                     "file from glint pedestal, or a closed run file)");
  }
  try {
    validate(params);
  } catch (const std::invalid_argument& e) {
    throw InputError(e.what());
  }
  if (!loaded && a.dark < params.pedestal_window)
    throw InputError(fmt::format(
        "--dark {}: fewer dark frames than the pedestal window ({}); the first data frame would "
        "corrupt the pedestal",
        a.dark, params.pedestal_window));
  if (a.dark > in.frames())
    throw InputError(fmt::format("--dark {}: dataset '{}' in {} holds only {} frames", a.dark,
                                 a.dataset, a.input, in.frames()));
  std::vector<uint32_t> mask_bits;
  const bool masked = !a.mask.empty() || a.mask_from_dark;
  if (!a.mask.empty()) {
    try {
      mask_bits = pipeline::read_mask_file(a.mask, params.shape);
    } catch (const std::runtime_error& e) {
      throw InputError(std::string("--mask: ") + e.what());
    }
  } else if (a.mask_from_dark) {
    mask_bits.assign(params.shape.pixels(), 0);
  }
  if (a.mask_from_dark && a.dark == 0)
    throw InputError("--mask-from-dark needs dark frames (--dark N with N > 0)");
  std::optional<pipeline::DarkGainSwitches> dark_gains;
  if (a.mask_from_dark && a.detector == "jungfrau") dark_gains.emplace(params.shape);
  pipeline::FinderOptions fo;
  try {
    fo.backend = pipeline::parse_backend(a.backend);
  } catch (const std::invalid_argument& e) {
    throw InputError(std::string("--backend: ") + e.what());
  }
  fo.threads = a.threads;
  fo.batch_frames = a.batch;
  fo.tuning = daemon::find_tuning_from_environment();
  const bool want_products = !a.products.empty();
  if (!want_products && (!a.energy_window.empty() || a.energy != "sum"))
    throw InputError("--energy-window and --energy need --products");
  if (!want_products && !a.eta_calibration.empty())
    throw InputError("--eta-calibration needs --products (the sub-pixel image is a product)");
  if (want_products && a.output.empty())
    throw InputError("--products needs -o/--output (the products are written into the run file)");
  config::Config products_cfg;
  if (want_products) {
    try {
      products_cfg.products = products_option(a.products, a.energy_window, a.energy,
                                              a.eta_calibration, a.subpixel);
      // The calibration checked before any output is made (the run reads it again).
      pipeline::load_subpixel_calibration(products_cfg.products, a.cluster_size);
    } catch (const std::invalid_argument& e) {
      throw InputError(e.what());
    }
    products_cfg.detector.rows = params.shape.rows;
    products_cfg.detector.cols = params.shape.cols;
  }
  for (const auto& out : {a.output, a.clust})
    if (!out.empty() && !a.overwrite && std::filesystem::exists(out))
      throw InputError(fmt::format("{} exists already (use --overwrite to replace it)", out));

  std::vector<ModuleOrientation> orientations;
  for (const std::string& name : a.module_orientation) {
    const auto o = parse_module_orientation(name);
    if (!o)
      throw InputError(fmt::format("--module-orientation: '{}' is not an orientation (allowed: "
                                   "{})", name, kModuleOrientations));
    orientations.push_back(*o);
  }
  std::vector<ModuleRegion> regions;
  try {
    regions = module_grid(params.shape, a.modules.at(0), a.modules.at(1));
  } catch (const std::exception& e) {
    throw InputError(std::string("--modules: ") + e.what());
  }
  if (!orientations.empty()) {
    try {
      regions = module_grid(params.shape, a.modules.at(0), a.modules.at(1), orientations);
    } catch (const std::exception& e) {
      throw InputError(std::string("--module-orientation: ") + e.what());
    }
  }
  const bool oriented = std::any_of(regions.begin(), regions.end(), [](const ModuleRegion& r) {
    return r.orientation != ModuleOrientation::normal;
  });
  const std::vector<ModuleRegion> module_regions = regions;
  auto finder = pipeline::make_module_finders(params, std::move(regions), fo, pipeline::make_finder);
  // Dark frames given as well go on top of the loaded pedestal (tracking continues from it).
  if (loaded) finder->load_pedestal(*loaded);
  const std::string backend = finder->description();
  log::debug("glint find: {} x {} frames from '{}' in {}, {} dark; {}x{} clusters, n_sigma {}, {}",
            in.shape().rows, in.shape().cols, a.dataset, a.input, a.dark, a.cluster_size,
            a.cluster_size, a.n_sigma, backend);

  std::optional<ClustWriter> clust;
  if (!a.clust.empty()) clust.emplace(a.clust, a.cluster_size);
  std::optional<pipeline::RunFileWriter> h5;
  if (!a.output.empty()) {
    pipeline::RunMetadata meta;
    meta.config_yaml = settings_yaml(a, backend);
    meta.finder = params;
    meta.detector_type = "file";
    meta.source = fmt::format("{}:{}", a.input, a.dataset);
    meta.backend = backend;
    meta.pixel_mask = masked;
    meta.cluster_energy = want_products && products_cfg.products.cluster_energy;
    meta.slice_frames = want_products ? products_cfg.products.slice_frames : 0;
    meta.modules.modules_x = a.modules[0];  // recorded when more than one (as glintd)
    meta.modules.modules_y = a.modules[1];
    if (oriented)
      for (const ModuleRegion& r : module_regions)
        meta.modules.orientations.push_back(r.orientation);
    h5.emplace(a.output, meta, a.overwrite);
  }
  // The products, as a glintd run makes them (the same consumer, on its worker threads).
  std::optional<pipeline::ProductsConsumer> products;
  if (want_products) {
    products.emplace([&h5] { return &*h5; }, a.products_threads);
    products->on_start(pipeline::RunContext{products_cfg, 0, a.output, params, backend});
  }

  const std::size_t np = params.shape.pixels();
  // At least one GPU batch per chunk.
  const uint64_t chunk =
      std::max(frames_per_chunk(params.shape), static_cast<uint64_t>(std::max(1, a.batch)));
  std::vector<uint16_t> buf;
  Progress progress(in.frames(), !a.quiet);

  // Dark frames.
  double find_seconds = 0.0;
  for (uint64_t f = 0; f < a.dark; f += chunk) {
    const uint64_t n = std::min(chunk, a.dark - f);
    buf.resize(n * np);
    in.read(f, n, buf);
    finder->push_dark(buf);
    if (dark_gains && oriented) {
      // The frames hold each module natively: counted where the image shows its pixels.
      std::vector<uint16_t> mine;
      for (std::size_t k = 0; k < module_regions.size(); ++k) {
        mine.resize(n * module_regions[k].shape.pixels());
        extract_module(params.shape, module_regions[k], buf, n, mine);
        dark_gains->add(mine, module_regions[k], k == 0);
      }
    } else if (dark_gains) {
      dark_gains->add(buf);
    }
    progress.update(f + n, 0);
  }
  // The mask, final once the dark frames are in: the same as glintd's (pipeline::MaskFilter).
  pipeline::MaskFilter mask_filter;
  if (masked) {
    if (a.mask_from_dark) {
      const pipeline::DarkMaskCounts d = pipeline::flag_from_dark(
          mask_bits, finder->pedestal(), a.noisy_factor, dark_gains ? &*dark_gains : nullptr);
      log::debug("glint find: from the dark frames: {} dead, {} noisy, {} gain switching", d.dead,
                 d.noisy, d.gain_switching);
    }
    mask_filter = pipeline::MaskFilter(mask_bits, params.shape);
    if (h5) h5->write_pixel_mask(mask_bits);
  }
  if (h5) {
    std::vector<pipeline::FrameRow> rows(a.dark);
    for (uint64_t f = 0; f < a.dark; ++f) rows[f] = {f, 0, 0, 0, pipeline::kFlagDark};
    h5->append_empty_frames(rows);
    h5->write_start_pedestal(finder->pedestal());
    if (const auto adc = finder->calibration_pedestal(); !adc.empty())
      h5->write_calibration_pedestal(adc);
  }

  // Data frames: frame number = index in the dataset.
  ClusterTable table = make_result_table(params);
  ClusterTable kept = make_result_table(params);
  std::vector<uint32_t> removed;
  std::vector<uint64_t> numbers;
  uint64_t clusters = 0, switched = 0, invalid = 0, masked_clusters = 0;
  for (uint64_t f = a.dark; f < in.frames(); f += chunk) {
    const uint64_t n = std::min(chunk, in.frames() - f);
    buf.resize(n * np);
    in.read(f, n, buf);
    numbers.resize(n);
    for (uint64_t k = 0; k < n; ++k) numbers[k] = f + k;
    table.clear();
    const auto t0 = Clock::now();
    finder->find(buf, numbers, table);
    find_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (mask_filter.active()) {
      masked_clusters += mask_filter.apply(table, kept, removed);
      std::swap(table, kept);
    } else {
      removed.assign(masked ? table.n_frames() : 0, 0);
    }
    clusters += table.n_clusters();
    for (const jungfrau::GainCounts& g : table.gain_counts()) {
      switched += g.g1 + g.g2;
      invalid += g.invalid;
    }
    if (clust) clust->write(table);
    if (h5) h5->append(table, {}, {}, removed);
    if (products) products->on_batch(pipeline::FoundBatch{table, {}});
    progress.update(f + n, clusters);
  }
  if (products) {
    pipeline::RunEnd end;
    end.end_reason = "end of input";
    products->on_end(end);
  }
  if (clust) clust->close();
  if (h5) {
    const PedestalState end = finder->pedestal();
    h5->set_masked_clusters(masked_clusters);
    h5->close(&end);
  }
  progress.finish();

  const uint64_t data = in.frames() - a.dark;
  const double total = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (!a.quiet && params.pixels != PixelMode::raw)
    std::cout << fmt::format("glint find: JUNGFRAU data frames: {} pixels in G1/G2, {} with the "
                             "invalid gain code{}\n",
                             switched, invalid,
                             params.pixels == PixelMode::jungfrau_g0
                                 ? " (never taken as photons: no gain maps)"
                                 : "");
  if (!a.quiet)
    std::cout << fmt::format(
        "glint find: {} frames ({} dark, {} data), {} clusters, {:.0f} frames/s ({:.1f} us/frame "
        "in the finder, {}), {:.2f} s in all\n",
        in.frames(), a.dark, data, clusters, find_seconds > 0 ? data / find_seconds : 0.0,
        data ? 1e6 * find_seconds / data : 0.0, backend, total);
  if (!a.quiet && masked)
    std::cout << fmt::format("glint find: pixel mask: {} pixels masked, {} clusters centred on "
                             "them removed\n",
                             mask_filter.masked_pixels(), masked_clusters);
  return 0;
}

}  // namespace

void add_find_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "find", "find photon clusters in frames stored in an HDF5 file (N x H x W uint16)");
  auto a = std::make_shared<FindArgs>();
  cmd->add_option("-i,--input", a->input, "HDF5 file with the frames")->required();
  cmd->add_option("--dataset", a->dataset, "dataset holding the frames")->capture_default_str();
  auto* dark = cmd->add_option("--dark", a->dark,
                               "the first DARK frames are dark (pedestal) frames (default 0 "
                               "with --pedestal-source file:PATH)")
                   ->capture_default_str();
  cmd->add_option("--pedestal-source", a->pedestal_source,
                  "dark (from the first --dark frames) or file:PATH (a pedestal file from glint "
                  "pedestal, or a closed run file: its end pedestal; its window is used; dark "
                  "frames given with --dark continue it)")
      ->capture_default_str();
  cmd->add_option("--n-sigma", a->n_sigma, "photon threshold in noise rms")->capture_default_str();
  cmd->add_option("--cluster-size", a->cluster_size, "cluster size: 3, 5, 7 or 9")
      ->capture_default_str();
  cmd->add_option("--backend", a->backend, "cpu, gpu or auto (the GPU when usable)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "CPU threads, 0 = all cores")->capture_default_str();
  cmd->add_option("--batch", a->batch, "frames per finder batch")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("-o,--output", a->output, "write the run file (HDF5: frames, clusters, pedestal)");
  cmd->add_option("--clust", a->clust, "write the clusters in aare's .clust format");
  cmd->add_option("--detector", a->detector,
                  "generic (pixels are values) or jungfrau (gain bits 15:14 over a 14-bit ADC; "
                  "without --gain-file clusters are found on G0 pixels only)")
      ->capture_default_str();
  cmd->add_option("--gain-file", a->gain_file,
                  "JUNGFRAU gain maps (PSI module file: G0, G1, G2[, HG0, HG1, HG2] float64, "
                  "ADU/keV): find on calibrated frames (keV, float clusters)");
  cmd->add_option("--pedestal-file", a->pedestal_file,
                  "JUNGFRAU G1/G2 pedestals (float64 G0, G1, G2 arrays, ADU; G0 is taken from "
                  "the dark frames); without it all stages come from the dark frames");
  cmd->add_flag("--hg0", a->hg0, "use the gain file's HG0 array for G0 (high-gain G0)");
  cmd->add_option("--mask", a->mask,
                  "pixel mask FILE.h5:/dataset (uint32 rows x cols, NXdetector pixel_mask bits): "
                  "clusters centred on a masked pixel are removed and counted");
  cmd->add_flag("--mask-from-dark", a->mask_from_dark,
                "mask dead and noisy pixels found in the dark frames (JUNGFRAU: also pixels out "
                "of G0 in a dark frame), OR-ed with --mask");
  CLI::Option* noisy =
      cmd->add_option("--noisy-factor", a->noisy_factor,
                      "with --mask-from-dark: noisy is noise > FACTOR x the median noise")
          ->check(CLI::Range(1.0, 1e6))
          ->capture_default_str();
  cmd->add_option("--products", a->products,
                  "compute the run's products into the output file (docs/products.md): all, or "
                  "a comma-separated list of hitmap (with the energy image), spectrum (always "
                  "made), eta, pixel_spectra, subpixel (needs --eta-calibration), slices:N (a "
                  "hit map per N frames)");
  cmd->add_option("--energy-window", a->energy_window,
                  "EMIN,EMAX: only clusters with an energy in [EMIN, EMAX] count in the "
                  "products (ADU, or keV for calibrated frames)");
  cmd->add_option("--energy", a->energy,
                  "which cluster energy the products use: sum (S x S) or 2x2 (the largest 2 x 2 "
                  "quadrant)")
      ->capture_default_str();
  cmd->add_option("--eta-calibration", a->eta_calibration,
                  "with --products: an eta calibration file (glint eta-calibrate) for the "
                  "sub-pixel image /entry/subpixel_image");
  cmd->add_option("--subpixel", a->subpixel,
                  "sub-pixels per pixel and axis of the sub-pixel image (1 to 100)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->add_option("--modules", a->modules,
                  "module grid X,Y: the frames are X x Y modules side by side and stacked, each "
                  "with its own pedestal and finder (as glintd's detector.modules)")
      ->delimiter(',')
      ->expected(2)
      ->capture_default_str();
  cmd->add_option("--module-orientation", a->module_orientation,
                  "with --modules: how each module is mounted, one for all or one per module "
                  "(row-major), comma-separated: normal, flip_rows (upside down), flip_cols, "
                  "rotate_180 (as glintd's detector.module_orientation). The frames hold each "
                  "module as its ports send it; the clusters, pedestal and products show it "
                  "flipped")
      ->delimiter(',');
  cmd->add_option("--products-threads", a->products_threads,
                  "worker threads for the products, 0 = as glintd (min(4, cores / 4))")
      ->capture_default_str();
  cmd->add_flag("--overwrite", a->overwrite, "replace existing output files");
  cmd->add_flag("-q,--quiet", a->quiet, "no progress, no summary line");
  cmd->callback([a, dark, noisy] {
    a->dark_given = dark->count() > 0;
    try {
      if (noisy->count() > 0 && !a->mask_from_dark)
        throw InputError("--noisy-factor needs --mask-from-dark (noisy pixels are found in the "
                         "dark frames)");
      run_find(*a);
    } catch (const InputError& e) {
      fail("glint find", e.what(), kExitUsage);
    } catch (const std::exception& e) {
      fail("glint find", e.what(), kExitFailure);
    }
  });
}

}  // namespace glint::tools
