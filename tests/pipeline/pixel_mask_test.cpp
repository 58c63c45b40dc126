// The pixel mask: bits from the dark pedestal, the mask file, the result filter and the run
// file's pixel_mask.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "glint/pipeline/pixel_mask.hpp"
#include "glint/pipeline/run_file.hpp"

using namespace glint;
using namespace glint::pipeline;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "glint_pixel_mask_test";
  fs::create_directories(dir);
  const fs::path p = dir / name;
  fs::remove(p);
  return p;
}

/// A pedestal of `frames` samples per pixel with the given per-pixel sample values.
PedestalState pedestal_of(FrameShape shape, const std::vector<std::vector<double>>& samples) {
  PedestalState p(shape, 100);
  for (std::size_t i = 0; i < shape.pixels(); ++i)
    for (double v : samples[i]) {
      p.sum[i] += v;
      p.sum2[i] += v * v;
      ++p.count[i];
    }
  return p;
}

std::string message_of(const std::string& spec, FrameShape shape) {
  try {
    read_mask_file(spec, shape);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(PixelMask, FromDarkFlagsDeadAndNoisyPixelsExactly) {
  const FrameShape shape{2, 3};
  // Noise 1 (samples 9, 11) except: pixel 1 constant (dead), pixel 4 noise 6 (6 x the median
  // 1: noisy at factor 5, not at 6), pixel 5 never sampled (dead).
  std::vector<std::vector<double>> s(6, {9.0, 11.0});
  s[1] = {7.0, 7.0};
  s[4] = {4.0, 16.0};
  s[5] = {};
  const PedestalState p = pedestal_of(shape, s);
  std::vector<uint32_t> mask(6, 0);
  mask[0] = kMaskUser;  // from a file: kept, OR-ed
  const DarkMaskCounts n = flag_from_dark(mask, p, 5.0, nullptr);
  EXPECT_EQ(mask, (std::vector<uint32_t>{kMaskUser, kMaskDead, 0, 0, kMaskNoisy, kMaskDead}));
  EXPECT_EQ(n.dead, 2u);
  EXPECT_EQ(n.noisy, 1u);
  EXPECT_EQ(n.gain_switching, 0u);
  EXPECT_EQ(n.median_noise, 1.0);

  std::vector<uint32_t> strict(6, 0);
  flag_from_dark(strict, p, 6.0, nullptr);  // noise 6 is not above 6 x 1
  EXPECT_EQ(strict, (std::vector<uint32_t>{0, kMaskDead, 0, 0, 0, kMaskDead}));
}

TEST(PixelMask, GainSwitchesInTheDarkAreOverResponding) {
  const FrameShape shape{1, 4};
  DarkGainSwitches g(shape);
  const std::vector<uint16_t> frames{100, 0x4000 | 100, 100, 100,   // pixel 1 in G1
                                     100, 100, 100, 0xC000 | 5,     // pixel 3 in G2
                                     100, 0x8000 | 3, 100, 100};    // pixel 1 invalid code
  g.add(frames);
  EXPECT_EQ(g.frames(), 3u);
  EXPECT_EQ(std::vector<uint32_t>(g.counts().begin(), g.counts().end()),
            (std::vector<uint32_t>{0, 2, 0, 1}));
  const PedestalState p = pedestal_of(shape, {{1, 3}, {1, 3}, {1, 3}, {1, 3}});
  std::vector<uint32_t> mask(4, 0);
  const DarkMaskCounts n = flag_from_dark(mask, p, 5.0, &g);
  EXPECT_EQ(mask, (std::vector<uint32_t>{0, kMaskOverResponding, 0, kMaskOverResponding}));
  EXPECT_EQ(n.gain_switching, 2u);
  EXPECT_THROW(g.add(std::vector<uint16_t>(3, 0)), std::invalid_argument);
}

TEST(PixelMask, ModuleDarkFramesCountWhereTheImageShowsThePixel) {
  // A 2 x 6 image of two 2 x 3 modules; module 1 (columns 3-5) mounted turned by 180 degrees.
  // Its native frames' pixel (x 0, y 0) is image pixel (row 1, column 5).
  const FrameShape shape{2, 6};
  const auto regions = module_grid(shape, 2, 1,
                                   std::vector<ModuleOrientation>{ModuleOrientation::normal,
                                                                  ModuleOrientation::rotate_180});
  DarkGainSwitches g(shape);
  const std::vector<uint16_t> module0{0x4000, 1, 1,   // native (0, 0) in G1
                                      1, 1, 1};
  const std::vector<uint16_t> module1{0x4000, 1, 1,   // native (0, 0) in G1
                                      1, 0xC000, 1};  // native (1, 1) in G2
  g.add(module0, regions[0], true);
  g.add(module1, regions[1], false);
  EXPECT_EQ(g.frames(), 1u);
  EXPECT_EQ(std::vector<uint32_t>(g.counts().begin(), g.counts().end()),
            (std::vector<uint32_t>{1, 0, 0, 0, 1, 0,
                                   0, 0, 0, 0, 0, 1}));
}

TEST(PixelMask, FilterRemovesExactlyTheClustersCentredOnMaskedPixels) {
  const FrameShape shape{4, 5};
  ClusterTable in(3, ClusterValues::int32, /*gain_counts=*/true);
  std::vector<int32_t> v(9);
  auto add = [&](uint16_t x, uint16_t y, int32_t tag) {
    v.assign(9, tag);
    in.add_cluster(x, y, v);
  };
  in.begin_frame(10);
  add(0, 0, 1);
  add(2, 1, 2);  // masked (pixel 1 * 5 + 2 = 7)
  add(4, 3, 3);
  in.set_gain_counts({1, 2, 3});
  in.begin_frame(11);  // no clusters
  in.begin_frame(12);
  add(2, 1, 4);  // masked
  add(3, 1, 5);
  std::vector<uint32_t> mask(20, 0);
  mask[7] = kMaskDead;
  mask[0 * 5 + 1] = kMaskNoisy;  // no cluster there
  const MaskFilter filter(mask, shape);
  EXPECT_TRUE(filter.active());
  EXPECT_EQ(filter.masked_pixels(), 2u);
  ClusterTable out;
  std::vector<uint32_t> removed;
  EXPECT_EQ(filter.apply(in, out, removed), 2u);
  EXPECT_EQ(removed, (std::vector<uint32_t>{1, 0, 1}));
  ClusterTable want(3, ClusterValues::int32, true);
  want.begin_frame(10);
  v.assign(9, 1);
  want.add_cluster(0, 0, v);
  v.assign(9, 3);
  want.add_cluster(4, 3, v);
  want.set_gain_counts({1, 2, 3});
  want.begin_frame(11);
  want.begin_frame(12);
  v.assign(9, 5);
  want.add_cluster(3, 1, v);
  EXPECT_TRUE(out == want);

  const MaskFilter none(std::vector<uint32_t>(20, 0), shape);
  EXPECT_FALSE(none.active());
  EXPECT_THROW(MaskFilter(std::vector<uint32_t>(19, 0), shape), std::invalid_argument);
}

TEST(PixelMask, FileIsReadWithItsShapeChecked) {
  const FrameShape shape{3, 4};
  const fs::path file = scratch("mask.h5");
  std::vector<uint32_t> mask(12, 0);
  mask[5] = kMaskDead | kMaskNoisy;
  mask[11] = kMaskVirtual;
  write_mask_file(file.string(), "/entry/mask", mask, shape);
  EXPECT_EQ(read_mask_file(file.string() + ":/entry/mask", shape), mask);

  EXPECT_EQ(message_of(file.string() + ":/entry/mask", {4, 3}),
            "mask file " + file.string() +
                ":/entry/mask: shape [3, 4], expected [4, 3] (detector.rows, detector.cols)");
  EXPECT_EQ(message_of(file.string() + ":/nothing", shape),
            "mask file " + file.string() + ": no dataset '/nothing'");
  EXPECT_EQ(message_of(file.string(), shape),
            "mask file '" + file.string() +
                "': expected FILE.h5:/dataset (an HDF5 file and a dataset path)");
  EXPECT_EQ(message_of("/no/such.h5:/m", shape), "mask file /no/such.h5: no such file");
  const fs::path text = scratch("text.h5");
  std::ofstream(text) << "not hdf5\n";
  EXPECT_EQ(message_of(text.string() + ":/m", shape),
            "mask file " + text.string() + ": not an HDF5 file");

  // Signed integers are taken when not negative; a float dataset is refused.
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  const hsize_t dims[2] = {3, 4};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  std::vector<int32_t> signed_mask(12, 0);
  signed_mask[2] = 2;
  hid_t ds = H5Dcreate2(f, "signed", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, signed_mask.data());
  H5Dclose(ds);
  signed_mask[9] = -1;
  ds = H5Dcreate2(f, "negative", H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, signed_mask.data());
  H5Dclose(ds);
  std::vector<float> fmask(12, 0.0f);
  ds = H5Dcreate2(f, "float", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, fmask.data());
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(f);
  std::vector<uint32_t> want(12, 0);
  want[2] = 2;
  EXPECT_EQ(read_mask_file(file.string() + ":/signed", shape), want);
  EXPECT_EQ(message_of(file.string() + ":/negative", shape),
            "mask file " + file.string() +
                ":/negative: pixel (2, 1) is -1 (expected bits of NXdetector pixel_mask, >= 0)");
  EXPECT_EQ(message_of(file.string() + ":/float", shape),
            "mask file " + file.string() +
                ":/float: holds no integers of up to 32 bits (expected uint32, as NXdetector "
                "pixel_mask)");
}

TEST(PixelMask, RunFileHoldsTheMaskAndTheMaskedCounts) {
  const fs::path file = scratch("run.h5");
  RunMetadata meta;
  meta.finder.shape = {3, 4};
  meta.pixel_mask = true;
  std::vector<uint32_t> mask(12, 0);
  mask[1] = kMaskDead;
  mask[10] = kMaskNoisy | kMaskOverResponding;
  {
    RunFileWriter w(file, meta);
    w.append_empty_frames(std::vector<FrameRow>{{1, 0, 0, 0, kFlagDark}});
    w.write_pixel_mask(mask);
    EXPECT_THROW(w.write_pixel_mask(std::vector<uint32_t>(11, 0)), std::invalid_argument);
    ClusterTable t(3);
    t.begin_frame(2);
    t.add_cluster(0, 0, std::vector<int32_t>(9, 7));
    t.begin_frame(3);
    const std::vector<uint32_t> masked{4, 2};
    w.append(t, {}, {}, masked);
    w.set_masked_clusters(6);
    w.close(nullptr);
  }
  const RunFileContents f = read_run_file(file);
  EXPECT_EQ(f.pixel_mask, mask);
  EXPECT_EQ(f.frame_masked_clusters, (std::vector<uint32_t>{0, 4, 2}));
  ASSERT_TRUE(f.masked_clusters.has_value());
  EXPECT_EQ(*f.masked_clusters, 6u);
  EXPECT_EQ(f.clusters.n_clusters(), 1u);

  // Without a mask: none of it, and write_pixel_mask is refused.
  const fs::path plain = scratch("plain.h5");
  meta.pixel_mask = false;
  {
    RunFileWriter w(plain, meta);
    EXPECT_THROW(w.write_pixel_mask(mask), OutputError);
    w.close(nullptr);
  }
  const RunFileContents g = read_run_file(plain);
  EXPECT_TRUE(g.pixel_mask.empty());
  EXPECT_TRUE(g.frame_masked_clusters.empty());
  EXPECT_FALSE(g.masked_clusters.has_value());
}
