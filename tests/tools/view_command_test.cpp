// `glint view`: subscribes to a live view, writes the chosen image as a PNG (read back here with
// libpng: its size, and the colours of known values on the colour map's anchors), a spectrum as
// a bar plot; gives up with a clear message when nothing comes.
#include <gtest/gtest.h>
#include <png.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "../pipeline/stream_test_util.hpp"
#include "glint/pipeline/preview_publisher.hpp"
#include "tool_test.hpp"

using namespace std::chrono_literals;
using glint::pipeline::PreviewImage;
using glint::pipeline::PreviewPublisher;
using glint::pipeline::PreviewUpdate;
using glint::testing::run_glint;

namespace {

struct Rgb {
  int r, g, b;
  bool operator==(const Rgb&) const = default;
};
std::ostream& operator<<(std::ostream& o, const Rgb& c) {
  return o << "(" << c.r << ", " << c.g << ", " << c.b << ")";
}

/// A PNG read back with libpng, as 8-bit RGB.
struct Png {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;
  Rgb at(uint32_t x, uint32_t y) const {
    const std::size_t i = (std::size_t{y} * width + x) * 3;
    return {rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

Png read_png(const std::filesystem::path& path) {
  Png out;
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, path.c_str())) {
    ADD_FAILURE() << path << ": " << image.message;
    return out;
  }
  image.format = PNG_FORMAT_RGB;
  out.width = image.width;
  out.height = image.height;
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.rgb.data(), 0, nullptr))
    ADD_FAILURE() << path << ": " << image.message;
  return out;
}

/// The colour map's anchors (viridis at 0, 1/4, 1/2, 3/4, 1), as docs/live-view.md gives them.
constexpr Rgb kAnchors[] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98},
                            {253, 231, 37}};

/// Publishes a hit map (4 x 8: values 0..30 and 32 in the last pixel), a noise map and a
/// spectrum every 50 ms until destroyed.
struct LiveView {
  PreviewPublisher pub{"tcp://127.0.0.1:*", 2};
  std::atomic<bool> stop{false};
  std::thread thread;
  LiveView() {
    PreviewUpdate u;
    u.run_index = 5;
    u.file = "/runs/run_000005.h5";
    PreviewImage hitmap;
    hitmap.what = "hitmap";
    hitmap.units = "counts";
    hitmap.rows = 4;
    hitmap.cols = 8;
    hitmap.frames = 100;
    for (int i = 0; i < 32; ++i) hitmap.values.push_back(i == 31 ? 32 : i);
    PreviewImage noise = hitmap;
    noise.what = "noise";
    noise.units = "ADU";
    for (auto& v : noise.values) v = 2.5 + v / 8;
    PreviewImage spectrum;
    spectrum.what = "spectrum";
    spectrum.units = "counts";
    spectrum.rows = 1;
    spectrum.cols = 4;
    spectrum.values = {0, 10, 5, 0};
    spectrum.x_min = 0;
    spectrum.x_max = 400;
    spectrum.x_label = "energy (ADU)";
    for (const auto& im : {hitmap, noise, spectrum})
      u.images.push_back(std::make_shared<const PreviewImage>(im));
    thread = std::thread([this, u] {
      for (uint64_t k = 0; !stop.load(); ++k) {
        PreviewUpdate v = u;
        v.sequence = k;
        pub.publish(std::move(v));
        std::this_thread::sleep_for(50ms);
      }
    });
  }
  ~LiveView() {
    stop.store(true);
    thread.join();
  }
};

}  // namespace

