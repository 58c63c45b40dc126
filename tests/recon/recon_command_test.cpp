// glint recon end to end: the phantom, an HDF5 input, attributes, exit statuses.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tool_test.hpp"
#include "glint/recon/cpu_solver.hpp"
#include "glint/recon/forward_model.hpp"
#include "glint/recon/phantom.hpp"
#include "glint/pipeline/run_file.hpp"
#include "glint/recon/volume_io.hpp"

namespace fs = std::filesystem;
using glint::testing::run_glint;
using glint::testing::ToolResult;

namespace {

double double_attribute(const std::string& file, const char* name) {
  hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/volume", H5P_DEFAULT);
  hid_t a = H5Aopen(d, name, H5P_DEFAULT);
  double v = -1;
  H5Aread(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

class GlintRecon : public glint::testing::ScratchDirTest {
 protected:
  GlintRecon() : ScratchDirTest("glint_recon_test") {}
};

}  // namespace

TEST_F(GlintRecon, PhantomIsReconstructedCloserThanTheMeasurement) {
  const std::string out = path("ph.h5");
  const ToolResult r = run_glint("recon --phantom 20 --forward gaussian:1,1,1 --noise 0.05 --lambda 0.02 "
                             "--backend cpu --threads 2 --output " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("RMSE vs phantom"), std::string::npos) << r.output;
  const auto x = glint::recon::read_volume(out, "/volume");
  const auto truth = glint::recon::read_volume(out, "/phantom");
  const auto y = glint::recon::read_volume(out, "/measured");
  EXPECT_EQ(x.dims, (glint::tv::Dims{20, 20, 20}));
  EXPECT_EQ(truth.data, glint::recon::make_phantom(20));
  const double err = glint::recon::rmse(x.data, truth.data);
  EXPECT_LT(err, glint::recon::rmse(y.data, truth.data));
  EXPECT_NEAR(double_attribute(out, "rmse"), err, 1e-9);
  EXPECT_FLOAT_EQ(float(double_attribute(out, "lambda")), 0.02f);
  for (float v : x.data) ASSERT_GE(v, 0.0f);  // non-negativity on by default
}

TEST_F(GlintRecon, InputFileWithMaskForwardModel) {
  const glint::tv::Dims d{12, 10, 8};
  glint::recon::Volume in{d, glint::recon::make_phantom(12)};
  in.data.resize(d.voxels());
  glint::recon::Volume mask{glint::tv::Dims{d.nx / 2 + 1, d.ny, d.nz}, {}};
  mask.data.assign(mask.dims.voxels(), 1.0f);
  for (std::size_t i = 0; i < mask.data.size(); i += 3) mask.data[i] = 0.0f;
  mask.data[0] = 1.0f;
  glint::recon::write_volumes(path("in.h5"), {{"/data", &in, {}}});
  glint::recon::write_volumes(path("mask.h5"), {{"/m", &mask, {}}});
  const ToolResult r = run_glint("recon --input " + path("in.h5") + " --dataset /data --lambda 0.01 "
                             "--forward mask:" + path("mask.h5") + ":/m --no-nonneg --cold-start "
                             "--outer 5 --tv-inner 4 --backend cpu --threads 1 --output " +
                             path("out.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto x = glint::recon::read_volume(path("out.h5"), "/volume");
  EXPECT_EQ(x.dims, d);
  EXPECT_NE(r.output.find("5 outer x 4 TV steps"), std::string::npos) << r.output;
  // The options reached the solver: the same solve here (one thread, as the command) gives the
  // same bits.
  glint::tv::SolverOptions o;
  o.lambda = 0.01f;
  o.nonneg = false;
  o.warm_start = false;
  o.outer = 5;
  o.tv_inner = 4;
  const auto fm = glint::recon::make_forward_model("mask:" + path("mask.h5") + ":/m", d);
  std::vector<float> want(d.voxels());
  glint::recon::CpuReconstructor(d, 1).solve(in.data, fm.H, o, want);
  EXPECT_EQ(x.data, want);
  EXPECT_NE(x.data, in.data);
}

TEST_F(GlintRecon, BadInputGetsAClearErrorAndStatus2) {
  ToolResult r = run_glint("recon --input " + path("none.h5") + " --output " + path("o.h5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("none.h5"), std::string::npos) << r.output;
  r = run_glint("recon --phantom 8 --forward gaussian:1,2 --output " + path("o.h5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("gaussian:1,2"), std::string::npos) << r.output;
  r = run_glint("recon --phantom 8 --variant quick --output " + path("o.h5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("quick"), std::string::npos) << r.output;
  r = run_glint("recon --phantom 8 --backend tpu --output " + path("o.h5"));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("tpu"), std::string::npos) << r.output;
}

TEST_F(GlintRecon, PhantomPrintsItsRmseWithoutAnOutputFile) {
  const std::string args =
      "recon --phantom 12 --forward gaussian:1,1,1 --noise 0.05 --lambda 0.02 --backend cpu "
      "--threads 2";
  const ToolResult r = run_glint(args);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("RMSE vs phantom"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("wrote"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(path("."))) << "nothing is written without --output";
  // The same solve with --output writes the RMSE it printed.
  const ToolResult w = run_glint(args + " --output " + path("ph.h5"));
  ASSERT_EQ(w.status, 0) << w.output;
  const auto at = r.output.find("RMSE vs phantom ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(w.output.find(r.output.substr(at, 30)), std::string::npos) << r.output << w.output;
  // A volume from a file is only worth its output.
  glint::testing::expect_failure("recon --input " + path("ph.h5"), 2,
                                 "--output OUT.h5 is required with --input");
}

// One volume of a run file's (n, Z, Y, X) stack, read while the run file is still being written
// (SWMR) and given to glint recon; a partial volume comes back with the slices it has.
TEST_F(GlintRecon, VolumeOfARunFileByIndex) {
  namespace gp = glint::pipeline;
  gp::RunMetadata meta;
  meta.finder.shape = {6, 8};
  meta.finder.cluster_size = 3;
  gp::ReconstructionLayout l;
  l.nx = 8;
  l.ny = 6;
  l.slices = 4;
  l.frames_per_slice = 5;
  l.weight = "centres";
  l.outer = 20;
  l.tv_inner = 10;
  meta.reconstruction = l;
  auto volume = [](uint64_t first, uint32_t nz) {
    gp::ReconstructionVolume v;
    v.first_frame = first;
    v.last_frame = first + 5 * nz - 1;
    v.nx = 8;
    v.ny = 6;
    v.nz = nz;
    for (uint32_t i = 0; i < 8 * 6 * nz; ++i) {
      v.input.push_back(float(i % 5) + float(first));
      v.output.push_back(float(i % 3));
    }
    return v;
  };
  const std::string file = path("run_000001.h5");
  gp::RunFileWriter w(file, meta);
  const auto v0 = volume(0, 4), v1 = volume(20, 2);
  w.add_reconstruction(v0);
  w.add_reconstruction(v1);
  const auto in1 = glint::recon::read_volume(file, "/entry/reconstruction/input[1]");
  EXPECT_EQ(in1.dims, (glint::tv::Dims{8, 6, 2}));
  EXPECT_EQ(in1.data, v1.input);
  const auto out0 = glint::recon::read_volume(file, "/entry/reconstruction/output[0]");
  EXPECT_EQ(out0.dims, (glint::tv::Dims{8, 6, 4}));
  EXPECT_EQ(out0.data, v0.output);
  try {
    glint::recon::read_volume(file, "/entry/reconstruction/input[2]");
    ADD_FAILURE() << "volume 2 does not exist";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 2"), std::string::npos) << e.what();
  }
  try {
    glint::recon::read_volume(file, "/entry/reconstruction/input");
    ADD_FAILURE() << "a 4D stack is not one volume";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("NAME[I]"), std::string::npos) << e.what();
  }
  // Another process, while the writer still has the file open.
  const ToolResult r = run_glint("recon --input " + file + " --dataset '/entry/reconstruction/input[0]' "
                                 "--lambda 0.1 --outer 3 --tv-inner 2 --backend cpu --threads 1 "
                                 "--output " + path("out.h5"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(glint::recon::read_volume(path("out.h5"), "/volume").dims, (glint::tv::Dims{8, 6, 4}));
  w.close(nullptr);
  EXPECT_EQ(glint::recon::read_volume(file, "/entry/reconstruction/input[0]").data, v0.input);
}
