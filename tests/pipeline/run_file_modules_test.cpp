// Run files of modular detectors (docs/modules.md): clusters handed over in image coordinates
// are stored local to their module with the module's id; the module groups carry the origins;
// a file of one module holds exactly the datasets it held before modules existed.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "glint/hdf5_handle.hpp"
#include "glint/pipeline/run_file.hpp"

namespace fs = std::filesystem;
using namespace glint;
using namespace glint::pipeline;
using glint::hdf5::Handle;

namespace {

RunMetadata metadata(FrameShape shape) {
  RunMetadata m;
  m.finder.shape = shape;
  m.finder.cluster_size = 3;
  m.finder.n_sigma = 5.0;
  m.config_yaml = "detector: {rows: 4, cols: 6}\n";
  m.detector_type = "MOENCH";
  m.source = "test";
  m.backend = "cpu reference";
  return m;
}

std::vector<int32_t> cluster_values(int32_t k) {
  std::vector<int32_t> v(9);
  for (int i = 0; i < 9; ++i) v[i] = k * 100 + i;
  return v;
}

/// Two frames of clusters in image coordinates of a 4 x 6 image: both modules of a 2 x 1 grid
/// (3 columns each), the borders included.
ClusterTable image_table() {
  ClusterTable t(3);
  t.begin_frame(7);
  t.add_cluster(0, 0, cluster_values(1));
  t.add_cluster(2, 3, cluster_values(2));
  t.add_cluster(3, 0, cluster_values(3));
  t.begin_frame(8);
  t.add_cluster(5, 3, cluster_values(4));
  t.add_cluster(4, 1, cluster_values(5));
  return t;
}

struct Fixture : ::testing::Test {
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("glint_run_modules_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    hdf5::silence_errors();
  }
  void TearDown() override { fs::remove_all(dir); }
  fs::path dir;
};

using RunFileModules = Fixture;

template <class T>
std::vector<T> vec(std::span<const T> s) {
  return {s.begin(), s.end()};
}

Handle open_file(const fs::path& p) {
  return Handle(H5Fopen(p.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
}

template <class T>
std::vector<T> read_dataset(hid_t file, const char* name) {
  Handle ds(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  EXPECT_TRUE(ds.valid()) << name;
  if (!ds.valid()) return {};
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  std::vector<T> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get())));
  if (!v.empty()) {
    EXPECT_GE(H5Dread(ds.get(), hdf5::native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      v.data()),
              0);
  }
  return v;
}

std::vector<uint32_t> read_attr(hid_t file, const char* object, const char* name) {
  Handle attr(H5Aopen_by_name(file, object, name, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  EXPECT_TRUE(attr.valid()) << object << " @" << name;
  if (!attr.valid()) return {};
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  std::vector<uint32_t> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get())));
  EXPECT_GE(H5Aread(attr.get(), H5T_NATIVE_UINT32, v.data()), 0);
  return v;
}

/// Every object's path in the file, in visiting order, and the attribute names of each.
std::vector<std::string> objects_and_attributes(const fs::path& p) {
  Handle f = open_file(p);
  std::vector<std::string> out;
  H5Ovisit(
      f.get(), H5_INDEX_NAME, H5_ITER_INC,
      [](hid_t root, const char* name, const H5O_info_t*, void* data) -> herr_t {
        auto* list = static_cast<std::vector<std::string>*>(data);
        list->emplace_back(name);
        H5Aiterate_by_name(
            root, name, H5_INDEX_NAME, H5_ITER_INC, nullptr,
            [](hid_t, const char* attr, const H5A_info_t*, void* d) -> herr_t {
              static_cast<std::vector<std::string>*>(d)->push_back(std::string("  @") + attr);
              return 0;
            },
            list, H5P_DEFAULT);
        return 0;
      },
      &out);
  return out;
}

}  // namespace

