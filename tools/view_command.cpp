// glint view: the live view of glintd's runs (docs/live-view.md). Subscribes to a stream in
// slsReceiver's format (glintd's preview.endpoint, or a receiver's own stream), decodes each
// image with glint's stream parser and writes the chosen kind as a PNG a person can look at:
// a perceptual colour map (viridis-like, interpolated from five anchors), small images scaled
// up, a spectrum drawn as a bar plot.
#include <png.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "commands.hpp"
#include "glint/pipeline/sls_stream.hpp"

namespace glint::tools {

namespace {

struct Rgb {
  uint8_t r, g, b;
};

/// A perceptual colour map from dark violet through blue and green to yellow: linear
/// interpolation between five anchors of matplotlib's viridis (at 0, 1/4, 1/2, 3/4 and 1).
Rgb colour(double t) {
  static constexpr Rgb kAnchors[] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  if (!(t > 0)) return kAnchors[0];
  if (t >= 1) return kAnchors[4];
  const double x = t * 4;
  const int i = std::min(static_cast<int>(x), 3);
  const double f = x - i;
  auto mix = [&](uint8_t a, uint8_t b) {
    return static_cast<uint8_t>(std::lround(a + (b - a) * f));
  };
  return {mix(kAnchors[i].r, kAnchors[i + 1].r), mix(kAnchors[i].g, kAnchors[i + 1].g),
          mix(kAnchors[i].b, kAnchors[i + 1].b)};
}

/// An RGB picture, row-major.
struct Picture {
  uint32_t width = 0, height = 0;
  std::vector<Rgb> px;
  Picture(uint32_t w, uint32_t h, Rgb fill) : width(w), height(h), px(std::size_t{w} * h, fill) {}
  Rgb& at(uint32_t x, uint32_t y) { return px[std::size_t{y} * width + x]; }
};

/// Writes `pic` as an 8-bit RGB PNG: to PATH.tmp, then renamed, so that a viewer reloading the
/// file never reads half of one.
void write_png(const Picture& pic, const std::filesystem::path& path) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr)
    throw std::runtime_error(fmt::format("{}: cannot be created: {}", tmp.string(),
                                         std::strerror(errno)));
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (png == nullptr || info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    std::fclose(f);
    std::filesystem::remove(tmp);
    throw std::runtime_error(fmt::format("{}: the PNG could not be written", tmp.string()));
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, pic.width, pic.height, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (uint32_t y = 0; y < pic.height; ++y)
    png_write_row(png, reinterpret_cast<png_const_bytep>(&pic.px[std::size_t{y} * pic.width]));
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  const bool ok = std::fflush(f) == 0;
  if (std::fclose(f) != 0 || !ok)
    throw std::runtime_error(fmt::format("{}: cannot be written: {}", tmp.string(),
                                         std::strerror(errno)));
  std::filesystem::rename(tmp, path);
}

/// One decoded image of the stream.
struct Image {
  std::string what, units, x_label;
  uint32_t rows = 0, cols = 0;
  std::vector<double> values;
  double x_min = 0, x_max = 0;
  uint64_t frames = 0, run = 0, update = 0;
};

double to_number(const std::map<std::string, std::string>& m, const std::string& key,
                 double fallback) {
  const auto it = m.find(key);
  if (it == m.end()) return fallback;
  try {
    std::size_t used = 0;
    const double v = std::stod(it->second, &used);
    return used == it->second.size() && std::isfinite(v) ? v : fallback;
  } catch (const std::exception&) {
    return fallback;
  }
}

/// The image of a [header, pixels] message; what the header's addJsonHeader says, or "frame"
/// for a detector's own stream. Pixels of bitmode 32 are uint32; others widen as the ingest's.
Image decode(const pipeline::SlsHeader& h, const zmq::message_t& payload) {
  Image im;
  const auto& add = h.add_json_header;
  im.what = add.contains("glint_what") ? add.at("glint_what") : "frame";
  im.units = add.contains("units") ? add.at("units") : "ADU";
  im.x_label = add.contains("x_label") ? add.at("x_label") : "";
  im.cols = h.shape[0];
  im.rows = h.shape[1];
  im.frames = static_cast<uint64_t>(to_number(add, "frames", 0));
  im.x_min = to_number(add, "x_min", 0);
  im.x_max = to_number(add, "x_max", im.cols);
  im.run = h.acq_index;
  im.update = h.frame_index;
  const double scale = to_number(add, "scale", 1), offset = to_number(add, "offset", 0);
  const std::size_t n = std::size_t{im.rows} * im.cols;
  if (payload.size() != pipeline::payload_bytes(h.bitmode, n) || payload.size() != h.size)
    throw std::runtime_error(fmt::format("{} bytes of pixels for a {} x {} image at bitmode {}",
                                         payload.size(), im.rows, im.cols, h.bitmode));
  im.values.resize(n);
  const auto* src = static_cast<const std::byte*>(payload.data());
  if (h.bitmode == 32) {
    for (std::size_t i = 0; i < n; ++i) {
      uint32_t p = 0;
      std::memcpy(&p, src + 4 * i, 4);  // little-endian, as the host
      im.values[i] = offset + scale * p;
    }
  } else {
    std::vector<uint16_t> row(n);
    pipeline::decode_row(h.bitmode, src, 0, n, row.data());
    for (std::size_t i = 0; i < n; ++i) im.values[i] = offset + scale * row[i];
  }
  return im;
}

/// The colour-mapped image, each pixel a square of `k` x `k`: k makes the larger side at least
/// `min_size` pixels (never smaller than the image).
Picture draw_image(const Image& im, double lo, double hi, bool log_scale, uint32_t min_size) {
  const uint32_t side = std::max(im.rows, im.cols);
  const uint32_t k = std::max<uint32_t>(1, (min_size + side - 1) / side);
  Picture pic(im.cols * k, im.rows * k, {0, 0, 0});
  auto level = [&](double v) {
    if (log_scale) return std::log1p(std::max(0.0, v - lo)) / std::log1p(hi - lo);
    return (v - lo) / (hi - lo);
  };
  for (uint32_t r = 0; r < im.rows; ++r)
    for (uint32_t c = 0; c < im.cols; ++c) {
      const double v = im.values[std::size_t{r} * im.cols + c];
      const Rgb col = colour(hi > lo ? level(v) : 0.0);
      for (uint32_t y = 0; y < k; ++y)
        for (uint32_t x = 0; x < k; ++x) pic.at(c * k + x, r * k + y) = col;
    }
  return pic;
}

/// A 1-row image (a spectrum) as a bar plot: white ground, black axes, one bar per bin in the
/// colour map's middle colour, heights from 0 to the largest value (log: log(1 + v)).
Picture draw_plot(const Image& im, double hi, bool log_scale, uint32_t min_size) {
  constexpr uint32_t kMargin = 20;
  const uint32_t bins = std::max<uint32_t>(1, im.cols);
  const uint32_t per_bin = std::max<uint32_t>(1, (std::max(min_size, 400u) + bins - 1) / bins);
  const uint32_t plot_w = bins * per_bin, plot_h = std::max(min_size, 400u) / 2;
  Picture pic(plot_w + 2 * kMargin, plot_h + 2 * kMargin, {255, 255, 255});
  const Rgb bar = colour(0.5), axis{0, 0, 0};
  const double top = log_scale ? std::log1p(std::max(0.0, hi)) : hi;
  for (uint32_t b = 0; b < bins && b < im.values.size(); ++b) {
    const double v = std::max(0.0, im.values[b]);
    const double f = top > 0 ? (log_scale ? std::log1p(v) : v) / top : 0.0;
    const auto h = static_cast<uint32_t>(std::lround(f * plot_h));
    for (uint32_t x = 0; x < per_bin; ++x)
      for (uint32_t y = 0; y < h; ++y)
        pic.at(kMargin + b * per_bin + x, kMargin + plot_h - 1 - y) = bar;
  }
  for (uint32_t x = kMargin - 1; x < kMargin + plot_w; ++x) pic.at(x, kMargin + plot_h) = axis;
  for (uint32_t y = kMargin; y <= kMargin + plot_h; ++y) pic.at(kMargin - 1, y) = axis;
  return pic;
}

}  // namespace

