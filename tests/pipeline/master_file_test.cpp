// The master file (docs/modules.md): two run files, each two modules of a four-module detector,
// joined into one; its virtual datasets read back as the placed inputs, value for value.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "glint/hdf5_handle.hpp"
#include "glint/pipeline/master_file.hpp"
#include "glint/pipeline/run_file.hpp"
#include "module_runs.hpp"

namespace fs = std::filesystem;
using namespace glint;
using namespace glint::pipeline;
using glint::hdf5::Handle;
using glint::testing::half_of_four_modules;
using glint::testing::ModuleRun;
using glint::testing::write_module_run;

namespace {

struct Dataset {
  std::vector<hsize_t> dims;
  std::vector<double> values;  ///< converted by HDF5 (exact for the integers here)
};

Dataset read(const fs::path& file, const std::string& name) {
  Dataset d;
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  EXPECT_TRUE(f.valid()) << file;
  if (!f.valid()) return d;
  Handle ds(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
  EXPECT_TRUE(ds.valid()) << name;
  if (!ds.valid()) return d;
  Handle space(H5Dget_space(ds.get()), H5Sclose);
  d.dims.resize(H5Sget_simple_extent_ndims(space.get()));
  H5Sget_simple_extent_dims(space.get(), d.dims.data(), nullptr);
  d.values.resize(H5Sget_simple_extent_npoints(space.get()));
  if (!d.values.empty()) {
    EXPECT_GE(H5Dread(ds.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      d.values.data()),
              0)
        << name;
  }
  return d;
}

std::vector<uint32_t> attr(const fs::path& file, const std::string& object, const char* name) {
  Handle f(H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  Handle a(H5Aopen_by_name(f.get(), object.c_str(), name, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  EXPECT_TRUE(a.valid()) << object << " @" << name;
  if (!a.valid()) return {};
  Handle space(H5Aget_space(a.get()), H5Sclose);
  std::vector<uint32_t> v(H5Sget_simple_extent_npoints(space.get()));
  H5Aread(a.get(), H5T_NATIVE_UINT32, v.data());
  return v;
}

bool same(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

class MasterFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("glint_master_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  /// Writes the two halves (top.h5: modules 0, 1; bottom.h5: modules 2, 3).
  void write_halves(bool pixel_mask = false) {
    for (int k : {0, 1}) {
      ModuleRun r = half_of_four_modules(k);
      r.pixel_mask = pixel_mask;
      r.mask_base = 10u * k;
      write_module_run(half(k), r);
    }
  }
  fs::path half(int k) const { return dir / (k == 0 ? "top.h5" : "bottom.h5"); }

  /// Expects write_master_file to refuse with a message holding every piece of `parts`.
  void expect_refused(const std::vector<fs::path>& inputs, const std::vector<std::string>& parts,
                      MasterOptions options = {}) {
    const fs::path out = dir / "refused.h5";
    try {
      write_master_file(inputs, out, options);
      FAIL() << "joined";
    } catch (const MasterInputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what;
    }
    EXPECT_FALSE(fs::exists(out));
  }

  fs::path dir;
};

}  // namespace

TEST_F(MasterFile, AssemblesTheImagesAndConcatenatesTheClusters) {
  write_halves(/*pixel_mask=*/true);
  const fs::path master = dir / "master.h5";
  // Given bottom first: the master orders the runs by their first module.
  const MasterSummary sum = write_master_file({half(1), half(0)}, master);
  ASSERT_EQ(sum.runs.size(), 2u);
  EXPECT_EQ(sum.runs[0].name, "top");
  EXPECT_EQ(sum.runs[1].name, "bottom");
  EXPECT_EQ(sum.detector_shape, (std::array<uint32_t, 2>{8, 6}));

  const RunFileContents top = read_run_file(half(0)), bottom = read_run_file(half(1));
  const RunFileContents* parts[2] = {&top, &bottom};
  EXPECT_EQ(sum.clusters, top.clusters.n_clusters() + bottom.clusters.n_clusters());
  EXPECT_EQ(sum.runs[0].clusters, top.clusters.n_clusters());
  EXPECT_EQ(sum.runs[1].cluster_offset, top.clusters.n_clusters());

  // Images: the top run's in rows 0..3, the bottom's in rows 4..7.
  for (const char* name : {"start_mean", "start_noise", "end_mean", "end_noise"}) {
    const Dataset d = read(master, std::string("entry/pedestal/") + name);
    ASSERT_EQ(d.dims, (std::vector<hsize_t>{8, 6})) << name;
    for (int k = 0; k < 2; ++k) {
      const std::string n = name;
      const std::vector<double>& src = n == "start_mean"    ? parts[k]->start_mean
                                       : n == "start_noise" ? parts[k]->start_noise
                                       : n == "end_mean"    ? parts[k]->end_mean
                                                            : parts[k]->end_noise;
      for (std::size_t i = 0; i < 24; ++i)
        EXPECT_TRUE(same(d.values[k * 24 + i], src[i])) << name << " " << k << " " << i;
    }
  }
  EXPECT_EQ(read(master, "entry/pedestal/start_mean").values[30], 2006.0);
  const Dataset hitmap = read(master, "entry/hitmap/counts");
  const Dataset energy = read(master, "entry/energy_image/energy");
  const Dataset mask = read(master, "entry/instrument/detector/pixel_mask");
  ASSERT_EQ(hitmap.dims, (std::vector<hsize_t>{8, 6}));
  double hits = 0;
  for (int k = 0; k < 2; ++k)
    for (std::size_t i = 0; i < 24; ++i) {
      EXPECT_EQ(hitmap.values[k * 24 + i], double(parts[k]->products.hitmap[i]));
      EXPECT_EQ(energy.values[k * 24 + i], parts[k]->products.energy_image[i]);
      EXPECT_EQ(mask.values[k * 24 + i], double(parts[k]->pixel_mask[i]));
      hits += hitmap.values[k * 24 + i];
    }
  EXPECT_EQ(hits, double(sum.clusters));
  EXPECT_EQ(read(master, "entry/hitmap/x").values.size(), 6u);
  EXPECT_EQ(read(master, "entry/hitmap/y").values.size(), 8u);

  // Clusters: the top run's rows, then the bottom's, as in the files (x, y local).
  const Dataset fn = read(master, "entry/clusters/frame_number");
  const Dataset x = read(master, "entry/clusters/x"), y = read(master, "entry/clusters/y");
  const Dataset module = read(master, "entry/clusters/module");
  const Dataset data = read(master, "entry/clusters/data");
  const Dataset e = read(master, "entry/clusters/energy");
  const Dataset e2 = read(master, "entry/clusters/energy_2x2");
  ASSERT_EQ(x.values.size(), sum.clusters);
  ASSERT_EQ(data.dims, (std::vector<hsize_t>{sum.clusters, 3, 3}));
  std::size_t row = 0;
  for (int k = 0; k < 2; ++k) {
    const RunFileContents& p = *parts[k];
    for (std::size_t i = 0; i < p.clusters.n_clusters(); ++i, ++row) {
      EXPECT_EQ(x.values[row], p.clusters.x()[i]);
      EXPECT_EQ(y.values[row], p.clusters.y()[i]);
      EXPECT_EQ(module.values[row], p.cluster_module[i]);
      EXPECT_EQ(e.values[row], p.cluster_energy[i]);
      EXPECT_EQ(e2.values[row], p.cluster_energy_2x2[i]);
      for (int j = 0; j < 9; ++j)
        EXPECT_EQ(data.values[row * 9 + j], p.clusters.data()[i * 9 + j]);
    }
    for (const FrameRow& f : p.frames)
      for (uint32_t c = 0; c < f.n_clusters; ++c)
        EXPECT_EQ(fn.values[sum.runs[k].cluster_offset + f.cluster_offset + c],
                  double(f.frame_number));
  }
  // The modules, each at its place in the detector-shaped data.
  EXPECT_EQ(attr(master, "entry/instrument/detector", "detector_shape"),
            (std::vector<uint32_t>{8, 6}));
  EXPECT_EQ(attr(master, "entry/instrument/detector", "modules"), std::vector<uint32_t>{4});
  for (uint32_t id = 0; id < 4; ++id) {
    const std::string g = "entry/instrument/detector/module_0" + std::to_string(id);
    const std::vector<double> origin{4.0 * (id / 2), 3.0 * (id % 2)};
    EXPECT_EQ(read(master, g + "/data_origin").values, origin) << g;
    EXPECT_EQ(read(master, g + "/data_size").values, (std::vector<double>{4, 3})) << g;
    EXPECT_EQ(attr(master, g, "module_id"), std::vector<uint32_t>{id});
  }
  EXPECT_EQ(attr(master, "entry/clusters", "run_offsets").size(), 3u);
  // The runs' own groups, through external links.
  EXPECT_EQ(read(master, "entry/runs/bottom/frames/frame_number").values.size(),
            bottom.frames.size());
  EXPECT_EQ(read(master, "entry/runs/top/instrument/detector/module_01/data_origin").values,
            (std::vector<double>{0, 3}));
}

TEST_F(MasterFile, WhereNoRunMapsThePedestalIsNaNAndTheHitMapZero) {
  write_halves();
  const fs::path master = dir / "master.h5";
  write_master_file({half(1)}, master);
  const Dataset ped = read(master, "entry/pedestal/end_mean");
  const Dataset hits = read(master, "entry/hitmap/counts");
  const RunFileContents bottom = read_run_file(half(1));
  for (std::size_t i = 0; i < 24; ++i) {
    EXPECT_TRUE(std::isnan(ped.values[i]));
    EXPECT_EQ(hits.values[i], 0.0);
    EXPECT_EQ(ped.values[24 + i], bottom.end_mean[i]);
    EXPECT_EQ(hits.values[24 + i], double(bottom.products.hitmap[i]));
  }
}

TEST_F(MasterFile, AFileWithoutPlacementIsModuleZeroAtTheOrigin) {
  ModuleRun whole;
  whole.clusters = glint::testing::module_clusters(whole.shape, 0, 2, 3);
  write_module_run(dir / "whole.h5", whole);
  const fs::path master = dir / "master.h5";
  const MasterSummary sum = write_master_file({dir / "whole.h5"}, master);
  ASSERT_EQ(sum.runs.size(), 1u);
  EXPECT_EQ(sum.runs[0].modules, (std::vector<ModuleInfo>{{0, {0, 0}, {4, 6}, {0, 0}}}));
  const Dataset module = read(master, "entry/clusters/module");
  ASSERT_EQ(module.values.size(), whole.clusters.n_clusters());
  for (double m : module.values) EXPECT_EQ(m, 0.0);
  const Dataset x = read(master, "entry/clusters/x");
  for (std::size_t i = 0; i < x.values.size(); ++i)
    EXPECT_EQ(x.values[i], whole.clusters.x()[i]);
}

TEST_F(MasterFile, RefusesWhatCannotBeJoined) {
  write_halves();
  // Missing, not HDF5, HDF5 but not a run file.
  expect_refused({half(0), dir / "missing.h5"}, {"missing.h5", "no such file"});
  std::ofstream(dir / "text.h5") << "not hdf5\n";
  expect_refused({dir / "text.h5"}, {"text.h5", "not a glint run file"});
  {
    Handle f(H5Fcreate((dir / "other.h5").c_str(), H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT),
             H5Fclose);
  }
  expect_refused({half(0), dir / "other.h5"}, {"other.h5", "not a glint run file"});
  // Another detector's part.
  ModuleRun other = half_of_four_modules(1);
  other.layout.detector_rows = 12;
  write_module_run(dir / "other_detector.h5", other);
  expect_refused({half(0), dir / "other_detector.h5"},
                 {"top.h5", "other_detector.h5", "different detectors", "[8, 6]", "[12, 6]"});
  // The same place twice; the same modules elsewhere.
  ModuleRun again = half_of_four_modules(0);
  again.layout.first_module = 7;
  write_module_run(dir / "again.h5", again);
  expect_refused({half(0), dir / "again.h5"}, {"top.h5", "again.h5", "overlap"});
  ModuleRun twin = half_of_four_modules(1);
  twin.layout.first_module = 1;
  write_module_run(dir / "twin.h5", twin);
  expect_refused({half(0), dir / "twin.h5"}, {"top.h5", "twin.h5", "module 1"});
  // Two files without placement: both the whole detector at (0, 0).
  ModuleRun plain;
  plain.clusters = glint::testing::module_clusters(plain.shape, 0, 1, 0);
  write_module_run(dir / "a.h5", plain);
  write_module_run(dir / "b.h5", plain);
  expect_refused({dir / "a.h5", dir / "b.h5"}, {"a.h5", "b.h5", "overlap"});
  // An existing output, unless overwritten.
  std::ofstream(dir / "exists.h5") << "x";
  EXPECT_THROW(write_master_file({half(0), half(1)}, dir / "exists.h5"), MasterInputError);
  MasterOptions overwrite;
  overwrite.overwrite = true;
  EXPECT_NO_THROW(write_master_file({half(0), half(1)}, dir / "exists.h5", overwrite));
  EXPECT_EQ(read(dir / "exists.h5", "entry/hitmap/counts").dims, (std::vector<hsize_t>{8, 6}));
}

TEST_F(MasterFile, ARunThatNeverClosedIsRefusedUnlessAllowed) {
  write_halves();
  ModuleRun open = half_of_four_modules(1);
  open.close = false;
  const fs::path path = dir / "open.h5";
  auto writer = write_module_run(path, open);
  ASSERT_TRUE(writer);
  expect_refused({half(0), path}, {"open.h5", "never closed", "--allow-open"});
  MasterOptions allow;
  allow.allow_open = true;
  const MasterSummary sum = write_master_file({half(0), path}, dir / "master.h5", allow);
  ASSERT_EQ(sum.runs.size(), 2u);
  EXPECT_FALSE(sum.runs[1].closed);
  EXPECT_EQ(sum.runs[1].clusters, open.clusters.n_clusters());  // flushed
  writer->close(nullptr);
}

TEST_F(MasterFile, CarriesEachModulesOrientation) {
  // The top half's module 1 mounted upside down, the bottom half's modules normal: every module
  // group of the master records its orientation, its axes placed in the detector.
  for (int k : {0, 1}) {
    ModuleRun r = half_of_four_modules(k);
    if (k == 0) r.layout.orientations = {ModuleOrientation::normal, ModuleOrientation::flip_rows};
    write_module_run(half(k), r);
  }
  const fs::path master = dir / "master.h5";
  write_master_file({half(0), half(1)}, master);
  const RunFileContents top = read_run_file(half(0));
  ASSERT_EQ(top.modules.size(), 2u);
  EXPECT_EQ(top.modules[1].orientation, ModuleOrientation::flip_rows);

  Handle f(H5Fopen(master.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  ASSERT_TRUE(f.valid());
  auto text = [&](const char* object) {
    Handle a(H5Aopen_by_name(f.get(), object, "orientation", H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    EXPECT_TRUE(a.valid()) << object;
    if (!a.valid()) return std::string();
    Handle type = hdf5::string_type();
    char* p = nullptr;
    H5Aread(a.get(), type.get(), &p);
    std::string s = p ? p : "";
    H5free_memory(p);
    return s;
  };
  auto doubles = [&](const char* object, const char* name) {
    Handle a(H5Aopen_by_name(f.get(), object, name, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    std::vector<double> v(3, -7.0);
    EXPECT_TRUE(a.valid()) << object << " @" << name;
    if (a.valid()) H5Aread(a.get(), H5T_NATIVE_DOUBLE, v.data());
    return v;
  };
  EXPECT_EQ(text("entry/instrument/detector/module_01"), "flip_rows");
  EXPECT_EQ(text("entry/instrument/detector/module_00"), "normal");
  EXPECT_EQ(text("entry/instrument/detector/module_03"), "normal");
  // Module 1: 4 x 3 at detector (0, 3); its native row 0 is detector row 3.
  const char* slow = "entry/instrument/detector/module_01/slow_pixel_direction";
  EXPECT_EQ(doubles(slow, "vector"), (std::vector<double>{0, -1, 0}));
  EXPECT_EQ(doubles(slow, "offset"), (std::vector<double>{3, 3, 0}));
  // Module 3 (normal, bottom half at detector (4, 3)).
  const char* fast3 = "entry/instrument/detector/module_03/fast_pixel_direction";
  EXPECT_EQ(doubles(fast3, "vector"), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(doubles(fast3, "offset"), (std::vector<double>{3, 4, 0}));
}