TEST_F(RunFileModules, TwoModulesStoreLocalCoordinatesAndTheirIds) {
  const fs::path file = dir / "modules.h5";
  RunMetadata meta = metadata({4, 6});
  meta.modules.modules_x = 2;
  meta.modules.detector_rows = 8;
  meta.modules.detector_cols = 12;
  meta.modules.origin_row = 4;
  meta.modules.origin_col = 6;
  meta.modules.first_module = 2;
  const ClusterTable table = image_table();
  {
    RunFileWriter w(file, meta);
    w.append(table);
    w.close(nullptr);
  }
  // In the file: x, y local to the module, the module ids, event_id the image pixel.
  {
    Handle f = open_file(file);
    ASSERT_TRUE(f.valid());
    EXPECT_EQ(read_dataset<uint16_t>(f.get(), "entry/clusters/x"),
              (std::vector<uint16_t>{0, 2, 0, 2, 1}));
    EXPECT_EQ(read_dataset<uint16_t>(f.get(), "entry/clusters/y"),
              (std::vector<uint16_t>{0, 3, 0, 3, 1}));
    EXPECT_EQ(read_dataset<uint16_t>(f.get(), "entry/clusters/module"),
              (std::vector<uint16_t>{2, 2, 3, 3, 3}));
    EXPECT_EQ(read_dataset<uint32_t>(f.get(), "entry/clusters/event_id"),
              (std::vector<uint32_t>{0, 20, 3, 23, 10}));
    const char* det = "entry/instrument/detector";
    EXPECT_EQ(read_attr(f.get(), det, "modules"), std::vector<uint32_t>{2});
    EXPECT_EQ(read_attr(f.get(), det, "module_grid"), (std::vector<uint32_t>{1, 2}));
    EXPECT_EQ(read_attr(f.get(), det, "detector_shape"), (std::vector<uint32_t>{8, 12}));
    EXPECT_EQ(read_attr(f.get(), det, "detector_origin"), (std::vector<uint32_t>{4, 6}));
    EXPECT_EQ(read_dataset<uint32_t>(f.get(), "entry/instrument/detector/module_03/data_origin"),
              (std::vector<uint32_t>{0, 3}));
    EXPECT_EQ(read_dataset<uint32_t>(f.get(), "entry/instrument/detector/module_03/data_size"),
              (std::vector<uint32_t>{4, 3}));
    EXPECT_EQ(read_attr(f.get(), "entry/instrument/detector/module_03", "detector_origin"),
              (std::vector<uint32_t>{4, 9}));
    EXPECT_EQ(read_attr(f.get(), "entry/instrument/detector/module_02", "module_id"),
              std::vector<uint32_t>{2});
  }
  const RunFileContents r = read_run_file(file);
  EXPECT_EQ(vec(r.clusters.x()), (std::vector<uint16_t>{0, 2, 0, 2, 1}));
  EXPECT_EQ(vec(r.clusters.y()), (std::vector<uint16_t>{0, 3, 0, 3, 1}));
  EXPECT_EQ(r.cluster_module, (std::vector<uint16_t>{2, 2, 3, 3, 3}));
  EXPECT_EQ(vec(r.clusters.data()), vec(table.data()));
  ASSERT_EQ(r.modules.size(), 2u);
  EXPECT_EQ(r.modules[0], (ModuleInfo{2, {0, 0}, {4, 3}, {4, 6}}));
  EXPECT_EQ(r.modules[1], (ModuleInfo{3, {0, 3}, {4, 3}, {4, 9}}));
  EXPECT_EQ(r.detector_shape, (std::array<uint32_t, 2>{8, 12}));
  EXPECT_EQ(r.detector_origin, (std::array<uint32_t, 2>{4, 6}));
  EXPECT_EQ(r.module(3).data_origin, (std::array<uint32_t, 2>{0, 3}));
  EXPECT_THROW(r.module(4), std::out_of_range);
  // Back in image coordinates: what was written; in the detector's: shifted by (4, 6).
  const ClusterTable image = image_clusters(r);
  EXPECT_EQ(vec(image.x()), vec(table.x()));
  EXPECT_EQ(vec(image.y()), vec(table.y()));
  const ClusterTable whole = detector_clusters(r);
  EXPECT_EQ(vec(whole.x()), (std::vector<uint16_t>{6, 8, 9, 11, 10}));
  EXPECT_EQ(vec(whole.y()), (std::vector<uint16_t>{4, 7, 4, 7, 5}));
}