void add_view_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "view", "show glintd's live view (preview.endpoint) or a receiver's stream: write each "
              "received image of one kind as a PNG");
  struct Args {
    std::string endpoint, what = "hitmap", output = "live.png";
    uint64_t count = 0;
    double timeout = 0;
    bool log_scale = false;
    uint32_t min_size = 512;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("endpoint", a->endpoint, "the stream, e.g. tcp://127.0.0.1:5556")->required();
  cmd->add_option("--what", a->what,
                  "which image: hitmap, energy, spectrum, subpixel, pedestal, noise, ... "
                  "(frame: a detector's own stream)")
      ->capture_default_str();
  cmd->add_option("-o,--output", a->output, "the PNG, rewritten for each image")
      ->capture_default_str();
  cmd->add_option("--count", a->count, "stop after N images (0: until interrupted)")
      ->capture_default_str();
  cmd->add_option("--timeout", a->timeout,
                  "give up (exit 1) after S seconds without an image of that kind (0: never)")
      ->capture_default_str();
  cmd->add_flag("--log", a->log_scale, "colours (bar heights) on a log scale: log(1 + v - min)");
  cmd->add_option("--min-size", a->min_size,
                  "small images are scaled up until their larger side is at least this (pixels)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 8192u));
  cmd->callback([a] {
    if (!(a->timeout >= 0) || !std::isfinite(a->timeout))
      fail("glint view", fmt::format("--timeout {}: allowed: 0 (never) or more seconds",
                                     a->timeout),
           kExitUsage);
    const auto& stop = stop_on_signals();
    zmq::context_t ctx{1};
    zmq::socket_t sub{ctx, zmq::socket_type::sub};
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::rcvtimeo, 100);
    sub.set(zmq::sockopt::subscribe, "");
    try {
      sub.connect(a->endpoint);
    } catch (const zmq::error_t& e) {
      fail("glint view", fmt::format("{}: cannot connect: {} (allowed: tcp://HOST:PORT, "
                                     "ipc://PATH)", a->endpoint, e.what()),
           kExitUsage);
    }
    using clock = std::chrono::steady_clock;
    auto last_image = clock::now();
    uint64_t saved = 0;
    std::set<std::string> seen;  // the kinds that came, for the timeout's message
    bool warned_bad = false;
    while (!stop.load() && (a->count == 0 || saved < a->count)) {
      if (a->timeout > 0 &&
          std::chrono::duration<double>(clock::now() - last_image).count() >= a->timeout) {
        std::string kinds;
        for (const auto& s : seen) kinds += (kinds.empty() ? "" : ", ") + s;
        fail("glint view",
             fmt::format("no '{}' image from {} within {} s (received: {}; is glintd running "
                         "with preview.enabled, and does its run offer '{}'?)",
                         a->what, a->endpoint, a->timeout, kinds.empty() ? "nothing" : kinds,
                         a->what),
             kExitFailure);
      }
      zmq::message_t first;
      if (!sub.recv(first)) continue;
      if (!first.more()) {
        // The naming message of an update, an end of acquisition, or noise: only names count.
        const auto j = nlohmann::json::parse(first.to_string_view(), nullptr, false);
        if (j.is_object() && j.contains("images") && j["images"].is_array())
          for (const auto& e : j["images"])
            if (e.is_object() && e.contains("what") && e["what"].is_string())
              seen.insert(e["what"].get<std::string>());
        continue;
      }
      zmq::message_t payload;
      if (!sub.recv(payload)) continue;
      while (payload.more()) {  // parts beyond two are not this format's
        zmq::message_t extra;
        if (!sub.recv(extra)) break;
        payload.swap(extra);
      }
      const pipeline::ParsedHeader parsed = pipeline::parse_sls_header(first.to_string_view());
      Image im;
      try {
        if (!parsed.header)
          throw std::runtime_error(fmt::format("header rejected ({}: {})",
                                               pipeline::to_string(parsed.reason), parsed.detail));
        if (parsed.header->is_end()) continue;
        im = decode(*parsed.header, payload);
      } catch (const std::exception& e) {
        if (!warned_bad) std::cerr << "glint view: a message skipped: " << e.what() << "\n";
        warned_bad = true;
        continue;
      }
      seen.insert(im.what);
      if (im.what != a->what || im.values.empty()) continue;
      const auto [lo_it, hi_it] = std::minmax_element(im.values.begin(), im.values.end());
      const double lo = *lo_it, hi = *hi_it;
      const bool plot = im.rows == 1 || !im.x_label.empty();
      const Picture pic = plot ? draw_plot(im, hi, a->log_scale, a->min_size)
                               : draw_image(im, lo, hi, a->log_scale, a->min_size);
      try {
        write_png(pic, a->output);
      } catch (const std::exception& e) {
        fail("glint view", e.what(), kExitFailure);
      }
      ++saved;
      last_image = clock::now();
      std::cout << fmt::format("{} {} x {}{}  min {:.6g}  max {:.6g} {}  frames {}  run {} "
                               "update {}  -> {} ({} x {} px)",
                               im.what, im.rows, im.cols,
                               plot ? fmt::format(" ({} {:.6g} to {:.6g})", im.x_label,
                                                  im.x_min, im.x_max)
                                    : "",
                               lo, hi, im.units, im.frames, im.run, im.update, a->output,
                               pic.width, pic.height)
                << std::endl;
    }
  });
}

}  // namespace glint::tools