TEST(GlintView, WritesTheHitMapAsAPngOnTheColourMap) {
  LiveView live;
  const auto dir = glint::testing::fresh_dir("view_hitmap");
  const auto png = dir / "live.png";
  const auto r = run_glint("view " + live.pub.endpoint() + " --what hitmap --output " +
                           png.string() + " --count 2 --timeout 20");
  ASSERT_EQ(r.status, 0) << r.output;
  // One line per image saved: what, shape, min/max, frames, file.
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 2) << r.output;
  EXPECT_NE(r.output.find("hitmap 4 x 8  min 0  max 32 counts  frames 100  run 5 update "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("-> " + png.string() + " (512 x 256 px)"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(png.string() + ".tmp"));
  const Png p = read_png(png);
  // 8 columns scaled up to 512 pixels: each image pixel is a 64 x 64 square.
  ASSERT_EQ(p.width, 512u);
  ASSERT_EQ(p.height, 256u);
  auto centre = [&](int value) {  // the pixel holding `value` (value i at row i / 8, col i % 8)
    const int i = value == 32 ? 31 : value;
    return p.at((i % 8) * 64 + 32, (i / 8) * 64 + 32);
  };
  EXPECT_EQ(centre(0), kAnchors[0]);
  EXPECT_EQ(centre(8), kAnchors[1]);   // 8 / 32 = 1/4
  EXPECT_EQ(centre(16), kAnchors[2]);  // 1/2
  EXPECT_EQ(centre(24), kAnchors[3]);  // 3/4
  EXPECT_EQ(centre(32), kAnchors[4]);  // the largest value
  // 4 / 32 = 1/8: half way between the first two anchors, rounded to nearest.
  EXPECT_EQ(centre(4), (Rgb{64, 42, 112}));  // (68+59)/2 = 63.5, (1+82)/2 = 41.5, 111.5
  // A square is one colour to its edges.
  EXPECT_EQ(p.at(0, 64), kAnchors[1]);  // value 8: row 1, column 0
  EXPECT_EQ(p.at(63, 127), kAnchors[1]);
}

TEST(GlintView, DrawsASpectrumAsABarPlot) {
  LiveView live;
  const auto dir = glint::testing::fresh_dir("view_spectrum");
  const auto png = dir / "spectrum.png";
  const auto r = run_glint("view " + live.pub.endpoint() + " --what spectrum -o " + png.string() +
                           " --count 1 --timeout 20");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("spectrum 1 x 4 (energy (ADU) 0 to 400)  min 0  max 10 counts"),
            std::string::npos)
      << r.output;
  const Png p = read_png(png);
  // 4 bins of 128 pixels, a plot 256 high, 20 pixels of margin around it.
  ASSERT_EQ(p.width, 4u * 128 + 40);
  ASSERT_EQ(p.height, 256u + 40);
  const Rgb white{255, 255, 255}, bar = kAnchors[2];
  const uint32_t base = 20 + 256 - 1;  // the lowest row of the bars
  EXPECT_EQ(p.at(5, 5), white);
  EXPECT_EQ(p.at(20 + 64, base), white);            // bin 0: empty
  EXPECT_EQ(p.at(20 + 128 + 64, base), bar);        // bin 1: the full height
  EXPECT_EQ(p.at(20 + 128 + 64, 20), bar);
  EXPECT_EQ(p.at(20 + 256 + 64, base - 127), bar);  // bin 2: half of it (128 pixels)
  EXPECT_EQ(p.at(20 + 256 + 64, base - 128), white);
  EXPECT_EQ(p.at(19, 100), (Rgb{0, 0, 0}));          // the y axis
}

TEST(GlintView, GivesUpWhenNothingComes) {
  const std::string ep = glint::testing::loopback(glint::testing::free_tcp_port());
  const auto r = run_glint("view " + ep + " --what hitmap --output /nonexistent/x.png "
                           "--timeout 0.5");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("glint view: no 'hitmap' image from " + ep +
                          " within 0.5 s (received: nothing;"),
            std::string::npos)
      << r.output;
}

TEST(GlintView, NamesTheKindsThatCameWhenTheChosenOneDoesNot) {
  LiveView live;
  const auto r = run_glint("view " + live.pub.endpoint() + " --what subpixel --timeout 1");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("(received: hitmap, noise, spectrum;"), std::string::npos) << r.output;
}