TEST_F(RunFileModules, AGridOfTwoRowsNumbersModulesRowMajor) {
  const fs::path file = dir / "grid.h5";
  RunMetadata meta = metadata({4, 6});
  meta.modules.modules_x = 3;
  meta.modules.modules_y = 2;
  {
    RunFileWriter w(file, meta);
    w.append(image_table());
    w.close(nullptr);
  }
  const RunFileContents r = read_run_file(file);
  // Modules of 2 x 2: (x 0, y 0) -> 0; (2, 3) -> 4; (3, 0) -> 1; (5, 3) -> 5; (4, 1) -> 2.
  EXPECT_EQ(r.cluster_module, (std::vector<uint16_t>{0, 4, 1, 5, 2}));
  EXPECT_EQ(vec(r.clusters.x()), (std::vector<uint16_t>{0, 0, 1, 1, 0}));
  EXPECT_EQ(vec(r.clusters.y()), (std::vector<uint16_t>{0, 1, 0, 1, 1}));
  ASSERT_EQ(r.modules.size(), 6u);
  EXPECT_EQ(r.modules[4], (ModuleInfo{4, {2, 2}, {2, 2}, {2, 2}}));
  EXPECT_EQ(r.detector_shape, (std::array<uint32_t, 2>{4, 6}));
  EXPECT_EQ(vec(image_clusters(r).x()), vec(image_table().x()));
  EXPECT_EQ(vec(image_clusters(r).y()), vec(image_table().y()));
}

TEST_F(RunFileModules, OneModuleWritesNoModuleDatasets) {
  const fs::path file = dir / "one.h5";
  {
    RunFileWriter w(file, metadata({4, 6}));
    w.append(image_table());
    w.close(nullptr);
  }
  // The objects and attributes of a run file of this layout before modules existed.
  const std::vector<std::string> got = objects_and_attributes(file);
  const std::vector<std::string> expected{
      ".",
      "entry",
      "  @NX_class", "  @end_time", "  @program_name", "  @program_version", "  @start_time",
      "  @stream_stride",
      "entry/clusters", "  @NX_class",
      "entry/clusters/data", "  @units",
      "entry/clusters/event_id", "  @units",
      "entry/clusters/event_index", "  @units",
      "entry/clusters/event_time_offset", "  @units",
      "entry/clusters/event_time_zero", "  @units",
      "entry/clusters/frame_number",
      "entry/clusters/x",
      "entry/clusters/y",
      "entry/config",
      "entry/end_time",
      "entry/flushed_rows", "  @columns",
      "entry/frames", "  @NX_class", "  @flag_bits",
      "entry/frames/cluster_offset",
      "entry/frames/flags",
      "entry/frames/frame_number",
      "entry/frames/n_clusters",
      "entry/frames/timestamp",
      "entry/instrument", "  @NX_class",
      "entry/instrument/detector", "  @NX_class", "  @backend", "  @cluster_size",
      "  @detector_type", "  @frame_shape", "  @n_sigma", "  @pedestal_window",
      "  @pixel_type", "  @source",
      "entry/instrument/events", "  @NX_class",
      "entry/pedestal", "  @NX_class",
      "entry/pedestal/end_count",
      "entry/pedestal/end_mean",
      "entry/pedestal/end_noise",
      "entry/pedestal/end_sum",
      "entry/pedestal/end_sum2",
      "entry/pedestal/start_mean",
      "entry/pedestal/start_noise",
      "entry/program_name", "  @version",
      "entry/start_time",
  };
  EXPECT_EQ(got, expected);
  const RunFileContents r = read_run_file(file);
  EXPECT_TRUE(r.cluster_module.empty());
  ASSERT_EQ(r.modules.size(), 1u);
  EXPECT_EQ(r.modules[0], (ModuleInfo{0, {0, 0}, {4, 6}, {0, 0}}));
  EXPECT_EQ(vec(r.clusters.x()), vec(image_table().x()));
  EXPECT_EQ(vec(image_clusters(r).x()), vec(image_table().x()));
  EXPECT_EQ(vec(detector_clusters(r).y()), vec(image_table().y()));
}

TEST_F(RunFileModules, LayoutsThatDoNotFitAreRefusedBeforeTheFileIsMade) {
  const fs::path file = dir / "bad.h5";
  RunMetadata meta = metadata({4, 6});
  meta.modules.modules_x = 4;  // 6 columns are not 4 equal modules
  EXPECT_THROW(RunFileWriter(file, meta), std::invalid_argument);
  meta.modules.modules_x = 1;
  meta.modules.detector_rows = 8;
  meta.modules.detector_cols = 6;
  meta.modules.origin_row = 5;  // rows 5..8 are past the detector's 8
  EXPECT_THROW(RunFileWriter(file, meta), std::invalid_argument);
  meta.modules.origin_row = 4;
  meta.modules.first_module = 65535;
  meta.modules.modules_y = 2;  // ids 65535 and 65536
  EXPECT_THROW(RunFileWriter(file, meta), std::invalid_argument);
  EXPECT_FALSE(fs::exists(file));
}

TEST_F(RunFileModules, AClusterOutsideTheImageIsRefused) {
  RunMetadata meta = metadata({4, 6});
  meta.modules.modules_x = 2;
  RunFileWriter w(dir / "outside.h5", meta);
  ClusterTable t(3);
  t.begin_frame(1);
  t.add_cluster(6, 0, cluster_values(1));
  EXPECT_THROW(w.append(t), std::invalid_argument);
  EXPECT_EQ(w.clusters_written(), 0u);
}

namespace {

std::vector<double> read_double_attr(hid_t file, const char* object, const char* name) {
  Handle attr(H5Aopen_by_name(file, object, name, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  EXPECT_TRUE(attr.valid()) << object << " @" << name;
  if (!attr.valid()) return {};
  Handle space(H5Aget_space(attr.get()), H5Sclose);
  std::vector<double> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space.get())));
  EXPECT_GE(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, v.data()), 0);
  return v;
}

std::string read_string_attr(hid_t file, const char* object, const char* name) {
  Handle attr(H5Aopen_by_name(file, object, name, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  EXPECT_TRUE(attr.valid()) << object << " @" << name;
  if (!attr.valid()) return {};
  Handle type = hdf5::string_type();
  char* p = nullptr;
  EXPECT_GE(H5Aread(attr.get(), type.get(), &p), 0);
  std::string s = p ? p : "";
  H5free_memory(p);
  return s;
}

}  // namespace

TEST_F(RunFileModules, FlippedModulesStoreNativeCoordinatesAndValues) {
  // Module 0 upside down, module 1 turned by 180 degrees (modules of 4 x 3 at columns 0 and 3).
  const fs::path file = dir / "flipped.h5";
  RunMetadata meta = metadata({4, 6});
  meta.modules.modules_x = 2;
  meta.modules.orientations = {ModuleOrientation::flip_rows, ModuleOrientation::rotate_180};
  const ClusterTable table = image_table();  // image coordinates and orientation
  {
    RunFileWriter w(file, meta);
    w.append(table);
    w.close(nullptr);
  }
  // (0, 0) -> module 0 native (0, 3); (2, 3) -> (2, 0); (3, 0) -> module 1 native (2, 3);
  // (5, 3) -> (0, 0); (4, 1) -> (1, 2). Windows as the modules read them.
  const std::vector<int32_t> upside_down{106, 107, 108, 103, 104, 105, 100, 101, 102};
  std::vector<int32_t> turned = cluster_values(3);
  std::reverse(turned.begin(), turned.end());
  {
    Handle f = open_file(file);
    ASSERT_TRUE(f.valid());
    EXPECT_EQ(read_dataset<uint16_t>(f.get(), "entry/clusters/x"),
              (std::vector<uint16_t>{0, 2, 2, 0, 1}));
    EXPECT_EQ(read_dataset<uint16_t>(f.get(), "entry/clusters/y"),
              (std::vector<uint16_t>{3, 0, 3, 0, 2}));
    EXPECT_EQ(read_dataset<uint16_t>(f.get(), "entry/clusters/module"),
              (std::vector<uint16_t>{0, 0, 1, 1, 1}));
    // event_id stays the image pixel.
    EXPECT_EQ(read_dataset<uint32_t>(f.get(), "entry/clusters/event_id"),
              (std::vector<uint32_t>{0, 20, 3, 23, 10}));
    const auto data = read_dataset<int32_t>(f.get(), "entry/clusters/data");
    ASSERT_EQ(data.size(), 45u);
    EXPECT_EQ(std::vector<int32_t>(data.begin(), data.begin() + 9), upside_down);
    EXPECT_EQ(std::vector<int32_t>(data.begin() + 18, data.begin() + 27), turned);
    const char* m0 = "entry/instrument/detector/module_00";
    const char* m1 = "entry/instrument/detector/module_01";
    EXPECT_EQ(read_string_attr(f.get(), m0, "orientation"), "flip_rows");
    EXPECT_EQ(read_string_attr(f.get(), m1, "orientation"), "rotate_180");
    // NeXus axes in image pixels: native (x, y) is at offset + x * fast + y * slow.
    const std::string f0 = std::string(m0) + "/fast_pixel_direction";
    const std::string s0 = std::string(m0) + "/slow_pixel_direction";
    const std::string f1 = std::string(m1) + "/fast_pixel_direction";
    const std::string s1 = std::string(m1) + "/slow_pixel_direction";
    EXPECT_EQ(read_double_attr(f.get(), f0.c_str(), "vector"), (std::vector<double>{1, 0, 0}));
    EXPECT_EQ(read_double_attr(f.get(), s0.c_str(), "vector"), (std::vector<double>{0, -1, 0}));
    EXPECT_EQ(read_double_attr(f.get(), s0.c_str(), "offset"), (std::vector<double>{0, 3, 0}));
    EXPECT_EQ(read_double_attr(f.get(), f1.c_str(), "vector"), (std::vector<double>{-1, 0, 0}));
    EXPECT_EQ(read_double_attr(f.get(), s1.c_str(), "vector"), (std::vector<double>{0, -1, 0}));
    EXPECT_EQ(read_double_attr(f.get(), f1.c_str(), "offset"), (std::vector<double>{5, 3, 0}));
    EXPECT_EQ(read_string_attr(f.get(), f1.c_str(), "transformation_type"), "translation");
    EXPECT_EQ(read_dataset<double>(f.get(), f1.c_str()), std::vector<double>{1.0});
  }
  const RunFileContents r = read_run_file(file);
  ASSERT_EQ(r.modules.size(), 2u);
  EXPECT_EQ(r.modules[0].orientation, ModuleOrientation::flip_rows);
  EXPECT_EQ(r.modules[1].orientation, ModuleOrientation::rotate_180);
  EXPECT_EQ(r.modules[1].region(), (ModuleRegion{0, 3, {4, 3}, ModuleOrientation::rotate_180}));
  EXPECT_EQ(vec(r.clusters.x()), (std::vector<uint16_t>{0, 2, 2, 0, 1}));
  // Back in the image: the coordinates and windows that were written.
  const ClusterTable image = image_clusters(r);
  EXPECT_EQ(vec(image.x()), vec(table.x()));
  EXPECT_EQ(vec(image.y()), vec(table.y()));
  EXPECT_EQ(vec(image.data()), vec(table.data()));
  const ClusterTable whole = detector_clusters(r);
  EXPECT_EQ(vec(whole.x()), vec(table.x()));
  EXPECT_EQ(vec(whole.data()), vec(table.data()));

  // One module mounted flipped is recorded as a module.
  const fs::path one = dir / "one_flipped.h5";
  RunMetadata single = metadata({4, 6});
  single.modules.orientations = {ModuleOrientation::flip_cols};
  {
    RunFileWriter w(one, single);
    w.append(table);
    w.close(nullptr);
  }
  const RunFileContents s = read_run_file(one);
  ASSERT_EQ(s.modules.size(), 1u);
  EXPECT_EQ(s.modules[0].orientation, ModuleOrientation::flip_cols);
  EXPECT_EQ(vec(s.clusters.x()), (std::vector<uint16_t>{5, 3, 2, 0, 1}));
  EXPECT_EQ(vec(image_clusters(s).x()), vec(table.x()));

  // Orientations that are not one per module are refused.
  meta.modules.orientations = {ModuleOrientation::flip_rows};
  EXPECT_THROW(RunFileWriter(dir / "bad.h5", meta), std::invalid_argument);
}
